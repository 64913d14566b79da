// SessionOptions::cuda_graphs on the simulated accelerator (Note [Captured partitions] in
// core/captured_partition.cc): a device partition with static shapes and no state is captured on
// its first untraced step and replayed after, with the results of eager execution; what is unsafe
// to replay stays eager, and a partition whose value goes to the host and comes back replays in
// segments (Note [Replay segments]). A replayed step's trace shows a "graph" span per launch on the
// device's compute stream where an eager one shows a span per op.
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include "tessera/tessera.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"
#include "tests/testing/traced_spans.h"

namespace tessera {
namespace {

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

constexpr const char* kSim = "/device:SIM:0";

// Spans on the SIM device's compute stream of a traced step: graph launches and ops one by one.
testing::ComputeSpans sim_stream_spans(const std::string& trace_json) {
  return testing::compute_stream_spans(trace_json, "SIM:0");
}

Tensor ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = start + 0.25f * static_cast<float>(i % 17);
  return Tensor::vector<float>(v);
}

// x -> 50 dependent ops on SIM (adds of a constant and multiplies), fetched to the host.
struct Chain {
  Graph g;
  Output x, y;
  explicit Chain(int64_t n = 16) {
    x = ops::placeholder(g, DType::Float32, Shape{n}, "x");
    auto scope = g.device(kSim);
    Output one = ops::constant(g, ramp(n, 1.0f), "one");
    y = x;
    for (int i = 0; i < 25; ++i) y = ops::mul(ops::add(y, one), ops::constant(g, 0.5f));
  }
  // The same on the host, for reference.
  static std::vector<float> expected(const Tensor& in) {
    std::vector<float> v = in.to_vector<float>();
    const std::vector<float> one = ramp(static_cast<int64_t>(v.size()), 1.0f).to_vector<float>();
    for (int i = 0; i < 25; ++i) {
      for (std::size_t k = 0; k < v.size(); ++k) v[k] = (v[k] + one[k]) * 0.5f;
    }
    return v;
  }
};

RunOptions traced() {
  RunOptions o;
  o.trace = true;
  return o;
}

TEST(CapturedPartitionTest, ReplaysGiveEagerResultsAndOneLaunchPerStep) {
  Chain c;
  Session s(c.g);  // cuda_graphs is on by default
  for (int step = 0; step < 6; ++step) {
    Tensor in = ramp(16, static_cast<float>(step) - 3.0f);
    RunMetadata md;
    // Steps 0 (the capture) and 2 onwards traced; step 1 replays untraced.
    Tensor out = step == 1 ? s.run({c.y}, {{c.x, in}}).front()
                           : s.run({c.y}, {{c.x, in}}, {}, step == 0 ? RunOptions{} : traced(), &md).front();
    EXPECT_EQ(out.to_vector<float>(), Chain::expected(in)) << "step " << step;
    if (step >= 2) {
      const testing::ComputeSpans spans = sim_stream_spans(md.trace_json);
      EXPECT_EQ(spans.graph, 1) << "step " << step;
      EXPECT_EQ(spans.ops, 0) << "step " << step << ": no op ran on its own";
    }
  }
}

TEST(CapturedPartitionTest, OffRunsEveryOpEveryStep) {
  Chain c;
  SessionOptions options;
  options.cuda_graphs = false;
  Session s(c.g, options);
  for (int step = 0; step < 3; ++step) {
    Tensor in = ramp(16, static_cast<float>(step));
    RunMetadata md;
    Tensor out = s.run({c.y}, {{c.x, in}}, {}, traced(), &md).front();
    EXPECT_EQ(out.to_vector<float>(), Chain::expected(in));
    const testing::ComputeSpans spans = sim_stream_spans(md.trace_json);
    EXPECT_EQ(spans.graph, 0);
    EXPECT_EQ(spans.ops, 50);
  }
}

TEST(CapturedPartitionTest, ATracedFirstStepIsNotCapturedTheNextUntracedOneIs) {
  Chain c;
  Session s(c.g);
  RunMetadata md;
  s.run({c.y}, {{c.x, ramp(16, 0)}}, {}, traced(), &md);
  EXPECT_EQ(sim_stream_spans(md.trace_json).ops, 50);
  s.run({c.y}, {{c.x, ramp(16, 1)}}, {}, traced(), &md);
  EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 0) << "still warming up: traced steps run eagerly";
  s.run({c.y}, {{c.x, ramp(16, 2)}});  // captured
  Tensor in = ramp(16, 3);
  Tensor out = s.run({c.y}, {{c.x, in}}, {}, traced(), &md).front();
  EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 1);
  EXPECT_EQ(out.to_vector<float>(), Chain::expected(in));
}

