// The pool of staging buffers over fake backings: reuse by size class, the bound, eviction of
// cached buffers of other sizes, the fallback when the pool is exhausted or the pinned backing
// fails (never a wait), and many threads at once.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "device/pinned_staging.h"
#include "tests/testing/counting_backing.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using namespace tessera::testing::allocator_suite;

// Host memory standing in for cudaHostAlloc (or for the fallback), 4 KiB aligned, counting its
// calls; fails while BackingLog::fail is set.
using FakeBacking = CountingBacking<StagingBacking, 4096>;

struct Fixture {
  std::shared_ptr<BackingLog> pinned = std::make_shared<BackingLog>();
  std::shared_ptr<BackingLog> fallback = std::make_shared<BackingLog>();
  std::unique_ptr<PinnedStagingPool> pool;
  explicit Fixture(std::size_t max_pooled = 64 * kMiB) {
    PinnedStagingOptions options;
    options.max_pooled_bytes = max_pooled;
    pool = std::make_unique<PinnedStagingPool>("test", std::make_unique<FakeBacking>(pinned),
                                               std::make_unique<FakeBacking>(fallback), options);
  }
  PinnedStagingPool::Buffer get(std::size_t bytes) {
    auto b = pool->acquire(bytes);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return b.ok() ? std::move(b).value() : PinnedStagingPool::Buffer();
  }
};

TEST(PinnedStagingTest, ReusesReleasedBuffersOfTheSameSize) {
  Fixture f;
  void* first = nullptr;
  {
    auto b = f.get(100 * kKiB);
    EXPECT_TRUE(b.pinned());
    EXPECT_EQ(b.size(), 128 * kKiB);  // a power of two
    first = b.data();
  }  // released by the destructor
  for (int i = 0; i < 10; ++i) {
    auto b = f.get(70 * kKiB);  // same size class
    EXPECT_EQ(b.data(), first);
    b.release();
    EXPECT_FALSE(b);
  }
  EXPECT_EQ(f.pinned->count(&BackingLog::allocs), 1);
  const auto s = f.pool->stats();
  EXPECT_EQ(s.reuses, 10);
  EXPECT_EQ(s.num_pinned_allocs, 1);
  EXPECT_EQ(s.pooled_bytes, static_cast<int64_t>(128 * kKiB));
  EXPECT_EQ(s.cached_bytes, static_cast<int64_t>(128 * kKiB));
  EXPECT_EQ(s.in_use_bytes, 0);
  EXPECT_EQ(s.fallbacks, 0);
}

TEST(PinnedStagingTest, SizeClassesStartAtTheMinimum) {
  Fixture f;
  auto zero = f.get(0);
  auto one = f.get(1);
  auto just_over = f.get(64 * kKiB + 1);
  EXPECT_EQ(zero.size(), 64 * kKiB);
  EXPECT_EQ(one.size(), 64 * kKiB);
  EXPECT_EQ(just_over.size(), 128 * kKiB);
  EXPECT_NE(zero.data(), one.data());
  EXPECT_EQ(f.pool->stats().in_use_bytes, static_cast<int64_t>(256 * kKiB));
}

TEST(PinnedStagingTest, FallsBackInsteadOfWaitingWhenEverythingIsInUse) {
  Fixture f(1 * kMiB);
  auto a = f.get(512 * kKiB);
  auto b = f.get(512 * kKiB);
  auto c = f.get(512 * kKiB);  // the bound is reached by buffers in use
  EXPECT_TRUE(a.pinned());
  EXPECT_TRUE(b.pinned());
  EXPECT_FALSE(c.pinned());
  EXPECT_GE(c.size(), 512 * kKiB);
  std::memset(c.data(), 7, 512 * kKiB);
  auto s = f.pool->stats();
  EXPECT_EQ(s.fallbacks, 1);
  EXPECT_EQ(s.fallbacks_in_use, 1);
  EXPECT_EQ(s.pooled_bytes, static_cast<int64_t>(1 * kMiB));
  c.release();  // a fallback buffer is freed, not cached
  EXPECT_EQ(f.fallback->count(&BackingLog::frees), 1);
  EXPECT_EQ(f.pool->stats().fallbacks_in_use, 0);
  EXPECT_EQ(f.pool->stats().cached_bytes, 0);
}

