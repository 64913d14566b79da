// A fake memory backing for the allocator suites (tests/caching_allocator_test.cc over
// CachingAllocatorBacking, tests/pinned_staging_test.cc over StagingBacking): real host memory (so
// tests can write to it) from aligned_alloc, counting its calls in a log the test keeps after the
// allocator owns the backing, and failing on demand (`fail`) or beyond a capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "core/status.h"
#include "tests/testing/test_util.h"

namespace tessera::testing {

// What a CountingBacking did; shared with the test.
struct BackingLog {
  std::mutex mu;
  int allocs = 0;
  int frees = 0;
  int failures = 0;            // allocations refused (`fail` or over `capacity`)
  std::size_t live_bytes = 0;  // as asked for, not rounded
  std::set<void*> live;
  bool fail = false;                // every allocation fails while set
  std::size_t capacity = SIZE_MAX;  // the backing fails beyond this many live bytes

  // One of the counts above, read under `mu` (the allocator may be calling the backing meanwhile).
  int count(int BackingLog::*field) {
    std::lock_guard<std::mutex> lock(mu);
    return this->*field;
  }
};

// `Interface` is the backing interface the allocator takes: StatusOr<void*> allocate(bytes) and
// void deallocate(ptr, bytes), both pure virtual. Memory is `kAlignment`-aligned (sizes rounded up
// to a multiple of it); a deallocate of a pointer it never gave fails the test.
template <class Interface, std::size_t kAlignment>
class CountingBacking final : public Interface {
 public:
  static_assert(kAlignment > 0 && (kAlignment & (kAlignment - 1)) == 0, "a power of two");
  explicit CountingBacking(std::shared_ptr<BackingLog> log) : log_(std::move(log)) {}

  StatusOr<void*> allocate(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    if (log_->fail) {
      ++log_->failures;
      return errors::resource_exhausted("fake backing: told to fail");
    }
    if (log_->live_bytes + bytes > log_->capacity) {
      ++log_->failures;
      return errors::resource_exhausted("fake backing: out of memory for {} bytes", bytes);
    }
    void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (p == nullptr) return errors::resource_exhausted("fake backing: aligned_alloc failed");
    ++log_->allocs;
    log_->live_bytes += bytes;
    log_->live.insert(p);
    return p;
  }

  void deallocate(void* ptr, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    EXPECT_EQ(log_->live.erase(ptr), 1u) << "freed a region the backing never gave";
    ++log_->frees;
    log_->live_bytes -= bytes;
    std::free(ptr);
  }

 private:
  std::shared_ptr<BackingLog> log_;
};

}  // namespace tessera::testing

// What the allocator suites use unqualified: they say `using namespace allocator_suite;`.
namespace tessera::testing::allocator_suite {

using testing::BackingLog;
using testing::CountingBacking;
using testing::kThreadCounts;
using testing::run_threads;

// The sizes the suites allocate in.
inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * 1024;

}  // namespace tessera::testing::allocator_suite