// A small MLP layer with two inputs, a MatMul, a broadcast and a reduction, and two outputs.
TEST(CapturedPartitionTest, ManyInputsAndOutputsMatchEagerExecution) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{8, 32}, "x");
  Output w = ops::placeholder(g, DType::Float32, Shape{32, 16}, "w");
  Output h, total;
  {
    auto scope = g.device(kSim);
    Output b = ops::constant(g, ramp(16, -1.0f), "b");
    h = ops::relu(ops::add(ops::matmul(x, w), b));
    total = ops::reduce_sum(ops::tanh(h), {1});
  }
  SessionOptions eager_options;
  eager_options.cuda_graphs = false;
  Session graphs(g);
  Session eager(g, eager_options);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> xv(8 * 32), wv(32 * 16);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i + step));
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * static_cast<float>(i * (step + 1)));
    const FeedMap feeds{{x, Tensor::matrix<float>(xv, 8, 32)}, {w, Tensor::matrix<float>(wv, 32, 16)}};
    RunMetadata md;
    auto got = graphs.run({h, total}, feeds, {}, step == 0 ? RunOptions{} : traced(), &md);
    auto want = eager.run({h, total}, feeds);
    EXPECT_TRUE(got[0].equals(want[0])) << "step " << step;
    EXPECT_TRUE(got[1].equals(want[1])) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 1) << "step " << step;
    }
  }
}

// A replayed kernel's failure fails its step, and the next step replays fine.
TEST(CapturedPartitionTest, AFailureInAReplayFailsThatStepOnly) {
  Graph g;
  Output a = ops::placeholder(g, DType::Int32, Shape{4}, "a");
  Output b = ops::placeholder(g, DType::Int32, Shape{4}, "b");
  Output q;
  {
    auto scope = g.device(kSim);
    q = ops::add(ops::div(a, b), ops::constant(g, Tensor::vector<int32_t>({1, 1, 1, 1})));
  }
  Session s(g);
  const Tensor num = Tensor::vector<int32_t>({8, 9, -7, 100});
  const Tensor den = Tensor::vector<int32_t>({2, 3, 2, 10});  // -7 / 2 rounds down to -4 (TF1's tf.div)
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(s.run({q}, {{a, num}, {b, den}}).front().to_vector<int32_t>(), (std::vector<int32_t>{5, 4, -3, 11}));
  }
  try {
    s.run({q}, {{a, num}, {b, Tensor::vector<int32_t>({2, 0, 1, 1})}});
    ADD_FAILURE() << "a division by zero ran";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos) << e.what();
  }
  RunMetadata md;
  auto out = s.run({q}, {{a, num}, {b, den}}, {}, traced(), &md);
  EXPECT_EQ(out.front().to_vector<int32_t>(), (std::vector<int32_t>{5, 4, -3, 11}));
  EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 1) << "still replayed";

  // A first step that fails is not the end of capturing: the next good step is captured.
  Session fresh(g);
  EXPECT_THROW(fresh.run({q}, {{a, num}, {b, Tensor::vector<int32_t>({0, 1, 1, 1})}}), InvalidArgumentError);
  fresh.run({q}, {{a, num}, {b, den}});  // captured
  out = fresh.run({q}, {{a, num}, {b, den}}, {}, traced(), &md);
  EXPECT_EQ(out.front().to_vector<int32_t>(), (std::vector<int32_t>{5, 4, -3, 11}));
  EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 1) << "captured after the failed step";
}

