// The queue resource on its own, without a session: ordering, blocking as pending attempts,
// close, partial batches, cancellation and concurrent producers and consumers.
#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "core/cancellation.h"
#include "kernels/fifo_queue.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using Tuple = FIFOQueueResource::Tuple;

std::shared_ptr<FIFOQueueResource> make_queue(int64_t capacity, std::vector<Shape> shapes = {Shape{}},
                                              std::vector<DType> dtypes = {DType::Float32}) {
  return std::make_shared<FIFOQueueResource>("q", capacity, std::move(dtypes), std::move(shapes));
}

std::vector<Tuple> rows(std::initializer_list<float> values) {
  std::vector<Tuple> out;
  for (float v : values) out.push_back({Tensor::scalar(v)});
  return out;
}

// Records the completion of one attempt (thread-safe).
struct Result {
  std::mutex mu;
  bool done = false;
  int calls = 0;
  Status status;
  std::vector<Tuple> tuples;

  FIFOQueueResource::EnqueueCallback enqueue_cb() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> l(mu);
      ++calls;
      done = true;
      status = s;
    };
  }
  FIFOQueueResource::DequeueCallback dequeue_cb() {
    return [this](const Status& s, std::vector<Tuple> got) {
      std::lock_guard<std::mutex> l(mu);
      ++calls;
      done = true;
      status = s;
      tuples = std::move(got);
    };
  }
  bool is_done() {
    std::lock_guard<std::mutex> l(mu);
    return done;
  }
  std::vector<float> values() {
    std::lock_guard<std::mutex> l(mu);
    std::vector<float> out;
    for (const auto& t : tuples) out.push_back(t.at(0).scalar<float>());
    return out;
  }
};

std::vector<float> dequeue_now(FIFOQueueResource& q, int64_t n) {
  Result r;
  q.try_dequeue(n, n > 1, false, nullptr, r.dequeue_cb());
  EXPECT_TRUE(r.is_done());
  EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  return r.values();
}

TEST(FIFOQueueResourceTest, EnqueueThenDequeueInOrder) {
  auto q = make_queue(10);
  Result e;
  q->try_enqueue(rows({1, 2, 3}), nullptr, e.enqueue_cb());
  ASSERT_TRUE(e.is_done());
  EXPECT_TRUE(e.status.ok());
  EXPECT_EQ(q->size(), 3);
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{2, 3}));
  EXPECT_EQ(q->size(), 0);
}

TEST(FIFOQueueResourceTest, DequeueWaitsWhileEmptyAndCompletesOnEnqueue) {
  auto q = make_queue(10);
  Result d;
  q->try_dequeue(nullptr, d.dequeue_cb());
  EXPECT_FALSE(d.is_done());
  EXPECT_EQ(q->num_pending_dequeues(), 1);
  Result e;
  q->try_enqueue(rows({7}), nullptr, e.enqueue_cb());
  // Completed synchronously by the enqueue, which is also done.
  ASSERT_TRUE(d.is_done());
  EXPECT_TRUE(e.is_done());
  EXPECT_EQ(d.values(), std::vector<float>{7});
  EXPECT_EQ(q->size(), 0);
  EXPECT_EQ(q->num_pending_dequeues(), 0);
}

TEST(FIFOQueueResourceTest, EnqueueWaitsWhileFull) {
  auto q = make_queue(2);
  Result e1, e2;
  q->try_enqueue(rows({1, 2}), nullptr, e1.enqueue_cb());
  ASSERT_TRUE(e1.is_done());
  q->try_enqueue(rows({3}), nullptr, e2.enqueue_cb());
  EXPECT_FALSE(e2.is_done());
  EXPECT_EQ(q->num_pending_enqueues(), 1);
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  ASSERT_TRUE(e2.is_done());
  EXPECT_TRUE(e2.status.ok());
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{2, 3}));
}

TEST(FIFOQueueResourceTest, EnqueueManyLargerThanCapacityCompletesPartially) {
  auto q = make_queue(2);
  Result e;
  q->try_enqueue(rows({1, 2, 3, 4, 5}), nullptr, e.enqueue_cb());
  EXPECT_FALSE(e.is_done());
  EXPECT_EQ(q->size(), 2);
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  EXPECT_EQ(q->size(), 2);
  EXPECT_FALSE(e.is_done());
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{2, 3}));
  ASSERT_TRUE(e.is_done());
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{4, 5}));
}

