// Device backends plug in through DeviceFactory (core/device_factory.h): a device type that only
// this file knows, with its kernels adapted from the CPU's, is listed, placed on and run by an
// ordinary Session, with no edit anywhere else.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/device_factory.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"
#include "host/cpu_device.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using internal::Device;
using internal::DeviceFactory;
using internal::OpKernel;
using internal::OpKernelContext;



constexpr const char* kTestDevice = "/job:localhost/replica:0/task:0/device:TEST:0";

// Runs of kernels on the TEST device, by op type.
std::atomic<int> test_add_runs{0};
std::atomic<int> test_kernel_runs{0};

// A device of type "TEST": its own memory (a host allocator of its own name), CPU-style streams.
class TestDevice final : public Device {
 public:
  TestDevice()
      : Device("TEST", 0), allocator_("test:0"), compute_(name() + "/stream:compute:0"),
        h2d_(name() + "/stream:host_to_device"), d2h_(name() + "/stream:device_to_host") {}

  internal::Allocator& allocator() override { return allocator_; }
  const internal::DeviceCostProfile& cost_profile() const override { return profile_; }
  int num_compute_streams() const override { return 1; }
  internal::Stream& compute_stream(int) override { return compute_; }
  internal::Stream& host_to_device_stream() override { return h2d_; }
  internal::Stream& device_to_host_stream() override { return d2h_; }
  int64_t memory_limit_bytes() const override { return 1 << 20; }
  std::string description() const override { return "a device this test made"; }

  void copy_to_device(const Tensor& host, internal::Stream& stream,
                      std::function<void(StatusOr<Tensor>)> done) override {
    copy(host, /*to_device=*/true, stream, std::move(done));
  }
  void copy_to_host(const Tensor& on_device, internal::Stream& stream,
                    std::function<void(StatusOr<Tensor>)> done) override {
    copy(on_device, /*to_device=*/false, stream, std::move(done));
  }

 private:
  void copy(const Tensor& src, bool to_device, internal::Stream& stream, std::function<void(StatusOr<Tensor>)> done) {
    auto result = std::make_shared<StatusOr<Tensor>>(errors::internal("copy did not run"));
    stream.enqueue([this, src, to_device, result] {
      StatusOr<Tensor> dst = to_device ? allocate_tensor(src.dtype(), src.shape()) : StatusOr<Tensor>(Tensor(src.dtype(), src.shape()));
      if (dst.ok() && src.bytes() > 0) std::memcpy(dst.value().raw_mutable_data(), src.raw_data(), src.bytes());
      *result = std::move(dst);
    });
    stream.then([result, done = std::move(done)](Status s) { done(s.ok() ? std::move(*result) : StatusOr<Tensor>(s)); });
  }

  internal::HostMemoryAllocator allocator_;
  internal::DeviceCostProfile profile_{/*flops=*/1e12, /*memory=*/1e12, /*transfer=*/1e11, /*latency=*/1e-7,
                                       /*overhead=*/1e-7};
  internal::CpuStream compute_, h2d_, d2h_;
};

class TestDeviceFactory final : public DeviceFactory {
 public:
  Status create_devices(std::vector<std::unique_ptr<Device>>* devices) override {
    devices->push_back(std::make_unique<TestDevice>());
    return Status::ok_status();
  }
};

// The TEST device runs the CPU's kernels (not the host-only ones), checking that its inputs were
// copied into its memory and moving host-memory outputs (a constant's value) into it.
class TestKernel final : public OpKernel {
 public:
  explicit TestKernel(std::unique_ptr<OpKernel> base) : OpKernel(base->node()), base_(std::move(base)) {}
  void compute(OpKernelContext& ctx) override {
    Device* device = ctx.device();
    if (device == nullptr || device->type() != "TEST") {
      ctx.fail(errors::internal("a TEST kernel ran off the TEST device"));
      return;
    }
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).device() != device->name()) {
        ctx.fail(errors::internal("input {} is in {}, not on the TEST device", i, ctx.input(i).device()));
        return;
      }
    }
    base_->compute(ctx);
    // A CPU kernel may hand back a host tensor (a constant's value): the TEST device's own copy.
    auto into_device = [&ctx](const Tensor& t) {
      Tensor copy = ctx.allocate_temp(t.dtype(), t.shape());
      if (t.bytes() > 0) std::memcpy(copy.raw_mutable_data(), t.raw_data(), t.bytes());
      return copy;
    };
    for (int i = 0; ctx.status().ok() && i < ctx.num_outputs(); ++i) {
      if (!ctx.output(i).is_null() && ctx.output(i).device() != device->name()) ctx.output(i) = into_device(ctx.output(i));
    }
    ++test_kernel_runs;
    if (node().type == "Add") ++test_add_runs;
  }

 private:
  std::unique_ptr<OpKernel> base_;
};

const bool kTestKernels = [] {
  internal::OpRegistry::global().register_kernel_adapter(
      "TEST", "CPU", [](std::unique_ptr<OpKernel> base) -> std::unique_ptr<OpKernel> {
        return std::make_unique<TestKernel>(std::move(base));
      });
  return true;
}();

