// The caching allocator over a fake backing that counts its calls: reuse, best fit, split and
// coalesce, exact statistics, running out of memory, and many threads at once. See Note [Caching
// allocator] in device/caching_allocator.cc.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/caching_allocator.h"
#include "device/sim_device.h"
#include "tests/testing/counting_backing.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using namespace tessera::testing::allocator_suite;

// Real host memory, 256-byte aligned, with a capacity (BackingLog::capacity).
using FakeBacking = CountingBacking<CachingAllocatorBacking, 256>;

struct Fixture {
  std::shared_ptr<BackingLog> log = std::make_shared<BackingLog>();
  std::unique_ptr<CachingAllocator> allocator;
  explicit Fixture(CachingAllocatorOptions options = {}) {
    allocator = std::make_unique<CachingAllocator>("test", std::make_unique<FakeBacking>(log), options);
  }
  void* alloc(std::size_t bytes, std::size_t alignment = 0) {
    auto p = allocator->allocate(bytes, alignment);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? p.value() : nullptr;
  }
  int backing_allocs() { return log->count(&BackingLog::allocs); }
};

TEST(CachingAllocatorTest, ReusesFreedMemoryWithoutNewBackingAllocations) {
  Fixture f;
  void* a = f.alloc(1 * kMiB);
  f.allocator->deallocate(a, 1 * kMiB);
  for (int i = 0; i < 100; ++i) {
    void* b = f.alloc(1 * kMiB);
    EXPECT_EQ(b, a) << "the one cached chunk that fits is the best fit";
    f.allocator->deallocate(b, 1 * kMiB);
  }
  EXPECT_EQ(f.backing_allocs(), 1);
  const auto s = f.allocator->caching_stats();
  EXPECT_EQ(s.num_allocs, 101);
  EXPECT_EQ(s.cache_hits, 100);
  EXPECT_EQ(s.num_backing_allocs, 1);
}

TEST(CachingAllocatorTest, SmallAllocationsShareARegion) {
  Fixture f;
  std::vector<void*> ptrs;
  for (int i = 0; i < 64; ++i) ptrs.push_back(f.alloc(16 * kKiB));  // 1 MiB in all
  EXPECT_EQ(f.backing_allocs(), 1);
  std::set<void*> distinct(ptrs.begin(), ptrs.end());
  EXPECT_EQ(distinct.size(), ptrs.size());
  for (void* p : ptrs) f.allocator->deallocate(p, 16 * kKiB);
}

TEST(CachingAllocatorTest, PicksTheSmallestFreeChunkThatFits) {
  Fixture f;
  // Holes of 64 KiB, 16 KiB and 32 KiB in one region, kept apart by chunks in use.
  void* h64 = f.alloc(64 * kKiB);
  void* sep1 = f.alloc(256);
  void* h16 = f.alloc(16 * kKiB);
  void* sep2 = f.alloc(256);
  void* h32 = f.alloc(32 * kKiB);
  void* sep3 = f.alloc(256);
  ASSERT_EQ(f.backing_allocs(), 1);
  f.allocator->deallocate(h64, 64 * kKiB);
  f.allocator->deallocate(h16, 16 * kKiB);
  f.allocator->deallocate(h32, 32 * kKiB);
  EXPECT_EQ(f.alloc(20 * kKiB), h32);  // not the 64 KiB hole, nor the rest of the region
  EXPECT_EQ(f.alloc(14 * kKiB), h16);  // the 12 KiB left of the 32 KiB hole is too small
  EXPECT_EQ(f.alloc(64 * kKiB), h64);
  // Those 12 KiB are a chunk of their own.
  void* tail = f.alloc(12 * kKiB);
  EXPECT_EQ(static_cast<char*>(tail), static_cast<char*>(h32) + 20 * kKiB);
  EXPECT_EQ(f.backing_allocs(), 1);
  for (void* p : {sep1, sep2, sep3}) f.allocator->deallocate(p, 256);
}

