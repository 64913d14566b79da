// RandomShuffleQueue through sessions: the cases of TensorFlow's random_shuffle_queue_test.py
// (enqueue and dequeue, dequeue_many / dequeue_up_to, min_after_dequeue blocking, close and
// drain, seeds, sharing, errors), plus timeouts and concurrency. Every test runs on CPU and on
// SIM: the queue ops are host-only, so on SIM the enqueued values are computed on the device and
// the dequeued ones consumed there, crossing to and from the host queue.
//
// A dequeue that must wait is shown waiting by a short run timeout (DeadlineExceededError) where
// the test goes on afterwards, so no test depends on timing; where a thread has to be blocked
// first, the test waits until the queue shows it (its size) or gives it kSettle, as TensorFlow's
// tests do.
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;
constexpr auto kSettle = 100ms;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

RunOptions bounded(std::chrono::milliseconds timeout = 10s) {
  RunOptions o;
  o.timeout = timeout;
  return o;
}

std::future<void> async(std::function<void()> fn) { return std::async(std::launch::async, std::move(fn)); }

// What the close-and-drain cases enqueue, and get back in some order.
const std::vector<float> kElems = {10, 20, 30, 40};

class RandomShuffleQueueTest : public ::testing::TestWithParam<std::string> {
 protected:
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }
  // `t` produced on the device under test.
  Output device_value(Graph& g, Tensor t) {
    auto scope = on_device(g);
    return ops::identity(ops::constant(g, std::move(t)));
  }
  Output floats(Graph& g, std::vector<float> v) { return device_value(g, Tensor::vector<float>(std::move(v))); }
  Output scalar(Graph& g, float v) { return device_value(g, Tensor::scalar(v)); }
  // `x` (a dequeued value) consumed on the device under test.
  Output consumed(const Output& x) {
    auto scope = on_device(x.op().graph());
    return ops::identity(x);
  }
  std::vector<Output> consumed(const std::vector<Output>& xs) {
    std::vector<Output> out;
    for (const Output& x : xs) out.push_back(consumed(x));
    return out;
  }
  std::vector<float> fetch(Session& s, const Output& x) { return s.run({x}, {}, {}, bounded())[0].to_vector<float>(); }
  float fetch_scalar(Session& s, const Output& x) { return s.run({x}, {}, {}, bounded())[0].scalar<float>(); }
  // The value of a queue's size() output (built before any thread runs the session).
  int32_t count(Session& s, const Output& size) { return s.run(size).scalar<int32_t>(); }
  void expect_on_device(const Output& x) {
    EXPECT_THAT(x.op().assigned_device(), HasSubstr("/device:" + GetParam() + ":0")) << x.name();
  }
  // A float queue of capacity 4 (no minimum) on `g`, an enqueue of 50 and a dequeue consumed on
  // the device: once kElems fill the queue, the enqueue waits for room.
  struct FullQueue {
    RandomShuffleQueue q;
    Operation enq;
    Output deq;
  };
  FullQueue full_queue(Graph& g) {
    RandomShuffleQueue q(g, 4, 0, {DType::Float32}, {Shape{}});
    return {q, q.enqueue({scalar(g, 50)}), consumed(q.dequeue()[0])};
  }
  // Enqueues kElems into `q` (of floats) in `s`.
  void enqueue_elems(Session& s, const RandomShuffleQueue& q) {
    s.run(q.enqueue_many({floats(q.op().graph(), kElems)}));
  }
  // Runs `consume` on a thread, gives it kSettle to block in `q`, runs `while_blocked` (if any),
  // closes `q` and joins the thread: what a close does to the dequeues waiting in the queue.
  void close_while_blocked(Session& s, const RandomShuffleQueue& q, const std::function<void()>& consume,
                           const std::function<void()>& while_blocked = nullptr) {
    Operation close = q.close();  // built before the thread runs the session
    auto consumer = async(consume);
    std::this_thread::sleep_for(kSettle);
    if (while_blocked) while_blocked();
    s.run(close);
    consumer.get();
  }
};

// ---- Graph construction ----

