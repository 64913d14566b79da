// train::QueueRunner: the behaviours of TensorFlow's queue_runner_test.py. TensorFlow's tests use
// count_up_to to make an enqueue op raise OutOfRangeError after a few runs; here the same role is
// played by dequeueing from a closed source queue holding a few elements.
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "tests/testing/test_util.h"

namespace tessera::train {
namespace {

using namespace std::chrono_literals;

// A closed queue holding `values`: its dequeue raises OutOfRangeError once they are taken.
struct Source {
  Source(Graph& g, Session& s, std::vector<float> values, std::string name = "source")
      : queue(g, 1000, {DType::Float32}, {Shape{}}, "", std::move(name)) {
    s.run(queue.enqueue_many({ops::constant(g, Tensor::vector<float>(values))}));
    s.run(queue.close());
  }
  Output next() const { return queue.dequeue()[0]; }
  FIFOQueue queue;
};

// Drains `q` until OutOfRangeError (bounded by a run timeout per dequeue).
std::vector<float> drain(Session& s, const FIFOQueue& q) {
  auto deq = q.dequeue()[0];
  RunOptions opts;
  opts.timeout = 10s;
  std::vector<float> out;
  for (;;) {
    try {
      out.push_back(s.run({deq}, {}, {}, opts)[0].scalar<float>());
    } catch (const OutOfRangeError&) {
      return out;
    }
  }
}

void join_all(std::vector<std::thread>& threads) {
  for (auto& t : threads) t.join();
  threads.clear();
}

// A session with a runner of one enqueue that moves a closed source's 1, 2, 3 into `q` (float,
// capacity 10): its thread ends on the source's OutOfRangeError, having moved all three.
struct OneToOne {
  Graph g;
  Session s{g};
  Source src{g, s, {1, 2, 3}};
  FIFOQueue q{g, 10, {DType::Float32}};
  QueueRunner qr{q, {q.enqueue({src.next()})}};
};

TEST(QueueRunnerTest, Basic) {
  OneToOne r;
  auto& [g, s, src, q, qr] = r;
  auto threads = qr.create_threads(s);
  EXPECT_EQ(threads.size(), 1u);  // one per enqueue op, no coordinator thread
  join_all(threads);
  EXPECT_TRUE(qr.exceptions().empty());
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 3);
  // The last thread to end closed the queue.
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
  EXPECT_EQ(drain(s, q), (std::vector<float>{1, 2, 3}));
}

TEST(QueueRunnerTest, TwoOpsCloseOnlyAfterBoth) {
  Graph g;
  Session s(g);
  Source a(g, s, {1, 2, 3}, "a");
  Source b(g, s, {10, 20, 30, 40, 50}, "b");
  FIFOQueue q(g, 100, {DType::Float32});
  QueueRunner qr(q, {q.enqueue({a.next()}), q.enqueue({b.next()})});
  EXPECT_EQ(qr.enqueue_ops().size(), 2u);
  EXPECT_EQ(qr.queue().op(), q.op());
  auto threads = qr.create_threads(s);
  EXPECT_EQ(threads.size(), 2u);
  join_all(threads);
  EXPECT_TRUE(qr.exceptions().empty());
  auto got = drain(s, q);
  EXPECT_EQ(std::multiset<float>(got.begin(), got.end()),
            (std::multiset<float>{1, 2, 3, 10, 20, 30, 40, 50}));
}

TEST(QueueRunnerTest, ExceptionsAreKeptWithoutACoordinator) {
  Graph g;
  Session s(g);
  FIFOQueue q(g, 10, {DType::Float32});
  auto unfed = ops::placeholder(g, DType::Float32, Shape{}, "unfed");
  QueueRunner qr(q, {q.enqueue({unfed}), q.enqueue({unfed})});
  auto threads = qr.create_threads(s);
  join_all(threads);
  auto errors = qr.exceptions();
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& ex : errors) {
    EXPECT_THROW_MSG(std::rethrow_exception(ex), InvalidArgumentError, "unfed");
  }
  // The error closed the queue.
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST(QueueRunnerTest, RealDequeueEnqueue) {
  Graph g;
  FIFOQueue q0(g, 3, {DType::Float32});
  auto enqueue0 = q0.enqueue({ops::constant(g, 10.f)});
  auto close0 = q0.close();
  FIFOQueue q1(g, 30, {DType::Float32});
  auto enqueue1 = q1.enqueue({q0.dequeue()[0]});
  auto dequeue1 = q1.dequeue()[0];
  Session s(g);
  QueueRunner qr(q1, {enqueue1});
  auto threads = qr.create_threads(s);
  // Enqueue 2 values, then close q0: the runner moves them and ends.
  s.run(enqueue0);
  s.run(enqueue0);
  s.run(close0);
  join_all(threads);
  EXPECT_TRUE(qr.exceptions().empty());
  EXPECT_EQ(s.run(dequeue1).scalar<float>(), 10.f);
  EXPECT_EQ(s.run(dequeue1).scalar<float>(), 10.f);
  EXPECT_THROW_MSG(s.run(dequeue1), OutOfRangeError, "is closed");
}

TEST(QueueRunnerTest, RespectCoordShouldStop) {
  OneToOne r;
  auto& [g, s, src, q, qr] = r;
  Coordinator coord;
  coord.request_stop();
  auto threads = qr.create_threads(s, &coord);
  EXPECT_EQ(threads.size(), 2u);  // the enqueue thread and the close-on-stop thread
  coord.join(threads, 10s);
  EXPECT_TRUE(qr.exceptions().empty());
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);  // nothing was moved
  EXPECT_EQ(s.run(src.queue.size()).scalar<int32_t>(), 3);
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST(QueueRunnerTest, RequestStopOnException) {
  Graph g;
  Session s(g);
  FIFOQueue q(g, 10, {DType::Float32});
  auto unfed = ops::placeholder(g, DType::Float32, Shape{}, "unfed");
  QueueRunner qr(q, {q.enqueue({unfed})});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord);
  EXPECT_TRUE(coord.wait_for_stop(10s));
  EXPECT_THROW_MSG(coord.join(threads, 10s), InvalidArgumentError, "unfed");
  // Reported to the coordinator, not kept.
  EXPECT_TRUE(qr.exceptions().empty());
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST(QueueRunnerTest, GracePeriodStopCancelsBlockedEnqueue) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32});
  auto enqueue = q.enqueue({ops::constant(g, 10.f)});
  auto dequeue = q.dequeue()[0];
  auto size = q.size();
  Session s(g);
  QueueRunner qr(q, {enqueue});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord);
  // The enqueue quickly fills the queue and blocks.
  ASSERT_TRUE(tessera::testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 2; }));
  s.run(dequeue.op());
  coord.request_stop();
  // The stop closes the queue, cancelling the blocked enqueue, so the join is prompt.
  const auto start = std::chrono::steady_clock::now();
  coord.join(threads, 1s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_TRUE(qr.exceptions().empty());
  EXPECT_TRUE(s.run(q.is_closed()).scalar<bool>());
}

