// Devices in isolation: registry, allocators, streams, events, the completion path, SIM copies and
// TESSERA_SIM_ACCELERATORS. See Note [Devices and streams] in core/stream.cc.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/device_factory.h"
#include "core/tensor_buffer.h"
#include "device/sim_device.h"
#include "host/cpu_device.h"
#include "core/thread_pool.h"
#include "tests/testing/latch.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using tessera::testing::kThreadCounts;
using tessera::testing::run_threads;
using tessera::testing::wait_until;

constexpr const char* kSim0 = "/job:localhost/replica:0/task:0/device:SIM:0";
constexpr const char* kSim1 = "/job:localhost/replica:0/task:0/device:SIM:1";

// A gate that stream work waits on (to simulate long-running work whose end the test decides),
// for at most 10 s: a broken test fails instead of hanging.
using Gate = tessera::testing::Latch;
constexpr auto kGateLimit = std::chrono::seconds(10);

// Collects the result of an asynchronous copy.
class CopyResult {
 public:
  std::function<void(StatusOr<Tensor>)> callback() {
    return [this](StatusOr<Tensor> r) {
      std::lock_guard<std::mutex> lock(mu_);
      result_.emplace(std::move(r));
    };
  }
  // Waits (bounded) for the callback.
  StatusOr<Tensor> get() {
    EXPECT_TRUE(wait_until([&] {
      std::lock_guard<std::mutex> lock(mu_);
      return result_.has_value();
    }));
    std::lock_guard<std::mutex> lock(mu_);
    if (!result_) return errors::deadline_exceeded("copy never completed");
    return std::move(*result_);
  }

 private:
  std::mutex mu_;
  std::optional<StatusOr<Tensor>> result_;
};

std::unique_ptr<DeviceRegistry> cpu_and_sims(int n) {
  auto r = std::make_unique<DeviceRegistry>();
  EXPECT_TRUE(register_cpu_device(*r).ok());
  EXPECT_TRUE(register_sim_devices(n, *r).ok());
  return r;
}

// ----- Registry -----

TEST(DeviceRegistryTest, FindsByFullPartialAndLegacySpec) {
  auto r = cpu_and_sims(2);
  ASSERT_EQ(r->devices().size(), 3u);
  EXPECT_EQ(r->find(kSim1).value()->name(), kSim1);
  EXPECT_EQ(r->find("/device:SIM:1").value()->name(), kSim1);
  EXPECT_EQ(r->find("/sim:1").value()->name(), kSim1);
  EXPECT_EQ(r->find("/device:SIM").value()->name(), kSim0);  // first of the type
  EXPECT_EQ(r->find("/cpu:0").value()->type(), "CPU");
  EXPECT_EQ(r->find("/job:localhost/device:CPU:0").value()->name(), kHostDeviceName);
  EXPECT_EQ(r->find("/device:sim:0").value()->id(), 0);
  EXPECT_EQ(r->find_all("/device:SIM:*").value().size(), 2u);
  EXPECT_EQ(r->find_all("").value().size(), 3u);
  EXPECT_TRUE(r->find_all("/device:GPU:0").value().empty());
}