TEST(CachingAllocatorTest, FreedNeighboursCoalesceIntoOneChunk) {
  Fixture f;
  // Three chunks fill one 2 MiB region exactly.
  void* a = f.alloc(512 * kKiB);
  void* b = f.alloc(512 * kKiB);
  void* c = f.alloc(1 * kMiB);
  ASSERT_EQ(f.backing_allocs(), 1);
  EXPECT_EQ(f.allocator->caching_stats().largest_free_chunk, 0);
  // a and c first (not neighbours), then b joins them.
  f.allocator->deallocate(a, 512 * kKiB);
  f.allocator->deallocate(c, 1 * kMiB);
  EXPECT_EQ(f.allocator->caching_stats().largest_free_chunk, static_cast<int64_t>(1 * kMiB));
  f.allocator->deallocate(b, 512 * kKiB);
  EXPECT_EQ(f.allocator->caching_stats().largest_free_chunk, static_cast<int64_t>(2 * kMiB));
  // Two neighbours' joint size fits where they were, without a new region.
  void* ab = f.alloc(1 * kMiB);
  EXPECT_EQ(ab, a);
  void* whole_rest = f.alloc(1 * kMiB);
  EXPECT_EQ(whole_rest, c);
  EXPECT_EQ(f.backing_allocs(), 1);
  f.allocator->deallocate(ab, 1 * kMiB);
  f.allocator->deallocate(whole_rest, 1 * kMiB);
  void* all = f.alloc(2 * kMiB);
  EXPECT_EQ(all, a);
  EXPECT_EQ(f.backing_allocs(), 1);
  f.allocator->deallocate(all, 2 * kMiB);
}

TEST(CachingAllocatorTest, StatisticsAreExact) {
  Fixture f;
  void* small = f.alloc(1000);  // a 1024-byte chunk of a 2 MiB region
  auto s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_in_use, 1024);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.num_regions, 1);
  EXPECT_EQ(s.num_backing_allocs, 1);
  EXPECT_EQ(s.cache_hits, 0);
  EXPECT_EQ(s.largest_free_chunk, static_cast<int64_t>(2 * kMiB - 1024));

  void* big = f.alloc(3 * kMiB);  // a region of its own, rounded to 4 MiB
  s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_in_use, static_cast<int64_t>(1024 + 3 * kMiB));
  EXPECT_EQ(s.peak_bytes_in_use, static_cast<int64_t>(1024 + 3 * kMiB));
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.num_regions, 2);
  EXPECT_EQ(s.num_backing_allocs, 2);
  EXPECT_EQ(f.allocator->chunk_size(big), 3 * kMiB);

  f.allocator->deallocate(big, 3 * kMiB);
  void* hit = f.alloc(100);  // best fit: the 2 MiB region's rest, not the freed 4 MiB region
  s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_in_use, 1024 + 256);
  EXPECT_EQ(s.peak_bytes_in_use, static_cast<int64_t>(1024 + 3 * kMiB));
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.num_allocs, 3);
  EXPECT_EQ(s.largest_free_chunk, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(static_cast<char*>(hit), static_cast<char*>(small) + 1024);

  // The Allocator base counts requested bytes.
  const AllocatorStats base = f.allocator->stats();
  EXPECT_EQ(base.bytes_in_use, 1100);
  EXPECT_EQ(base.num_allocs, 3);
  EXPECT_EQ(base.live_allocs, 2);

  // Only the region with nothing in use goes back.
  EXPECT_EQ(f.allocator->empty_cache(), 4 * kMiB);
  s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.peak_bytes_reserved, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.num_regions, 1);
  EXPECT_EQ(s.num_backing_frees, 1);

  f.allocator->deallocate(small, 1000);
  f.allocator->deallocate(hit, 100);
  s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.largest_free_chunk, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(f.allocator->empty_cache(), 2 * kMiB);
  s = f.allocator->caching_stats();
  EXPECT_EQ(s.bytes_reserved, 0);
  EXPECT_EQ(s.num_regions, 0);
  EXPECT_EQ(s.num_backing_frees, 2);
  std::lock_guard<std::mutex> lock(f.log->mu);
  EXPECT_EQ(f.log->frees, 2);
  EXPECT_TRUE(f.log->live.empty());
}

TEST(CachingAllocatorTest, ZeroBytesAndLargeAlignments) {
  Fixture f;
  void* z1 = f.alloc(0);
  void* z2 = f.alloc(0);
  EXPECT_NE(z1, nullptr);
  EXPECT_NE(z1, z2);
  for (std::size_t alignment : {64, 256, 4096, 65536}) {
    void* p = f.alloc(100, alignment);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u) << alignment;
    std::memset(p, 0xab, 100);
    f.allocator->deallocate(p, 100);
  }
  f.allocator->deallocate(z1, 0);
  f.allocator->deallocate(z2, 0);
  EXPECT_EQ(f.allocator->caching_stats().bytes_in_use, 0);
  EXPECT_FALSE(f.allocator->allocate(8, 3).ok()) << "not a power of two";
}

TEST(CachingAllocatorTest, DestructionReturnsEveryRegion) {
  Fixture f;
  f.alloc(3 * kMiB);  // still in use at destruction: returned anyway (and reported)
  void* p = f.alloc(2 * kMiB);  // more than the first region has left: a second region
  f.allocator->deallocate(p, 2 * kMiB);
  f.allocator.reset();
  std::lock_guard<std::mutex> lock(f.log->mu);
  EXPECT_EQ(f.log->allocs, 2);
  EXPECT_EQ(f.log->frees, 2);
  EXPECT_TRUE(f.log->live.empty());
  EXPECT_EQ(f.log->live_bytes, 0u);
}