TEST(QueueRunnerTest, MultipleSessions) {
  Graph g;
  Session s(g), other(g);
  // One source queue node; each session has its own queue behind it.
  FIFOQueue src(g, 100, {DType::Float32}, {Shape{}}, "", "source");
  auto values = ops::placeholder(g, DType::Float32, Shape{-1});
  auto fill = src.enqueue_many({values});
  s.run(fill, {{values, Tensor::vector<float>({1, 2})}});
  s.run(src.close());
  other.run(fill, {{values, Tensor::vector<float>({7, 8, 9})}});
  other.run(src.close());
  FIFOQueue q(g, 10, {DType::Float32});
  QueueRunner qr(q, {q.enqueue({src.dequeue()[0]})});
  auto threads = qr.create_threads(s);
  auto other_threads = qr.create_threads(other);
  EXPECT_EQ(threads.size(), other_threads.size());
  join_all(threads);
  join_all(other_threads);
  // Each session's queue was filled and closed by its own threads.
  EXPECT_EQ(drain(s, q), (std::vector<float>{1, 2}));
  EXPECT_EQ(drain(other, q), (std::vector<float>{7, 8, 9}));
}

TEST(QueueRunnerTest, IgnoreMultiStarts) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32});
  Session s(g);
  QueueRunner qr(q, {q.enqueue({ops::constant(g, 1.f)})});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord);
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_TRUE(qr.create_threads(s, &coord).empty());  // already running for this session
  coord.request_stop();
  coord.join(threads, 10s);
  // Once they ended, new threads may be created again.
  coord.clear_stop();
  Session s2(g);
  auto more = qr.create_threads(s2, &coord);
  EXPECT_EQ(more.size(), 2u);
  coord.request_stop();
  coord.join(more, 10s);
}