TEST(DeviceRegistryTest, ReportsErrors) {
  auto r = cpu_and_sims(1);
  auto bad = r->find("device:SIM:0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  auto missing = r->find("/device:GPU:0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(kSim0), std::string::npos) << missing.status().message();
  EXPECT_FALSE(r->find("/job:other/device:SIM:0").ok());
  Status dup = r->add(std::make_unique<SimDevice>(0));
  EXPECT_EQ(dup.code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(register_sim_devices(2, *r).code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(r->devices().size(), 2u);  // nothing half-registered
  EXPECT_EQ(register_sim_devices(-1, *r).code(), ErrorCode::kInvalidArgument);
}

// The CPU's factory makes /device:CPU:0, which local_devices() lists first.
TEST(DeviceRegistryTest, GlobalRegistryHasTheCpu) {
  auto devices = local_devices();
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  EXPECT_EQ(devices.value().front()->name(), kHostDeviceName);
  auto cpu = DeviceRegistry::global().find("/cpu:0");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(cpu.value()->name(), kHostDeviceName);
  EXPECT_EQ(cpu.value()->type(), "CPU");
}

TEST(DeviceTest, HasKernelFollowsTheOpRegistry) {
  auto r = cpu_and_sims(1);
  Device* cpu = r->find("/cpu:0").value();
  Device* sim = r->find("/sim:0").value();
  EXPECT_TRUE(cpu->has_kernel("Identity"));
  EXPECT_TRUE(sim->has_kernel("Identity"));      // the CPU kernel, run on the SIM streams
  EXPECT_TRUE(sim->has_kernel("MatMul"));
  EXPECT_FALSE(sim->has_kernel("QueueDequeue"));  // host-only: queues live in host memory
  EXPECT_TRUE(cpu->has_kernel("QueueDequeue"));
  EXPECT_FALSE(cpu->has_kernel("NoSuchOp"));
  EXPECT_FALSE(sim->has_kernel("NoSuchOp"));
}

TEST(DeviceTest, CostProfiles) {
  auto r = cpu_and_sims(1);
  const auto& cpu = r->find("/cpu:0").value()->cost_profile();
  const auto& sim = r->find("/sim:0").value()->cost_profile();
  EXPECT_GE(sim.flops_per_second, 2 * cpu.flops_per_second);
  EXPECT_EQ(cpu.transfer_seconds(1 << 20), 0.0);
  EXPECT_NEAR(sim.transfer_seconds(12'000'000), 10e-6 + 1e-3, 1e-9);
}

// ----- Allocators and tensors -----

TEST(AllocatorTest, StatisticsAndAlignment) {
  HostMemoryAllocator a("test");
  void* p1 = a.allocate(100).value();
  void* p2 = a.allocate(1000).value();
  auto s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1100);
  EXPECT_EQ(s.peak_bytes_in_use, 1100);
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.live_allocs, 2);
  a.deallocate(p1, 100);
  void* p3 = a.allocate(10).value();
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1010);
  EXPECT_EQ(s.peak_bytes_in_use, 1100);
  EXPECT_EQ(s.num_allocs, 3);
  a.deallocate(p2, 1000);
  a.deallocate(p3, 10);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.live_allocs, 0);

  for (std::size_t bytes : {0, 1, 63, 64, 65, 4097}) {
    void* p = a.allocate(bytes).value();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes;
    void* q = a.allocate(bytes, 4096).value();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 4096, 0u) << bytes;
    EXPECT_NE(p, q);
    a.deallocate(p, bytes);
    a.deallocate(q, bytes);
  }
  EXPECT_EQ(a.allocate(10, 48).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(AllocatorTest, DeviceTensorReportsItsDeviceAndFreesThroughTheAllocator) {
  SimDevice sim(0);
  {
    Tensor t = sim.allocate_tensor(DType::Float32, {3, 4}).value();
    EXPECT_EQ(t.device(), kSim0);
    EXPECT_EQ(t.shape(), Shape({3, 4}));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64, 0u);
    EXPECT_EQ(sim.allocator().stats().bytes_in_use, 48);
    Tensor u = t;  // a second handle keeps it alive
    t.reset();
    EXPECT_EQ(sim.allocator().stats().bytes_in_use, 48);
    u.mutable_data<float>()[11] = 5.0f;
    EXPECT_EQ(u.to_vector<float>()[11], 5.0f);
  }
  auto s = sim.allocator().stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.live_allocs, 0);
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_EQ(s.peak_bytes_in_use, 48);
  EXPECT_EQ(sim.allocate_tensor(DType::Float32, {-1, 2}).status().code(), ErrorCode::kInvalidArgument);

  CpuDevice cpu;
  Tensor c = cpu.allocate_tensor(DType::Int64, {5}).value();
  EXPECT_EQ(c.device(), kHostDeviceName);
  EXPECT_EQ(cpu.allocator().stats().bytes_in_use, 40);
  EXPECT_EQ(sim.allocator().stats().bytes_in_use, 0);  // separate statistics
  c.reset();
  EXPECT_EQ(cpu.allocator().stats().bytes_in_use, 0);
}

// ----- Streams and events -----

// Both kinds of host-run stream: a SIM stream (own thread) and a CPU stream (the shared pool).
class StreamKindTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "SIM") {
      device_ = std::make_unique<SimDevice>(0, SimDeviceOptions{.num_compute_streams = 2});
    } else {
      device_ = std::make_unique<CpuDevice>();
    }
  }
  Stream& stream() { return device_->compute_stream(); }
  std::unique_ptr<Device> device_;
};

