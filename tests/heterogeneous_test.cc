// Sessions over the CPU and simulated accelerators: placement decisions reach execution,
// cross-device edges carry copies, steps spanning devices fail, time out and close as one, traces
// show copies and kernels on their streams, and random graphs give the same results on CPU+SIM
// as on the CPU alone.
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "core/device.h"
#include "device/sim_device.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/traced_spans.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using testing::kThreadCounts;

constexpr const char* kCpu = "/job:localhost/replica:0/task:0/device:CPU:0";
constexpr const char* kSim0 = "/job:localhost/replica:0/task:0/device:SIM:0";
constexpr const char* kSim1 = "/job:localhost/replica:0/task:0/device:SIM:1";

// Two simulated accelerators in this process, as TESSERA_SIM_ACCELERATORS=2 would register.
class SimEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto& registry = internal::DeviceRegistry::global();
    auto existing = registry.find_all("/device:SIM:*");
    if (existing.ok() && existing.value().size() >= 2) return;
    ASSERT_TRUE(internal::register_sim_devices(2, registry).ok());
  }
};
const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new SimEnvironment);

SessionOptions with_policy(PlacementPolicy p) {
  SessionOptions o;
  o.placement_policy = p;
  return o;
}

std::vector<float> iota_floats(int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * static_cast<float>((i * 7) % 13 - 6);
  return v;
}

// An accelerator: a simulated one, or a GPU where one is registered (placement then prefers it).
bool on_accelerator(const std::string& device) {
  return device.find("/device:SIM:") != std::string::npos || device.find("/device:GPU:") != std::string::npos;
}

using testing::traced_spans;
using testing::TracedSpan;

// The device a traced step ran op `name` on, "" when absent.
std::string traced_device_of(const std::string& trace_json, const std::string& name) {
  for (const TracedSpan& span : traced_spans(trace_json)) {
    if (span.name == name) return span.device;
  }
  return "";
}

// Placement belongs to the session: two sessions over one graph with different policies each run
// the op where they placed it, whichever placed last; Operation::assigned_device() reports the
// latest placement made.
TEST(HeterogeneousTest, TwoSessionsWithDifferentPoliciesEachKeepTheirOwnPlacement) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {64, 64}, "x");
  auto y = ops::matmul(x, x, false, false, "y");
  const FeedMap feeds{{x, Tensor::matrix<float>(iota_floats(64 * 64, 0.5f), 64, 64)}};
  Session host(g, with_policy(PlacementPolicy::cpu_only));
  Session accel(g, with_policy(PlacementPolicy::gpu_first));
  RunOptions traced;
  traced.trace = true;
  for (int round = 0; round < 2; ++round) {
    RunMetadata on_host, on_accel;
    const Tensor a = host.run({y}, feeds, {}, traced, &on_host).front();
    if (round == 0) {
      EXPECT_EQ(y.op().assigned_device(), kCpu);
    }
    const Tensor b = accel.run({y}, feeds, {}, traced, &on_accel).front();
    EXPECT_TRUE(on_accelerator(y.op().assigned_device())) << y.op().assigned_device();  // the latest placement
    EXPECT_EQ(traced_device_of(on_host.trace_json, "y"), kCpu) << "round " << round;
    EXPECT_TRUE(on_accelerator(traced_device_of(on_accel.trace_json, "y"))) << on_accel.trace_json;
    const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
    ASSERT_EQ(va.size(), vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-3f * (1 + std::abs(va[i]))) << i;
  }
}