TEST_P(RandomShuffleQueueTest, Constructor) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32, DType::Int32}, {Shape{}, Shape{3}});
  EXPECT_EQ(q.op().type(), "RandomShuffleQueueV2");
  EXPECT_EQ(q.name(), "random_shuffle_queue");
  EXPECT_EQ(q.capacity(), 10);
  EXPECT_EQ(q.min_after_dequeue(), 2);
  EXPECT_EQ(q.dtypes(), (std::vector<DType>{DType::Float32, DType::Int32}));
  EXPECT_EQ(q.shapes()[1], Shape{3});
  RandomShuffleQueue named(g, 5, 0, {DType::Float32}, {}, 7, "", "Q");
  EXPECT_EQ(named.name(), "Q");
  EXPECT_EQ(named.dequeue()[0].op().name(), "Q_Dequeue");
  RandomShuffleQueue copy = q;  // a handle: the same queue
  EXPECT_EQ(copy.op(), q.op());
  QueueBase& base = q;
  EXPECT_EQ(base.dequeue_many(4)[1].shape(), (Shape{4, 3}));
}

TEST_P(RandomShuffleQueueTest, ConstructorRejectsBadArguments) {
  Graph g;
  EXPECT_THROW_MSG(RandomShuffleQueue(g, 10, 10, {DType::Float32}), InvalidArgumentError,
                   "min_after_dequeue 10 must be < capacity 10");
  EXPECT_THROW_MSG(RandomShuffleQueue(g, 10, -1, {DType::Float32}), InvalidArgumentError,
                   "min_after_dequeue must be >= 0, got -1");
  EXPECT_THROW_MSG(RandomShuffleQueue(g, 10, 0, {}), InvalidArgumentError, "component type");
  EXPECT_THROW_MSG(RandomShuffleQueue(g, 10, 0, {DType::Float32}, {Shape{}, Shape{}}), InvalidArgumentError,
                   "2 shapes");
  RandomShuffleQueue unbounded(g, -1, 1000, {DType::Float32});  // no capacity: any min_after_dequeue
  EXPECT_EQ(unbounded.min_after_dequeue(), 1000);
  RandomShuffleQueue null_queue;
  EXPECT_THROW(null_queue.dequeue(), InvalidArgumentError);
}

TEST_P(RandomShuffleQueueTest, BuildTimeErrorsNameTheOp) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Float32}, {Shape{2}}, 0, "", "q");
  EXPECT_THROW_MSG(q.enqueue({ops::constant(g, 1)}), InvalidArgumentError,
                   "q_enqueue (QueueEnqueue): component 0 has dtype int32 but queue 'q' expects float32");
  EXPECT_THROW_MSG(q.enqueue({floats(g, {1, 2, 3})}), InvalidArgumentError,
                   "component 0 has shape [3] but queue 'q' expects [2]");
  EXPECT_THROW_MSG(q.enqueue_many({floats(g, {1, 2})}), InvalidArgumentError, "expects rows of shape [2]");
  EXPECT_THROW_MSG(q.dequeue_many(-1), InvalidArgumentError, "n must be >= 0, got -1");
}

// ---- Enqueue and dequeue ----

TEST_P(RandomShuffleQueueTest, EnqueueAndDequeue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Float32}, {Shape{}});
  const std::vector<float> elems = {10, 20, 30};
  std::vector<Operation> enqueues;
  for (float v : elems) enqueues.push_back(q.enqueue({scalar(g, v)}));
  auto deq = consumed(q.dequeue()[0]);
  EXPECT_EQ(deq.shape(), Shape{});
  Session s(g);
  for (auto& e : enqueues) s.run(e);
  std::vector<float> got;
  for (std::size_t i = 0; i < elems.size(); ++i) got.push_back(fetch_scalar(s, deq));
  EXPECT_THAT(got, UnorderedElementsAreArray(elems));
  expect_on_device(deq);
}

TEST_P(RandomShuffleQueueTest, MultiComponentTuplesStayTogether) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Int32, DType::Float32}, {Shape{}, Shape{2}});
  auto enq = q.enqueue_many({device_value(g, Tensor::vector<int32_t>({1, 2, 3, 4})),
                             device_value(g, Tensor::matrix<float>({10, -10, 20, -20, 30, -30, 40, -40}, 4, 2))});
  auto deq = consumed(q.dequeue());
  Session s(g);
  s.run(enq);
  std::set<int32_t> seen;
  for (int i = 0; i < 4; ++i) {
    auto out = s.run(deq, {}, {}, bounded());
    const int32_t k = out[0].scalar<int32_t>();
    EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{10.f * k, -10.f * k})) << k;
    seen.insert(k);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2, 3, 4}));
}