TEST_P(StreamKindTest, RunsClosuresInOrder) {
  std::vector<int> seen;  // written only by stream work, which runs one item at a time
  for (int i = 0; i < 1000; ++i) stream().enqueue([&seen, i] { seen.push_back(i); });
  ASSERT_TRUE(stream().synchronize(std::chrono::seconds(10)).ok());
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], i);
}

TEST_P(StreamKindTest, ThenFiresAfterPriorWorkWithoutBlockingTheCaller) {
  Gate gate;
  std::atomic<bool> work_done{false};
  std::atomic<bool> fired{false};
  std::atomic<bool> work_done_when_fired{false};
  std::thread::id callback_thread;
  stream().enqueue([&] {
    gate.wait(kGateLimit);  // slow work: runs until the test opens the gate
    work_done = true;
  });
  stream().then([&](Status s) {
    EXPECT_TRUE(s.ok());
    work_done_when_fired = work_done.load();
    callback_thread = std::this_thread::get_id();
    fired = true;
  });
  // then() returned while the work is still held: the caller was not blocked.
  EXPECT_FALSE(fired.load());
  gate.open();
  ASSERT_TRUE(wait_until([&] { return fired.load(); }));
  EXPECT_TRUE(work_done_when_fired.load());
  EXPECT_NE(callback_thread, std::this_thread::get_id());
}

