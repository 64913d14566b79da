// FIFOQueue through sessions: the behaviours of TensorFlow's fifo_queue_test.py, plus timeouts,
// session close and a small inter-op pool.
//
// Some tests need an op to be blocked in the queue before the next step. Where the queue shows
// it (a dequeue_many holding elements empties the queue; an enqueue_many pushes what fits) the
// test waits for that; otherwise it gives the blocked op kSettle to reach the queue, as
// TensorFlow's tests do.
#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "core/half.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
constexpr auto kSettle = 100ms;

Output fconst(Graph& g, std::vector<float> v) { return ops::constant(g, Tensor::vector<float>(std::move(v))); }
Output iconst(Graph& g, std::vector<int32_t> v) { return ops::constant(g, Tensor::vector<int32_t>(std::move(v))); }

float fscalar(Session& s, const Output& o) { return s.run(o).scalar<float>(); }
std::vector<float> fvec(Session& s, const Output& o) { return s.run(o).to_vector<float>(); }

// Runs `fn` on a thread; get() returns its exception, if any, as a future would.
std::future<void> async(std::function<void()> fn) { return std::async(std::launch::async, std::move(fn)); }

bool ready(std::future<void>& f) { return f.wait_for(0ms) == std::future_status::ready; }

// Runs `blocked` on a thread and, once it waits in `q` (when `waiting` holds; without `waiting`,
// after kSettle), closes `q` and joins the thread: what a close does to an op waiting in the queue.
void close_when_waiting(Session& s, FIFOQueue& q, const std::function<void()>& blocked,
                        const std::function<bool()>& waiting = nullptr) {
  auto thread = async(blocked);
  if (waiting) {
    ASSERT_TRUE(testing::wait_until(waiting));
  } else {
    std::this_thread::sleep_for(kSettle);
  }
  s.run(q.close());
  thread.get();
}

// A float queue of capacity 4 that the first step filled with `fill`, and `blocking` (an enqueue
// `make_blocking` builds on it) started on a thread, where it waits for room.
struct BlockedEnqueue {
  Graph g;
  FIFOQueue q{g, 4, {DType::Float32}};
  Output deq = q.dequeue()[0];
  Output size = q.size();
  Output closed = q.is_closed();
  Session s{g};
  std::future<void> producer;

  BlockedEnqueue(std::vector<float> fill, const std::function<Operation(Graph&, FIFOQueue&)>& make_blocking) {
    s.run(q.enqueue_many({fconst(g, std::move(fill))}));
    Operation blocking = make_blocking(g, q);
    producer = async([this, blocking] { s.run(blocking); });
  }
};

Operation enqueue_50(Graph& g, FIFOQueue& q) { return q.enqueue({ops::constant(g, 50.f)}); }
Operation enqueue_50_60(Graph& g, FIFOQueue& q) { return q.enqueue_many({fconst(g, {50, 60})}); }

// ---- Graph construction ----

TEST(QueueTest, Constructor) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {}, "", "Q");
  EXPECT_EQ(q.op().type(), "FIFOQueue");
  EXPECT_EQ(q.name(), "Q");
  EXPECT_EQ(q.capacity(), 10);
  EXPECT_EQ(q.dtypes(), std::vector<DType>{DType::Float32});
  EXPECT_TRUE(q.shapes().empty());
  EXPECT_EQ(&q.graph(), &g);
  FIFOQueue q2(g, 5, {DType::Int32, DType::Float32}, {Shape{1, 1, 2, 3}, Shape{5, 8}}, "foo");
  EXPECT_EQ(q2.name(), "fifo_queue");
  EXPECT_EQ(q2.shapes()[1], (Shape{5, 8}));
  FIFOQueue copy = q2;  // a handle: same queue
  EXPECT_EQ(copy.op(), q2.op());
}

TEST(QueueTest, ConstructorRejectsBadArguments) {
  Graph g;
  EXPECT_THROW_MSG(FIFOQueue(g, 10, {}), InvalidArgumentError, "component type");
  EXPECT_THROW_MSG(FIFOQueue(g, 10, {DType::Float32}, {Shape{}, Shape{}}), InvalidArgumentError, "2 shapes");
  FIFOQueue null_queue;
  EXPECT_THROW(null_queue.dequeue(), InvalidArgumentError);
}

TEST(QueueTest, OpsAreNamedAfterTheQueueAndPlacedWithIt) {
  Graph g;
  FIFOQueue q = [&] {
    auto scope = g.device("/cpu:0");
    return FIFOQueue(g, 10, {DType::Float32}, {Shape{}}, "", "q");
  }();
  auto deq = q.dequeue()[0];
  EXPECT_EQ(deq.op().name(), "q_Dequeue");
  EXPECT_EQ(deq.op().type(), "QueueDequeue");
  EXPECT_EQ(q.enqueue({ops::constant(g, 1.0f)}).name(), "q_enqueue");
  EXPECT_EQ(q.close().name(), "q_Close");
  EXPECT_EQ(q.size().op().name(), "q_Size");
  EXPECT_EQ(deq.op().device(), q.op().device());
  EXPECT_FALSE(q.op().device().empty());
}

TEST(QueueTest, BuildTimeDtypeErrorNamesOpAndBothDtypes) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32, DType::Float32}, {Shape{}, Shape{}}, "", "q");
  auto a = ops::placeholder(g, DType::Int32);
  auto b = ops::placeholder(g, DType::Int32);
  try {
    q.enqueue({a, b}, "bad_enqueue");
    ADD_FAILURE() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bad_enqueue"), std::string::npos) << m;
    EXPECT_NE(m.find("int32"), std::string::npos) << m;
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
  }
  EXPECT_THROW(q.enqueue_many({a, b}), InvalidArgumentError);
  EXPECT_THROW_MSG(q.enqueue({a}), InvalidArgumentError, "2 components");
}