TEST(HeterogeneousTest, CostModelSendsABigMatMulToTheAcceleratorAndKeepsAScalarAddOnTheHost) {
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, {1024, 1024}, "a");
  auto b = ops::placeholder(g, DType::Float32, {1024, 1024}, "b");
  auto mm = ops::matmul(a, b);
  auto total = ops::reduce_sum(mm);
  auto small = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "small");
  Session s(g);
  // Small integers: every product and partial sum of the MatMul is exact in float32, so any
  // device's summation order gives the CPU's result bit for bit. The sum of its million elements
  // is not exact: compared within float32 rounding of the sum of their magnitudes.
  auto av = Tensor::matrix<float>(iota_floats(1024 * 1024, 1.0f), 1024, 1024);
  auto bv = Tensor::matrix<float>(iota_floats(1024 * 1024, 1.0f), 1024, 1024);
  auto out = s.run({mm, total, small}, {{a, av}, {b, bv}});
  EXPECT_TRUE(on_accelerator(mm.op().assigned_device())) << mm.op().assigned_device();
  EXPECT_EQ(small.op().assigned_device(), kCpu);
  EXPECT_FLOAT_EQ(out[2].scalar<float>(), 3.0f);
  EXPECT_EQ(out[0].device(), kCpu);  // fetched results are in host memory
  EXPECT_EQ(out[1].device(), kCpu);

  Session cpu(g, with_policy(PlacementPolicy::cpu_only));
  auto ref = cpu.run({mm, total}, {{a, av}, {b, bv}});
  EXPECT_EQ(mm.op().assigned_device(), kCpu);
  EXPECT_TRUE(out[0].equals(ref[0]));
  double magnitude = 0;
  for (float v : ref[0].to_vector<float>()) magnitude += std::abs(v);
  EXPECT_NEAR(out[1].scalar<float>(), ref[1].scalar<float>(), 1e-6 * magnitude);
}

TEST(HeterogeneousTest, ExplicitDeviceScopesAreHonoured) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {4}, "x");
  Output y, z;
  {
    auto scope = g.device("/device:SIM:1");
    y = ops::mul(x, ops::constant(g, Tensor::vector<float>({1, 2, 3, 4})), "y");
  }
  {
    auto scope = g.device("/sim:0");
    z = ops::add(y, y, "z");
  }
  auto w = ops::neg(z, "w");
  Session s(g);
  auto out = s.run({z, w, y}, {{x, Tensor::vector<float>({1, 1, 1, 1})}});
  EXPECT_EQ(y.op().assigned_device(), kSim1);
  EXPECT_EQ(z.op().assigned_device(), kSim0);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{-2, -4, -6, -8}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  for (const auto& t : out) EXPECT_EQ(t.device(), kCpu);
}

TEST(HeterogeneousTest, GpuFirstPutsEveryOpWithAKernelOnAnAccelerator) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2}, "x");
  auto y = ops::add(x, ops::constant(g, Tensor::vector<float>({1, 2})), "y");
  FIFOQueue q(g, 4, {DType::Float32});
  auto enq = q.enqueue({y});
  Session s(g, with_policy(PlacementPolicy::gpu_first));
  s.run(enq, {{x, Tensor::vector<float>({10, 20})}});
  EXPECT_TRUE(on_accelerator(y.op().assigned_device())) << y.op().assigned_device();
  EXPECT_EQ(enq.assigned_device(), kCpu);  // queues live in host memory
  EXPECT_EQ(s.run(q.dequeue()[0]).to_vector<float>(), (std::vector<float>{11, 22}));
}

