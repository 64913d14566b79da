// Intra-op parallelism (core/parallel_for.h): every element of the range is visited exactly once,
// on the caller and the pool's threads; a pool too busy to help does not stop the caller; a
// shard's exception reaches the caller. And the kernels that use it: MatMul sharded by rows of its
// result equals a plain triple loop in every transposition; the elementwise kernels, BiasAdd and
// BiasAddGrad sharded over a big tensor equal a loop over its elements.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/nn_ops.h"
#include "core/parallel_for.h"
#include "core/thread_pool.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"
#include "kernels/elementwise_shards.h"

namespace tessera::internal {
namespace {

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new tessera::testing::SimEnvironment);

Runner runner_of(ThreadPool& pool) {
  return [&pool](std::function<void()> fn) { pool.schedule(std::move(fn)); };
}

TEST(ParallelForTest, VisitsEveryElementOnceInShardsOfTheMinimumSize) {
  ThreadPool pool(4);
  const Runner run = runner_of(pool);
  for (int64_t total : {1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(total));
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> shards;
    parallel_for(&run, total, 100, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) seen[static_cast<std::size_t>(i)]++;
      std::lock_guard<std::mutex> lock(mu);
      shards.emplace_back(begin, end);
    });
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1) << i << " of " << total;
    // At least min_shard per shard (but one shorter last shard), never more shards than threads.
    EXPECT_LE(shards.size(), std::max<std::size_t>(1, std::thread::hardware_concurrency())) << total;
    if (total >= 200) {
      for (auto [b, e] : shards) {
        if (e != total) {
          EXPECT_GE(e - b, 100) << total;
        }
      }
    }
  }
}

TEST(ParallelForTest, WithoutARunnerEverythingRunsOnTheCaller) {
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  parallel_for(nullptr, 1000, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 1000);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelForTest, ABusyPoolLeavesAllTheShardsToTheCaller) {
  // The pool's only thread is held until the loop is over: the helpers cannot start, and the loop
  // must still finish (a loop that waited for them would hang here).
  ThreadPool pool(1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, held = false;
  pool.schedule([&] {
    std::unique_lock<std::mutex> lock(mu);
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return held; }));
  }
  const Runner run = runner_of(pool);
  std::atomic<int64_t> sum{0};
  parallel_for(&run, 64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 64 * 63 / 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
}

TEST(ParallelForTest, AShardsExceptionReachesTheCallerAfterEveryShardIsDone) {
  ThreadPool pool(2);
  const Runner run = runner_of(pool);
  std::atomic<int> finished{0};
  EXPECT_THROW(parallel_for(&run, 4, 1,
                            [&](int64_t begin, int64_t) {
                              if (begin == 0) throw std::runtime_error("shard 0 failed");
                              finished++;
                            }),
               std::runtime_error);
  const int shards = std::min(4, std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  EXPECT_EQ(finished.load(), shards - 1);
}

// ---- MatMul through a session: sharded by rows on a host CPU, the same on SIM (one stream) ----

class ShardedMatMulTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardedMatMulTest, EqualsATripleLoopInEveryTransposition) {
  // 150 x 90 x 70 = 945,000 multiply-adds: several shards of kGemmShardMultiplyAdds.
  const int64_t m = 150, k = 90, n = 70;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a_shape = ta ? Shape{k, m} : Shape{m, k};
      const Shape b_shape = tb ? Shape{n, k} : Shape{k, n};
      std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>((i * 7919) % 23) - 11.0;
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>((i * 104729) % 19) - 9.0;
      auto at = [&](int64_t i, int64_t p) { return a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)]; };
      auto bt = [&](int64_t p, int64_t j) { return b[static_cast<std::size_t>(tb ? j * k + p : p * n + j)]; };
      std::vector<double> want(static_cast<std::size_t>(m * n));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) s += at(i, p) * bt(p, j);
          want[static_cast<std::size_t>(i * n + j)] = s;
        }
      }
      Graph g;
      auto scope = g.device(GetParam());
      auto c = ops::matmul(ops::constant(g, Tensor::from_vector<double>(a, a_shape)),
                           ops::constant(g, Tensor::from_vector<double>(b, b_shape)), ta, tb);
      Session s(g);
      // Small integers: every product and sum is exact, so any shard in the wrong place shows.
      EXPECT_EQ(s.run(c).to_vector<double>(), want) << "transpose_a " << ta << " transpose_b " << tb;
    }
  }
}

