// The inter-op thread pool: every closure runs exactly once, from any producer, including
// closures scheduled from pool threads; destruction drains what was scheduled.
#include <atomic>

#include "core/thread_pool.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

class ThreadPoolTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolTest, RunsEveryClosureOnceFromManyProducers) {
  const int threads = GetParam();
  std::atomic<int64_t> sum{0};
  {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    tessera::testing::run_threads(threads, [&](int id) {
      for (int i = 1; i <= 1000; ++i) pool.schedule([&sum, i] { sum += i; });
    });
  }  // the destructor runs everything scheduled
  EXPECT_EQ(sum.load(), int64_t{threads} * 500500);
}

TEST_P(ThreadPoolTest, ClosuresMayScheduleMoreWork) {
  const int threads = GetParam();
  std::atomic<int> count{0};
  std::function<void(int)> fan;  // declared first: the pool (joined in its destructor) dies first
  ThreadPool pool(threads);
  fan = [&](int depth) {
    count++;
    EXPECT_TRUE(pool.on_pool_thread());
    if (depth < 10) {
      pool.schedule([&fan, depth] { fan(depth + 1); });
      pool.schedule([&fan, depth] { fan(depth + 1); });
    }
  };
  pool.schedule([&] { fan(0); });
  EXPECT_TRUE(tessera::testing::wait_until([&] { return count.load() == 2047; }));
  EXPECT_FALSE(pool.on_pool_thread());
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadPoolTest, ::testing::ValuesIn(tessera::testing::kThreadCounts));

}  // namespace
}  // namespace tessera::internal
