// Sessions on the process's GPUs (label `gpu`; every test skips itself without one): CUDA graphs
// replaying a device partition with eager execution's results, float16 and bfloat16 through a
// session, and large feeds and fetches in pinned host blocks (cudaHostRegister).
#include <cmath>
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