TEST_P(StreamKindTest, ThrowingWorkPutsTheStreamInError) {
  std::atomic<int> ran{0};
  stream().enqueue([&] { ran++; });
  stream().enqueue([] { throw std::runtime_error("kernel exploded"); });
  stream().enqueue([&] { ran++; });  // skipped
  Event e;
  ASSERT_TRUE(stream().record(e).ok());
  Status s = stream().synchronize(std::chrono::seconds(10));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kernel exploded"), std::string::npos) << s.to_string();
  EXPECT_EQ(ran.load(), 1);
  ASSERT_TRUE(e.completed());
  EXPECT_FALSE(e.status().ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, StreamKindTest, ::testing::Values("SIM", "CPU"));

TEST(EventTest, RecordingTwiceAndWaitingOnAnUnrecordedEventFail) {
  SimDevice sim(0);
  Event e;
  EXPECT_FALSE(e.recorded());
  EXPECT_EQ(sim.compute_stream().wait(e).code(), ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(sim.compute_stream().record(e).ok());
  EXPECT_EQ(sim.compute_stream().record(e).code(), ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(e.wait_for(std::chrono::seconds(10)));
  EXPECT_TRUE(e.status().ok());
  bool inline_fired = false;
  e.on_completed([&](Status) { inline_fired = true; });  // already complete: runs right here
  EXPECT_TRUE(inline_fired);
}

// A native handle (a device's own event, for waits on the device) is seen only by its owner and
// only until the event completes, when the device may record it again.
TEST(EventTest, ANativeHandleIsVisibleToItsOwnerUntilTheEventCompletes) {
  Event e;
  ASSERT_TRUE(e.mark_recorded().ok());
  int owner = 0, other = 0, handle = 0;
  void* seen = nullptr;
  EXPECT_FALSE(e.with_native(&owner, [&](void* h) { seen = h; }));  // none attached yet
  e.set_native(&owner, &handle);
  EXPECT_FALSE(e.with_native(&other, [&](void* h) { seen = h; }));
  EXPECT_EQ(seen, nullptr);
  EXPECT_TRUE(e.with_native(&owner, [&](void* h) { seen = h; }));
  EXPECT_EQ(seen, &handle);
  e.complete(Status::ok_status());
  seen = nullptr;
  EXPECT_FALSE(e.with_native(&owner, [&](void* h) { seen = h; }));
  EXPECT_EQ(seen, nullptr);
  e.set_native(&owner, &handle);  // after completion: ignored
  EXPECT_FALSE(e.with_native(&owner, [&](void* h) { seen = h; }));
}

TEST(EventTest, OrdersWorkAcrossStreams) {
  SimDevice sim(0, SimDeviceOptions{.num_compute_streams = 2});
  CpuDevice cpu;
  Stream& a = sim.compute_stream(0);
  for (Stream* b : {&sim.compute_stream(1), &cpu.compute_stream()}) {
    int effect = 0;  // plain int: only the event orders the write before the read (TSan checks)
    int observed = -1;
    a.enqueue([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // slow work
      effect = 1;
    });
    Event e;
    ASSERT_TRUE(a.record(e).ok());
    ASSERT_TRUE(b->wait(e).ok());
    b->enqueue([&] { observed = effect; });
    ASSERT_TRUE(b->synchronize(std::chrono::seconds(10)).ok());
    EXPECT_EQ(observed, 1) << b->name();
    ASSERT_TRUE(a.synchronize(std::chrono::seconds(10)).ok());
  }
}

TEST(EventTest, ErrorTravelsToTheWaitingStream) {
  SimDevice sim(0, SimDeviceOptions{.num_compute_streams = 2});
  sim.compute_stream(0).enqueue([] { throw std::runtime_error("upstream failed"); });
  Event e;
  ASSERT_TRUE(sim.compute_stream(0).record(e).ok());
  ASSERT_TRUE(sim.compute_stream(1).wait(e).ok());
  std::atomic<bool> ran{false};
  sim.compute_stream(1).enqueue([&] { ran = true; });
  Status s = sim.compute_stream(1).synchronize(std::chrono::seconds(10));
  EXPECT_NE(s.message().find("upstream failed"), std::string::npos) << s.to_string();
  EXPECT_FALSE(ran.load());
}

TEST(EventTest, CpuStreamsWaitingOnAnEventDoNotHoldPoolThreads) {
  SimDevice sim(0);
  Gate gate;
  sim.compute_stream().enqueue([&] { gate.wait(kGateLimit); });
  Event e;
  ASSERT_TRUE(sim.compute_stream().record(e).ok());
  // More waiting CPU streams than pool threads: if a wait held a pool thread, none would be left.
  ThreadPool& pool = ThreadPool::shared();
  std::vector<std::unique_ptr<CpuStream>> streams;
  std::atomic<int> after{0};
  for (int i = 0; i < pool.num_threads() + 1; ++i) {
    streams.push_back(std::make_unique<CpuStream>("waiter" + std::to_string(i)));
    ASSERT_TRUE(streams.back()->wait(e).ok());
    streams.back()->enqueue([&] { after++; });
  }
  std::atomic<int> ran{0};
  for (int i = 0; i < 4 * pool.num_threads(); ++i) pool.schedule([&] { ran++; });
  EXPECT_TRUE(wait_until([&] { return ran.load() == 4 * pool.num_threads(); }));
  EXPECT_EQ(after.load(), 0);
  gate.open();
  EXPECT_TRUE(wait_until([&] { return after.load() == pool.num_threads() + 1; }));
  streams.clear();  // drains before `after` goes
}

// ----- Copies -----

template <class T>
Tensor pattern(int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      v[static_cast<std::size_t>(i)] = (i * 7) % 3 == 0;
    } else {
      v[static_cast<std::size_t>(i)] = static_cast<T>(i * 3 - 7);
    }
  }
  return Tensor::from_vector<T>(std::move(v), Shape{n});
}

TEST(SimCopyTest, RoundTripKeepsTheBytes) {
  SimDevice sim(1);
  for (int64_t n : {0, 1, 17, 1000, 100000}) {
    for (const Tensor& host : {pattern<float>(n), pattern<double>(n), pattern<int32_t>(n),
                               pattern<int64_t>(n), pattern<bool>(n)}) {
      CopyResult to_dev;
      sim.copy_to_device(host, sim.host_to_device_stream(), to_dev.callback());
      auto d = to_dev.get();
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      Tensor on_device = std::move(d).value();  // the only handle left
      EXPECT_EQ(on_device.device(), kSim1);
      EXPECT_EQ(on_device.shape(), host.shape());
      EXPECT_NE(on_device.raw_data(), host.raw_data());
      EXPECT_EQ(sim.allocator().stats().bytes_in_use, static_cast<int64_t>(host.bytes()));

      CopyResult to_host;
      sim.copy_to_host(on_device, sim.device_to_host_stream(), to_host.callback());
      auto h = to_host.get();
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      EXPECT_EQ(h.value().device(), kHostDeviceName);
      EXPECT_TRUE(h.value().equals(host)) << n << " " << host.dtype();
      on_device.reset();
      EXPECT_EQ(sim.allocator().stats().bytes_in_use, 0);
    }
  }
}

TEST(SimCopyTest, RejectsTensorsInTheWrongMemory) {
  SimDevice sim(0);
  CopyResult a;
  sim.copy_to_host(pattern<float>(4), sim.device_to_host_stream(), a.callback());
  EXPECT_EQ(a.get().status().code(), ErrorCode::kInvalidArgument);
  Tensor on_device = sim.allocate_tensor(DType::Float32, {2}).value();
  CopyResult b;
  sim.copy_to_device(on_device, sim.host_to_device_stream(), b.callback());
  EXPECT_EQ(b.get().status().code(), ErrorCode::kInvalidArgument);
  CopyResult c;
  sim.copy_to_device(Tensor(), sim.host_to_device_stream(), c.callback());
  EXPECT_EQ(c.get().status().code(), ErrorCode::kInvalidArgument);
}

TEST(SimCopyTest, CopyThenComputeThroughAnEvent) {
  // The pattern the executor will use: copy in on the H2D stream, the kernel waits on its event.
  SimDevice sim(0);
  Tensor host = pattern<float>(256);
  CopyResult in;
  sim.copy_to_device(host, sim.host_to_device_stream(), in.callback());
  Event copied;
  ASSERT_TRUE(sim.host_to_device_stream().record(copied).ok());
  ASSERT_TRUE(sim.compute_stream().wait(copied).ok());
  Tensor on_device = in.get().value();
  double sum = 0;
  sim.compute_stream().enqueue([&] {
    for (float x : on_device.to_vector<float>()) sum += x;
  });
  ASSERT_TRUE(sim.compute_stream().synchronize(std::chrono::seconds(10)).ok());
  double want = 0;
  for (float x : host.to_vector<float>()) want += x;
  EXPECT_EQ(sum, want);
}

TEST(SimCopyTest, SimulatedTransferTakesTime) {
  SimDevice sim(0, SimDeviceOptions{.simulated_transfer_latency_seconds = 0.03});
  auto start = std::chrono::steady_clock::now();
  CopyResult r;
  sim.copy_to_device(pattern<int32_t>(8), sim.host_to_device_stream(), r.callback());
  ASSERT_TRUE(r.get().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
}

TEST(CpuCopyTest, CopiesHandTheBufferOver) {
  CpuDevice cpu;
  Tensor host = pattern<float>(8);
  CopyResult r;
  cpu.copy_to_device(host, cpu.host_to_device_stream(), r.callback());
  auto t = r.get();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value().raw_data(), host.raw_data());
}

// ----- Concurrency -----

TEST(StreamConcurrencyTest, ProducersKeepTheirOrderOnEveryStream) {
  for (int threads : kThreadCounts) {
    SimDevice sim(0, SimDeviceOptions{.num_compute_streams = 2});
    CpuDevice cpu;
    std::vector<Stream*> streams = {&sim.compute_stream(0), &sim.compute_stream(1), &cpu.compute_stream(),
                                    &sim.host_to_device_stream()};
    constexpr int kPerThread = 400;
    // One log per stream, written only by that stream's work.
    std::vector<std::vector<std::pair<int, int>>> logs(streams.size());
    run_threads(threads, [&](int t) {
      for (int i = 0; i < kPerThread; ++i) {
        std::size_t s = static_cast<std::size_t>(t + i) % streams.size();
        streams[s]->enqueue([&logs, s, t, i] { logs[s].emplace_back(t, i); });
      }
    });
    std::size_t total = 0;
    for (std::size_t s = 0; s < streams.size(); ++s) {
      ASSERT_TRUE(streams[s]->synchronize(std::chrono::seconds(10)).ok());
      std::vector<int> last(static_cast<std::size_t>(threads), -1);
      for (auto [t, i] : logs[s]) {
        EXPECT_GT(i, last[static_cast<std::size_t>(t)]) << "stream " << s << " reordered producer " << t;
        last[static_cast<std::size_t>(t)] = i;
      }
      total += logs[s].size();
    }
    EXPECT_EQ(total, static_cast<std::size_t>(threads * kPerThread)) << threads << " threads";
  }
}

TEST(StreamConcurrencyTest, ConcurrentCopiesAndThenCallbacks) {
  for (int threads : kThreadCounts) {
    SimDevice sim(0);
    std::atomic<int> ok{0};
    run_threads(threads, [&](int t) {
      for (int i = 0; i < 20; ++i) {
        Tensor host = pattern<int32_t>(t * 31 + i);
        CopyResult r;
        sim.copy_to_device(host, sim.host_to_device_stream(), r.callback());
        auto d = r.get();
        if (!d.ok()) continue;
        CopyResult back;
        sim.copy_to_host(d.value(), sim.device_to_host_stream(), back.callback());
        auto h = back.get();
        if (h.ok() && h.value().equals(host)) ok++;
      }
    });
    EXPECT_EQ(ok.load(), threads * 20);
    EXPECT_EQ(sim.allocator().stats().bytes_in_use, 0);
  }
}

// ----- Teardown -----

TEST(DeviceTeardownTest, DestroyingADeviceDrainsPendingWork) {
  std::atomic<int> ran{0};
  std::atomic<bool> then_fired{false};
  std::atomic<bool> waited_work_ran{false};
  {
    auto sim = std::make_unique<SimDevice>(0, SimDeviceOptions{.num_compute_streams = 2});
    sim->compute_stream(0).enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
    for (int i = 0; i < 1000; ++i) sim->compute_stream(0).enqueue([&] { ran++; });
    sim->compute_stream(0).then([&](Status s) { then_fired = s.ok(); });
    // A stream parked on another stream's event when the device goes.
    sim->host_to_device_stream().enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
    Event e;
    ASSERT_TRUE(sim->host_to_device_stream().record(e).ok());
    ASSERT_TRUE(sim->compute_stream(1).wait(e).ok());
    sim->compute_stream(1).enqueue([&] { waited_work_ran = true; });
    sim.reset();  // joins every stream thread
  }
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_TRUE(then_fired.load());
  EXPECT_TRUE(waited_work_ran.load());
}

TEST(DeviceTeardownTest, RegistryDestroysItsDevices) {
  std::atomic<int> ran{0};
  {
    auto r = cpu_and_sims(3);
    for (Device* d : r->devices()) {
      for (int i = 0; i < 100; ++i) d->compute_stream().enqueue([&] { ran++; });
    }
  }
  EXPECT_EQ(ran.load(), 400);
}

// ----- TESSERA_SIM_ACCELERATORS -----

class SimEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("TESSERA_SIM_ACCELERATORS");
    if (v) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      setenv("TESSERA_SIM_ACCELERATORS", saved_->c_str(), 1);
    } else {
      unsetenv("TESSERA_SIM_ACCELERATORS");
    }
  }
  std::optional<std::string> saved_;
};