TEST_P(RandomShuffleQueueTest, SizeAfterEnqueueAndDequeue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Float32});
  auto enq = q.enqueue({scalar(g, 10)});
  auto deq = q.dequeue()[0];
  auto size = q.size();
  Session s(g);
  EXPECT_EQ(count(s, size), 0);
  s.run(enq);
  EXPECT_EQ(count(s, size), 1);
  EXPECT_EQ(fetch_scalar(s, deq), 10.f);
  EXPECT_EQ(count(s, size), 0);
  EXPECT_FALSE(s.run(q.is_closed()).scalar<bool>());
}

TEST_P(RandomShuffleQueueTest, DequeueManyTakesDistinctElements) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Float32}, {Shape{}});
  std::vector<float> elems(10);
  std::iota(elems.begin(), elems.end(), 10.f);
  auto enq = q.enqueue_many({floats(g, elems)});
  auto deq = consumed(q.dequeue_many(5)[0]);
  auto size = q.size();
  EXPECT_EQ(deq.shape(), Shape{5});
  Session s(g);
  s.run(enq);
  std::vector<float> got = fetch(s, deq);
  std::vector<float> second = fetch(s, deq);
  got.insert(got.end(), second.begin(), second.end());
  EXPECT_THAT(got, UnorderedElementsAreArray(elems));
  EXPECT_EQ(count(s, size), 0);
}

TEST_P(RandomShuffleQueueTest, DequeueUpTo) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue_many({floats(g, {1, 2, 3, 4, 5, 6, 7})});
  auto deq = consumed(q.dequeue_up_to(5)[0]);
  EXPECT_EQ(deq.shape(), Shape{-1});
  Session s(g);
  s.run(enq);
  std::vector<float> got = fetch(s, deq);
  EXPECT_EQ(got.size(), 5u);
  s.run(q.close());
  std::vector<float> rest = fetch(s, deq);  // the closed queue's last 2
  EXPECT_EQ(rest.size(), 2u);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_THAT(got, UnorderedElementsAreArray({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f}));
  EXPECT_THROW_MSG(s.run({deq}, {}, {}, bounded()), OutOfRangeError, "is closed and has insufficient elements");
}

TEST_P(RandomShuffleQueueTest, EmptyEnqueueManyAndDequeueMany) {
  Graph g;
  RandomShuffleQueue q(g, 10, 5, {DType::Float32}, {Shape{2}});
  auto enq = q.enqueue_many({device_value(g, Tensor(DType::Float32, Shape{0, 2}))});
  auto empty = consumed(q.dequeue_many(0)[0]);
  RandomShuffleQueue unshaped(g, 10, 5, {DType::Float32});
  auto unshaped_empty = unshaped.dequeue_many(0)[0];
  Session s(g);
  s.run(enq);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
  EXPECT_EQ(s.run(empty).shape(), (Shape{0, 2}));
  EXPECT_THROW_MSG(s.run(unshaped_empty), InvalidArgumentError, "needs fully specified shapes");
}

TEST_P(RandomShuffleQueueTest, HighDimension) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Int32}, {Shape{4, 4, 4, 4}});
  std::vector<int32_t> values(10 * 256);
  std::iota(values.begin(), values.end(), 0);
  auto enq = q.enqueue_many({device_value(g, Tensor::from_vector<int32_t>(values, Shape{10, 4, 4, 4, 4}))});
  auto deq = consumed(q.dequeue_many(10)[0]);
  Session s(g);
  s.run(enq);
  Tensor out = s.run({deq}, {}, {}, bounded())[0];
  ASSERT_EQ(out.shape(), (Shape{10, 4, 4, 4, 4}));
  // Every row is one enqueued row, whole: its first value says which, the rest follow it.
  std::vector<int32_t> got = out.to_vector<int32_t>();
  std::set<int32_t> rows;
  for (int r = 0; r < 10; ++r) {
    const int32_t first = got[r * 256];
    ASSERT_EQ(first % 256, 0);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(got[r * 256 + i], first + i);
    rows.insert(first / 256);
  }
  EXPECT_EQ(rows.size(), 10u);
}