TEST(QueueTest, BuildTimeShapeErrors) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{3, 2}});
  Session s(g);
  s.run(q.enqueue({ops::constant(g, Tensor::zeros(DType::Float32, {3, 2}))}));
  EXPECT_THROW_MSG(q.enqueue({ops::constant(g, Tensor::zeros(DType::Float32, {2, 3}))}),
                   InvalidArgumentError, "[3,2]");
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 1);

  FIFOQueue q2(g, 10, {DType::Int32, DType::Int32}, {Shape{}, Shape{2}});
  EXPECT_THROW(q2.enqueue({iconst(g, {1, 2}), iconst(g, {2, 2})}), InvalidArgumentError);
  EXPECT_THROW(q2.enqueue_many({ops::constant(g, 7), ops::constant(g, Tensor::zeros(DType::Int32, {3, 2}))}),
               InvalidArgumentError);

  FIFOQueue q3(g, 10, {DType::Int32, DType::Int32, DType::Int32}, {Shape{}, Shape{}, Shape{}});
  EXPECT_THROW_MSG(q3.enqueue_many({iconst(g, {1, 2, 3}), iconst(g, {1, 2}), iconst(g, {1, 2, 3})}),
                   InvalidArgumentError, "dimension 0");
  EXPECT_THROW(q3.enqueue_many({iconst(g, {1, 2, 3}), iconst(g, {1, 2}), ops::placeholder(g, DType::Int32)}),
               InvalidArgumentError);
  // Shapes of the outputs are inferred from the queue.
  auto many = q2.dequeue_many(4);
  EXPECT_EQ(many[0].shape(), Shape{4});
  EXPECT_EQ(many[1].shape(), (Shape{4, 2}));
  EXPECT_EQ(q2.dequeue_up_to(4)[1].shape(), (Shape{-1, 2}));
  EXPECT_EQ(q2.dequeue()[1].shape(), Shape{2});
  EXPECT_TRUE(FIFOQueue(g, 1, {DType::Float32}).dequeue_many(3)[0].shape().unknown_rank());
  EXPECT_THROW(q2.dequeue_many(-1), InvalidArgumentError);
}

// ---- Basic runs ----

TEST(QueueTest, EnqueueAndDequeueInOrder) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  std::vector<Operation> enqueues;
  for (float v : {10.f, 20.f, 30.f}) enqueues.push_back(q.enqueue({ops::constant(g, v)}));
  auto deq = q.dequeue()[0];
  Session s(g);
  for (auto& e : enqueues) s.run(e);
  for (float v : {10.f, 20.f, 30.f}) EXPECT_EQ(fscalar(s, deq), v);
}

TEST(QueueTest, MultiComponentEnqueueAndDequeue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32, DType::Float32});
  auto x = ops::placeholder(g, DType::Int32, Shape{});
  auto y = ops::placeholder(g, DType::Float32, Shape{});
  auto enq = q.enqueue({x, y});
  auto deq = q.dequeue();
  Session s(g);
  for (int i = 1; i <= 3; ++i) s.run(enq, {{x, Tensor::scalar(int32_t(5 * i))}, {y, Tensor::scalar(10.f * i)}});
  for (int i = 1; i <= 3; ++i) {
    auto r = s.run({deq[0], deq[1]});
    EXPECT_EQ(r[0].scalar<int32_t>(), 5 * i);
    EXPECT_EQ(r[1].scalar<float>(), 10.f * i);
  }
}

TEST(QueueTest, SizeAndIsClosed) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto enq = q.enqueue({ops::constant(g, 10.f)});
  auto deq = q.dequeue()[0];
  auto size = q.size();
  auto closed = q.is_closed();
  EXPECT_EQ(size.dtype(), DType::Int32);
  EXPECT_EQ(size.shape(), Shape{});
  EXPECT_EQ(closed.dtype(), DType::Bool);
  Session s(g);
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 0);
  s.run(enq);
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 1);
  s.run(deq.op());
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 0);
  EXPECT_FALSE(s.run(closed).scalar<bool>());
  s.run(q.close());
  EXPECT_TRUE(s.run(closed).scalar<bool>());
}

TEST(QueueTest, EnqueueManyTwice) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto enq = q.enqueue_many({fconst(g, {10, 20, 30, 40})});
  auto deq = q.dequeue()[0];
  Session s(g);
  s.run(enq);
  s.run(enq);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(fscalar(s, deq), 10.f * (i % 4 + 1));
}

TEST(QueueTest, EmptyEnqueueMany) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto enq = q.enqueue_many({ops::constant(g, Tensor::zeros(DType::Float32, {0, 2, 3}))});
  Session s(g);
  s.run(enq);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueTest, EmptyDequeueMany) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue({ops::constant(g, 10.f)});
  auto deq = q.dequeue_many(0)[0];
  Session s(g);
  EXPECT_EQ(s.run(deq).shape(), Shape{0});
  s.run(enq);
  EXPECT_EQ(s.run(deq).shape(), Shape{0});
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 1);
}

TEST(QueueTest, EmptyDequeueManyWithoutShapes) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto deq = q.dequeue_many(0)[0];
  Session s(g);
  EXPECT_THROW_MSG(s.run(deq), InvalidArgumentError, "shapes");
}