TEST(QueueRunnerTest, StartFalseWaitsForStart) {
  OneToOne r;
  auto& [g, s, src, q, qr] = r;
  auto size = q.size();
  auto threads = qr.create_threads(s, nullptr, /*start=*/false);
  ASSERT_EQ(threads.size(), 1u);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 0);  // parked
  qr.start(s);
  join_all(threads);
  EXPECT_EQ(drain(s, q), (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(qr.start(s), FailedPreconditionError);  // no threads for it any more
}

TEST(QueueRunnerTest, ParkedThreadsExitOnStop) {
  Graph g;
  Session s(g);
  FIFOQueue q(g, 10, {DType::Float32});
  QueueRunner qr(q, {q.enqueue({ops::constant(g, 1.f)})});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord, /*start=*/false);
  coord.request_stop();
  coord.join(threads, 10s);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueRunnerTest, StartQueueRunnersFromTheGraphCollection) {
  Graph g;
  Session s(g);
  Source a(g, s, {1, 2, 3}, "a");
  Source b(g, s, {4, 5}, "b");
  FIFOQueue qa(g, 10, {DType::Float32});
  FIFOQueue qb(g, 10, {DType::Float32});
  add_queue_runner(g, QueueRunner(qa, {qa.enqueue({a.next()})}));
  add_queue_runner(g, QueueRunner(qb, {qb.enqueue({b.next()})}));
  ASSERT_EQ(queue_runners(g).size(), 2u);
  EXPECT_EQ(queue_runners(g)[1].queue().op(), qb.op());
  Coordinator coord;
  auto threads = start_queue_runners(s, coord);
  EXPECT_EQ(threads.size(), 4u);  // 2 enqueue threads, 2 close-on-stop threads
  EXPECT_EQ(drain(s, qa), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(drain(s, qb), (std::vector<float>{4, 5}));
  coord.request_stop();
  coord.join(threads, 10s);
  EXPECT_THROW(add_queue_runner(g, QueueRunner()), InvalidArgumentError);
}

TEST(QueueRunnerTest, SessionCloseEndsThreadsQuietly) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32});
  auto size = q.size();
  Session s(g);
  QueueRunner qr(q, {q.enqueue({ops::constant(g, 1.f)}), q.enqueue({ops::constant(g, 2.f)})});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord);
  ASSERT_TRUE(tessera::testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 2; }));
  s.close();  // the blocked enqueues end with CancelledError; closing the queue then fails too
  coord.request_stop();
  coord.join(threads, 10s);  // nothing raised, nothing escaped a thread
  EXPECT_TRUE(qr.exceptions().empty());
}

TEST(QueueRunnerTest, ErrorWithCoordinatorLetsConsumersDrain) {
  Graph g;
  Session s(g);
  Source src(g, s, {1, 2});
  FIFOQueue q(g, 10, {DType::Float32});
  auto unfed = ops::placeholder(g, DType::Float32, Shape{}, "unfed");
  // One op feeds the queue, the other fails at once.
  QueueRunner qr(q, {q.enqueue({src.next()}), q.enqueue({unfed})});
  Coordinator coord;
  auto threads = qr.create_threads(s, &coord);
  EXPECT_THROW(coord.join(threads, 10s), InvalidArgumentError);
  // The queue was closed: a consumer drains what arrived, then sees OutOfRangeError.
  auto got = drain(s, q);
  EXPECT_LE(got.size(), 2u);
}

TEST(QueueRunnerTest, ManyEnqueueThreadsMoveEveryElementOnce) {
  for (int n : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(n);
    Graph g;
    Session s(g);
    std::vector<float> values(200);
    for (int i = 0; i < 200; ++i) values[i] = static_cast<float>(i);
    Source src(g, s, values);
    FIFOQueue q(g, 4, {DType::Float32});
    std::vector<Operation> enqueues;
    for (int i = 0; i < n; ++i) enqueues.push_back(q.enqueue({src.next()}));
    QueueRunner qr(q, enqueues);
    Coordinator coord;
    auto threads = qr.create_threads(s, &coord);
    EXPECT_EQ(threads.size(), static_cast<std::size_t>(n + 1));
    auto got = drain(s, q);  // ends when the last runner thread closed the queue
    coord.request_stop();
    coord.join(threads, 10s);
    std::multiset<float> seen(got.begin(), got.end());
    EXPECT_EQ(seen.size(), values.size());
    EXPECT_EQ(std::set<float>(got.begin(), got.end()).size(), values.size());
  }
}

}  // namespace
}  // namespace tessera::train