// ---- min_after_dequeue ----

// A dequeue waits until more than min_after_dequeue elements are queued.
TEST_P(RandomShuffleQueueTest, DequeueWaitsForMoreThanMinAfterDequeue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue({scalar(g, 1)});
  auto deq = consumed(q.dequeue()[0]);
  auto size = q.size();
  Session s(g);
  for (int queued = 0; queued < 2; ++queued) {
    s.run(enq);
    EXPECT_THROW(s.run({deq}, {}, {}, bounded(50ms)), DeadlineExceededError) << queued + 1 << " queued";
  }
  s.run(enq);
  EXPECT_EQ(fetch_scalar(s, deq), 1.f);  // 3 > 2: no wait
  EXPECT_EQ(count(s, size), 2);
  // A blocked dequeue completes as soon as the third element arrives.
  auto consumer = async([&] { EXPECT_EQ(fetch_scalar(s, deq), 1.f); });
  std::this_thread::sleep_for(kSettle);
  s.run(enq);
  consumer.get();
  EXPECT_EQ(count(s, size), 2);
}

// TF testBlockingDequeueFromClosedQueue: the dequeues stop at min_after_dequeue until the close,
// then drain.
TEST_P(RandomShuffleQueueTest, BlockingDequeueFromClosedQueue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32});
  auto deq = consumed(q.dequeue()[0]);
  Session s(g);
  enqueue_elems(s, q);
  std::vector<float> results;
  for (int i = 0; i < 2; ++i) results.push_back(fetch_scalar(s, deq));
  EXPECT_THROW(s.run({deq}, {}, {}, bounded(50ms)), DeadlineExceededError);  // 2 left: the minimum
  std::atomic<int> late{0};  // dequeued by the consumer
  close_while_blocked(
      s, q,
      [&] {
        std::vector<float> got;
        for (int i = 0; i < 2; ++i) {
          got.push_back(fetch_scalar(s, deq));
          ++late;
        }
        EXPECT_THROW_MSG(s.run({deq}, {}, {}, bounded()), OutOfRangeError, "is closed and has insufficient");
        results.insert(results.end(), got.begin(), got.end());
      },
      [&] { EXPECT_EQ(late.load(), 0); });  // blocked at min_after_dequeue
  EXPECT_THAT(results, UnorderedElementsAreArray(kElems));
}

TEST_P(RandomShuffleQueueTest, BlockingDequeueManyTakesWhatMinAfterDequeueAllows) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32}, {Shape{}});
  auto enq4 = q.enqueue_many({floats(g, {1, 2, 3, 4})});
  auto enq2 = q.enqueue_many({floats(g, {5, 6})});
  auto deq = consumed(q.dequeue_many(4)[0]);
  auto size = q.size();
  auto close = q.close();
  auto rest_op = consumed(q.dequeue_many(2)[0]);
  Session s(g);
  s.run(enq4);
  std::vector<float> got;
  auto consumer = async([&] { got = fetch(s, deq); });
  // The dequeue takes the 2 elements beyond the minimum and waits for 2 more.
  ASSERT_TRUE(testing::wait_until([&] { return count(s, size) == 2; }));
  s.run(enq2);
  consumer.get();
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(std::set<float>(got.begin(), got.end()).size(), 4u);
  EXPECT_EQ(count(s, size), 2);
  // The two left and the four taken are the six enqueued.
  s.run(close);
  std::vector<float> rest = fetch(s, rest_op);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_THAT(got, UnorderedElementsAreArray({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}));
}

// TF testBlockingDequeueUpToSmallerThanMinAfterDequeue.
TEST_P(RandomShuffleQueueTest, BlockingDequeueUpToSmallerThanMinAfterDequeue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 4, {DType::Float32}, {Shape{}});
  auto deq = consumed(q.dequeue_up_to(3)[0]);
  Session s(g);
  enqueue_elems(s, q);
  std::vector<float> results;
  close_while_blocked(s, q, [&] {
    std::vector<float> first = fetch(s, deq);
    EXPECT_EQ(first.size(), 3u);
    std::vector<float> second = fetch(s, deq);
    EXPECT_EQ(second.size(), 1u);
    results = first;
    results.insert(results.end(), second.begin(), second.end());
    EXPECT_THROW_MSG(s.run({deq}, {}, {}, bounded()), OutOfRangeError, "is closed and has insufficient");
  });
  EXPECT_THAT(results, UnorderedElementsAreArray(kElems));
}