TEST(FIFOQueueResourceTest, WaitersAreServedInArrivalOrder) {
  auto q = make_queue(10);
  Result many, single;
  q->try_dequeue(3, true, false, nullptr, many.dequeue_cb());
  q->try_dequeue(nullptr, single.dequeue_cb());
  Result e;
  q->try_enqueue(rows({1}), nullptr, e.enqueue_cb());
  // The dequeue_many at the head takes the element; the later dequeue keeps waiting.
  EXPECT_FALSE(many.is_done());
  EXPECT_FALSE(single.is_done());
  EXPECT_EQ(q->size(), 0);
  q->try_enqueue(rows({2, 3, 4}), nullptr, e.enqueue_cb());
  ASSERT_TRUE(many.is_done());
  ASSERT_TRUE(single.is_done());
  EXPECT_EQ(many.values(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(single.values(), std::vector<float>{4});
}

TEST(FIFOQueueResourceTest, BlockedEnqueuesCompleteInArrivalOrder) {
  auto q = make_queue(1);
  constexpr int kEnqueues = 3;
  Result e[kEnqueues];
  for (int i = 0; i < kEnqueues; ++i) q->try_enqueue(rows({static_cast<float>(i)}), nullptr, e[i].enqueue_cb());
  // Element i is in the queue and the later enqueues wait; taking it lets the next one in.
  for (int i = 0; i < kEnqueues; ++i) {
    for (int later = i + 1; later < kEnqueues; ++later) EXPECT_FALSE(e[later].is_done()) << "enqueue " << later;
    EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{static_cast<float>(i)});
    if (i + 1 < kEnqueues) {
      EXPECT_TRUE(e[i + 1].is_done()) << "enqueue " << i + 1;
    }
  }
}

TEST(FIFOQueueResourceTest, DequeueManyLargerThanCapacityTakesElementsAsTheyArrive) {
  // TensorFlow's testBigDequeueMany: capacity 2, dequeue_many(4) completes after 4 enqueues.
  auto q = make_queue(2);
  Result d;
  q->try_dequeue(4, true, false, nullptr, d.dequeue_cb());
  for (float v : {0.f, 1.f, 2.f, 3.f}) {
    EXPECT_FALSE(d.is_done());
    Result e;
    q->try_enqueue(rows({v}), nullptr, e.enqueue_cb());
    EXPECT_TRUE(e.is_done());
  }
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.values(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(FIFOQueueResourceTest, EnqueueAfterCloseIsCancelled) {
  auto q = make_queue(10);
  Result c, e;
  q->close(false, nullptr, c.enqueue_cb());
  ASSERT_TRUE(c.is_done());
  EXPECT_TRUE(c.status.ok());
  EXPECT_TRUE(q->is_closed());
  q->try_enqueue(rows({1}), nullptr, e.enqueue_cb());
  ASSERT_TRUE(e.is_done());
  EXPECT_EQ(e.status.code(), ErrorCode::kCancelled);
  EXPECT_NE(e.status.message().find("queue 'q' is closed"), std::string::npos) << e.status.message();
}

TEST(FIFOQueueResourceTest, DequeueDrainsClosedQueueThenOutOfRange) {
  auto q = make_queue(10);
  Result e, c;
  q->try_enqueue(rows({1, 2}), nullptr, e.enqueue_cb());
  q->close(false, nullptr, c.enqueue_cb());
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{2});
  Result d;
  q->try_dequeue(nullptr, d.dequeue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(d.status.message().find("requested 1, current size 0"), std::string::npos)
      << d.status.message();
  EXPECT_NE(d.status.message().find("'q'"), std::string::npos);
}

TEST(FIFOQueueResourceTest, CloseFailsBlockedDequeue) {
  auto q = make_queue(10);
  Result d, c;
  q->try_dequeue(nullptr, d.dequeue_cb());
  EXPECT_FALSE(d.is_done());
  q->close(false, nullptr, c.enqueue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kOutOfRange);
}

TEST(FIFOQueueResourceTest, CloseWaitsForEarlierPendingEnqueues) {
  // TensorFlow's testBlockingEnqueueBeforeClose: the pending enqueue completes, then the close.
  auto q = make_queue(2);
  Result fill, pending, c, late;
  q->try_enqueue(rows({1, 2}), nullptr, fill.enqueue_cb());
  q->try_enqueue(rows({3}), nullptr, pending.enqueue_cb());
  q->close(false, nullptr, c.enqueue_cb());
  EXPECT_FALSE(c.is_done());
  EXPECT_FALSE(q->is_closed());
  // An enqueue arriving after the close fails once the close happens.
  q->try_enqueue(rows({9}), nullptr, late.enqueue_cb());
  EXPECT_FALSE(late.is_done());
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  ASSERT_TRUE(pending.is_done());
  EXPECT_TRUE(pending.status.ok());
  ASSERT_TRUE(c.is_done());
  EXPECT_TRUE(c.status.ok());
  EXPECT_TRUE(q->is_closed());
  ASSERT_TRUE(late.is_done());
  EXPECT_EQ(late.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{2, 3}));
}

TEST(FIFOQueueResourceTest, CloseWithCancelPendingEnqueues) {
  auto q = make_queue(2);
  Result fill, pending, c;
  q->try_enqueue(rows({1, 2, 3, 4}), nullptr, pending.enqueue_cb());
  EXPECT_FALSE(pending.is_done());
  q->close(true, nullptr, c.enqueue_cb());
  ASSERT_TRUE(c.is_done());
  EXPECT_TRUE(c.status.ok());
  ASSERT_TRUE(pending.is_done());
  EXPECT_EQ(pending.status.code(), ErrorCode::kCancelled);
  // The rows that fitted stay queued.
  EXPECT_EQ(q->size(), 2);
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{1, 2}));
}

