// Stream-ordered execution on the simulated accelerator (Note [Stream-ordered kernels] in
// core/executor.cc, Note [Stream-ordered memory] in device/sim_kernels.cc): dependent device ops
// are enqueued without waiting for each other, memory freed while queued work still reads it is
// never overwritten early (guard patterns), a failing kernel in the middle of a chain fails its
// step and the next step succeeds, and variable reads are snapshots under concurrent AssignAdd.
#include <atomic>
#include <future>
#include <thread>

#include "core/device.h"
#include "device/sim_device.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;

// This suite's own accelerator: /device:SIM:0 of the process, registered once.
internal::Device* sim() {
  static internal::Device* device = [] {
    auto& registry = internal::DeviceRegistry::global();
    auto existing = registry.find_all("/device:SIM:*");
    if (!existing.ok() || existing.value().empty()) {
      internal::register_sim_devices(1, registry).raise();
    }
    return registry.find("/device:SIM:0").value_or_raise();
  }();
  return device;
}

// Registered before any session places an op.
class SimEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_NE(sim(), nullptr); }
};
const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new SimEnvironment);

constexpr const char* kSim0 = "/job:localhost/replica:0/task:0/device:SIM:0";

// Holds the device's compute stream (its next work item waits) until release() or destruction.
class StreamHold {
 public:
  explicit StreamHold(internal::Stream& stream) {
    auto released = released_.get_future().share();
    stream.enqueue([released] { (void)released.wait_for(30s); });
  }
  ~StreamHold() { release(); }
  void release() {
    if (!done_) released_.set_value();
    done_ = true;
  }

 private:
  std::promise<void> released_;
  bool done_ = false;
};

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// While the stream is held, a step's whole chain of dependent SIM ops is enqueued: their outputs
// are all allocated (at enqueue time) though none has run. A device that finished each op before
// its successor could start would have issued one.
TEST(StreamOrderTest, ADependentChainIsEnqueuedWhileTheStreamHasRunNoneOfIt) {
  constexpr int kChain = 40;
  Graph g;
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    auto c = ops::constant(g, Tensor::vector<float>({1, 2, 3, 4}));
    y = c;
    for (int i = 0; i < kChain; ++i) y = ops::add(y, c);
  }
  SessionOptions eager;
  eager.cuda_graphs = false;  // each op issued on its own (a replay would allocate nothing)
  Session s(g, eager);
  EXPECT_EQ(s.run(y).to_vector<float>(), (std::vector<float>{41, 82, 123, 164}));  // warm: kernels made
  ASSERT_EQ(y.op().assigned_device(), kSim0);
  const int64_t before = sim()->allocator().stats().num_allocs;
  StreamHold hold(sim()->compute_stream(0));
  auto result = std::async(std::launch::async, [&] { return s.run(y); });
  EXPECT_TRUE(wait_until([&] { return sim()->allocator().stats().num_allocs - before >= kChain; }, 10s))
      << sim()->allocator().stats().num_allocs - before << " of " << kChain << " ops issued";
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout);  // the fetch waits for the stream
  hold.release();
  ASSERT_EQ(result.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(result.get().to_vector<float>(), (std::vector<float>{41, 82, 123, 164}));
}