// TF testBlockingDequeueManyFromClosedQueueWithElementsRemaining.
TEST_P(RandomShuffleQueueTest, DequeueManyFromClosedQueueWithElementsRemaining) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32}, {Shape{}});
  auto deq = consumed(q.dequeue_many(3)[0]);
  auto cleanup = consumed(q.dequeue()[0]);
  auto size = q.size();
  Session s(g);
  enqueue_elems(s, q);
  std::vector<float> results;
  close_while_blocked(s, q, [&] {
    results = fetch(s, deq);
    EXPECT_EQ(results.size(), 3u);
    // 1 element left on a closed queue: not enough, and it stays.
    EXPECT_THROW_MSG(s.run({deq}, {}, {}, bounded()), OutOfRangeError, "is closed and has insufficient");
    EXPECT_EQ(count(s, size), 1);
    results.push_back(fetch_scalar(s, cleanup));
  });
  EXPECT_THAT(results, UnorderedElementsAreArray(kElems));
}

TEST_P(RandomShuffleQueueTest, TimedOutDequeueManyGivesBackWhatItHeld) {
  Graph g;
  RandomShuffleQueue q(g, 10, 1, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue_many({floats(g, {1, 2, 3})});
  auto deq = consumed(q.dequeue_many(5)[0]);
  Session s(g);
  s.run(enq);
  EXPECT_THROW(s.run({deq}, {}, {}, bounded(50ms)), DeadlineExceededError);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 3);
  s.run(q.close());
  EXPECT_THAT(fetch(s, consumed(q.dequeue_up_to(5)[0])), UnorderedElementsAreArray({1.f, 2.f, 3.f}));
}

// ---- Close ----

TEST_P(RandomShuffleQueueTest, DequeueFromClosedEmptyQueue) {
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Float32}, {Shape{}});
  auto deq = consumed(q.dequeue()[0]);
  auto deq_many = consumed(q.dequeue_many(2)[0]);
  auto deq_up_to = consumed(q.dequeue_up_to(2)[0]);
  Session s(g);
  close_while_blocked(s, q, [&] { EXPECT_THROW_MSG(s.run({deq}, {}, {}, bounded()), OutOfRangeError, "is closed"); });
  EXPECT_THROW(s.run({deq_many}, {}, {}, bounded()), OutOfRangeError);
  EXPECT_THROW(s.run({deq_up_to}, {}, {}, bounded()), OutOfRangeError);
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST_P(RandomShuffleQueueTest, EnqueueToClosedQueueAndSecondClose) {
  Graph g;
  RandomShuffleQueue q(g, 10, 4, {DType::Float32}, {Shape{}}, 0, "", "q");
  auto enq = q.enqueue({scalar(g, 1)});
  auto enq_many = q.enqueue_many({floats(g, {1, 2})});
  Session s(g);
  s.run(q.close());
  EXPECT_THROW_MSG(s.run(enq), CancelledError, "queue 'q' is closed");
  EXPECT_THROW_MSG(s.run(enq_many), CancelledError, "queue 'q' is closed");
  EXPECT_THROW_MSG(s.run(q.close()), CancelledError, "already closed");
}

TEST_P(RandomShuffleQueueTest, BlockingEnqueueToFullQueueCompletesAfterDequeue) {
  Graph g;
  const FullQueue f = full_queue(g);
  Session s(g);
  enqueue_elems(s, f.q);
  EXPECT_THROW(s.run({}, {}, {f.enq}, bounded(50ms)), DeadlineExceededError);  // full
  auto producer = async([&] { s.run({}, {}, {f.enq}, bounded()); });
  std::this_thread::sleep_for(kSettle);
  std::vector<float> got{fetch_scalar(s, f.deq)};
  producer.get();
  for (int i = 0; i < 4; ++i) got.push_back(fetch_scalar(s, f.deq));
  EXPECT_THAT(got, UnorderedElementsAreArray({10.f, 20.f, 30.f, 40.f, 50.f}));
}