TEST(QueueTest, MultiEnqueueManyAndDequeueMany) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32, DType::Int32}, {Shape{}, Shape{2}});
  std::vector<float> floats{10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  std::vector<int32_t> ints(20);
  std::iota(ints.begin(), ints.end(), 1);
  auto enq = q.enqueue_many({fconst(g, floats), ops::constant(g, Tensor::matrix<int32_t>(ints, 10, 2))});
  auto many = q.dequeue_many(4);
  auto single = q.dequeue();
  Session s(g);
  s.run(enq);
  for (int b = 0; b < 2; ++b) {
    auto r = s.run({many[0], many[1]});
    EXPECT_EQ(r[0].shape(), Shape{4});
    EXPECT_EQ(r[1].shape(), (Shape{4, 2}));
    EXPECT_EQ(r[0].to_vector<float>(), std::vector<float>(floats.begin() + 4 * b, floats.begin() + 4 * b + 4));
    EXPECT_EQ(r[1].to_vector<int32_t>(), std::vector<int32_t>(ints.begin() + 8 * b, ints.begin() + 8 * b + 8));
  }
  auto r = s.run({single[0], single[1]});
  EXPECT_EQ(r[0].scalar<float>(), 90.f);
  EXPECT_EQ(r[1].to_vector<int32_t>(), (std::vector<int32_t>{17, 18}));
  EXPECT_EQ(r[1].shape(), Shape{2});
}

TEST(QueueTest, HighDimension) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32}, {Shape{4, 4, 4, 4}});
  std::vector<int32_t> elems;
  for (int x = 0; x < 10; ++x) elems.insert(elems.end(), 256, x);
  Tensor t = Tensor::from_vector<int32_t>(elems, {10, 4, 4, 4, 4});
  auto enq = q.enqueue_many({ops::constant(g, t)});
  auto deq = q.dequeue_many(10)[0];
  Session s(g);
  s.run(enq);
  EXPECT_TRUE(s.run(deq).equals(t));
}

TEST(QueueTest, AllDtypesRoundTrip) {
  Graph g;
  std::vector<DType> dtypes{DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool,
                            DType::Float16, DType::BFloat16};
  FIFOQueue q(g, 32, dtypes, std::vector<Shape>(dtypes.size(), Shape{4, 8}));
  std::mt19937 rng(3);
  std::vector<Tensor> inputs;
  std::vector<Output> consts;
  const Shape shape{32, 4, 8};
  auto gen = [&](int) { return static_cast<int>(rng() % 21) - 10; };
  std::vector<int> base(32 * 4 * 8);
  for (DType dt : dtypes) {
    for (int i = 0; i < static_cast<int>(base.size()); ++i) base[i] = gen(i);
    Tensor t;
    switch (dt) {
      case DType::Float32: t = Tensor::from_vector<float>(std::vector<float>(base.begin(), base.end()), shape); break;
      case DType::Float64: t = Tensor::from_vector<double>(std::vector<double>(base.begin(), base.end()), shape); break;
      case DType::Int32: t = Tensor::from_vector<int32_t>(std::vector<int32_t>(base.begin(), base.end()), shape); break;
      case DType::Int64: t = Tensor::from_vector<int64_t>(std::vector<int64_t>(base.begin(), base.end()), shape); break;
      case DType::Bool: {
        std::vector<bool> b;
        for (int v : base) b.push_back(v > 0);
        t = Tensor::from_vector<bool>(b, shape);
        break;
      }
      case DType::Float16:
        t = Tensor::from_vector<internal::float16_t>(
            std::vector<internal::float16_t>(base.begin(), base.end()), shape);
        break;
      case DType::BFloat16:
        t = Tensor::from_vector<internal::bfloat16_t>(
            std::vector<internal::bfloat16_t>(base.begin(), base.end()), shape);
        break;
      case DType::String:  // not in `dtypes`: string queues are tests/string_input_test.cc's
        FAIL() << "no values made for String";
    }
    inputs.push_back(t);
    consts.push_back(ops::constant(g, t));
  }
  auto enq = q.enqueue_many(consts);
  auto out = q.dequeue_many(32);
  Session s(g);
  s.run(enq);
  auto r = s.run(out);
  for (std::size_t i = 0; i < dtypes.size(); ++i) EXPECT_TRUE(r[i].equals(inputs[i])) << i;
}

TEST(QueueTest, RuntimeShapeMismatch) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32, DType::Int32}, {Shape{2, 2}, Shape{3, 3}});
  auto ok = ops::constant(g, Tensor::zeros(DType::Int32, {2, 2}));
  auto bad = ops::placeholder(g, DType::Int32);
  auto enq = q.enqueue({ok, bad});
  Session s(g);
  EXPECT_THROW_MSG(s.run(enq, {{bad, Tensor::zeros(DType::Int32, {3, 4})}}), InvalidArgumentError,
                   "Expected [3,3], got [3,4]");
  auto ok_many = ops::constant(g, Tensor::zeros(DType::Int32, {2, 2, 2}));
  auto enq_many = q.enqueue_many({ok_many, bad});
  EXPECT_THROW_MSG(s.run(enq_many, {{bad, Tensor::zeros(DType::Int32, {2, 3, 4})}}), InvalidArgumentError,
                   "Shape mismatch in tuple component 1. Expected [2,3,3], got [2,3,4]");
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueTest, DequeueManyWithoutShapesNeedsElementsOfOneShape) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto x = ops::placeholder(g, DType::Float32);
  auto enq = q.enqueue({x});
  auto many = q.dequeue_many(2)[0];
  Session s(g);
  s.run(enq, {{x, Tensor::vector<float>({1, 2})}});
  s.run(enq, {{x, Tensor::vector<float>({3, 4})}});
  Tensor t = s.run(many);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  s.run(enq, {{x, Tensor::vector<float>({1, 2})}});
  s.run(enq, {{x, Tensor::vector<float>({3})}});
  EXPECT_THROW_MSG(s.run(many), InvalidArgumentError, "shape");
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 2);  // left queued
}

