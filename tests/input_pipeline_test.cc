// train::batch, shuffle_batch, slice_input_producer and range_input_producer: the cases of
// TensorFlow's input_test.py (BatchTest, ShuffleBatchTest, SliceInputProducerTest,
// RangeInputProducerTest) through sessions with the graph's queue runners started.
//
// TensorFlow's tests count examples with count_up_to; here a one-epoch, unshuffled input_producer
// hands out 0 .. n-1 and then OutOfRangeError, which ends the pipeline the same way. Every test
// runs on CPU and on SIM: the queues are host-only, so on SIM each example is computed on the
// device before it is enqueued and each batch is consumed there. Every run has a timeout, so a
// pipeline that fails to end fails the test instead of hanging it.
#include <gmock/gmock.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

#include "tests/testing/queue_runners.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera::train {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using tessera::testing::ScopedQueueRunners;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new tessera::testing::SimEnvironment);

RunOptions bounded() {
  RunOptions o;
  o.timeout = 10s;
  return o;
}

std::vector<int64_t> arange(int64_t n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class InputPipelineTest : public ::testing::TestWithParam<std::string> {
 protected:
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }

  // Examples (count, {count, -count}) for count = 0 .. n-1 in order, num_epochs times, computed
  // on the device under test: an int64 scalar and a float32 [2] per example.
  std::vector<Output> examples(Graph& g, int64_t n, int num_epochs = 1) {
    Output count = input_producer(g, Tensor::vector<int64_t>(arange(n)), num_epochs, /*shuffle=*/false).dequeue()[0];
    auto scope = on_device(g);
    Output on_dev = ops::identity(count);
    Output pair = ops::mul(ops::cast(on_dev, DType::Float32), ops::constant(g, Tensor::vector<float>({1, -1})));
    return {on_dev, pair};
  }
  // `values` as constants passed through the device under test (an identity there each).
  std::vector<Output> on_device_constants(Graph& g, const std::vector<Tensor>& values) {
    auto scope = on_device(g);
    std::vector<Output> out;
    for (const Tensor& v : values) out.push_back(ops::identity(ops::constant(g, v)));
    return out;
  }
  // `xs` consumed on the device under test.
  std::vector<Output> consumed(const std::vector<Output>& xs) {
    auto scope = on_device(xs.front().op().graph());
    std::vector<Output> out;
    for (const Output& x : xs) out.push_back(ops::identity(x));
    return out;
  }
  // Runs a batch of examples(), checks that each pair matches its count, and returns the counts.
  std::vector<int64_t> run_batch(Session& s, const std::vector<Output>& batch) {
    std::vector<Tensor> out = s.run(batch, {}, {}, bounded());
    std::vector<int64_t> counts = out[0].to_vector<int64_t>();
    std::vector<float> pairs = out[1].to_vector<float>();
    EXPECT_EQ(out[1].shape(), (Shape{static_cast<int64_t>(counts.size()), 2}));
    for (std::size_t i = 0; i < counts.size() && 2 * i + 1 < pairs.size(); ++i) {
      EXPECT_EQ(pairs[2 * i], static_cast<float>(counts[i])) << "component 1 of example " << counts[i];
      EXPECT_EQ(pairs[2 * i + 1], -static_cast<float>(counts[i])) << "component 1 of example " << counts[i];
    }
    return counts;
  }
  // Runs `batch` until OutOfRangeError; returns every count and the batch sizes.
  std::vector<int64_t> drain(Session& s, const std::vector<Output>& batch, std::vector<std::size_t>* sizes = nullptr) {
    std::vector<int64_t> all;
    for (;;) {
      std::vector<int64_t> counts;
      try {
        counts = run_batch(s, batch);
      } catch (const OutOfRangeError&) {
        return all;
      }
      if (sizes != nullptr) sizes->push_back(counts.size());
      all.insert(all.end(), counts.begin(), counts.end());
    }
  }
  // Runs `num_batches` batches of `batch_size` examples(); returns their counts, in the order run.
  std::vector<int64_t> run_batches(Session& s, const std::vector<Output>& batch, int num_batches, int batch_size) {
    std::vector<int64_t> all;
    for (int i = 0; i < num_batches; ++i) {
      std::vector<int64_t> counts = run_batch(s, batch);
      EXPECT_EQ(counts.size(), static_cast<std::size_t>(batch_size));
      all.insert(all.end(), counts.begin(), counts.end());
    }
    return all;
  }
  // Runs `num_batches` batches of `batch_size` examples() and expects counts 0, 1, 2, ... in order.
  void expect_batches_in_order(Session& s, const std::vector<Output>& batch, int num_batches, int batch_size) {
    for (int i = 0; i < num_batches; ++i) {
      std::vector<int64_t> want(batch_size);
      std::iota(want.begin(), want.end(), int64_t{i * batch_size});
      EXPECT_EQ(run_batch(s, batch), want);
    }
  }
  // drain() of `batch` in a new session of `batch`'s graph with its queue runners started.
  std::vector<int64_t> drain_pipeline(const std::vector<Output>& batch, std::vector<std::size_t>* sizes = nullptr) {
    Session s(batch.front().op().graph());
    ScopedQueueRunners threads(s);
    return drain(s, batch, sizes);
  }
  // Expects `counts` to hold `n` distinct counts, each `num_epochs` times.
  void expect_each_count_once_per_epoch(const std::vector<int64_t>& counts, int n, int num_epochs) {
    std::map<int64_t, int> seen;
    for (int64_t v : counts) seen[v]++;
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
    for (const auto& [v, k] : seen) EXPECT_EQ(k, num_epochs) << v;
  }
  void expect_on_device(const Output& x) {
    EXPECT_THAT(x.op().assigned_device(), HasSubstr("/device:" + GetParam() + ":0")) << x.name();
  }
};