TEST_P(RandomShuffleQueueTest, BlockingEnqueueBeforeCloseCompletesThenDrains) {
  Graph g;
  const FullQueue f = full_queue(g);
  auto close = f.q.close();
  Session s(g);
  enqueue_elems(s, f.q);
  auto producer = async([&] { s.run({}, {}, {f.enq}, bounded()); });
  std::this_thread::sleep_for(kSettle);
  auto closer = async([&] { s.run({}, {}, {close}, bounded()); });  // waits behind the blocked enqueue
  std::vector<float> got;
  for (int i = 0; i < 5; ++i) got.push_back(fetch_scalar(s, f.deq));
  producer.get();
  closer.get();
  EXPECT_THAT(got, UnorderedElementsAreArray({10.f, 20.f, 30.f, 40.f, 50.f}));
  EXPECT_THROW(s.run({f.deq}, {}, {}, bounded()), OutOfRangeError);
}

// ---- Randomness ----

// The order of everything dequeued (singles, a batch, and what is left after the close).
std::vector<float> dequeue_order(Session& s, const RandomShuffleQueue& q, const Operation& enq,
                                 const Output& one, const Output& five, const Output& rest) {
  s.run(enq);
  std::vector<float> order;
  for (int i = 0; i < 5; ++i) order.push_back(s.run({one}, {}, {}, bounded())[0].scalar<float>());
  for (float v : s.run({five}, {}, {}, bounded())[0].to_vector<float>()) order.push_back(v);
  s.run(q.close());
  for (float v : s.run({rest}, {}, {}, bounded())[0].to_vector<float>()) order.push_back(v);
  return order;
}

TEST_P(RandomShuffleQueueTest, SeedMakesTheOrderReproducible) {
  Graph g;
  std::vector<float> elems(20);
  std::iota(elems.begin(), elems.end(), 0.f);
  struct Pipeline {
    RandomShuffleQueue q;
    Operation enq;
    Output one, five, rest;
  };
  auto pipeline = [&](uint64_t seed) {
    RandomShuffleQueue q(g, 30, 3, {DType::Float32}, {Shape{}}, seed);
    return Pipeline{q, q.enqueue_many({floats(g, elems)}), consumed(q.dequeue()[0]),
                    consumed(q.dequeue_many(5)[0]), consumed(q.dequeue_up_to(20)[0])};
  };
  // TF testDequeueInDifferentOrders' seeds, and seed 0 (random).
  Pipeline a = pipeline(1729), b = pipeline(87539319), random = pipeline(0);
  std::map<std::string, std::vector<std::vector<float>>> orders;
  for (int session = 0; session < 2; ++session) {
    Session s(g);
    orders["a"].push_back(dequeue_order(s, a.q, a.enq, a.one, a.five, a.rest));
    orders["b"].push_back(dequeue_order(s, b.q, b.enq, b.one, b.five, b.rest));
    orders["random"].push_back(dequeue_order(s, random.q, random.enq, random.one, random.five, random.rest));
  }
  for (auto& [name, runs] : orders) {
    for (auto& order : runs) EXPECT_THAT(order, UnorderedElementsAreArray(elems)) << name;
  }
  EXPECT_EQ(orders["a"][0], orders["a"][1]);    // same seed, same operations: same order
  EXPECT_EQ(orders["b"][0], orders["b"][1]);
  EXPECT_NE(orders["a"][0], orders["b"][0]);    // another seed: another order
  EXPECT_NE(orders["a"][0], elems);             // shuffled
  EXPECT_NE(orders["random"][0], orders["random"][1]);  // seed 0: 1 chance in 20! to be equal
}

// Each element is equally likely to come out first (a fixed seed: the counts are deterministic,
// and an unfair pick would show in them).
TEST_P(RandomShuffleQueueTest, DequeueIsUniform) {
  Graph g;
  RandomShuffleQueue q(g, 10, 0, {DType::Int32}, {Shape{}}, 12345);
  auto enq = q.enqueue_many({device_value(g, Tensor::vector<int32_t>({0, 1, 2, 3, 4}))});
  auto all = consumed(q.dequeue_many(5)[0]);
  Session s(g);
  const int trials = 1000;
  std::map<int32_t, int> first;
  for (int t = 0; t < trials; ++t) {
    s.run(enq);
    std::vector<int32_t> order = s.run({all}, {}, {}, bounded())[0].to_vector<int32_t>();
    ASSERT_THAT(order, UnorderedElementsAreArray({0, 1, 2, 3, 4}));
    first[order[0]]++;
  }
  ASSERT_EQ(first.size(), 5u);
  for (const auto& [v, n] : first) {
    EXPECT_GT(n, trials / 5 * 0.7) << v;
    EXPECT_LT(n, trials / 5 * 1.3) << v;
  }
}