// With several accelerators, gpu_first spreads independent branches over them (a step then
// spans both, with its copies), and the results are the CPU's. It picks among the accelerators of
// the kind it prefers: the GPUs where there are any. With exactly one GPU (and the two SIMs of
// this process) both branches go to that GPU, as TensorFlow puts everything on GPU:0.
TEST(HeterogeneousTest, GpuFirstSpreadsIndependentBranchesOverTheAccelerators) {
  int gpus = 0;
  for (const DeviceInfo& d : list_devices()) gpus += d.type == "GPU" ? 1 : 0;
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, {128, 128}, "a");
  auto b = ops::placeholder(g, DType::Float32, {128, 128}, "b");
  auto left = ops::matmul(a, a, false, false, "left");
  auto right = ops::matmul(b, b, false, false, "right");
  const FeedMap feeds{{a, Tensor::matrix<float>(iota_floats(128 * 128, 0.25f), 128, 128)},
                      {b, Tensor::matrix<float>(iota_floats(128 * 128, 0.5f), 128, 128)}};
  Session accel(g, with_policy(PlacementPolicy::gpu_first));
  auto out = accel.run({left, right}, feeds);
  EXPECT_TRUE(on_accelerator(left.op().assigned_device())) << left.op().assigned_device();
  EXPECT_TRUE(on_accelerator(right.op().assigned_device())) << right.op().assigned_device();
  if (gpus == 1) {
    EXPECT_EQ(left.op().assigned_device(), "/job:localhost/replica:0/task:0/device:GPU:0");
    EXPECT_EQ(right.op().assigned_device(), left.op().assigned_device());
  } else {
    EXPECT_NE(left.op().assigned_device(), right.op().assigned_device());
  }
  Session host(g, with_policy(PlacementPolicy::cpu_only));
  auto want = host.run({left, right}, feeds);
  testing::expect_same(out[0], want[0], 1e-4);
  testing::expect_same(out[1], want[1], 1e-4);
}

TEST(HeterogeneousTest, WithoutSoftPlacementAnUnknownDeviceIsAnError) {
  Graph g;
  Output y;
  {
    auto scope = g.device("/device:GPU:3");
    y = ops::neg(ops::constant(g, 1.0f), "y");
  }
  SessionOptions o;
  o.allow_soft_placement = false;
  Session strict(g, o);
  EXPECT_THROW_MSG(strict.run(y), InvalidArgumentError, "available devices");
  Session soft(g);
  EXPECT_FLOAT_EQ(soft.run(y).scalar<float>(), -1.0f);
}

TEST(HeterogeneousTest, VariablesOnAnAcceleratorLoseNoUpdateUnderConcurrentAssignAdd) {
  for (int threads : kThreadCounts) {
    Graph g;
    Output inc;
    Variable v;
    {
      auto scope = g.device("/device:SIM:0");
      v = Variable(g, Tensor::vector<float>({0, 0}), "counter");
    }
    inc = v.assign_add(ops::constant(g, Tensor::vector<float>({1, 2})));
    Session s(g);
    s.run(global_variables_initializer(g));
    constexpr int kPerThread = 50;
    testing::run_threads(threads, [&](int) {
      for (int i = 0; i < kPerThread; ++i) s.run(inc);
    });
    auto value = s.run(v.value());
    EXPECT_EQ(inc.op().assigned_device(), kSim0);
    EXPECT_EQ(v.value().op().assigned_device(), kSim0);
    EXPECT_EQ(value.to_vector<float>(), (std::vector<float>{float(threads * kPerThread), float(2 * threads * kPerThread)}))
        << threads << " threads";
  }
}

TEST(HeterogeneousTest, ControlEdgesCrossDevices) {
  Graph g;
  Variable v(g, Tensor::scalar<float>(0.0f), "v");
  Operation set;
  {
    auto scope = g.device("/device:SIM:1");
    set = v.assign(ops::constant(g, 5.0f)).op();
  }
  Output read;
  {
    auto deps = g.control_dependencies({set});
    auto scope = g.device("/device:CPU:0");
    read = ops::add(ops::constant(g, 1.0f), ops::constant(g, 1.0f), "after_set");
  }
  Session s(g);
  EXPECT_FLOAT_EQ(s.run(read).scalar<float>(), 2.0f);
  // The assign ran (as a control dependency) before `read`: the variable is set.
  EXPECT_FLOAT_EQ(s.run(v.value()).scalar<float>(), 5.0f);
  EXPECT_EQ(set.assigned_device(), kSim1);
}