TEST(FIFOQueueResourceTest, SecondCloseIsCancelledButCancellingCloseIsNot) {
  auto q = make_queue(2);
  Result c1, c2, c3;
  q->close(false, nullptr, c1.enqueue_cb());
  q->close(false, nullptr, c2.enqueue_cb());
  q->close(true, nullptr, c3.enqueue_cb());
  EXPECT_TRUE(c1.status.ok());
  EXPECT_EQ(c2.status.code(), ErrorCode::kCancelled);
  EXPECT_NE(c2.status.message().find("already closed"), std::string::npos);
  EXPECT_TRUE(c3.status.ok());
}

TEST(FIFOQueueResourceTest, ClosedDequeueManyRestoresPartialBatch) {
  auto q = std::make_shared<FIFOQueueResource>("q", 4, std::vector<DType>{DType::Float32, DType::Int32},
                                               std::vector<Shape>{Shape{}, Shape{}});
  for (int i = 1; i <= 3; ++i) {
    Result e;
    q->try_enqueue({{Tensor::scalar(float(i)), Tensor::scalar(int32_t(10 * i))}}, nullptr, e.enqueue_cb());
  }
  Result d, c;
  q->try_dequeue(4, true, false, nullptr, d.dequeue_cb());
  EXPECT_FALSE(d.is_done());
  EXPECT_EQ(q->size(), 0);  // held by the waiting dequeue_many
  q->close(false, nullptr, c.enqueue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(d.status.message().find("requested 4, current size 3"), std::string::npos)
      << d.status.message();
  ASSERT_EQ(q->size(), 3);
  for (int i = 1; i <= 3; ++i) {
    Result one;
    q->try_dequeue(nullptr, one.dequeue_cb());
    ASSERT_TRUE(one.status.ok());
    EXPECT_EQ(one.tuples.at(0).at(0).scalar<float>(), float(i));
    EXPECT_EQ(one.tuples.at(0).at(1).scalar<int32_t>(), 10 * i);
  }
}

TEST(FIFOQueueResourceTest, DequeueUpToWaitsWhileOpenAndReturnsRestWhenClosed) {
  auto q = make_queue(10);
  Result e, d, c;
  q->try_enqueue(rows({1, 2}), nullptr, e.enqueue_cb());
  q->try_dequeue(3, true, true, nullptr, d.dequeue_cb());
  EXPECT_FALSE(d.is_done());  // open: waits for 3 like dequeue_many
  q->close(false, nullptr, c.enqueue_cb());
  ASSERT_TRUE(d.is_done());
  ASSERT_TRUE(d.status.ok()) << d.status.to_string();
  EXPECT_EQ(d.values(), (std::vector<float>{1, 2}));
  Result empty;
  q->try_dequeue(3, true, true, nullptr, empty.dequeue_cb());
  ASSERT_TRUE(empty.is_done());
  EXPECT_EQ(empty.status.code(), ErrorCode::kOutOfRange);
}

TEST(FIFOQueueResourceTest, DequeueUpToOnOpenQueueCompletesWithFullBatch) {
  auto q = make_queue(10);
  Result e, d;
  q->try_dequeue(2, true, true, nullptr, d.dequeue_cb());
  q->try_enqueue(rows({1, 2, 3}), nullptr, e.enqueue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.values(), (std::vector<float>{1, 2}));
  EXPECT_EQ(q->size(), 1);
}

TEST(FIFOQueueResourceTest, CancellationCompletesWaiterWithReasonAndRemovesIt) {
  auto q = make_queue(10);
  CancellationManager cm;
  Result d;
  q->try_dequeue(&cm, d.dequeue_cb());
  EXPECT_FALSE(d.is_done());
  cm.start_cancel(errors::deadline_exceeded("timed out"));
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(q->num_pending_dequeues(), 0);
  // The element goes to the next dequeue, not the cancelled one.
  Result e;
  q->try_enqueue(rows({5}), nullptr, e.enqueue_cb());
  EXPECT_EQ(q->size(), 1);
  EXPECT_EQ(d.calls, 1);
}

TEST(FIFOQueueResourceTest, CancelledDequeueManyRestoresWhatItHeld) {
  auto q = make_queue(10);
  CancellationManager cm;
  Result d, e;
  q->try_dequeue(3, true, false, &cm, d.dequeue_cb());
  q->try_enqueue(rows({1, 2}), nullptr, e.enqueue_cb());
  EXPECT_EQ(q->size(), 0);
  cm.start_cancel(errors::cancelled("session closed"));
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{1, 2}));
}