TEST(CachingAllocatorTest, BackingOutOfMemoryIsResourceExhausted) {
  Fixture f;
  f.log->capacity = 4 * kMiB;
  auto too_big = f.allocator->allocate(8 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(f.allocator->last_backing_error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(f.allocator->last_backing_error().message().find("fake backing"), std::string::npos);
  auto tensor = f.allocator->allocate_tensor(DType::Float32, Shape{4 * 1024 * 1024}, "/device:TEST:0");
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_GE(f.allocator->caching_stats().num_backing_failures, 2);
  // Still usable: what fits is served.
  void* p = f.alloc(1 * kMiB);
  EXPECT_NE(p, nullptr);
  f.allocator->deallocate(p, 1 * kMiB);
}

TEST(CachingAllocatorTest, ReturnsCachedRegionsAndRetriesWhenTheBackingRunsOut) {
  Fixture f;
  f.log->capacity = 4 * kMiB;
  void* p = f.alloc(2 * kMiB);
  f.allocator->deallocate(p, 2 * kMiB);  // cached: 2 of the 4 MiB
  void* q = f.alloc(3 * kMiB);           // needs 4 MiB: only after the cached region goes back
  ASSERT_NE(q, nullptr);
  const auto s = f.allocator->caching_stats();
  EXPECT_EQ(s.num_backing_failures, 1);
  EXPECT_EQ(s.num_backing_frees, 1);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(4 * kMiB));
  f.allocator->deallocate(q, 3 * kMiB);
}

TEST(CachingAllocatorTest, RespectsItsReservationLimit) {
  CachingAllocatorOptions options;
  options.max_reserved_bytes = 4 * kMiB;
  Fixture f(options);
  void* a = f.alloc(3 * kMiB);
  auto b = f.allocator->allocate(1 * kMiB + 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(f.allocator->last_backing_error().message().find("limit"), std::string::npos);
  f.allocator->deallocate(a, 3 * kMiB);
}

TEST(CachingAllocatorTest, TensorsComeFromTheAllocatorAndGoBackToIt) {
  Fixture f;
  {
    auto t = f.allocator->allocate_tensor(DType::Float64, Shape{128, 128}, "/device:TEST:0");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t.value().device(), "/device:TEST:0");
    EXPECT_EQ(f.allocator->chunk_size(t.value().raw_data()), 128u * 128u * 8u);
    EXPECT_EQ(f.allocator->stats().live_allocs, 1);
  }
  EXPECT_EQ(f.allocator->stats().live_allocs, 0);
  EXPECT_EQ(f.allocator->caching_stats().bytes_in_use, 0);
}

TEST(CachingAllocatorTest, ManyThreadsAllocateAndFreeConcurrently) {
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(threads);
    Fixture f;
    std::atomic<int> corrupted{0};
    run_threads(threads, [&](int t) {
      std::mt19937 gen(static_cast<unsigned>(t) * 7919u + 1);
      std::uniform_int_distribution<std::size_t> size_of(1, 256 * 1024);
      struct Held {
        unsigned char* p;
        std::size_t bytes;
        unsigned char fill;
      };
      std::vector<Held> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() < 16 && (held.empty() || gen() % 3 != 0)) {
          const std::size_t bytes = size_of(gen);
          auto p = f.allocator->allocate(bytes);
          if (!p.ok()) {
            ++corrupted;
            continue;
          }
          const auto fill = static_cast<unsigned char>(t * 31 + i);
          auto* c = static_cast<unsigned char*>(p.value());
          std::memset(c, fill, bytes);
          held.push_back({c, bytes, fill});
        } else {
          const std::size_t k = gen() % held.size();
          Held h = held[k];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
          // Nobody else wrote into this allocation while it was ours.
          if (std::any_of(h.p, h.p + h.bytes, [&](unsigned char c) { return c != h.fill; })) ++corrupted;
          f.allocator->deallocate(h.p, h.bytes);
        }
      }
      for (const Held& h : held) f.allocator->deallocate(h.p, h.bytes);
    });
    EXPECT_EQ(corrupted.load(), 0);
    const auto s = f.allocator->caching_stats();
    EXPECT_EQ(s.bytes_in_use, 0);
    EXPECT_EQ(f.allocator->stats().live_allocs, 0);
    EXPECT_EQ(s.num_allocs, s.cache_hits + s.num_backing_allocs);
    // Coalescing left every region whole: all of it goes back.
    EXPECT_EQ(f.allocator->empty_cache(), static_cast<std::size_t>(s.bytes_reserved));
    EXPECT_EQ(f.allocator->caching_stats().num_regions, 0);
  }
}

}  // namespace
}  // namespace tessera::internal