// State and shapes that change are not replayed: those partitions run every op every step.
TEST(CapturedPartitionTest, VariablesAndPartialShapesStayEager) {
  {
    Graph g;
    Output x = ops::placeholder(g, DType::Float32, Shape{4}, "x");
    Output y;
    Variable v;
    {
      auto scope = g.device(kSim);
      v = Variable(g, Tensor::vector<float>({1, 2, 3, 4}), "captured_v");
      y = ops::add(v.assign_add(x), ops::constant(g, 1.0f));
    }
    Session s(g);
    s.run({}, {}, {v.initializer()});
    for (int step = 1; step <= 3; ++step) {
      RunMetadata md;
      Tensor out = s.run({y}, {{x, Tensor::vector<float>({1, 1, 1, 1})}}, {}, traced(), &md).front();
      EXPECT_EQ(out.to_vector<float>()[0], 2.0f + static_cast<float>(step));
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 0);
    }
  }
  {
    Graph g;
    Output x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
    Output y;
    {
      auto scope = g.device(kSim);
      y = ops::square(x);
    }
    Session s(g);
    for (int64_t n : {3, 5, 5, 2}) {
      RunMetadata md;
      Tensor out = s.run({y}, {{x, ramp(n, 1.0f)}}, {}, traced(), &md).front();
      EXPECT_EQ(out.num_elements(), n);
      EXPECT_EQ(out.to_vector<float>()[0], 1.0f);
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 0);
    }
  }
}

// A replay is enqueued like any stream work: while the compute stream is held, the step waits for
// it (its fetch follows the graph), and it finishes with the right result once released.
TEST(CapturedPartitionTest, AReplayWaitsForTheStreamItIsEnqueuedOn) {
  Chain c;
  Session s(c.g);
  s.run({c.y}, {{c.x, ramp(16, 0)}});  // the capture
  auto* sim = internal::DeviceRegistry::global().find(kSim).value_or_raise();
  std::promise<void> release;
  auto released = release.get_future().share();
  sim->compute_stream(0).enqueue([released] { (void)released.wait_for(std::chrono::seconds(30)); });
  Tensor in = ramp(16, 7);
  auto result = std::async(std::launch::async, [&] { return s.run({c.y}, {{c.x, in}}).front(); });
  EXPECT_EQ(result.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  release.set_value();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(result.get().to_vector<float>(), Chain::expected(in));
}

// A capture that would keep more device memory than TESSERA_CAPTURE_MAX_MB is dropped: the
// partition runs eagerly, with the same results.
TEST(CapturedPartitionTest, ACaptureOverTheMemoryBoundIsDropped) {
  ASSERT_EQ(setenv("TESSERA_CAPTURE_MAX_MB", "0", 1), 0);
  Chain c;
  Session s(c.g);
  for (int step = 0; step < 3; ++step) {
    Tensor in = ramp(16, static_cast<float>(step));
    RunMetadata md;
    Tensor out = s.run({c.y}, {{c.x, in}}, {}, step == 0 ? RunOptions{} : traced(), &md).front();
    EXPECT_EQ(out.to_vector<float>(), Chain::expected(in));
    if (step > 0) {
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 0);
    }
  }
  ASSERT_EQ(unsetenv("TESSERA_CAPTURE_MAX_MB"), 0);
}

// Runs `steps` steps on each of `threads` threads at once, step i of thread t being
// right(ramp(n, t * 100 + i)), and expects every step of every thread right.
void expect_concurrent_steps_right(int threads, int steps, int64_t n,
                                   const std::function<bool(const Tensor&)>& right) {
  std::vector<std::future<int>> wrong;
  for (int t = 0; t < threads; ++t) {
    wrong.push_back(std::async(std::launch::async, [&, t] {
      int bad = 0;
      for (int i = 0; i < steps; ++i) {
        if (!right(ramp(n, static_cast<float>(t * 100 + i)))) ++bad;
      }
      return bad;
    }));
  }
  for (auto& f : wrong) EXPECT_EQ(f.get(), 0);
}

// Steps from many threads at once: one replays at a time, the others run eagerly; every result
// is its own input's.
TEST(CapturedPartitionTest, ConcurrentStepsEachGetTheirOwnResult) {
  Chain c;
  Session s(c.g);
  s.run({c.y}, {{c.x, ramp(16, 0)}});  // the capture
  expect_concurrent_steps_right(6, 40, 16, [&](const Tensor& in) {
    return s.run({c.y}, {{c.x, in}}).front().to_vector<float>() == Chain::expected(in);
  });
}

// ---- Round trips: a value leaves the SIM partition for the host and its result comes back ----

constexpr const char* kCpu = "/device:CPU:0";
constexpr int64_t kRoundTripN = 8;

// Runs a step that must not deadlock: a run timeout fails it, and should even that not end it,
// the process aborts instead of hanging the suite.
std::vector<Tensor> bounded_run(Session& s, const std::vector<Output>& fetches, const FeedMap& feeds,
                                const std::vector<Operation>& targets = {}, RunMetadata* md = nullptr) {
  RunOptions options;
  options.timeout = std::chrono::seconds(10);
  options.trace = md != nullptr;
  auto step = std::async(std::launch::async, [&] { return s.run(fetches, feeds, targets, options, md); });
  if (step.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the step hangs past its run timeout";
    std::abort();
  }
  return step.get();
}