// "CPU" or "SIM": the instantiations' names for the two device params below.
std::string device_test_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "/cpu:0" ? "CPU" : "SIM";
}

// ---- The elementwise kernels through a session: sharded over a big tensor on a host CPU ----

class ShardedElementwiseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardedElementwiseTest, BigTensorsEqualALoopOverTheirElements) {
  // Three shards and a short last one (Note [Sharding the elementwise kernels]); small integers,
  // so that every result is exact and an element in the wrong shard shows.
  const int64_t rows = 3 * kElementwiseShard / 7 + 5, cols = 7, n = rows * cols;
  ASSERT_GT(n, 3 * kElementwiseShard);
  std::vector<float> a(static_cast<std::size_t>(n)), b(a.size()), bias(static_cast<std::size_t>(cols));
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(static_cast<int64_t>((i * 7919) % 23) - 11);
    b[i] = static_cast<float>(static_cast<int64_t>((i * 104729) % 19) - 9);
  }
  for (std::size_t c = 0; c < bias.size(); ++c) bias[c] = static_cast<float>(c) - 3.0f;
  const Shape shape{rows, cols};
  Graph g;
  auto scope = g.device(GetParam());
  auto pa = ops::placeholder(g, DType::Float32, {-1, cols});
  auto pb = ops::placeholder(g, DType::Float32, {-1, cols});
  auto pbias = ops::placeholder(g, DType::Float32, {cols});
  auto sum = ops::add(pa, pb);
  auto scaled = ops::mul(pa, ops::constant(g, 2.0f));  // a scalar operand
  auto in_place = ops::sub(ops::mul(pa, pb), pb);      // Sub over Mul's forwarded output
  auto relu = ops::relu(pb);
  auto relu_backprop = relu_grad(pa, pb);
  auto biased = ops::bias_add(pa, pbias);
  auto bias_grad = bias_add_grad(pb);
  Session s(g);
  auto out = s.run({sum, scaled, in_place, relu, relu_backprop, biased, bias_grad},
                   {{pa, Tensor::from_vector<float>(a, shape)},
                    {pb, Tensor::from_vector<float>(b, shape)},
                    {pbias, Tensor::vector<float>(bias)}});
  std::vector<std::vector<float>> want(6, std::vector<float>(a.size()));
  std::vector<float> want_bias_grad(static_cast<std::size_t>(cols), 0.0f);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::size_t c = i % static_cast<std::size_t>(cols);
    want[0][i] = a[i] + b[i];
    want[1][i] = a[i] * 2.0f;
    want[2][i] = a[i] * b[i] - b[i];
    want[3][i] = b[i] < 0 ? 0.0f : b[i];
    want[4][i] = b[i] > 0 ? a[i] : 0.0f;
    want[5][i] = a[i] + bias[c];
    want_bias_grad[c] += b[i];
  }
  const char* names[] = {"Add", "Mul by a scalar", "Sub in place", "Relu", "ReluGrad", "BiasAdd"};
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(out[k].to_vector<float>(), want[k]) << names[k];
  EXPECT_EQ(out[6].to_vector<float>(), want_bias_grad) << "BiasAddGrad";
}

INSTANTIATE_TEST_SUITE_P(Devices, ShardedElementwiseTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         device_test_name);

INSTANTIATE_TEST_SUITE_P(Devices, ShardedMatMulTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         device_test_name);

}  // namespace
}  // namespace tessera::internal