// ---- Sharing ----

TEST_P(RandomShuffleQueueTest, SharedQueueSameSession) {
  Graph g;
  RandomShuffleQueue q1(g, 1, 0, {DType::Float32}, {}, 0, "shared_queue");
  RandomShuffleQueue q2(g, 1, 0, {DType::Float32}, {}, 0, "shared_queue");
  Session s(g);
  s.run(q1.enqueue({scalar(g, 10)}));
  EXPECT_EQ(count(s, q2.size()), 1);
  EXPECT_EQ(fetch_scalar(s, consumed(q2.dequeue()[0])), 10.f);
  EXPECT_EQ(count(s, q1.size()), 0);
}

TEST_P(RandomShuffleQueueTest, IncompatibleSharedQueues) {
  Graph g;
  Session s(g);
  auto check = std::bind_front(testing::expect_share_refused, std::ref(s));
  check(RandomShuffleQueue(g, 10, 5, {DType::Float32}, {}, 0, "q_a"),
        RandomShuffleQueue(g, 10, 4, {DType::Float32}, {}, 0, "q_a"),
        "has min_after_dequeue 5 but requested min_after_dequeue was 4");
  check(RandomShuffleQueue(g, 10, 5, {DType::Float32}, {}, 0, "q_b"),
        RandomShuffleQueue(g, 15, 5, {DType::Float32}, {}, 0, "q_b"), "capacity");
  check(RandomShuffleQueue(g, 10, 5, {DType::Float32}, {}, 0, "q_c"),
        RandomShuffleQueue(g, 10, 5, {DType::Int32}, {}, 0, "q_c"), "component types");
  check(RandomShuffleQueue(g, 10, 5, {DType::Float32}, {}, 0, "q_d"),
        RandomShuffleQueue(g, 10, 5, {DType::Float32}, {Shape{2}}, 0, "q_d"), "component shapes");
  check(FIFOQueue(g, 10, {DType::Float32}, {}, "q_e"), RandomShuffleQueue(g, 10, 0, {DType::Float32}, {}, 0, "q_e"),
        "shared queue 'q_e' is a FIFOQueue but a RandomShuffleQueue was requested");
}

// ---- Concurrency ----

// Producers and consumers at 1, 2, 4 and 8 threads each: every element comes out exactly once.
TEST_P(RandomShuffleQueueTest, ParallelEnqueueAndDequeue) {
  for (int threads : testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    Graph g;
    RandomShuffleQueue q(g, 8, 3, {DType::Float32}, {Shape{}});
    const int per_thread = 20;
    std::vector<Operation> enqueues;
    for (int t = 0; t < threads; ++t) {
      std::vector<float> v(per_thread);
      std::iota(v.begin(), v.end(), static_cast<float>(t * per_thread));
      enqueues.push_back(q.enqueue_many({floats(g, v)}));
    }
    auto one = consumed(q.dequeue()[0]);
    auto two = consumed(q.dequeue_up_to(2)[0]);
    auto close = q.close();
    Session s(g);
    std::mutex mu;
    std::multiset<float> seen;
    auto consumers = async([&] {
      testing::run_threads(threads, [&](int t) {
        for (;;) {
          std::vector<float> got;
          try {
            got = fetch(s, t % 2 ? two : one);
          } catch (const OutOfRangeError&) {
            return;
          }
          std::lock_guard<std::mutex> l(mu);
          seen.insert(got.begin(), got.end());
        }
      });
    });
    testing::run_threads(threads, [&](int t) { s.run({}, {}, {enqueues[t]}, bounded()); });
    s.run(close);
    consumers.get();
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(threads * per_thread));
    EXPECT_EQ(std::set<float>(seen.begin(), seen.end()).size(), seen.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, RandomShuffleQueueTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