const std::vector<int32_t> kPick{3, 0, 5, 5, 7, 1, 2, 6};   // a gather on the host
const std::vector<int32_t> kPick2{7, 6, 5, 4, 3, 2, 1, 0};  // the second round trip's

Output pick_on_cpu(Output v, const std::vector<int32_t>& indices) {
  Graph& g = v.op().graph();
  auto scope = g.device(kCpu);
  return ops::gather(v, ops::constant(g, Tensor::vector<int32_t>(indices)));
}

std::vector<float> picked(const std::vector<float>& v, const std::vector<int32_t>& indices) {
  std::vector<float> out;
  for (int32_t i : indices) out.push_back(v[static_cast<std::size_t>(i)]);
  return out;
}

std::vector<float> squares(std::vector<float> v) {
  for (float& e : v) e *= e;
  return v;
}

// x (fed) -> square on SIM -> gather on the host -> identity on SIM, fetched.
struct RoundTrip {
  Graph g;
  Output x, y;
  RoundTrip() {
    x = ops::placeholder(g, DType::Float32, Shape{kRoundTripN}, "x");
    Output src;
    {
      auto scope = g.device(kSim);
      src = ops::square(x, "src2");
    }
    Output back = pick_on_cpu(src, kPick);
    auto scope = g.device(kSim);
    y = ops::identity(back, "identity");
  }
  static std::vector<float> expected(const Tensor& in) { return picked(squares(in.to_vector<float>()), kPick); }
};

TEST(CapturedPartitionTest, ARoundTripThroughTheHostIsReplayedWithoutDeadlock) {
  RoundTrip rt;
  Session s(rt.g);
  for (int step = 0; step < 5; ++step) {
    Tensor in = ramp(kRoundTripN, static_cast<float>(step) - 2.0f);
    RunMetadata md;
    Tensor out = bounded_run(s, {rt.y}, {{rt.x, in}}, {}, step == 0 ? nullptr : &md).front();
    EXPECT_EQ(out.to_vector<float>(), RoundTrip::expected(in)) << "step " << step;
    if (step > 0) {
      // Two segments: what leaves for the host, then what waits for its return.
      const testing::ComputeSpans spans = sim_stream_spans(md.trace_json);
      EXPECT_EQ(spans.graph, 2) << "step " << step;
      EXPECT_EQ(spans.ops, 0) << "step " << step;
    }
  }
}

// The value goes out through a queue on the host and comes back by a dequeue that no graph edge
// ties to the enqueue: the round trip is visible only at run time.
TEST(CapturedPartitionTest, ARoundTripThroughAHostQueueIsReplayedWithoutDeadlock) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{kRoundTripN}, "x");
  Output src, y;
  Operation enqueue;
  Output dequeued;
  {
    auto scope = g.device(kSim);
    src = ops::square(x);
  }
  {
    auto scope = g.device(kCpu);
    FIFOQueue q(g, 2, {DType::Float32}, {Shape{kRoundTripN}});
    enqueue = q.enqueue({src});
    dequeued = q.dequeue()[0];
  }
  {
    auto scope = g.device(kSim);
    y = ops::mul(dequeued, ops::constant(g, 2.0f));
  }
  Session s(g);
  for (int step = 0; step < 4; ++step) {
    Tensor in = ramp(kRoundTripN, static_cast<float>(step));
    RunMetadata md;
    Tensor out = bounded_run(s, {y}, {{x, in}}, {enqueue}, step == 0 ? nullptr : &md).front();
    std::vector<float> want = squares(in.to_vector<float>());
    for (float& v : want) v *= 2.0f;
    EXPECT_EQ(out.to_vector<float>(), want) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 2) << "step " << step;
    }
  }
}