// ---- batch ----

TEST_P(InputPipelineTest, BatchOneThread) {
  Graph g;
  const int batch_size = 10, num_batches = 3;
  auto raw = batch(examples(g, batch_size * num_batches), batch_size);
  EXPECT_EQ(raw[0].shape(), Shape{batch_size});
  EXPECT_EQ(raw[1].shape(), (Shape{batch_size, 2}));
  EXPECT_EQ(raw[0].op().type(), "QueueDequeueMany");
  auto runners = queue_runners(g);
  ASSERT_EQ(runners.size(), 2u);  // the input producer's and the batch's
  EXPECT_EQ(runners[1].queue().op().type(), "FIFOQueue");
  EXPECT_EQ(runners[1].queue().name().rfind("batch/", 0), 0u) << runners[1].queue().name();
  EXPECT_EQ(runners[1].queue().capacity(), 32);
  EXPECT_EQ(runners[1].enqueue_ops().size(), 1u);
  auto b = consumed(raw);
  Session s(g);
  ScopedQueueRunners threads(s);
  expect_batches_in_order(s, b, num_batches, batch_size);  // one thread: in order
  EXPECT_THROW_MSG(s.run(b, {}, {}, bounded()), OutOfRangeError, "is closed");
  expect_on_device(b[0]);
}

TEST_P(InputPipelineTest, BatchManyThreads) {
  Graph g;
  const int batch_size = 10, num_batches = 3;
  auto b = consumed(batch(examples(g, batch_size * num_batches), batch_size, /*num_threads=*/4));
  EXPECT_EQ(queue_runners(g)[1].enqueue_ops().size(), 4u);  // one op, run by 4 threads
  Session s(g);
  ScopedQueueRunners threads(s);
  std::vector<int64_t> all = run_batches(s, b, num_batches, batch_size);
  EXPECT_EQ(sorted(all), arange(batch_size * num_batches));
  EXPECT_THROW(s.run(b, {}, {}, bounded()), OutOfRangeError);
}

TEST_P(InputPipelineTest, BatchOneThreadEnqueueMany) {
  Graph g;
  const int batch_size = 10, num_batches = 3;
  auto pre_batched = batch(examples(g, batch_size * num_batches), 2);
  auto raw = batch(pre_batched, batch_size, 1, 32, /*enqueue_many=*/true);
  EXPECT_EQ(raw[1].shape(), (Shape{batch_size, 2}));
  auto b = consumed(raw);
  Session s(g);
  ScopedQueueRunners threads(s);
  expect_batches_in_order(s, b, num_batches, batch_size);
  EXPECT_THROW(s.run(b, {}, {}, bounded()), OutOfRangeError);
}