TEST_F(SimEnvTest, RegistersTheRequestedNumber) {
  setenv("TESSERA_SIM_ACCELERATORS", "2", 1);
  DeviceRegistry r;
  auto n = register_sim_devices_from_env(r);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n.value(), 2);
  ASSERT_EQ(r.devices().size(), 2u);
  EXPECT_EQ(r.devices()[0]->name(), kSim0);
  EXPECT_EQ(r.devices()[1]->name(), kSim1);
  EXPECT_EQ(r.devices()[1]->type(), "SIM");
}

TEST_F(SimEnvTest, UnsetOrEmptyMeansNone) {
  unsetenv("TESSERA_SIM_ACCELERATORS");
  DeviceRegistry r;
  EXPECT_EQ(register_sim_devices_from_env(r).value(), 0);
  setenv("TESSERA_SIM_ACCELERATORS", "", 1);
  EXPECT_EQ(register_sim_devices_from_env(r).value(), 0);
  EXPECT_TRUE(r.devices().empty());
}

TEST_F(SimEnvTest, InvalidValuesAreClearErrors) {
  for (const char* bad : {"abc", "-1", "2x", " 2", "65", "99999999999999999999"}) {
    setenv("TESSERA_SIM_ACCELERATORS", bad, 1);
    DeviceRegistry r;
    auto n = register_sim_devices_from_env(r);
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(n.status().message().find("TESSERA_SIM_ACCELERATORS"), std::string::npos);
    EXPECT_NE(n.status().message().find(bad), std::string::npos) << n.status().message();
    EXPECT_TRUE(r.devices().empty());
  }
}

}  // namespace
}  // namespace tessera::internal