// SIM -> host -> SIM -> host -> SIM: three segments, each launched once its input is back.
TEST(CapturedPartitionTest, TwoRoundTripsAreReplayedWithoutDeadlock) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{kRoundTripN}, "x");
  Output a, c, e;
  {
    auto scope = g.device(kSim);
    a = ops::square(x);
  }
  Output b = pick_on_cpu(a, kPick);
  {
    auto scope = g.device(kSim);
    c = ops::add(b, ops::constant(g, 1.0f));
  }
  Output d = pick_on_cpu(c, kPick2);
  {
    auto scope = g.device(kSim);
    e = ops::mul(d, ops::constant(g, 3.0f));
  }
  Session s(g);
  for (int step = 0; step < 4; ++step) {
    Tensor in = ramp(kRoundTripN, static_cast<float>(step) - 1.0f);
    RunMetadata md;
    auto out = bounded_run(s, {e, a}, {{x, in}}, {}, step == 0 ? nullptr : &md);
    std::vector<float> want = picked(squares(in.to_vector<float>()), kPick);
    for (float& v : want) v += 1.0f;
    want = picked(want, kPick2);
    for (float& v : want) v *= 3.0f;
    EXPECT_EQ(out[0].to_vector<float>(), want) << "step " << step;
    EXPECT_EQ(out[1].to_vector<float>(), squares(in.to_vector<float>())) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 3) << "step " << step;
    }
  }
}

// Only a control edge comes back: the SIM op that waits for the host's op must not hold back
// the SIM value that op reads.
TEST(CapturedPartitionTest, ARoundTripOfAControlDependencyIsReplayedWithoutDeadlock) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{kRoundTripN}, "x");
  Output a, y;
  {
    auto scope = g.device(kSim);
    a = ops::square(x);
  }
  Output total;
  {
    auto scope = g.device(kCpu);
    total = ops::reduce_sum(a, {0});
  }
  {
    auto scope = g.device(kSim);
    auto after = g.control_dependencies({total.op()});
    y = ops::neg(a);
  }
  Session s(g);
  for (int step = 0; step < 4; ++step) {
    Tensor in = ramp(kRoundTripN, static_cast<float>(step));
    RunMetadata md;
    auto out = bounded_run(s, {y, total}, {{x, in}}, {}, step == 0 ? nullptr : &md);
    std::vector<float> want = squares(in.to_vector<float>());
    float sum = 0;
    for (float& v : want) {
      sum += v;
      v = -v;
    }
    EXPECT_EQ(out[0].to_vector<float>(), want) << "step " << step;
    EXPECT_FLOAT_EQ(out[1].scalar<float>(), sum) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 2) << "step " << step;
    }
  }
}

// Steps of a round trip from 4 threads: one replays at a time, the others run eagerly, and each
// gets its own input's result.
TEST(CapturedPartitionTest, ConcurrentRoundTripStepsEachGetTheirOwnResult) {
  RoundTrip rt;
  Session s(rt.g);
  bounded_run(s, {rt.y}, {{rt.x, ramp(kRoundTripN, 0)}});  // the capture
  expect_concurrent_steps_right(4, 25, kRoundTripN, [&](const Tensor& in) {
    return bounded_run(s, {rt.y}, {{rt.x, in}}).front().to_vector<float>() == RoundTrip::expected(in);
  });
  RunMetadata md;
  bounded_run(s, {rt.y}, {{rt.x, ramp(kRoundTripN, 1)}}, {}, &md);
  EXPECT_EQ(sim_stream_spans(md.trace_json).graph, 2) << "still replayed";
}

// Without a round trip a partition stays one launch, even with ops that wait for no input: those
// feed only ops that wait for the fed x, so they wait with them.
TEST(CapturedPartitionTest, APartitionWithoutARoundTripIsOneLaunch) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{kRoundTripN}, "x");
  Output y;
  {
    auto scope = g.device(kSim);
    Output scale = ops::square(ops::constant(g, ramp(kRoundTripN, 0.5f)));  // needs no input
    y = ops::add(ops::mul(x, scale), scale);
  }
  Session s(g);
  const std::vector<float> scale = squares(ramp(kRoundTripN, 0.5f).to_vector<float>());
  for (int step = 0; step < 3; ++step) {
    Tensor in = ramp(kRoundTripN, static_cast<float>(step));
    RunMetadata md;
    Tensor out = bounded_run(s, {y}, {{x, in}}, {}, step == 0 ? nullptr : &md).front();
    std::vector<float> want = in.to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = want[i] * scale[i] + scale[i];
    EXPECT_EQ(out.to_vector<float>(), want) << "step " << step;
    if (step > 0) {
      const testing::ComputeSpans spans = sim_stream_spans(md.trace_json);
      EXPECT_EQ(spans.graph, 1) << "step " << step;
      EXPECT_EQ(spans.ops, 0) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace tessera