// Guard patterns: each step copies its own pattern to the device, where a slow MatMul reads it
// while the executor has already freed it (its last consumer is enqueued) and other threads'
// copies reuse that memory at once. Every result must be its own pattern's.
TEST(StreamOrderTest, MemoryFreedWhileQueuedWorkReadsItIsNeverOverwrittenEarly) {
  constexpr int64_t kN = 160;
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {kN, kN}, "x");
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    auto ones = ops::constant(g, Tensor::from_vector<float>(std::vector<float>(kN * kN, 1.0f), Shape{kN, kN}));
    // x is read by the MatMul only: it is freed once the MatMul is enqueued.
    y = ops::matmul(x, ones, false, false, "product");
  }
  Session s(g);
  std::atomic<int> wrong{0};
  testing::run_threads(4, [&](int t) {
    for (int k = 0; k < 25; ++k) {
      const float pattern = static_cast<float>(1 + t * 100 + k);
      auto out = s.run(y, {{x, Tensor::from_vector<float>(std::vector<float>(kN * kN, pattern), Shape{kN, kN})}});
      // Every element is the sum of a row of x: kN * pattern, exact in float.
      const float* p = out.data<float>();
      for (int64_t i = 0; i < kN * kN; ++i) {
        if (p[i] != pattern * static_cast<float>(kN)) {
          ++wrong;
          break;
        }
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "of 100 steps";
  EXPECT_EQ(y.op().assigned_device(), kSim0);
  EXPECT_TRUE(sim()->health().ok());
}

// A kernel failing in the middle of a chain (its error is found on the stream, after it was done
// for the executor) fails that step, naming the op; the device is not failed and the next step
// succeeds.
TEST(StreamOrderTest, AFailingKernelInTheMiddleOfAChainFailsItsStepAndTheNextStepSucceeds) {
  Graph g;
  auto d = ops::placeholder(g, DType::Int32, {3}, "d");
  Output r;
  {
    auto scope = g.device("/device:SIM:0");
    auto n = ops::constant(g, Tensor::vector<int32_t>({6, 8, 10}));
    auto a = ops::add(n, n, "before");
    auto q = ops::div(a, d, "quotient");
    r = ops::mul(ops::add(q, n, "after"), n, "last");
  }
  Session s(g);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THROW_MSG(s.run(r, {{d, Tensor::vector<int32_t>({1, 0, 2})}}), InvalidArgumentError,
                     "quotient (Div): integer division by zero");
    EXPECT_EQ(s.run(r, {{d, Tensor::vector<int32_t>({2, 4, 5})}}).to_vector<int32_t>(),
              (std::vector<int32_t>{(6 + 6) * 6, (4 + 8) * 8, (4 + 10) * 10}));
  }
  EXPECT_EQ(r.op().assigned_device(), kSim0);
  EXPECT_TRUE(sim()->health().ok()) << sim()->health().to_string();
}

// A read of a device variable is a snapshot: fetched while other threads AssignAdd ones to every
// element, every element of a read is the same.
TEST(StreamOrderTest, VariableReadsAreSnapshotsUnderConcurrentAssignAdd) {
  constexpr int64_t kN = 1 << 16;
  Graph g;
  Variable v;
  Output inc;
  {
    auto scope = g.device("/device:SIM:0");
    v = Variable(g, Tensor::zeros(DType::Float32, Shape{kN}), "v");
    inc = v.assign_add(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(kN, 1.0f), Shape{kN})));
  }
  auto read = ops::identity(v.value(), "read");  // on the host: a copy out of device memory
  Session s(g);
  s.run(global_variables_initializer(g));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  constexpr int kUpdates = 150;
  std::thread updater([&] {
    for (int i = 0; i < kUpdates; ++i) s.run(inc);
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto value = s.run(read);
        const float* p = value.data<float>();
        for (int64_t i = 1; i < kN; ++i) {
          if (p[i] != p[0]) {
            ++torn;
            break;
          }
        }
        ++reads;
      }
    });
  }
  updater.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(inc.op().assigned_device(), kSim0);
  auto final_value = s.run(read);
  EXPECT_EQ(final_value.data<float>()[kN - 1], static_cast<float>(kUpdates));
}

// Memory that stream work allocates itself (a kernel run whole on the stream) is fresh heap memory
// freed in stream order: dropped on the host while later work on the stream still reads it, it
// stays valid for that work (AddressSanitizer reports the read otherwise).
TEST(StreamOrderTest, MemoryAllocatedOnTheStreamIsFreedInStreamOrder) {
  internal::Stream& stream = sim()->compute_stream(0);
  auto holder = std::make_shared<Tensor>();
  std::promise<void> dropped;
  auto dropped_future = dropped.get_future().share();
  std::atomic<float> read{0};
  float* raw = nullptr;
  std::promise<float*> allocated;
  stream.enqueue([&, holder] {
    *holder = sim()->allocate_tensor(DType::Float32, Shape{1024}).value();
    float* p = holder->mutable_data<float>();
    for (int i = 0; i < 1024; ++i) p[i] = 7.0f;
    allocated.set_value(p);
  });
  stream.enqueue([dropped_future] { (void)dropped_future.wait_for(30s); });
  stream.enqueue([&] { read = raw[1023]; });
  auto f = allocated.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  raw = f.get();  // read by the third item, which has not run: the second waits for `dropped`
  holder->reset();  // the last handle: the free goes onto the stream, after the read
  dropped.set_value();
  ASSERT_TRUE(stream.synchronize(30s).ok());
  EXPECT_EQ(read.load(), 7.0f);
}

}  // namespace
}  // namespace tessera
