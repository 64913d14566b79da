// Sessions on the process's GPUs (label `gpu`; every test skips itself without one): CUDA graphs
// replaying a device partition with eager execution's results (in segments where a value goes
// to the host and comes back), float16 and bfloat16 through a session, and large feeds and
// fetches in pinned host blocks (cudaHostRegister).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include "core/half.h"
#include "core/host_blocks.h"
#include "tessera/tessera.h"
#include "tests/testing/traced_spans.h"

namespace tessera {
namespace {

// The first GPU among the process's devices (the default registry's, as sessions see them).
std::string first_gpu() {
  for (const DeviceInfo& d : list_devices()) {
    if (d.type == "GPU") return d.name;
  }
  return "";
}

#define REQUIRE_SESSION_GPU(name) \
  const std::string name = first_gpu(); \
  if (name.empty()) GTEST_SKIP() << "no usable GPU: nothing to test"

TEST(CudaSessionTest, AReplayedChainEqualsEagerExecution) {
  REQUIRE_SESSION_GPU(gpu);
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{1024}, "x");
  Output y = x;
  {
    auto scope = g.device(gpu);
    Output c = ops::constant(g, 0.75f);
    for (int i = 0; i < 40; ++i) y = ops::tanh(ops::add(ops::mul(y, c), c));
    y = ops::reduce_sum(y, {0}, true);
  }
  SessionOptions eager_options;
  eager_options.cuda_graphs = false;
  Session graphs(g);
  Session eager(g, eager_options);
  RunOptions traced;
  traced.trace = true;
  for (int step = 0; step < 5; ++step) {
    std::vector<float> v(1024);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.01f * static_cast<float>(i * (step + 1)));
    const FeedMap feeds{{x, Tensor::vector<float>(v)}};
    RunMetadata md;
    Tensor got = graphs.run({y}, feeds, {}, step == 0 ? RunOptions{} : traced, &md).front();
    Tensor want = eager.run({y}, feeds).front();
    EXPECT_TRUE(got.equals(want)) << "step " << step << ": " << got.debug_string() << " vs " << want.debug_string();
    if (step > 0) {
      EXPECT_EQ(testing::compute_stream_spans(md.trace_json, "GPU").graph, 1) << "step " << step << " replays one CUDA graph";
    }
  }
}

// An optimizer's update under a GPU scope: the NoOp that groups the updates runs on the GPU (no
// soft placement to the host, so no round trip between the updates and what follows them), and
// running what its control edge orders after it runs the updates too.
TEST(CudaSessionTest, AGroupOfGpuUpdatesStaysOnTheGpu) {
  REQUIRE_SESSION_GPU(gpu);
  Graph g;
  Variable a, b, steps;
  Operation update, after;
  {
    auto scope = g.device(gpu);
    a = Variable(g, Tensor::vector<float>({1, 2, 3}), "a");
    b = Variable(g, Tensor::vector<float>({10, 20, 30}), "b");
    steps = Variable(g, Tensor::vector<float>({0}), "steps");
    update = ops::group({a.assign_add(ops::constant(g, Tensor::vector<float>({1, 1, 1}))).op(),
                         b.assign_add(ops::constant(g, Tensor::vector<float>({2, 2, 2}))).op()},
                        "update");
    auto scope_after = g.control_dependencies({update});
    after = steps.assign_add(ops::constant(g, Tensor::vector<float>({1}))).op();
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  for (int step = 0; step < 3; ++step) s.run(after);
  EXPECT_EQ(update.assigned_device(), gpu);
  EXPECT_EQ(after.assigned_device(), gpu);
  EXPECT_EQ(s.run(a.value()).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(s.run(b.value()).to_vector<float>(), (std::vector<float>{16, 26, 36}));
  EXPECT_EQ(s.run(steps.value()).to_vector<float>(), (std::vector<float>{3}));
}

// A GPU value gathered on the host and brought back (Note [Replay segments]): the replay launches
// one CUDA graph for what leaves and one for what waits for its return, and never deadlocks (a run
// timeout bounds each step).
TEST(CudaSessionTest, ARoundTripThroughTheHostReplaysInTwoGraphs) {
  REQUIRE_SESSION_GPU(gpu);
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{256}, "x");
  Output y;
  Output src;
  {
    auto scope = g.device(gpu);
    src = ops::square(x);
  }
  std::vector<int32_t> pick(256);
  for (std::size_t i = 0; i < pick.size(); ++i) pick[i] = static_cast<int32_t>((i * 7) % 256);
  Output back;
  {
    auto scope = g.device("/device:CPU:0");
    back = ops::gather(src, ops::constant(g, Tensor::vector<int32_t>(pick)));
  }
  {
    auto scope = g.device(gpu);
    y = ops::mul(back, ops::constant(g, 2.0f));
  }
  Session s(g);
  RunOptions options;  // step 0, the capture, untraced; the replays traced
  options.timeout = std::chrono::seconds(10);
  for (int step = 0; step < 4; ++step, options.trace = true) {
    std::vector<float> v(256);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i) - static_cast<float>(step);
    RunMetadata md;
    Tensor got = s.run({y}, {{x, Tensor::vector<float>(v)}}, {}, options, &md).front();
    std::vector<float> want(256);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const float e = v[static_cast<std::size_t>(pick[i])];
      want[i] = 2.0f * e * e;
    }
    EXPECT_EQ(got.to_vector<float>(), want) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(testing::compute_stream_spans(md.trace_json, "GPU").graph, 2) << "step " << step;
    }
  }
}

TEST(CudaSessionTest, SixteenBitFloatsThroughASession) {
  REQUIRE_SESSION_GPU(gpu);
  for (DType half : {DType::Float16, DType::BFloat16}) {
    Graph g;
    Output total, product;
    {
      auto scope = g.device(gpu);
      Output ones = ops::cast(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(4096, 1.0f), Shape{1, 4096})), half);
      total = ops::cast(ops::reduce_sum(ones), DType::Float32);
      product = ops::cast(ops::matmul(ones, ones, false, true), DType::Float32);
    }
    Session s(g);
    auto out = s.run({total, product});
    EXPECT_EQ(out[0].scalar<float>(), 4096.0f) << dtype_name(half);
    EXPECT_EQ(out[1].to_vector<float>(), std::vector<float>{4096.0f}) << dtype_name(half);
  }
}

TEST(CudaSessionTest, LargeFeedsAndFetchesUsePinnedBlocks) {
  REQUIRE_SESSION_GPU(gpu);
  constexpr int64_t n = int64_t{8} << 20;  // 32 MiB
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{n}, "x");
  Output y;
  {
    auto scope = g.device(gpu);
    y = ops::add(x, x);
  }
  Session s(g);
  Tensor feed(DType::Float32, Shape{n});
  for (int64_t i = 0; i < n; ++i) feed.mutable_data<float>()[i] = static_cast<float>(i % 4099);
  const uint64_t pins_before = internal::host_block_pin_stats().pins;
  for (int step = 0; step < 3; ++step) {
    Tensor out = s.run({y}, {{x, feed}}).front();
    EXPECT_EQ(out.data<float>()[n - 1], 2.0f * static_cast<float>((n - 1) % 4099));
    EXPECT_TRUE(internal::host_memory_pinned(out.raw_data(), out.bytes())) << "step " << step;
  }
  EXPECT_TRUE(internal::host_memory_pinned(feed.raw_data(), feed.bytes()));
  EXPECT_LE(internal::host_block_pin_stats().pins - pins_before, 3u) << "the feed's block and the fetches' (reused)";
}

}  // namespace
}  // namespace tessera