TEST(QueueTest, DoesNotLoseValue) {
  Graph g;
  FIFOQueue q(g, 1, {DType::Float32});
  auto size = q.size();
  Session s(g);
  s.run(q.enqueue({ops::constant(g, 10.f)}));
  for (int i = 0; i < 500; ++i) ASSERT_EQ(s.run(size).scalar<int32_t>(), 1);
}

// ---- Blocking ----

TEST(QueueTest, EnqueueAndBlockingDequeue) {
  Graph g;
  FIFOQueue q(g, 3, {DType::Float32});
  auto x = ops::placeholder(g, DType::Float32, Shape{});
  auto enq = q.enqueue({x});
  auto deq = q.dequeue()[0];
  Session s(g);
  std::vector<float> results;
  auto consumer = async([&] {
    for (int i = 0; i < 3; ++i) results.push_back(fscalar(s, deq));
  });
  std::this_thread::sleep_for(kSettle);  // let the dequeue block first (coverage only)
  for (float v : {10.f, 20.f, 30.f}) s.run(enq, {{x, Tensor::scalar(v)}});
  consumer.get();
  EXPECT_EQ(results, (std::vector<float>{10, 20, 30}));
}

TEST(QueueTest, BlockingDequeueManyCompletesWhenEnoughArrive) {
  Graph g;
  testing::FedQueue fed(g, 10, DType::Float32);
  FIFOQueue& q = fed.queue;
  auto deq = q.dequeue_many(4)[0];
  auto size = q.size();
  Session s(g);
  std::vector<float> got;
  auto consumer = async([&] { got = fvec(s, deq); });
  for (float v : {10.f, 20.f, 30.f}) {
    s.run(fed.enqueue, fed.feed(Tensor::scalar(v)));
    // The waiting dequeue_many takes each element as it arrives.
    ASSERT_TRUE(testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 0; }));
    EXPECT_FALSE(ready(consumer));
  }
  s.run(fed.enqueue, fed.feed(Tensor::scalar(40.f)));
  consumer.get();
  EXPECT_EQ(got, (std::vector<float>{10, 20, 30, 40}));
}

TEST(QueueTest, BigDequeueManyLargerThanCapacity) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Int32}, {Shape{}});
  auto x = ops::placeholder(g, DType::Int32, Shape{});
  auto enq = q.enqueue({x});
  auto deq = q.dequeue_many(4)[0];
  Session s(g);
  std::vector<int32_t> got;
  auto consumer = async([&] { got = s.run(deq).to_vector<int32_t>(); });
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(ready(consumer));
    s.run(enq, {{x, Tensor::scalar(i)}});  // never blocks: the dequeue_many holds what it took
  }
  consumer.get();
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(QueueTest, BigEnqueueManyLargerThanCapacity) {
  Graph g;
  FIFOQueue q(g, 5, {DType::Int32}, {Shape{}});
  auto enq = q.enqueue_many({iconst(g, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})});
  auto deq = q.dequeue()[0];
  auto size = q.size();
  Session s(g);
  auto producer = async([&] { s.run(enq); });
  ASSERT_TRUE(testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 5; }));
  std::vector<int32_t> results;
  for (int i = 0; i < 4; ++i) results.push_back(s.run(deq).scalar<int32_t>());
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 5);  // refilled from the pending rows
  EXPECT_FALSE(ready(producer));
  results.push_back(s.run(deq).scalar<int32_t>());  // the last pending row goes in
  ASSERT_EQ(producer.wait_for(10s), std::future_status::ready);
  producer.get();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(s.run(size).scalar<int32_t>(), 5 - i);
    results.push_back(s.run(deq).scalar<int32_t>());
  }
  EXPECT_EQ(results, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST(QueueTest, BlockingEnqueueToFullQueue) {
  BlockedEnqueue b({10, 20, 30, 40}, enqueue_50);
  std::this_thread::sleep_for(kSettle);
  EXPECT_FALSE(ready(b.producer));
  for (float v : {10.f, 20.f, 30.f, 40.f}) EXPECT_EQ(fscalar(b.s, b.deq), v);
  EXPECT_EQ(fscalar(b.s, b.deq), 50.f);
  b.producer.get();
}

TEST(QueueTest, BlockingEnqueueManyToFullQueue) {
  BlockedEnqueue b({10, 20, 30, 40}, enqueue_50_60);
  for (float v : {10.f, 20.f, 30.f, 40.f, 50.f, 60.f}) EXPECT_EQ(fscalar(b.s, b.deq), v);
  b.producer.get();
}

// ---- Close ----

TEST(QueueTest, DequeueFromClosedQueueDrainsThenOutOfRange) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {}, "", "q");
  auto enq = q.enqueue_many({fconst(g, {10, 20, 30, 40})});
  auto deq = q.dequeue()[0];
  Session s(g);
  s.run(enq);
  s.run(q.close());
  for (float v : {10.f, 20.f, 30.f, 40.f}) EXPECT_EQ(fscalar(s, deq), v);
  try {
    s.run(deq);
    ADD_FAILURE() << "expected OutOfRangeError";
  } catch (const OutOfRangeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("is closed and has insufficient elements"), std::string::npos) << m;
    EXPECT_NE(m.find("q_Dequeue"), std::string::npos) << m;  // names the op
    EXPECT_NE(m.find("requested 1, current size 0"), std::string::npos) << m;
  }
}