TEST_P(InputPipelineTest, BatchSmallerFinalBatch) {
  for (int num_threads : {1, 4}) {
    SCOPED_TRACE(num_threads);
    Graph g;
    const int batch_size = 10, extra = 5, n = 3 * batch_size + extra;
    auto raw = batch(examples(g, n), batch_size, num_threads, 32, false, /*allow_smaller_final_batch=*/true);
    EXPECT_EQ(raw[0].shape(), Shape{-1});
    EXPECT_EQ(raw[1].shape(), (Shape{-1, 2}));
    EXPECT_EQ(raw[0].op().type(), "QueueDequeueUpTo");
    std::vector<std::size_t> sizes;
    std::vector<int64_t> all = drain_pipeline(consumed(raw), &sizes);
    EXPECT_EQ(sizes, (std::vector<std::size_t>{10, 10, 10, 5}));
    if (num_threads == 1) {
      EXPECT_EQ(all, arange(n));
    } else {
      EXPECT_EQ(sorted(all), arange(n));
    }
  }
}

// Without allow_smaller_final_batch the last, incomplete batch is never returned.
TEST_P(InputPipelineTest, BatchWithoutSmallerFinalBatchEndsAfterTheFullOnes) {
  Graph g;
  std::vector<std::size_t> sizes;
  std::vector<int64_t> all = drain_pipeline(consumed(batch(examples(g, 35), 10)), &sizes);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{10, 10, 10}));
  EXPECT_EQ(all, arange(30));
}

// An input that never ends: the runner keeps the queue filled until the coordinator stops it.
TEST_P(InputPipelineTest, BatchOfAConstantRunsUntilStopped) {
  Graph g;
  Output x = on_device_constants(g, {Tensor::vector<int32_t>({7, 8})})[0];
  auto b = consumed(batch({x}, 3, 2, /*capacity=*/4));
  Session s(g);
  ScopedQueueRunners threads(s);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(s.run(b, {}, {}, bounded())[0].to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 7, 8, 7, 8}));
  }
  EXPECT_FALSE(threads.coord().should_stop());
}

TEST_P(InputPipelineTest, BatchArgumentErrors) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  auto any = ops::placeholder(g, DType::Float32, Shape::unknown(), "any");
  auto scalar = ops::constant(g, 1.f, "scalar");
  EXPECT_THROW_MSG(batch({x}, 2), InvalidArgumentError, "batch: all shapes must be fully defined, tensor 'x:0'");
  EXPECT_THROW_MSG(batch({any}, 2), InvalidArgumentError, "batch: all shapes must be fully defined");
  EXPECT_THROW_MSG(batch({scalar}, 2, 1, 32, /*enqueue_many=*/true), InvalidArgumentError,
                   "batch: with enqueue_many, tensor 'scalar:0' must have rank >= 1");
  EXPECT_THROW_MSG(batch({scalar}, 0), InvalidArgumentError, "batch: batch_size must be >= 1, got 0");
  EXPECT_THROW_MSG(batch({scalar}, 2, 0), InvalidArgumentError, "batch: num_threads must be >= 1, got 0");
  EXPECT_THROW_MSG(batch({scalar}, 2, 1, 0), InvalidArgumentError, "batch: capacity must be >= 1, got 0");
  EXPECT_THROW_MSG(batch({}, 2), InvalidArgumentError, "batch: needs at least one tensor");
  EXPECT_THROW_MSG(batch({Output()}, 2), InvalidArgumentError, "batch: null Output");
  Graph other;
  EXPECT_THROW_MSG(batch({scalar, ops::constant(other, 2.f)}, 2), InvalidArgumentError, "is not in the graph of tensor");
  EXPECT_THROW_MSG(shuffle_batch({scalar}, 2, 32, 32), InvalidArgumentError,
                   "shuffle_batch: min_after_dequeue (32) must be < capacity (32)");
  EXPECT_THROW_MSG(shuffle_batch({scalar}, 2, 32, -1), InvalidArgumentError,
                   "shuffle_batch: min_after_dequeue must be >= 0, got -1");
  EXPECT_THROW_MSG(shuffle_batch({x}, 2, 32, 8), InvalidArgumentError, "shuffle_batch: all shapes must be fully defined");
  EXPECT_TRUE(queue_runners(g).empty());  // nothing half-built was registered
}

// ---- shuffle_batch ----