TEST(HeterogeneousTest, AnErrorOnTheAcceleratorFailsTheStepWithTheOpNameAndTheSessionStaysUsable) {
  Graph g;
  auto d = ops::placeholder(g, DType::Int32, {2}, "d");
  Output q;
  {
    auto scope = g.device("/device:SIM:0");
    q = ops::div(ops::constant(g, Tensor::vector<int32_t>({6, 8})), d, "quotient");
  }
  auto r = ops::add(q, ops::constant(g, Tensor::vector<int32_t>({1, 1})), "r");
  Session s(g);
  EXPECT_THROW_MSG(s.run(r, {{d, Tensor::vector<int32_t>({0, 2})}}), InvalidArgumentError, "quotient (Div): ");
  EXPECT_EQ(s.run(r, {{d, Tensor::vector<int32_t>({3, 2})}}).to_vector<int32_t>(), (std::vector<int32_t>{3, 5}));
}

TEST(HeterogeneousTest, ADeadlineCancelsEveryPartitionOfTheStep) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{2}});
  auto x = q.dequeue()[0];  // host: blocks, nothing is ever enqueued
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::mul(x, x, "square_on_sim");
  }
  Session s(g);
  RunOptions ro;
  ro.timeout = 50ms;
  EXPECT_THROW(s.run({y}, {}, {}, ro), DeadlineExceededError);
  // The session is still usable.
  s.run(q.enqueue({ops::constant(g, Tensor::vector<float>({3, 4}))}));
  EXPECT_EQ(s.run(y).to_vector<float>(), (std::vector<float>{9, 16}));
}

TEST(HeterogeneousTest, CloseCancelsAStepWaitingAcrossDevices) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}});
  Output y;
  {
    auto scope = g.device("/device:SIM:1");
    y = ops::exp(q.dequeue()[0], "exp_on_sim");
  }
  Session s(g);
  std::atomic<bool> cancelled{false};
  std::thread t([&] {
    try {
      s.run(y);
    } catch (const CancelledError&) {
      cancelled = true;
    }
  });
  std::this_thread::sleep_for(20ms);
  s.close();
  t.join();
  EXPECT_TRUE(cancelled.load());
}

TEST(HeterogeneousTest, TraceShowsKernelsOnStreamsAndCopiesOnCopyStreams) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {64, 64}, "x");
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::matmul(x, x, false, false);
  }
  auto z = ops::reduce_sum(y, {}, false);
  Session s(g);
  RunOptions ro;
  ro.trace = true;
  RunMetadata md;
  s.run({z}, {{x, Tensor::matrix<float>(iota_floats(64 * 64, 1.0f), 64, 64)}}, {}, ro, &md);
  bool matmul_on_stream = false, h2d_copy = false, d2h_copy = false;
  for (const TracedSpan& span : traced_spans(md.trace_json)) {
    EXPECT_GE(span.dur, 0);
    const auto on = [&](const char* lane) { return span.lane.find(lane) != std::string::npos; };
    if (span.category == "MatMul" && span.device == kSim0 && on("stream:compute")) matmul_on_stream = true;
    if (span.category == "copy" && on("host_to_device")) h2d_copy = true;
    if (span.category == "copy" && on("device_to_host")) d2h_copy = true;
  }
  EXPECT_TRUE(matmul_on_stream) << md.trace_json;
  EXPECT_TRUE(h2d_copy) << md.trace_json;
  EXPECT_TRUE(d2h_copy) << md.trace_json;
}

// A tensor from one accelerator to another that can reach its memory goes peer to peer: one copy,
// on the destination's host-to-device stream, none through host memory.
TEST(HeterogeneousTest, CopiesBetweenAcceleratorsGoPeerToPeer) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {64, 64}, "x");
  Output y, z;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::matmul(x, x, false, false, "on_sim0");
  }
  {
    auto scope = g.device("/device:SIM:1");
    z = ops::add(y, y, "on_sim1");
  }
  Session s(g);
  RunOptions ro;
  ro.trace = true;
  RunMetadata md;
  const Tensor xv = Tensor::matrix<float>(iota_floats(64 * 64, 1.0f), 64, 64);
  auto out = s.run({z}, {{x, xv}}, {}, ro, &md);
  Session host(g, with_policy(PlacementPolicy::cpu_only));
  testing::expect_same(out[0], host.run({z}, {{x, xv}})[0], 1e-5);
  int sim0_to_host = 0, into_sim1 = 0;
  for (const TracedSpan& span : traced_spans(md.trace_json)) {
    if (span.category != "copy") continue;
    if (span.device == kSim0 && span.lane.find("device_to_host") != std::string::npos) ++sim0_to_host;
    if (span.device == kSim1 && span.lane.find("host_to_device") != std::string::npos) ++into_sim1;
  }
  EXPECT_EQ(sim0_to_host, 0) << "y went through host memory\n" << md.trace_json;
  EXPECT_EQ(into_sim1, 1) << md.trace_json;
}