TEST(QueueTest, BlockingDequeueFromClosedQueue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto enq = q.enqueue_many({fconst(g, {10, 20, 30, 40})});
  auto deq = q.dequeue()[0];
  auto close = q.close();
  Session s(g);
  s.run(enq);
  auto consumer = async([&] {
    for (float v : {10.f, 20.f, 30.f, 40.f}) EXPECT_EQ(fscalar(s, deq), v);
    EXPECT_THROW_MSG(s.run(deq), OutOfRangeError, "is closed and has insufficient");
  });
  std::this_thread::sleep_for(kSettle);
  s.run(close);
  consumer.get();
}

TEST(QueueTest, BlockingDequeueFromClosedEmptyQueue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto deq = q.dequeue()[0];
  Session s(g);
  close_when_waiting(s, q, [&] { EXPECT_THROW_MSG(s.run(deq), OutOfRangeError, "is closed"); });
}

TEST(QueueTest, BlockingDequeueManyFromClosedQueue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue_many({fconst(g, {10, 20, 30, 40})});
  auto deq = q.dequeue_many(4)[0];
  auto size = q.size();
  Session s(g);
  s.run(enq);
  // The second dequeue_many is waiting once the queue is empty... or about to.
  close_when_waiting(
      s, q,
      [&] {
        EXPECT_EQ(fvec(s, deq), (std::vector<float>{10, 20, 30, 40}));
        EXPECT_THROW_MSG(s.run(deq), OutOfRangeError, "is closed and has insufficient");
      },
      [&] { return s.run(size).scalar<int32_t>() == 0; });
}

TEST(QueueTest, EnqueueManyLargerThanCapacityWithConcurrentDequeueMany) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue_many({fconst(g, {10, 20, 30, 40})});
  auto deq = q.dequeue_many(3)[0];
  auto cleanup = q.dequeue()[0];
  auto size = q.size();
  Session s(g);
  auto producer = async([&] { s.run(enq); });
  auto consumer = async([&] {
    EXPECT_EQ(fvec(s, deq), (std::vector<float>{10, 20, 30}));
    EXPECT_THROW(s.run(deq), OutOfRangeError);
    EXPECT_EQ(fscalar(s, cleanup), 40.f);
  });
  producer.get();
  // The second dequeue_many holds 40 once it waits (size 0); close makes it give 40 back.
  ASSERT_TRUE(testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 0; }));
  s.run(q.close());
  consumer.get();
}

TEST(QueueTest, ClosedBlockingDequeueManyRestoresPartialBatch) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32, DType::Float32}, {Shape{}, Shape{}});
  auto enq = q.enqueue_many({fconst(g, {1, 2, 3}), fconst(g, {10, 20, 30})});
  auto many = q.dequeue_many(4);
  auto cleanup = q.dequeue();
  auto size = q.size();
  Session s(g);
  s.run(enq);
  close_when_waiting(
      s, q, [&] { EXPECT_THROW(s.run({many[0], many[1]}), OutOfRangeError); },
      [&] { return s.run(size).scalar<int32_t>() == 0; });
  for (float a : {1.f, 2.f, 3.f}) {
    auto r = s.run({cleanup[0], cleanup[1]});
    EXPECT_EQ(r[0].scalar<float>(), a);
    EXPECT_EQ(r[1].scalar<float>(), 10 * a);
  }
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 0);
}

TEST(QueueTest, BlockingDequeueManyFromClosedEmptyQueue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto deq = q.dequeue_many(4)[0];
  Session s(g);
  close_when_waiting(s, q, [&] { EXPECT_THROW_MSG(s.run(deq), OutOfRangeError, "requested 4, current size 0"); });
}

TEST(QueueTest, DequeueUpTo) {
  Graph g;
  testing::FedQueue fed(g, 10, DType::Float32);
  FIFOQueue& q = fed.queue;
  auto up_to = q.dequeue_up_to(3)[0];
  auto size = q.size();
  Session s(g);
  for (float v : {1.f, 2.f, 3.f, 4.f}) s.run(fed.enqueue, fed.feed(Tensor::scalar(v)));
  EXPECT_EQ(fvec(s, up_to), (std::vector<float>{1, 2, 3}));  // open: a full batch
  // Open with fewer than n: waits like dequeue_many (holding what is there).
  std::vector<float> rest;
  auto consumer = async([&] { rest = fvec(s, up_to); });
  ASSERT_TRUE(testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 0; }));
  EXPECT_FALSE(ready(consumer));
  s.run(fed.enqueue, fed.feed(Tensor::scalar(5.f)));
  EXPECT_FALSE(ready(consumer));
  s.run(q.close());  // closed: returns what is left
  consumer.get();
  EXPECT_EQ(rest, (std::vector<float>{4, 5}));
  EXPECT_THROW_MSG(s.run(up_to), OutOfRangeError, "is closed");
}

TEST(QueueTest, DequeueUpToOnClosedQueueReturnsTheRest) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32, DType::Float32}, {Shape{}, Shape{2}});
  auto enq = q.enqueue_many({iconst(g, {1, 2}), ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2))});
  auto up_to = q.dequeue_up_to(5);
  Session s(g);
  s.run(enq);
  s.run(q.close());
  auto r = s.run({up_to[0], up_to[1]});
  EXPECT_EQ(r[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r[1].shape(), (Shape{2, 2}));
}

TEST(QueueTest, EnqueueToClosedQueueIsCancelled) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {}, "", "q");
  auto enq = q.enqueue({ops::constant(g, 10.f)});
  auto enq_many = q.enqueue_many({fconst(g, {1, 2})});
  Session s(g);
  s.run(enq);
  s.run(q.close());
  EXPECT_THROW_MSG(s.run(enq), CancelledError, "queue 'q' is closed");
  EXPECT_THROW_MSG(s.run(enq_many), CancelledError, "is closed");
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 1);
}