TEST_P(InputPipelineTest, ShuffleBatchOneThread) {
  Graph g;
  const int batch_size = 10, num_batches = 3;
  auto raw = shuffle_batch(examples(g, batch_size * num_batches), batch_size, /*capacity=*/32,
                           /*min_after_dequeue=*/16, /*num_threads=*/1, /*seed=*/141421);
  EXPECT_EQ(raw[0].shape(), Shape{batch_size});
  EXPECT_EQ(raw[1].shape(), (Shape{batch_size, 2}));
  auto runners = queue_runners(g);
  ASSERT_EQ(runners.size(), 2u);
  EXPECT_EQ(runners[1].queue().op().type(), "RandomShuffleQueueV2");
  EXPECT_EQ(runners[1].queue().name().rfind("shuffle_batch/", 0), 0u) << runners[1].queue().name();
  auto b = consumed(raw);
  Session s(g);
  ScopedQueueRunners threads(s);
  std::vector<int64_t> all = run_batches(s, b, num_batches, batch_size);
  EXPECT_NE(all, arange(batch_size * num_batches));  // shuffled
  EXPECT_EQ(sorted(all), arange(batch_size * num_batches));
  EXPECT_THROW(s.run(b, {}, {}, bounded()), OutOfRangeError);
  expect_on_device(b[1]);
}

TEST_P(InputPipelineTest, ShuffleBatchManyThreads) {
  Graph g;
  const int batch_size = 10, num_batches = 3;
  auto b = consumed(shuffle_batch(examples(g, batch_size * num_batches), batch_size, 32, 16,
                                  /*num_threads=*/4, /*seed=*/173205));
  Session s(g);
  ScopedQueueRunners threads(s);
  std::vector<int64_t> all;
  for (int i = 0; i < num_batches; ++i) {
    std::vector<int64_t> counts = run_batch(s, b);
    all.insert(all.end(), counts.begin(), counts.end());
  }
  EXPECT_NE(all, arange(batch_size * num_batches));
  EXPECT_EQ(sorted(all), arange(batch_size * num_batches));
  EXPECT_THROW(s.run(b, {}, {}, bounded()), OutOfRangeError);
}

TEST_P(InputPipelineTest, ShuffleBatchSmallerFinalBatch) {
  for (int num_threads : {1, 4}) {
    SCOPED_TRACE(num_threads);
    Graph g;
    const int n = 35;
    auto raw = shuffle_batch(examples(g, n), 10, 32, 16, num_threads, /*seed=*/314159, false,
                             /*allow_smaller_final_batch=*/true);
    EXPECT_EQ(raw[0].shape(), Shape{-1});
    std::vector<std::size_t> sizes;
    std::vector<int64_t> all = drain_pipeline(consumed(raw), &sizes);
    EXPECT_EQ(sizes, (std::vector<std::size_t>{10, 10, 10, 5}));
    EXPECT_NE(all, arange(n));
    EXPECT_EQ(sorted(all), arange(n));
  }
}

TEST_P(InputPipelineTest, ShuffleBatchEnqueueMany) {
  Graph g;
  auto pre_batched = batch(examples(g, 30), 5);
  auto b = consumed(shuffle_batch(pre_batched, 10, 32, 8, 1, /*seed=*/2718, /*enqueue_many=*/true));
  std::vector<std::size_t> sizes;
  std::vector<int64_t> all = drain_pipeline(b, &sizes);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{10, 10, 10}));
  EXPECT_NE(all, arange(30));
  EXPECT_EQ(sorted(all), arange(30));
}

// Over several epochs every example comes out exactly once per epoch, whatever the threads.
TEST_P(InputPipelineTest, ShuffleBatchKeepsEveryElementOncePerEpoch) {
  for (int num_threads : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(num_threads);
    Graph g;
    const int n = 20, num_epochs = 3;
    auto b = consumed(shuffle_batch(examples(g, n, num_epochs), 7, 16, 5, num_threads, 0, false, true));
    expect_each_count_once_per_epoch(drain_pipeline(b), n, num_epochs);
  }
}

// ---- slice_input_producer ----

TEST_P(InputPipelineTest, SliceInputProducerNoShuffle) {
  Graph g;
  const int num_epochs = 3;
  const std::vector<int32_t> ints = {2, 3, 5, 7};
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<Output> sources =
      on_device_constants(g, {Tensor::vector<int32_t>(ints), Tensor::matrix<float>(rows, 4, 2)});
  auto raw = slice_input_producer(sources, num_epochs, /*shuffle=*/false);
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_EQ(raw[0].shape(), Shape{});
  EXPECT_EQ(raw[1].shape(), Shape{2});
  auto slices = consumed(raw);
  Session s(g);
  ScopedQueueRunners threads(s);
  for (int e = 0; e < num_epochs; ++e) {
    for (int j = 0; j < 4; ++j) {
      auto out = s.run(slices, {}, {}, bounded());
      EXPECT_EQ(out[0].scalar<int32_t>(), ints[j]);
      EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{rows[2 * j], rows[2 * j + 1]}));
    }
  }
  EXPECT_THROW(s.run(slices, {}, {}, bounded()), OutOfRangeError);
  expect_on_device(raw[0]);  // each gather with its tensor: only a row leaves the device
  expect_on_device(raw[1]);
  expect_on_device(slices[1]);
}

