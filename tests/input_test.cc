// train::input_producer: the input_producer behaviours of TensorFlow's input_test.py (epochs,
// shuffling with a seed, OutOfRangeError once the epochs are consumed).
#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "tests/testing/queue_runners.h"
#include "tests/testing/test_util.h"

namespace tessera::train {
namespace {

using namespace std::chrono_literals;
using tessera::testing::ScopedQueueRunners;

Tensor rows_3x4() { return Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4); }

RunOptions bounded() {
  RunOptions o;
  o.timeout = 10s;
  return o;
}

TEST(InputProducerTest, NoShuffle) {
  Graph g;
  const int num_epochs = 2;
  FIFOQueue q = input_producer(g, rows_3x4(), num_epochs, /*shuffle=*/false);
  EXPECT_EQ(q.dtypes(), std::vector<DType>{DType::Int32});
  ASSERT_EQ(q.shapes().size(), 1u);
  EXPECT_EQ(q.shapes()[0], Shape{4});
  auto many = q.dequeue_many(3 * num_epochs)[0];
  auto one = q.dequeue()[0];
  EXPECT_EQ(many.shape(), (Shape{6, 4}));
  Session s(g);
  ScopedQueueRunners runners(s);
  // No randomness: repeated copies of the input.
  auto got = s.run({many}, {}, {}, bounded())[0].to_vector<int32_t>();
  std::vector<int32_t> want = rows_3x4().to_vector<int32_t>();
  want.insert(want.end(), want.begin(), want.end());
  EXPECT_EQ(got, want);
  // Reached the limit.
  EXPECT_THROW_MSG(s.run({one}, {}, {}, bounded()), OutOfRangeError, "is closed");
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST(InputProducerTest, RegistersAQueueRunner) {
  Graph g;
  FIFOQueue q = input_producer(g, rows_3x4(), 1, false);
  auto runners = queue_runners(g);
  ASSERT_EQ(runners.size(), 1u);
  EXPECT_EQ(runners[0].queue().op(), q.op());
  EXPECT_EQ(q.capacity(), 32);
  EXPECT_EQ(q.name().rfind("input_producer/", 0), 0u) << q.name();
}

TEST(InputProducerTest, ComputedInputIsEvaluatedEachEpoch) {
  Graph g;
  auto base = ops::constant(g, Tensor::vector<float>({1, 2, 3}));
  auto input = ops::mul(base, ops::constant(g, 10.f));
  FIFOQueue q = input_producer(input, 3, /*shuffle=*/false, /*capacity=*/4);
  EXPECT_EQ(q.shapes()[0], Shape{});
  auto one = q.dequeue()[0];
  Session s(g);
  ScopedQueueRunners runners(s);
  std::vector<float> got;
  for (int i = 0; i < 9; ++i) got.push_back(s.run({one}, {}, {}, bounded())[0].scalar<float>());
  EXPECT_EQ(got, (std::vector<float>{10, 20, 30, 10, 20, 30, 10, 20, 30}));
  EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
}

TEST(InputProducerTest, ShuffleWithinEachEpoch) {
  Graph g;
  const int num_epochs = 300;
  FIFOQueue q = input_producer(g, Tensor::vector<int32_t>({0, 1, 2}), num_epochs, /*shuffle=*/true,
                               /*capacity=*/32, /*seed=*/271828);
  auto epoch = q.dequeue_many(3)[0];
  auto one = q.dequeue()[0];
  Session s(g);
  ScopedQueueRunners runners(s);
  // Every batch of 3 is one epoch: a permutation of the rows. Count how often each order appears.
  std::map<std::vector<int32_t>, int> frequency;
  for (int e = 0; e < num_epochs; ++e) {
    auto order = s.run({epoch}, {}, {}, bounded())[0].to_vector<int32_t>();
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, (std::vector<int32_t>{0, 1, 2}));
    frequency[order]++;
  }
  // Roughly even over the 6 orders.
  EXPECT_EQ(frequency.size(), 6u);
  const double expected = num_epochs / 6.0;
  for (const auto& [order, n] : frequency) {
    EXPECT_GT(n, expected * 0.6);
    EXPECT_LT(n, expected * 1.4);
  }
  EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
}

TEST(InputProducerTest, SeedMakesTheOrderReproducible) {
  Graph g;
  std::vector<int32_t> values(20);
  for (int i = 0; i < 20; ++i) values[i] = i;
  FIFOQueue q = input_producer(g, Tensor::vector<int32_t>(values), 2, true, 64, /*seed=*/7);
  auto all = q.dequeue_many(40)[0];
  std::vector<std::vector<int32_t>> runs;
  for (int session = 0; session < 2; ++session) {
    Session s(g);
    ScopedQueueRunners runners(s);
    runs.push_back(s.run({all}, {}, {}, bounded())[0].to_vector<int32_t>());
  }
  EXPECT_EQ(runs[0], runs[1]);
  // Shuffled: two epochs in the same order as the input would be a broken shuffle.
  std::vector<int32_t> unshuffled = values;
  unshuffled.insert(unshuffled.end(), values.begin(), values.end());
  EXPECT_NE(runs[0], unshuffled);
}

TEST(InputProducerTest, EveryRowSeenExactlyNumEpochsTimes) {
  Graph g;
  const int num_epochs = 5;
  std::vector<int32_t> values(17);
  for (int i = 0; i < 17; ++i) values[i] = i;
  FIFOQueue q = input_producer(g, Tensor::vector<int32_t>(values), num_epochs, true, 8);
  auto one = q.dequeue()[0];
  Session s(g);
  ScopedQueueRunners runners(s);
  std::map<int32_t, int> count;
  for (;;) {
    try {
      count[s.run({one}, {}, {}, bounded())[0].scalar<int32_t>()]++;
    } catch (const OutOfRangeError&) {
      break;
    }
  }
  ASSERT_EQ(count.size(), values.size());
  for (const auto& [v, n] : count) EXPECT_EQ(n, num_epochs) << v;
}

TEST(InputProducerTest, ConcurrentConsumersSeeEveryRowOncePerEpoch) {
  for (int threads : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    Graph g;
    const int num_epochs = 4;
    std::vector<int64_t> values(50);
    for (int i = 0; i < 50; ++i) values[i] = i;
    FIFOQueue q = input_producer(g, Tensor::vector<int64_t>(values), num_epochs, true, 16, 99);
    auto one = q.dequeue()[0];
    auto up_to = q.dequeue_up_to(3)[0];
    Session s(g);
    ScopedQueueRunners runners(s);
    std::mutex mu;
    std::multiset<int64_t> seen;
    tessera::testing::run_threads(threads, [&](int t) {
      for (;;) {
        std::vector<int64_t> got;
        try {
          got = s.run({t % 2 ? up_to : one}, {}, {}, bounded())[0].to_vector<int64_t>();
        } catch (const OutOfRangeError&) {
          return;
        }
        std::lock_guard<std::mutex> l(mu);
        seen.insert(got.begin(), got.end());
      }
    });
    ASSERT_EQ(seen.size(), values.size() * num_epochs);
    for (int64_t v : values) EXPECT_EQ(seen.count(v), static_cast<std::size_t>(num_epochs)) << v;
  }
}

TEST(InputProducerTest, EpochsAreCountedPerSession) {
  Graph g;
  FIFOQueue q = input_producer(g, Tensor::vector<float>({1, 2}), 1, false);
  auto both = q.dequeue_many(2)[0];
  auto one = q.dequeue()[0];
  for (int i = 0; i < 2; ++i) {
    Session s(g);
    ScopedQueueRunners runners(s);
    EXPECT_EQ(s.run({both}, {}, {}, bounded())[0].to_vector<float>(), (std::vector<float>{1, 2}));
    EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
  }
}

TEST(InputProducerTest, ForeverUntilStopped) {
  Graph g;
  FIFOQueue q = input_producer(g, Tensor::vector<int32_t>({1, 2, 3}), /*num_epochs=*/0, false, 4);
  auto batch = q.dequeue_many(3)[0];
  auto size = q.size();
  Session s(g);
  ScopedQueueRunners runners(s);
  for (int e = 0; e < 20; ++e) {
    EXPECT_EQ(s.run({batch}, {}, {}, bounded())[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_LE(s.run(size).scalar<int32_t>(), 4);  // the capacity bounds the queue
  }
  EXPECT_FALSE(runners.coord().should_stop());
  // ~ScopedQueueRunners requests a stop: the close-on-stop thread cancels the blocked enqueue.
}

TEST(InputProducerTest, BadArguments) {
  Graph g;
  EXPECT_THROW_MSG(input_producer(g, Tensor::scalar(1.0f)), InvalidArgumentError, "rank");
  EXPECT_THROW_MSG(input_producer(g, rows_3x4(), -1), InvalidArgumentError, "num_epochs");
  EXPECT_THROW(input_producer(g, Tensor()), InvalidArgumentError);
  EXPECT_THROW(input_producer(Output()), InvalidArgumentError);
}

}  // namespace
}  // namespace tessera::train