// Registered once for the whole program, the first time a test needs it (after the library's own
// factories ran for the sessions of earlier tests, if any: it still runs, at the next session).
void register_test_factory() {
  static const Status registered = DeviceFactory::register_factory("TEST", 500, std::make_unique<TestDeviceFactory>());
  ASSERT_TRUE(registered.ok()) << registered.to_string();
}

TEST(DeviceFactoryTest, ATestsDeviceTypeIsListedPlacedOnAndRun) {
  {
    Graph warm;
    Session before(warm);  // the built-in factories run now, before TEST is registered
    before.run(ops::constant(warm, 1.0f));
  }
  ASSERT_NO_FATAL_FAILURE(register_test_factory());
  const std::vector<std::string> types = DeviceFactory::registered_types();
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types.front(), "CPU");
  EXPECT_EQ(types.back(), "TEST");

  Graph g;
  Output x = ops::placeholder(g, DType::Float32, {3}, "x");
  Output sum;
  {
    auto scope = g.device("/device:TEST:0");
    sum = ops::add(x, ops::constant(g, Tensor::from_vector<float>({10, 20, 30}, {3})), "sum");
  }
  Session s(g);
  const int before = test_add_runs.load();
  Tensor out = s.run(sum, {{x, Tensor::from_vector<float>({1, 2, 3}, {3})}});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(out.device(), internal::kHostDeviceName);  // fetched back into host memory
  EXPECT_EQ(test_add_runs.load(), before + 1);
  EXPECT_EQ(sum.op().assigned_device(), kTestDevice);

  bool listed = false;
  for (const DeviceInfo& d : list_devices()) {
    if (d.name != kTestDevice) continue;
    listed = true;
    EXPECT_EQ(d.type, "TEST");
    EXPECT_EQ(d.memory_bytes, 1 << 20);
    EXPECT_EQ(d.description, "a device this test made");
  }
  EXPECT_TRUE(listed);
  EXPECT_GT(memory_stats("/device:TEST:0").peak_bytes, 0);  // the add's inputs and output lived there
}

// With no request, TensorFlow's rule puts every op an accelerator has a kernel for on it: the TEST
// device is an accelerator like any other.
TEST(DeviceFactoryTest, GpuFirstPlacementPicksTheTestDevice) {
  ASSERT_NO_FATAL_FAILURE(register_test_factory());
  Graph g;
  Output a = ops::placeholder(g, DType::Float32, {2, 2}, "a");
  Output y = ops::matmul(a, a, false, false, "y");
  SessionOptions options;
  options.placement_policy = PlacementPolicy::gpu_first;
  Session s(g, options);
  const int before = test_kernel_runs.load();
  Tensor out = s.run(y, {{a, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{7, 10, 15, 22}));
  const std::string placed = y.op().assigned_device();
  // A SIM or GPU device of the environment may come first among accelerators; TEST otherwise.
  if (placed.find("/device:SIM:") == std::string::npos && placed.find("/device:GPU:") == std::string::npos) {
    EXPECT_EQ(placed, kTestDevice);
    EXPECT_GT(test_kernel_runs.load(), before);
  }
  EXPECT_NE(placed, internal::kHostDeviceName);
}

TEST(DeviceFactoryTest, RegistrationRefusesDuplicatesAndNull) {
  ASSERT_NO_FATAL_FAILURE(register_test_factory());
  EXPECT_EQ(DeviceFactory::register_factory("TEST", 1, std::make_unique<TestDeviceFactory>()).code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(DeviceFactory::register_factory("OTHER", 1, nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(DeviceFactory::register_factory("", 1, std::make_unique<TestDeviceFactory>()).code(),
            ErrorCode::kInvalidArgument);
}

TEST(DeviceFactoryTest, MemoryStatsOfAnUnknownDeviceIsNotFound) {
  EXPECT_THROW(memory_stats("/device:NOPE:0"), NotFoundError);
  EXPECT_THROW(memory_stats("/device:"), InvalidArgumentError);
}

// The demo's way to get an accelerator on a machine without one: SIM devices after those already
// there, listed like any other; a bad count is refused with nothing added.
TEST(DeviceFactoryTest, AddSimulatedAcceleratorsAppendsListedDevices) {
  auto sims = [] {
    int n = 0;
    for (const DeviceInfo& d : list_devices()) n += d.type == "SIM";
    return n;
  };
  const int have = sims();
  const std::vector<std::string> added = add_simulated_accelerators(2);
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0], "/job:localhost/replica:0/task:0/device:SIM:" + std::to_string(have));
  EXPECT_EQ(added[1], "/job:localhost/replica:0/task:0/device:SIM:" + std::to_string(have + 1));
  EXPECT_EQ(sims(), have + 2);
  EXPECT_THROW(add_simulated_accelerators(0), InvalidArgumentError);
  EXPECT_THROW(add_simulated_accelerators(64), InvalidArgumentError);
  EXPECT_EQ(sims(), have + 2);
}

}  // namespace
}  // namespace tessera