// Data parallelism as TensorFlow 1 users write it, built by hand (no optimizers yet): the batch
// split in two, a tower per accelerator computing its half's loss and the gradient of a linear
// model's squared error by hand, the towers' gradients averaged on one device and applied to a
// variable that lives there. Every step equals the same step on the CPU alone.
TEST(HeterogeneousTest, TwoTowersOnTwoAcceleratorsAverageTheirGradientsLikeOneDevice) {
  constexpr int64_t kBatch = 64, kIn = 32;
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {kBatch, kIn}, "x");
  auto y = ops::placeholder(g, DType::Float32, {kBatch, 1}, "y");
  Variable w;
  {
    auto scope = g.device("/device:SIM:0");
    w = Variable(g, Tensor::zeros(DType::Float32, Shape{kIn, 1}), "w");
  }
  // Rows [0, 32) go to tower 0, [32, 64) to tower 1: the split is a MatMul with a 0/1 selector.
  auto selector = [&](int tower) {
    std::vector<float> s(static_cast<std::size_t>(kBatch / 2 * kBatch), 0.0f);
    for (int64_t r = 0; r < kBatch / 2; ++r) s[static_cast<std::size_t>(r * kBatch + r + tower * kBatch / 2)] = 1.0f;
    return Tensor::matrix<float>(s, kBatch / 2, kBatch);
  };
  std::vector<Output> grads;
  for (int tower = 0; tower < 2; ++tower) {
    auto scope = g.device("/device:SIM:" + std::to_string(tower));
    auto sel = ops::constant(g, selector(tower));
    auto xs = ops::matmul(sel, x);
    auto ys = ops::matmul(sel, y);
    auto err = ops::sub(ops::matmul(xs, w.value()), ys);                  // [32, 1]
    // d/dw of mean((xs w - ys)^2) = 2 xs^T err / 32
    grads.push_back(ops::mul(ops::matmul(xs, err, /*transpose_a=*/true, false),
                             ops::constant(g, 2.0f / (kBatch / 2))));
  }
  Output step;
  {
    auto scope = g.device("/device:SIM:0");
    auto avg = ops::mul(ops::add(grads[0], grads[1]), ops::constant(g, 0.5f));
    step = w.assign_sub(ops::mul(avg, ops::constant(g, 0.05f)));
  }
  std::vector<float> xv(static_cast<std::size_t>(kBatch * kIn)), yv(static_cast<std::size_t>(kBatch));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.5f;
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = static_cast<float>((i * 13) % 7) / 7.0f;
  const FeedMap feeds{{x, Tensor::matrix<float>(xv, kBatch, kIn)}, {y, Tensor::matrix<float>(yv, kBatch, 1)}};
  Session towers(g, with_policy(PlacementPolicy::cost));
  towers.run(global_variables_initializer(g));
  std::vector<Tensor> tower_steps;
  for (int i = 0; i < 5; ++i) tower_steps.push_back(towers.run(step, feeds));
  // (assigned_device reports the latest placement: checked before the host session places.)
  EXPECT_EQ(grads[0].op().assigned_device(), kSim0);
  EXPECT_EQ(grads[1].op().assigned_device(), kSim1);
  EXPECT_EQ(step.op().assigned_device(), kSim0);
  Session host(g, with_policy(PlacementPolicy::cpu_only));
  host.run(global_variables_initializer(g));
  for (int i = 0; i < 5; ++i) testing::expect_same(tower_steps[static_cast<std::size_t>(i)], host.run(step, feeds), 1e-6);
  EXPECT_GT(std::abs(tower_steps.back().data<float>()[0]), 0.0f);  // the model moved
}

