// Feeds and fetches that cross to or from an accelerator use pinned host memory (Note [Pinned host
// blocks] in core/host_blocks.cc): on the simulated accelerator, whose copies take the GPU's
// decisions, with a fake pinner in place of cudaHostRegister. A large fed tensor's block is pinned
// once and copied directly; a large fetch lands in a pinned block, and in a loop the blocks come
// back from the cache already pinned, so a steady state pins nothing; small tensors stage.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/host_blocks.h"
#include "core/tensor_buffer.h"
#include "tessera/tessera.h"
#include "tests/testing/fake_pinner.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using testing::FakePinner;

constexpr std::size_t kMiB = std::size_t{1} << 20;

internal::SimDevice* sim() { return testing::sim_device(); }

class HostTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(sim(), nullptr);
    old_cache_limit_ = internal::set_host_block_cache_limit(256 * kMiB);  // sanitizer builds cache nothing
    internal::release_host_block_cache();
  }
  void TearDown() override {
    internal::release_host_block_cache();
    internal::set_host_block_cache_limit(old_cache_limit_);
  }
  // x + x on the SIM device, fed from and fetched to the host (no constant: its copy would count).
  static Output doubled_on_sim(Graph& g, Output* x, int64_t n) {
    *x = ops::placeholder(g, DType::Float32, Shape{n}, "x");
    auto scope = g.device("/device:SIM:0");
    return ops::add(*x, *x);
  }
  uint64_t old_cache_limit_ = 0;
  FakePinner::Scope pinning_{512 * kMiB};
};

TEST_F(HostTransferTest, LargeFeedsAndFetchesCopyStraightFromAndIntoPinnedBlocks) {
  constexpr int64_t n = int64_t{4} << 20;  // 16 MiB
  Graph g;
  Output x;
  Output y = doubled_on_sim(g, &x, n);
  Session s(g);
  Tensor feed(DType::Float32, Shape{n});
  for (int64_t i = 0; i < n; ++i) feed.mutable_data<float>()[i] = static_cast<float>(i % 1000);

  const auto before = sim()->transfer_stats();
  const void* first_fetch = nullptr;
  for (int step = 0; step < 5; ++step) {
    std::vector<Tensor> out = s.run({y}, {{x, feed}});
    ASSERT_EQ(out[0].num_elements(), n);
    EXPECT_EQ(out[0].data<float>()[n - 1], 2.0f * static_cast<float>((n - 1) % 1000));
    EXPECT_TRUE(internal::host_memory_pinned(out[0].raw_data(), out[0].bytes())) << "step " << step;
    if (step == 0) first_fetch = out[0].raw_data();
    // Dropped before the next step: its block goes back to the cache, pinned, for the next fetch.
    if (step > 0) {
      EXPECT_EQ(out[0].raw_data(), first_fetch) << "the same pinned block, reused";
    }
  }
  EXPECT_TRUE(internal::host_memory_pinned(feed.raw_data(), feed.bytes()));
  const auto after = sim()->transfer_stats();
  EXPECT_EQ(after.direct_to_device - before.direct_to_device, 5);
  EXPECT_EQ(after.direct_to_host - before.direct_to_host, 5);
  EXPECT_EQ(after.staged - before.staged, 0);
  EXPECT_EQ(FakePinner::pins(), 2u) << "the feed's block and the first fetch's: none after the first step";
}

TEST_F(HostTransferTest, SmallTensorsAndAFullPinningBudgetStage) {
  {
    Graph g;
    Output x;
    Output y = doubled_on_sim(g, &x, 1000);
    Session s(g);
    const auto before = sim()->transfer_stats();
    Tensor out = s.run({y}, {{x, Tensor::zeros(DType::Float32, Shape{1000})}})[0];
    EXPECT_FALSE(internal::host_memory_pinned(out.raw_data(), out.bytes()));
    const auto after = sim()->transfer_stats();
    EXPECT_EQ(after.staged - before.staged, 2);
    EXPECT_EQ(after.direct_to_device + after.direct_to_host, before.direct_to_device + before.direct_to_host);
  }
  {
    internal::set_pinned_host_limit(0);
    Graph g;
    Output x;
    Output y = doubled_on_sim(g, &x, int64_t{1} << 20);
    Session s(g);
    const auto before = sim()->transfer_stats();
    Tensor out = s.run({y}, {{x, Tensor::zeros(DType::Float32, Shape{int64_t{1} << 20})}})[0];
    EXPECT_EQ(out.data<float>()[0], 0.0f);
    EXPECT_FALSE(internal::host_memory_pinned(out.raw_data(), out.bytes()));
    EXPECT_EQ(sim()->transfer_stats().staged - before.staged, 2);
    EXPECT_EQ(FakePinner::pins(), 0u);
  }
}

}  // namespace
}  // namespace tessera