TEST(QueueTest, SecondCloseIsCancelled) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto close = q.close();
  Session s(g);
  s.run(close);
  EXPECT_THROW_MSG(s.run(close), CancelledError, "already closed");
  s.run(q.close(true));  // closing and cancelling is idempotent
}

TEST(QueueTest, BlockingEnqueueManyBeforeClose) {
  // The producer succeeds once the dequeue makes room.
  BlockedEnqueue b({10, 20, 30}, enqueue_50_60);
  Session& s = b.s;
  // 50 went in; 60 waits.
  ASSERT_TRUE(testing::wait_until([&] { return s.run(b.size).scalar<int32_t>() == 4; }));
  auto closer = async([&] { s.run(b.q.close()); });
  std::this_thread::sleep_for(kSettle);
  // The close waits behind the pending enqueue.
  EXPECT_FALSE(ready(closer));
  EXPECT_FALSE(s.run(b.closed).scalar<bool>());
  EXPECT_EQ(fscalar(s, b.deq), 10.f);  // unblocks both
  b.producer.get();
  closer.get();
  EXPECT_TRUE(s.run(b.closed).scalar<bool>());
  for (float v : {20.f, 30.f, 50.f, 60.f}) EXPECT_EQ(fscalar(s, b.deq), v);
  EXPECT_EQ(s.run(b.size).scalar<int32_t>(), 0);
}

TEST(QueueTest, BlockingEnqueueBeforeClose) {
  BlockedEnqueue b({10, 20, 30, 40}, enqueue_50);
  std::this_thread::sleep_for(kSettle);  // the enqueue must block before the close is issued
  auto closer = async([&] { b.s.run(b.q.close()); });
  EXPECT_EQ(fscalar(b.s, b.deq), 10.f);
  b.producer.get();
  closer.get();
  for (float v : {20.f, 30.f, 40.f, 50.f}) EXPECT_EQ(fscalar(b.s, b.deq), v);
}

TEST(QueueTest, CloseWithCancelPendingEnqueues) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32});
  auto blocking = q.enqueue_many({fconst(g, {1, 2, 3})});
  auto deq = q.dequeue()[0];
  auto size = q.size();
  Session s(g);
  auto producer = async([&] { EXPECT_THROW_MSG(s.run(blocking), CancelledError, "is closed"); });
  ASSERT_TRUE(testing::wait_until([&] { return s.run(size).scalar<int32_t>() == 2; }));
  s.run(q.close(/*cancel_pending_enqueues=*/true));
  producer.get();
  EXPECT_EQ(fscalar(s, deq), 1.f);
  EXPECT_EQ(fscalar(s, deq), 2.f);
  EXPECT_THROW(s.run(deq), OutOfRangeError);
}

// ---- Sharing ----

TEST(QueueTest, SharedQueueSameSession) {
  Graph g;
  FIFOQueue q1(g, 1, {DType::Float32}, {}, "shared_queue");
  FIFOQueue q2(g, 1, {DType::Float32}, {}, "shared_queue");
  auto s1 = q1.size();
  auto s2 = q2.size();
  Session s(g);
  s.run(q1.enqueue({ops::constant(g, 10.f)}));
  EXPECT_EQ(s.run(s1).scalar<int32_t>(), 1);
  EXPECT_EQ(s.run(s2).scalar<int32_t>(), 1);
  EXPECT_EQ(fscalar(s, q2.dequeue()[0]), 10.f);
  EXPECT_EQ(s.run(s1).scalar<int32_t>(), 0);
  s.run(q2.enqueue({ops::constant(g, 20.f)}));
  EXPECT_EQ(fscalar(s, q1.dequeue()[0]), 20.f);
}

TEST(QueueTest, IncompatibleSharedQueues) {
  Graph g;
  Session s(g);
  auto check = std::bind_front(testing::expect_share_refused, std::ref(s));
  check(FIFOQueue(g, 10, {DType::Float32}, {}, "q_a"), FIFOQueue(g, 15, {DType::Float32}, {}, "q_a"), "capacity");
  check(FIFOQueue(g, 10, {DType::Float32}, {}, "q_b"), FIFOQueue(g, 10, {DType::Int32}, {}, "q_b"),
        "component types");
  check(FIFOQueue(g, 10, {DType::Float32}, {}, "q_c"),
        FIFOQueue(g, 10, {DType::Float32}, {Shape{1, 1, 2, 3}}, "q_c"), "component shapes");
  check(FIFOQueue(g, 10, {DType::Float32}, {Shape{1, 1, 2, 3}}, "q_d"),
        FIFOQueue(g, 10, {DType::Float32}, {Shape{1, 1, 2, 4}}, "q_d"), "component shapes");
  check(FIFOQueue(g, 10, {DType::Float32}, {}, "q_f"), FIFOQueue(g, 10, {DType::Float32, DType::Int32}, {}, "q_f"),
        "component types");
}

TEST(QueueTest, EachSessionHasItsOwnQueue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto enq = q.enqueue({ops::constant(g, 1.f)});
  Session a(g), b(g);
  a.run(enq);
  a.run(enq);
  EXPECT_EQ(a.run(q.size()).scalar<int32_t>(), 2);
  EXPECT_EQ(b.run(q.size()).scalar<int32_t>(), 0);
}

// ---- Cancellation: timeouts and session close ----

TEST(QueueTest, TimeoutEndsABlockedDequeueAndLeavesTheSessionUsable) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  auto deq = q.dequeue()[0];
  auto enq = q.enqueue({ops::constant(g, 7.f)});
  Session s(g);
  RunOptions opts;
  opts.timeout = 50ms;
  EXPECT_THROW(s.run({deq}, {}, {}, opts), DeadlineExceededError);
  // The timed-out dequeue left the queue: the next element goes to the next dequeue.
  s.run(enq);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 1);
  EXPECT_EQ(fscalar(s, deq), 7.f);
}