TEST(HeterogeneousTest, LogDevicePlacementPrintsTheTableWithEstimates) {
  Graph g;
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::square(ops::constant(g, Tensor::vector<float>({1, 2})), "sq");
  }
  SessionOptions o;
  o.log_device_placement = true;
  Session s(g, o);
  ::testing::internal::CaptureStderr();
  s.run(y);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("sq"), std::string::npos) << log;
  EXPECT_NE(log.find(kSim0), std::string::npos) << log;
  EXPECT_NE(log.find("us"), std::string::npos) << log;
}

TEST(HeterogeneousTest, ManyThreadsRunStepsWithTransfersConcurrently) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {256}, "x");
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::mul(x, ops::constant(g, 2.0f));
  }
  Output z;
  {
    auto scope = g.device("/device:SIM:1");
    z = ops::add(y, ops::constant(g, 1.0f));
  }
  Session s(g);
  for (int threads : kThreadCounts) {
    std::atomic<int> wrong{0};
    testing::run_threads(threads, [&](int t) {
      for (int i = 0; i < 100; ++i) {
        std::vector<float> in(256);
        for (int k = 0; k < 256; ++k) in[static_cast<std::size_t>(k)] = static_cast<float>(t * 1000 + i + k);
        auto out = s.run(z, {{x, Tensor::vector<float>(in)}}).to_vector<float>();
        for (int k = 0; k < 256; ++k) {
          if (out[static_cast<std::size_t>(k)] != 2 * in[static_cast<std::size_t>(k)] + 1) ++wrong;
        }
      }
    });
    EXPECT_EQ(wrong.load(), 0) << threads << " threads";
  }
}

// ---- Random DAGs: CPU+SIM (and a GPU, where there is one) must agree with the CPU alone ----

struct RandomDag {
  Graph g;
  std::vector<Output> sinks;
  FeedMap feeds;
};

// A random DAG of elementwise, matmul and reduction ops over [8, 8] float tensors, with random
// explicit device requests so that edges cross between CPU, SIM:0 and SIM:1 in every direction.
std::unique_ptr<RandomDag> random_dag(uint32_t seed) {
  auto dag = std::make_unique<RandomDag>();
  Graph& g = dag->g;
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::vector<Output> values;
  const int inputs = 1 + pick(3);
  for (int i = 0; i < inputs; ++i) {
    if (pick(2) == 0) {
      auto p = ops::placeholder(g, DType::Float32, {8, 8});
      std::vector<float> v(64);
      for (auto& f : v) f = static_cast<float>(pick(200) - 100) / 50.0f;
      dag->feeds[p] = Tensor::matrix<float>(v, 8, 8);
      values.push_back(p);
    } else {
      values.push_back(ops::random_uniform(g, {8, 8}, DType::Float32, seed * 31 + static_cast<uint32_t>(i) + 1));
    }
  }
  const char* devices[] = {"", "/device:CPU:0", "/device:SIM:0", "/device:SIM:1"};
  std::vector<bool> used(values.size(), false);
  const int ops_count = 4 + pick(12);
  for (int k = 0; k < ops_count; ++k) {
    auto scope = g.device(devices[pick(4)]);
    const int ia = pick(static_cast<int>(values.size()));
    const int ib = pick(static_cast<int>(values.size()));
    Output a = values[static_cast<std::size_t>(ia)], b = values[static_cast<std::size_t>(ib)];
    used[static_cast<std::size_t>(ia)] = used[static_cast<std::size_t>(ib)] = true;
    Output r;
    switch (pick(8)) {
      case 0: r = ops::add(a, b); break;
      case 1: r = ops::sub(a, b); break;
      case 2: r = ops::mul(a, b); break;
      case 3: r = ops::maximum(a, b); break;
      case 4: r = ops::tanh(a); break;
      case 5: r = ops::matmul(a, b, pick(2) == 0, pick(2) == 0); break;
      case 6: r = ops::add(a, ops::reduce_mean(b, {1}, true)); break;
      default: r = ops::sigmoid(ops::square(a)); break;
    }
    values.push_back(r);
    used.push_back(false);
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!used[i]) dag->sinks.push_back(values[i]);
  }
  return dag;
}

