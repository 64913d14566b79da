// Queues of tuples of tensors, with TensorFlow's semantics: FIFOQueue (first in, first out) and
// RandomShuffleQueue (a uniformly random element), both QueueBase handles.
//
//   tessera::FIFOQueue q(g, /*capacity=*/10, {DType::Float32}, {Shape{}});
//   auto x = ops::placeholder(g, DType::Float32, Shape{});
//   auto enq = q.enqueue({x});
//   auto deq = q.dequeue()[0];
//   s.run(enq, {{x, Tensor::scalar(1.0f)}});
//   float v = s.run(deq).scalar<float>();
//
// Enqueue blocks while full; dequeue blocks while empty. After close(): enqueue raises
// CancelledError; dequeue drains what is left, then raises OutOfRangeError; dequeue_many(n) raises
// OutOfRangeError when fewer than n remain (they stay queued); dequeue_up_to(n) returns what is
// left (at least 1), and on an open queue waits for n like dequeue_many. close() itself waits for
// the enqueues already blocked (they complete as room frees); closing a closed queue raises
// CancelledError. close(true) instead fails blocked enqueues with CancelledError, at once.
// Blocked ops hold no thread of the session's pool; a run timeout or a session close ends them.
// Waiters are served in arrival order: a dequeue_many(n) at the head takes elements as they
// arrive (so n may exceed the capacity) and a later dequeue waits behind it. Dtypes are checked
// when ops are built, shapes too when the queue has them (else at run time); without shapes,
// dequeue_many needs elements of one shape. A queue is a copyable handle; the queue state lives
// in the session that runs it or, with a `shared_name`, in the task (server) that runs it, where
// every session and client naming it shares it. Without one it is private to the session, as
// TensorFlow's, also on a server (two clients' unnamed queues of the same op name are two queues).
// Thread-safe to run from any number of sessions and threads.
//
// RandomShuffleQueue has all of the above except the order: each dequeue takes a uniformly random
// element (a dequeue_many, n of them), and while the queue is open it waits until more than
// `min_after_dequeue` elements are queued, leaving at least that many; once closed it drains.
//
//   tessera::RandomShuffleQueue q(g, /*capacity=*/100, /*min_after_dequeue=*/20,
//                                 {DType::Int32}, {Shape{}}, /*seed=*/7);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera {

// The members every queue has. Not constructed directly: a FIFOQueue or a RandomShuffleQueue.
class QueueBase {
 public:
  QueueBase() = default;

  Operation enqueue(std::vector<Output> components, std::string name = "") const;
  // Splits each component along dimension 0 and enqueues the rows.
  Operation enqueue_many(std::vector<Output> components, std::string name = "") const;
  std::vector<Output> dequeue(std::string name = "") const;
  std::vector<Output> dequeue_many(int n, std::string name = "") const;
  std::vector<Output> dequeue_up_to(int n, std::string name = "") const;
  Operation close(bool cancel_pending_enqueues = false, std::string name = "") const;
  Output size(std::string name = "") const;       // int32 scalar
  Output is_closed(std::string name = "") const;  // bool scalar

  Operation op() const;  // the queue node
  Graph& graph() const;
  const std::string& name() const;
  int capacity() const;
  const std::vector<DType>& dtypes() const;
  const std::vector<Shape>& shapes() const;

  struct State;  // internal (core/queue_ops.cc)

 protected:
  explicit QueueBase(std::shared_ptr<const State> state);

 private:
  std::vector<Output> dequeue_op(const char* type, int n, std::string name) const;
  std::shared_ptr<const State> state_;
};

class FIFOQueue : public QueueBase {
 public:
  FIFOQueue() = default;
  // `shapes` empty: element shapes unconstrained. `shared_name` empty: private to the session.
  FIFOQueue(Graph& g, int capacity, std::vector<DType> dtypes, std::vector<Shape> shapes = {},
            std::string shared_name = "", std::string name = "");
};

class RandomShuffleQueue : public QueueBase {
 public:
  RandomShuffleQueue() = default;
  // `min_after_dequeue` in [0, capacity) (any >= 0 when capacity < 0: unbounded). `seed` 0: a
  // different order in every session; else the same order for the same sequence of operations.
  RandomShuffleQueue(Graph& g, int capacity, int min_after_dequeue, std::vector<DType> dtypes,
                     std::vector<Shape> shapes = {}, uint64_t seed = 0, std::string shared_name = "",
                     std::string name = "");

  int min_after_dequeue() const { return min_after_dequeue_; }

 private:
  int min_after_dequeue_ = 0;
};

}  // namespace tessera