TEST(FIFOQueueResourceTest, CancelledEnqueueLetsLaterEnqueueProceed) {
  auto q = make_queue(1);
  CancellationManager cm;
  Result fill, blocked, later;
  q->try_enqueue(rows({1}), nullptr, fill.enqueue_cb());
  q->try_enqueue(rows({2}), &cm, blocked.enqueue_cb());
  q->try_enqueue(rows({3}), nullptr, later.enqueue_cb());
  cm.start_cancel(errors::cancelled("stop"));
  ASSERT_TRUE(blocked.is_done());
  EXPECT_EQ(blocked.status.code(), ErrorCode::kCancelled);
  EXPECT_FALSE(later.is_done());
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{1});
  ASSERT_TRUE(later.is_done());
  EXPECT_EQ(dequeue_now(*q, 1), std::vector<float>{3});
}

TEST(FIFOQueueResourceTest, AlreadyCancelledManagerFailsAtOnce) {
  auto q = make_queue(10);
  CancellationManager cm;
  cm.start_cancel(errors::deadline_exceeded("too late"));
  Result d;
  q->try_dequeue(&cm, d.dequeue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(q->num_pending_dequeues(), 0);
}

TEST(FIFOQueueResourceTest, CompletedAttemptDeregistersItsCancellation) {
  auto q = make_queue(10);
  CancellationManager cm;
  Result d, e;
  q->try_dequeue(&cm, d.dequeue_cb());
  q->try_enqueue(rows({1}), nullptr, e.enqueue_cb());
  ASSERT_TRUE(d.is_done());
  cm.start_cancel(errors::cancelled("later"));
  EXPECT_EQ(d.calls, 1);
  EXPECT_TRUE(d.status.ok());
}

TEST(FIFOQueueResourceTest, CancelAllFailsEveryWaiter) {
  auto q = make_queue(1);
  Result fill, enq, c;
  q->try_enqueue(rows({1}), nullptr, fill.enqueue_cb());
  q->try_enqueue(rows({2}), nullptr, enq.enqueue_cb());
  q->close(false, nullptr, c.enqueue_cb());
  auto empty = make_queue(1);
  Result deq;
  empty->try_dequeue(nullptr, deq.dequeue_cb());
  q->cancel_all(errors::cancelled("session closed"));
  empty->cancel_all(errors::cancelled("session closed"));
  EXPECT_EQ(enq.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(c.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(deq.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(q->num_pending_enqueues(), 0);
  EXPECT_EQ(empty->num_pending_dequeues(), 0);
}

TEST(FIFOQueueResourceTest, DestroyingTheQueueCompletesWaiters) {
  Result d;
  {
    auto q = make_queue(1);
    q->try_dequeue(nullptr, d.dequeue_cb());
  }
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kCancelled);
}

TEST(FIFOQueueResourceTest, CallbacksRunOutsideTheLock) {
  // A dequeue callback that uses the queue again would deadlock if run under the lock.
  auto q = make_queue(10);
  std::atomic<int64_t> size_seen{-1};
  Result again;
  q->try_dequeue(nullptr, [&](const Status& s, std::vector<Tuple> got) {
    size_seen = q->size();
    q->try_enqueue(std::move(got), nullptr, again.enqueue_cb());
  });
  Result e;
  q->try_enqueue(rows({4, 5}), nullptr, e.enqueue_cb());
  EXPECT_TRUE(again.is_done());
  EXPECT_EQ(size_seen.load(), 1);
  EXPECT_EQ(dequeue_now(*q, 2), (std::vector<float>{5, 4}));
}

TEST(FIFOQueueResourceTest, ValidateChecksCountDtypeAndShape) {
  auto q = std::make_shared<FIFOQueueResource>("q", 10, std::vector<DType>{DType::Int32, DType::Int32},
                                               std::vector<Shape>{Shape{2, 2}, Shape{3, 3}});
  Tensor ok = Tensor::zeros(DType::Int32, {2, 2});
  Tensor bad = Tensor::zeros(DType::Int32, {3, 4});
  EXPECT_TRUE(q->validate_tuple({ok, Tensor::zeros(DType::Int32, {3, 3})}).ok());
  Status s = q->validate_tuple({ok, bad});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Expected [3,3], got [3,4]"), std::string::npos) << s.message();
  EXPECT_EQ(q->validate_tuple({ok}).code(), ErrorCode::kInvalidArgument);
  s = q->validate_tuple({ok, Tensor::zeros(DType::Float32, {3, 3})});
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();

  s = q->validate_batch({Tensor::zeros(DType::Int32, {2, 2, 2}), Tensor::zeros(DType::Int32, {2, 3, 4})});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Expected [2,3,3], got [2,3,4]"), std::string::npos) << s.message();
  s = q->validate_batch({Tensor::zeros(DType::Int32, {2, 2, 2}), Tensor::zeros(DType::Int32, {1, 3, 3})});
  EXPECT_NE(s.message().find("0th dimension"), std::string::npos) << s.message();
  s = q->validate_batch({Tensor::scalar(int32_t(1)), Tensor::zeros(DType::Int32, {1, 3, 3})});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(q->validate_batch({Tensor::zeros(DType::Int32, {2, 2, 2}), Tensor::zeros(DType::Int32, {2, 3, 3})}).ok());
}

TEST(FIFOQueueResourceTest, BatchRowsComeOutAsElementsOrStackedAcrossChunks) {
  // Rows of an enqueue_many stay in their batch; dequeues copy them out one by one or stacked,
  // across a single element and a split batch.
  auto q = std::make_shared<FIFOQueueResource>("q", -1, std::vector<DType>{DType::Int32, DType::Bool},
                                               std::vector<Shape>{Shape{2}, Shape{}});
  Result e1, e2, e3;
  q->try_enqueue_batch({Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 3, 2), Tensor::vector<bool>({true, false, true})},
                       nullptr, e1.enqueue_cb());
  q->try_enqueue({{Tensor::vector<int32_t>({7, 8}), Tensor::scalar(false)}}, nullptr, e2.enqueue_cb());
  q->try_enqueue_batch({Tensor::zeros(DType::Int32, {0, 2}), Tensor::zeros(DType::Bool, {0})}, nullptr,
                       e3.enqueue_cb());  // empty: succeeds, queues nothing
  for (Result* e : {&e1, &e2, &e3}) {
    EXPECT_TRUE(e->is_done());
    EXPECT_TRUE(e->status.ok()) << e->status.to_string();
  }
  EXPECT_EQ(q->size(), 4);

  std::vector<Tuple> one;
  q->try_dequeue(nullptr, [&](const Status& s, std::vector<Tuple> got) {
    ASSERT_TRUE(s.ok());
    one = std::move(got);
  });
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0][0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(one[0][0].shape(), Shape{2});
  EXPECT_EQ(one[0][1].scalar<bool>(), true);

  Tuple stacked;
  q->try_dequeue_stacked(3, /*many=*/true, false, nullptr, [&](const Status& s, Tuple got) {
    ASSERT_TRUE(s.ok());
    stacked = std::move(got);
  });
  ASSERT_EQ(stacked.size(), 2u);
  EXPECT_TRUE(stacked[0].equals(Tensor::matrix<int32_t>({3, 4, 5, 6, 7, 8}, 3, 2)));
  EXPECT_TRUE(stacked[1].equals(Tensor::vector<bool>({false, true, false})));
  EXPECT_EQ(q->size(), 0);
}

TEST(FIFOQueueResourceTest, DequeueManyWithoutShapesNeedsSharedShapes) {
  auto q = make_queue(10, /*shapes=*/{});
  Result e;
  q->try_enqueue({{Tensor::vector<float>({1, 2})}, {Tensor::vector<float>({3})}}, nullptr,
                 e.enqueue_cb());
  Result d;
  q->try_dequeue(2, true, false, nullptr, d.dequeue_cb());
  ASSERT_TRUE(d.is_done());
  EXPECT_EQ(d.status.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(q->size(), 2);  // left queued, in order
  Result one;
  q->try_dequeue(nullptr, one.dequeue_cb());
  EXPECT_EQ(one.tuples.at(0).at(0).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_FALSE(q->empty_batch().ok());
  EXPECT_TRUE(make_queue(10)->empty_batch().ok());
  EXPECT_EQ(make_queue(10, {Shape{3}})->empty_batch().value().at(0).shape(), (Shape{0, 3}));
}

TEST(FIFOQueueResourceTest, ConcurrentProducersAndConsumersLoseAndDuplicateNothing) {
  for (int threads : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    auto q = make_queue(3);
    constexpr int kPerThread = 300;
    std::mutex mu;
    std::multiset<float> seen;
    tessera::testing::run_threads(2 * threads, [&](int t) {
      for (int i = 0; i < kPerThread; ++i) {
        if (t < threads) {
          std::promise<Status> p;
          q->try_enqueue(rows({float(t * kPerThread + i)}), nullptr,
                         [&p](const Status& s) { p.set_value(s); });
          auto f = p.get_future();
          ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
          ASSERT_TRUE(f.get().ok());
        } else {
          std::promise<std::pair<Status, std::vector<Tuple>>> p;
          q->try_dequeue(nullptr, [&p](const Status& s, std::vector<Tuple> got) {
            p.set_value({s, std::move(got)});
          });
          auto f = p.get_future();
          ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
          auto [s, got] = f.get();
          ASSERT_TRUE(s.ok());
          std::lock_guard<std::mutex> l(mu);
          seen.insert(got.at(0).at(0).scalar<float>());
        }
      }
    });
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(threads * kPerThread));
    std::set<float> unique(seen.begin(), seen.end());
    EXPECT_EQ(unique.size(), seen.size());
    EXPECT_EQ(q->size(), 0);
  }
}

TEST(FIFOQueueResourceTest, ConcurrentCancellationAndCompletionCallOnce) {
  for (int threads : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    auto q = make_queue(100);
    constexpr int kWaiters = 200;
    std::vector<std::unique_ptr<CancellationManager>> cms;
    std::vector<std::unique_ptr<Result>> results;
    for (int i = 0; i < kWaiters; ++i) {
      cms.push_back(std::make_unique<CancellationManager>());
      results.push_back(std::make_unique<Result>());
      q->try_dequeue(cms.back().get(), results.back()->dequeue_cb());
    }
    // Half the threads cancel waiters while the other half enqueue elements.
    std::atomic<int> enqueued{0};
    tessera::testing::run_threads(2 * threads, [&](int t) {
      if (t % 2 == 0) {
        for (int i = t / 2; i < kWaiters; i += threads) cms[i]->start_cancel(errors::cancelled("stop"));
      } else {
        for (int i = t / 2; i < kWaiters / 2; i += threads) {
          Result e;
          q->try_enqueue(rows({float(i)}), nullptr, e.enqueue_cb());
          enqueued.fetch_add(1);
        }
      }
    });
    int ok = 0;
    for (auto& r : results) {
      ASSERT_TRUE(r->is_done());
      EXPECT_EQ(r->calls, 1);
      ok += r->status.ok();
    }
    // Every element went to exactly one successful waiter or stayed queued.
    EXPECT_EQ(ok + q->size(), enqueued.load());
    EXPECT_EQ(q->num_pending_dequeues(), 0);
  }
}

}  // namespace
}  // namespace tessera::internal