TEST(QueueTest, TimeoutEndsABlockedEnqueue) {
  Graph g;
  FIFOQueue q(g, 1, {DType::Float32});
  auto enq = q.enqueue({ops::constant(g, 1.f)});
  auto enq_many = q.enqueue_many({fconst(g, {1, 2})});
  auto deq = q.dequeue()[0];
  Session s(g);
  s.run(enq);
  RunOptions opts;
  opts.timeout = 50ms;
  EXPECT_THROW(s.run({}, {}, {enq}, opts), DeadlineExceededError);
  EXPECT_THROW(s.run({}, {}, {enq_many}, opts), DeadlineExceededError);
  EXPECT_EQ(fscalar(s, deq), 1.f);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueTest, TimedOutDequeueManyGivesBackWhatItHeld) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue_many({fconst(g, {1, 2})});
  auto many = q.dequeue_many(3)[0];
  Session s(g);
  s.run(enq);
  RunOptions opts;
  opts.timeout = 50ms;
  EXPECT_THROW(s.run({many}, {}, {}, opts), DeadlineExceededError);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 2);
  EXPECT_EQ(fvec(s, q.dequeue_many(2)[0]), (std::vector<float>{1, 2}));
}

TEST(QueueTest, SessionCloseCancelsBlockedOperations) {
  Graph g;
  FIFOQueue empty(g, 5, {DType::Float32}, {Shape{}});
  auto deq = empty.dequeue()[0];
  auto deq_many = empty.dequeue_many(1)[0];
  FIFOQueue full(g, 5, {DType::Float32});
  auto fill = full.enqueue_many({fconst(g, {1, 2, 3, 4, 5})});
  auto enq = full.enqueue({ops::constant(g, 6.f)});
  auto enq_many = full.enqueue_many({fconst(g, {6})});
  Session s(g);
  s.run(fill);
  std::vector<std::future<void>> blocked;
  blocked.push_back(async([&] { EXPECT_THROW(s.run(deq), CancelledError); }));
  blocked.push_back(async([&] { EXPECT_THROW(s.run(deq_many), CancelledError); }));
  blocked.push_back(async([&] { EXPECT_THROW(s.run(enq), CancelledError); }));
  blocked.push_back(async([&] { EXPECT_THROW(s.run(enq_many), CancelledError); }));
  std::this_thread::sleep_for(kSettle);
  s.close();  // cancels the blocked operations (and any that had not started yet)
  for (auto& f : blocked) {
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    f.get();
  }
}

TEST(QueueTest, BlockedDequeuesDoNotStarveASmallPool) {
  Graph g;
  FIFOQueue q(g, 100, {DType::Float32});
  auto deq = q.dequeue()[0];
  auto x = ops::placeholder(g, DType::Float32, Shape{});
  auto enq = q.enqueue({x});
  auto y = ops::mul(x, ops::constant(g, 2.f));
  SessionOptions opts;
  opts.inter_op_threads = 2;
  Session s(g, opts);
  constexpr int kBlocked = 16;
  std::mutex mu;
  std::multiset<float> got;
  std::vector<std::future<void>> consumers;
  for (int i = 0; i < kBlocked; ++i) {
    consumers.push_back(async([&] {
      float v = fscalar(s, deq);
      std::lock_guard<std::mutex> l(mu);
      got.insert(v);
    }));
  }
  std::this_thread::sleep_for(kSettle);
  // Other runs keep progressing while 16 dequeues wait on a 2-thread pool.
  RunOptions bounded;
  bounded.timeout = 5s;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(s.run({y}, {{x, Tensor::scalar(float(i))}}, {}, bounded)[0].scalar<float>(), 2.f * i);
  }
  for (int i = 0; i < kBlocked; ++i) s.run({}, {{x, Tensor::scalar(float(i))}}, {enq}, bounded);
  for (auto& c : consumers) {
    ASSERT_EQ(c.wait_for(10s), std::future_status::ready);
    c.get();
  }
  std::multiset<float> want;
  for (int i = 0; i < kBlocked; ++i) want.insert(float(i));
  EXPECT_EQ(got, want);
}

// ---- Concurrency ----

TEST(QueueTest, ParallelEnqueueAndDequeue) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32});
  std::vector<Operation> enqueues;
  for (int i = 1; i <= 10; ++i) enqueues.push_back(q.enqueue({ops::constant(g, 10.f * i)}));
  auto deq = q.dequeue()[0];
  Session s(g);
  testing::run_threads(10, [&](int i) { s.run(enqueues[i]); });
  std::mutex mu;
  std::multiset<float> got;
  testing::run_threads(10, [&](int) {
    float v = fscalar(s, deq);
    std::lock_guard<std::mutex> l(mu);
    got.insert(v);
  });
  std::multiset<float> want;
  for (int i = 1; i <= 10; ++i) want.insert(10.f * i);
  EXPECT_EQ(got, want);
}

TEST(QueueTest, ParallelEnqueueManyAndDequeueMany) {
  Graph g;
  FIFOQueue q(g, 1000, {DType::Float32}, {Shape{}});
  std::vector<float> elems(100);
  for (int i = 0; i < 100; ++i) elems[i] = 10.f * i;
  auto enq = q.enqueue_many({fconst(g, elems)});
  auto deq_all = q.dequeue_many(1000)[0];
  auto deq_100 = q.dequeue_many(100)[0];
  Session s(g);
  testing::run_threads(10, [&](int) { s.run(enq); });
  auto all = fvec(s, deq_all);
  std::multiset<float> got(all.begin(), all.end()), want;
  for (int k = 0; k < 10; ++k) want.insert(elems.begin(), elems.end());
  EXPECT_EQ(got, want);
  // And back: 10 threads each take 100.
  testing::run_threads(10, [&](int) { s.run(enq); });
  std::mutex mu;
  got.clear();
  testing::run_threads(10, [&](int) {
    auto v = fvec(s, deq_100);
    std::lock_guard<std::mutex> l(mu);
    got.insert(v.begin(), v.end());
  });
  EXPECT_EQ(got, want);
}