namespace tessera::internal {
namespace {

// Per-stream caches (Note [Caching allocator]): a chunk freed on one stream is not handed to
// another stream's allocations, and one that another stream used too waits for it.
TEST(CachingAllocatorStreamTest, EachStreamReusesOnlyItsOwnChunks) {
  Fixture f;
  SimStream a("a"), b("b");
  void* pa = f.allocator->allocate(kMiB, 0, &a).value();
  f.allocator->deallocate(pa, kMiB);
  void* pb = f.allocator->allocate(kMiB, 0, &b).value();
  EXPECT_NE(pb, pa) << "a's cached chunk went to b";
  f.allocator->deallocate(pb, kMiB);
  for (int i = 0; i < 3; ++i) {
    void* again_a = f.allocator->allocate(kMiB, 0, &a).value();
    void* again_b = f.allocator->allocate(kMiB, 0, &b).value();
    EXPECT_EQ(again_a, pa);
    EXPECT_EQ(again_b, pb);
    f.allocator->deallocate(again_a, kMiB);
    f.allocator->deallocate(again_b, kMiB);
  }
  EXPECT_EQ(f.backing_allocs(), 2);
}

TEST(CachingAllocatorStreamTest, AChunkUsedOnAnotherStreamIsReusedOnlyOnceThatStreamPassedItsFree) {
  Fixture f;
  SimStream a("a"), b("b");
  void* p = f.allocator->allocate(kMiB, 0, &a).value();
  f.allocator->record_stream(p, &a);  // its own stream: nothing to wait for
  f.allocator->record_stream(p, &b);
  f.allocator->record_stream(p, &b);  // once is enough
  std::promise<void> release;
  auto released = release.get_future().share();
  b.enqueue([released] { (void)released.wait_for(std::chrono::seconds(30)); });  // b's queued "reader"
  f.allocator->deallocate(p, kMiB);
  EXPECT_EQ(f.allocator->caching_stats().pending_chunks, 1);
  EXPECT_EQ(f.allocator->caching_stats().bytes_pending, static_cast<int64_t>(kMiB));
  void* q = f.allocator->allocate(kMiB, 0, &a).value();
  EXPECT_NE(q, p) << "reused while b may still read it";
  release.set_value();
  ASSERT_TRUE(b.synchronize(std::chrono::seconds(30)).ok());
  EXPECT_EQ(f.allocator->caching_stats().pending_chunks, 0);
  void* r = f.allocator->allocate(kMiB, 0, &a).value();
  EXPECT_EQ(r, p) << "cached again once b passed the free";
  f.allocator->deallocate(q, kMiB);
  f.allocator->deallocate(r, kMiB);
}

// Out of backing memory, a stream borrows a chunk cached for another one; its later work waits
// until the owner has passed the point where the chunk was lent (no host wait).
TEST(CachingAllocatorStreamTest, OutOfMemoryAStreamBorrowsAnotherStreamsChunkInStreamOrder) {
  Fixture f;
  f.log->capacity = 2 * kMiB;  // one region
  SimStream owner("owner"), borrower("borrower");
  void* kept = f.allocator->allocate(kMiB, 0, &owner).value();  // keeps the region from going back
  void* p = f.allocator->allocate(kMiB, 0, &owner).value();
  std::promise<void> release;
  auto released = release.get_future().share();
  owner.enqueue([released] { (void)released.wait_for(std::chrono::seconds(30)); });  // a queued use of p
  f.allocator->deallocate(p, kMiB);
  void* q = f.allocator->allocate(kMiB, 0, &borrower).value();
  EXPECT_EQ(q, p);
  EXPECT_EQ(f.allocator->caching_stats().lent_chunks, 1);
  EXPECT_EQ(f.backing_allocs(), 1);
  std::atomic<bool> ran{false};
  borrower.enqueue([&] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ran.load()) << "the borrower's work ran before the owner passed the loan";
  release.set_value();
  ASSERT_TRUE(borrower.synchronize(std::chrono::seconds(30)).ok());
  EXPECT_TRUE(ran.load());
  f.allocator->deallocate(q, kMiB);
  // Now the borrower's: cached for it, and reused by it without another loan.
  void* r = f.allocator->allocate(kMiB, 0, &borrower).value();
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.allocator->caching_stats().lent_chunks, 1);
  // Nothing cached, no room, and no stream named to order a loan on: out of memory.
  EXPECT_FALSE(f.allocator->allocate(kMiB, 0, nullptr).ok());
  f.allocator->deallocate(r, kMiB);
  f.allocator->deallocate(kept, kMiB);
}

}  // namespace
}  // namespace tessera::internal