// SIM runs the CPU's kernels, so where only the CPU and SIM devices ran a graph its results are
// the CPU's bit for bit. A GPU's kernels round differently (its tanh, its MatMul's summation
// order): where one ran part of the graph, each result is compared within float32 rounding
// (normalised squared error 1e-8, a relative error near 1e-4 after up to 16 ops).
TEST(HeterogeneousTest, TwoHundredRandomDagsGiveTheSameResultsOnTheAcceleratorsAsOnTheCpuAlone) {
  int crossing = 0, on_gpu = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    auto dag = random_dag(seed);
    Session mixed(dag->g, with_policy(PlacementPolicy::gpu_first));
    auto got = mixed.run(dag->sinks, dag->feeds);
    std::set<std::string> devices;
    bool gpu = false;
    for (const auto& op : dag->g.operations()) {
      devices.insert(op.assigned_device());
      gpu = gpu || op.assigned_device().find("/device:GPU:") != std::string::npos;
    }
    if (devices.size() > 1) ++crossing;
    if (gpu) ++on_gpu;
    Session cpu(dag->g, with_policy(PlacementPolicy::cpu_only));
    auto want = cpu.run(dag->sinks, dag->feeds);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " sink " << dag->sinks[i].name());
      if (gpu) {
        testing::expect_same(got[i], want[i], 1e-8);
      } else {
        ASSERT_TRUE(got[i].equals(want[i]));
      }
      EXPECT_EQ(got[i].device(), kCpu);
    }
  }
  EXPECT_GT(crossing, 150);  // most graphs really span devices
  // With a GPU, gpu_first puts the unconstrained ops there: most graphs use it.
  auto gpus = internal::DeviceRegistry::global().find_all("/device:GPU:*");
  if (gpus.ok() && !gpus.value().empty()) {
    EXPECT_GT(on_gpu, 100);
  }
}

// ---- Copy streams under stress ----

TEST(HeterogeneousTest, CopiesOnOneStreamCompleteInOrderWithTheirOwnContents) {
  auto* sim = internal::DeviceRegistry::global().find("/device:SIM:1").value();
  for (int threads : kThreadCounts) {
    constexpr int kPerThread = 200;
    std::mutex mu;
    std::vector<std::pair<int, int>> completions;  // (thread, sequence) in completion order
    std::atomic<int> wrong{0};
    std::atomic<int> done{0};
    testing::run_threads(threads, [&](int t) {
      for (int i = 0; i < kPerThread; ++i) {
        auto host = Tensor::vector<int32_t>({t, i, t * 100000 + i});
        sim->copy_to_device(host, sim->host_to_device_stream(), [&, t, i](StatusOr<Tensor> r) {
          if (!r.ok() || r.value().device() != kSim1 || r.value().to_vector<int32_t>() != std::vector<int32_t>{t, i, t * 100000 + i}) {
            ++wrong;
          }
          {
            std::lock_guard<std::mutex> l(mu);
            completions.emplace_back(t, i);
          }
          ++done;
        });
      }
    });
    ASSERT_TRUE(testing::wait_until([&] { return done.load() == threads * kPerThread; }));
    EXPECT_EQ(wrong.load(), 0);
    // Per enqueueing thread, completions keep the enqueue order (one stream is one queue).
    std::vector<int> last(static_cast<std::size_t>(threads), -1);
    for (auto [t, i] : completions) {
      EXPECT_EQ(i, last[static_cast<std::size_t>(t)] + 1);
      last[static_cast<std::size_t>(t)] = i;
    }
  }
}

}  // namespace
}  // namespace tessera