TEST_P(InputPipelineTest, SliceInputProducerShuffle) {
  Graph g;
  const int num_epochs = 300;
  std::vector<Output> sources =
      on_device_constants(g, {Tensor::vector<int32_t>({0, 1, 2}), Tensor::vector<float>({0, 10, 20})});
  auto slices = consumed(slice_input_producer(sources, num_epochs, /*shuffle=*/true, /*seed=*/161803));
  Session s(g);
  ScopedQueueRunners threads(s);
  // Every 3 runs are one epoch: a permutation of the rows, each row whole. Count the orders.
  std::map<std::vector<int32_t>, int> frequency;
  for (int e = 0; e < num_epochs; ++e) {
    std::vector<int32_t> order;
    for (int j = 0; j < 3; ++j) {
      auto out = s.run(slices, {}, {}, bounded());
      order.push_back(out[0].scalar<int32_t>());
      EXPECT_EQ(out[1].scalar<float>(), 10.f * static_cast<float>(order.back()));
    }
    ASSERT_EQ(std::set<int32_t>(order.begin(), order.end()).size(), 3u) << "epoch " << e;
    frequency[order]++;
  }
  EXPECT_EQ(frequency.size(), 6u);  // the input order and every other one
  for (const auto& [order, n] : frequency) {
    EXPECT_GT(n, num_epochs / 6 * 0.6);
    EXPECT_LT(n, num_epochs / 6 * 1.4);
  }
  EXPECT_THROW(s.run(slices, {}, {}, bounded()), OutOfRangeError);
}

// The rows of a slice_input_producer, batched with shuffling: the usual TF1 pipeline.
TEST_P(InputPipelineTest, SliceInputProducerFeedsShuffleBatch) {
  Graph g;
  const int n = 12, num_epochs = 2;
  std::vector<int64_t> counts = arange(n);
  std::vector<float> pairs;
  for (int64_t c : counts) pairs.insert(pairs.end(), {static_cast<float>(c), -static_cast<float>(c)});
  std::vector<Output> sources =
      on_device_constants(g, {Tensor::vector<int64_t>(counts), Tensor::matrix<float>(pairs, n, 2)});
  auto slices = slice_input_producer(sources, num_epochs, true, /*seed=*/11);
  auto b = consumed(shuffle_batch(slices, 5, 10, 3, 2, /*seed=*/13, false, true));
  EXPECT_EQ(queue_runners(g).size(), 2u);
  expect_each_count_once_per_epoch(drain_pipeline(b), n, num_epochs);
}

TEST_P(InputPipelineTest, SliceInputProducerArgumentErrors) {
  Graph g;
  auto rows3 = ops::constant(g, Tensor::vector<float>({1, 2, 3}), "rows3");
  auto rows2 = ops::constant(g, Tensor::vector<int32_t>({1, 2}), "rows2");
  auto unknown = ops::placeholder(g, DType::Float32, Shape{-1, 2}, "unknown");
  EXPECT_THROW_MSG(slice_input_producer({}), InvalidArgumentError, "slice_input_producer: needs at least one tensor");
  EXPECT_THROW_MSG(slice_input_producer({ops::constant(g, 1.f, "one")}), InvalidArgumentError,
                   "slice_input_producer: tensor 'one:0' must have rank >= 1");
  EXPECT_THROW_MSG(slice_input_producer({unknown}), InvalidArgumentError,
                   "slice_input_producer: dimension 0 of tensor 'unknown:0' must be known");
  EXPECT_THROW_MSG(slice_input_producer({rows3, rows2}), InvalidArgumentError,
                   "slice_input_producer: tensor 'rows2:0' has 2 rows but tensor 'rows3:0' has 3");
  EXPECT_THROW_MSG(slice_input_producer({rows3}, -1), InvalidArgumentError, "num_epochs must be >= 0, got -1");
  EXPECT_TRUE(queue_runners(g).empty());
}

// ---- range_input_producer ----