TEST(PinnedStagingTest, RequestsLargerThanTheBoundFallBack) {
  Fixture f(1 * kMiB);
  auto big = f.get(3 * kMiB);
  EXPECT_FALSE(big.pinned());
  EXPECT_EQ(f.pinned->count(&BackingLog::allocs), 0);
}

TEST(PinnedStagingTest, EvictsCachedBuffersOfOtherSizesToStayUnderTheBound) {
  Fixture f(1 * kMiB);
  f.get(1 * kMiB);  // acquired and released at once: cached
  EXPECT_EQ(f.pool->stats().cached_bytes, static_cast<int64_t>(1 * kMiB));
  auto small = f.get(256 * kKiB);  // no room next to the cached 1 MiB: it goes back
  EXPECT_TRUE(small.pinned());
  const auto s = f.pool->stats();
  EXPECT_EQ(s.num_pinned_frees, 1);
  EXPECT_EQ(s.pooled_bytes, static_cast<int64_t>(256 * kKiB));
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(f.pinned->count(&BackingLog::frees), 1);
}

TEST(PinnedStagingTest, PinnedBackingFailureFallsBack) {
  Fixture f;
  f.pinned->fail = true;
  auto b = f.get(100 * kKiB);
  EXPECT_FALSE(b.pinned());
  const auto s = f.pool->stats();
  EXPECT_EQ(s.pooled_bytes, 0);
  EXPECT_EQ(s.in_use_bytes, 0);
  EXPECT_EQ(s.fallbacks, 1);
}

TEST(PinnedStagingTest, BothBackingsFailingIsResourceExhausted) {
  Fixture f;
  f.pinned->fail = true;
  f.fallback->fail = true;
  auto b = f.pool->acquire(100 * kKiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kResourceExhausted);
}

TEST(PinnedStagingTest, TrimAndDestructionReturnCachedBuffers) {
  Fixture f;
  auto held = f.get(64 * kKiB);
  f.get(1 * kMiB);
  f.get(2 * kMiB);
  EXPECT_EQ(f.pool->trim(), 3 * kMiB);
  EXPECT_EQ(f.pool->stats().pooled_bytes, static_cast<int64_t>(64 * kKiB));
  held.release();
  f.pool.reset();
  std::lock_guard<std::mutex> lock(f.pinned->mu);
  EXPECT_EQ(f.pinned->allocs, 3);
  EXPECT_EQ(f.pinned->frees, 3);
  EXPECT_TRUE(f.pinned->live.empty());
}

TEST(PinnedStagingTest, BuffersMove) {
  Fixture f;
  auto a = f.get(10);
  void* p = a.data();
  PinnedStagingPool::Buffer b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.data(), p);
  PinnedStagingPool::Buffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(f.pool->stats().in_use_bytes, static_cast<int64_t>(64 * kKiB));
  c = f.get(10);  // the assignment gives the old buffer back
  EXPECT_EQ(f.pool->stats().in_use_bytes, static_cast<int64_t>(64 * kKiB));
}

TEST(PinnedStagingTest, ManyThreadsAcquireAndRelease) {
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(threads);
    Fixture f(4 * kMiB);  // small: fallbacks happen under contention
    std::atomic<int> errors{0};
    run_threads(threads, [&](int t) {
      for (int i = 0; i < 500; ++i) {
        const std::size_t bytes = (static_cast<std::size_t>(t * 7919 + i * 104729) % (512 * kKiB)) + 1;
        auto b = f.pool->acquire(bytes);
        if (!b.ok()) {
          ++errors;
          continue;
        }
        auto* p = static_cast<unsigned char*>(b.value().data());
        const auto fill = static_cast<unsigned char>(t + i);
        std::memset(p, fill, bytes);
        if (std::any_of(p, p + bytes, [&](unsigned char c) { return c != fill; })) ++errors;
      }
    });
    EXPECT_EQ(errors.load(), 0);
    const auto s = f.pool->stats();
    EXPECT_EQ(s.in_use_bytes, 0);
    EXPECT_EQ(s.fallbacks_in_use, 0);
    EXPECT_LE(s.pooled_bytes, static_cast<int64_t>(4 * kMiB));
    EXPECT_EQ(s.pooled_bytes, s.cached_bytes);
  }
}

}  // namespace
}  // namespace tessera::internal