TEST(QueueTest, MixtureOfEnqueueAndEnqueueMany) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32}, {Shape{}});
  auto one = ops::placeholder(g, DType::Int32, Shape{});
  auto many = ops::placeholder(g, DType::Int32, Shape{-1});
  auto enq = q.enqueue({one});
  auto enq_many = q.enqueue_many({many});
  auto deq = q.dequeue()[0];
  Session s(g);
  auto consumer = async([&] {
    for (int32_t i = 0; i < 250; ++i) ASSERT_EQ(s.run(deq).scalar<int32_t>(), i);
  });
  std::mt19937 rng(42);
  int32_t sent = 0;
  while (sent < 250) {
    if (rng() % 2) {
      s.run(enq, {{one, Tensor::scalar(sent)}});
      ++sent;
    } else {
      int32_t count = static_cast<int32_t>(rng() % (std::min(20, 250 - sent) + 1));
      std::vector<int32_t> v(count);
      std::iota(v.begin(), v.end(), sent);
      s.run(enq_many, {{many, Tensor::vector<int32_t>(v)}});
      sent += count;
    }
  }
  s.run(q.close());
  consumer.get();
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueTest, MixtureOfDequeueAndDequeueMany) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Int32}, {Shape{}});
  std::vector<int32_t> all(250);
  std::iota(all.begin(), all.end(), 0);
  auto enq = q.enqueue_many({iconst(g, all)});
  auto deq = q.dequeue()[0];
  std::map<int, Output> deq_many;
  for (int n = 0; n <= 20; ++n) deq_many[n] = q.dequeue_many(n)[0];
  Session s(g);
  auto producer = async([&] { s.run(enq); });
  std::mt19937 rng(7);
  int32_t taken = 0;
  while (taken < 250) {
    if (rng() % 2) {
      ASSERT_EQ(s.run(deq).scalar<int32_t>(), taken);
      ++taken;
    } else {
      int count = static_cast<int>(rng() % (std::min(20, 250 - taken) + 1));
      std::vector<int32_t> want(count);
      std::iota(want.begin(), want.end(), taken);
      ASSERT_EQ(s.run(deq_many[count]).to_vector<int32_t>(), want);
      taken += count;
    }
  }
  producer.get();
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

TEST(QueueTest, ConcurrentProducersAndConsumersLoseAndDuplicateNothing) {
  for (int threads : testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    Graph g;
    FIFOQueue q(g, 4, {DType::Int32}, {Shape{}});
    auto x = ops::placeholder(g, DType::Int32, Shape{});
    auto enq = q.enqueue({x});
    auto deq = q.dequeue()[0];
    auto deq_many = q.dequeue_many(3)[0];
    Session s(g);
    constexpr int kPerThread = 150;  // a multiple of 3: consumers alternate dequeue and dequeue_many(3)
    std::mutex mu;
    std::multiset<int32_t> got;
    testing::run_threads(2 * threads, [&](int t) {
      if (t < threads) {
        for (int i = 0; i < kPerThread; ++i) s.run(enq, {{x, Tensor::scalar(int32_t(t * kPerThread + i))}});
        return;
      }
      int taken = 0;
      while (taken < kPerThread) {
        std::vector<int32_t> v;
        if (taken % 2 == 0 && kPerThread - taken >= 3) {
          v = s.run(deq_many).to_vector<int32_t>();
        } else {
          v = {s.run(deq).scalar<int32_t>()};
        }
        taken += static_cast<int>(v.size());
        std::lock_guard<std::mutex> l(mu);
        got.insert(v.begin(), v.end());
      }
    });
    ASSERT_EQ(got.size(), static_cast<std::size_t>(threads * kPerThread));
    std::set<int32_t> unique(got.begin(), got.end());
    EXPECT_EQ(unique.size(), got.size());
    EXPECT_EQ(*unique.begin(), 0);
    EXPECT_EQ(*unique.rbegin(), threads * kPerThread - 1);
    EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
  }
}

TEST(QueueTest, PerProducerOrderIsKept) {
  for (int threads : testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    Graph g;
    FIFOQueue q(g, 8, {DType::Int32, DType::Int32}, {Shape{}, Shape{}});
    auto who = ops::placeholder(g, DType::Int32, Shape{});
    auto seq = ops::placeholder(g, DType::Int32, Shape{});
    auto enq = q.enqueue({who, seq});
    auto deq = q.dequeue();
    Session s(g);
    constexpr int kPerThread = 100;
    auto producers = async([&] {
      testing::run_threads(threads, [&](int t) {
        for (int i = 0; i < kPerThread; ++i) s.run(enq, {{who, Tensor::scalar(int32_t(t))}, {seq, Tensor::scalar(int32_t(i))}});
      });
    });
    std::vector<int32_t> next(threads, 0);
    for (int i = 0; i < threads * kPerThread; ++i) {
      auto r = s.run({deq[0], deq[1]});
      int32_t t = r[0].scalar<int32_t>();
      ASSERT_EQ(r[1].scalar<int32_t>(), next[t]++);  // FIFO per producer
    }
    producers.get();
  }
}

}  // namespace
}  // namespace tessera