TEST_P(InputPipelineTest, RangeInputProducerNoShuffle) {
  Graph g;
  FIFOQueue q = range_input_producer(g, 5, /*num_epochs=*/2, /*shuffle=*/false);
  EXPECT_EQ(q.dtypes(), std::vector<DType>{DType::Int32});
  EXPECT_EQ(q.shapes(), std::vector<Shape>{Shape{}});
  EXPECT_EQ(q.capacity(), 32);
  EXPECT_EQ(q.name().rfind("input_producer/", 0), 0u) << q.name();
  ASSERT_EQ(queue_runners(g).size(), 1u);
  auto all = consumed({q.dequeue_many(10)[0]})[0];
  auto one = consumed({q.dequeue()[0]})[0];
  Session s(g);
  ScopedQueueRunners threads(s);
  EXPECT_EQ(s.run({all}, {}, {}, bounded())[0].to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
}

TEST_P(InputPipelineTest, RangeInputProducerShuffle) {
  Graph g;
  const int limit = 10, num_epochs = 4;
  FIFOQueue q = range_input_producer(g, limit, num_epochs, /*shuffle=*/true, /*seed=*/7, /*capacity=*/8);
  auto epoch = consumed({q.dequeue_many(limit)[0]})[0];
  auto one = consumed({q.dequeue()[0]})[0];
  std::vector<std::vector<int32_t>> runs;
  for (int session = 0; session < 2; ++session) {
    Session s(g);
    ScopedQueueRunners threads(s);
    std::vector<int32_t> all;
    for (int e = 0; e < num_epochs; ++e) {
      std::vector<int32_t> order = s.run({epoch}, {}, {}, bounded())[0].to_vector<int32_t>();
      std::vector<int32_t> in_order = order;
      std::sort(in_order.begin(), in_order.end());
      std::vector<int32_t> want(limit);
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(in_order, want) << "epoch " << e;  // each value once per epoch
      all.insert(all.end(), order.begin(), order.end());
    }
    EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);  // the seed fixes the order
  std::vector<int32_t> unshuffled;
  for (int e = 0; e < num_epochs; ++e) {
    for (int i = 0; i < limit; ++i) unshuffled.push_back(i);
  }
  EXPECT_NE(runs[0], unshuffled);
}

TEST_P(InputPipelineTest, RangeInputProducerArgumentErrors) {
  Graph g;
  EXPECT_THROW_MSG(range_input_producer(g, 0), InvalidArgumentError, "range_input_producer: limit must be in [1, 2147483647], got 0");
  EXPECT_THROW_MSG(range_input_producer(g, -3), InvalidArgumentError, "got -3");
  EXPECT_THROW_MSG(range_input_producer(g, int64_t{std::numeric_limits<int32_t>::max()} + 1), InvalidArgumentError,
                   "got 2147483648");
  EXPECT_THROW_MSG(range_input_producer(g, 5, -1), InvalidArgumentError,
                   "range_input_producer: num_epochs must be >= 0, got -1");
}

// ---- Gradients ----

// A loss over a batch is differentiated with respect to the model, never through the queue:
// d/dw sum(batch * w) is the batch summed over its rows, and the enqueued tensor gets no gradient
// (TF's None), as the queue ops are not differentiable.
TEST_P(InputPipelineTest, GradientsOfALossOverABatch) {
  Graph g;
  Output rows = on_device_constants(g, {Tensor::matrix<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 6, 2)})[0];
  Output b = batch({rows}, 3, 1, 32, /*enqueue_many=*/true)[0];
  auto w = ops::placeholder(g, DType::Float32, Shape{2}, "w");
  Output loss = [&] {
    auto scope = on_device(g);
    return ops::reduce_sum(ops::mul(b, w));
  }();
  std::vector<Output> grads = gradients({loss}, {w, rows});
  ASSERT_EQ(grads.size(), 2u);
  ASSERT_FALSE(grads[0].is_null());
  EXPECT_EQ(grads[0].shape(), Shape{2});
  EXPECT_TRUE(grads[1].is_null());
  Session s(g);
  ScopedQueueRunners threads(s);
  for (int step = 0; step < 4; ++step) {
    auto out = s.run({b, grads[0]}, {{w, Tensor::vector<float>({0.5f, -2.f})}}, {}, bounded());
    const std::vector<float> batch_values = out[0].to_vector<float>();
    std::vector<float> column_sums(2, 0.f);
    for (std::size_t i = 0; i < batch_values.size(); ++i) column_sums[i % 2] += batch_values[i];
    EXPECT_EQ(out[1].to_vector<float>(), column_sums) << "step " << step;
    EXPECT_EQ(batch_values.front(), step % 2 == 0 ? 1.f : 7.f);  // the rows, 3 at a time, in order
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, InputPipelineTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera::train
