// The machinery behind every queue (tessera::FIFOQueue, tessera::RandomShuffleQueue): a bounded
// store of tuples of tensors, and the ordered lists of enqueue and dequeue attempts waiting on it.
// See Note [Queue attempts] in kernels/queue_resource.cc. Subclasses choose how elements are
// stored and which ones a dequeue takes (Note [Queue stores]): kernels/fifo_queue.h (oldest first)
// and kernels/random_shuffle_queue.h (uniformly random).
//
//   auto q = std::make_shared<FIFOQueueResource>("q", /*capacity=*/2,
//                                                std::vector<DType>{DType::Float32},
//                                                std::vector<Shape>{Shape{}});
//   q->try_dequeue(&cm, [](const Status& s, std::vector<QueueResource::Tuple> got) {
//     // runs later, on the thread whose enqueue made an element available
//   });
//   q->try_enqueue({{Tensor::scalar(1.0f)}}, &cm, [](const Status& s) {});
//
// Nothing here blocks: an attempt that cannot complete at once is queued with its callback, and
// the callback runs (exactly once, never under the queue's lock) when another attempt, close(),
// a cancellation or cancel_all() completes it. Instances must be owned by a std::shared_ptr
// (cancellation callbacks hold a weak reference). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/resource_mgr.h"
#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class OpKernelContext;
struct Node;
class QueueResource;

// The queue `queue_node` (a "FIFOQueue" or "RandomShuffleQueueV2" node) describes, created in this
// session's resources on first use (kernels/queue_ops.cc). Also the reader ops' filename queue.
StatusOr<std::shared_ptr<QueueResource>> get_queue(OpKernelContext& ctx, const Node& queue_node);

class QueueResource : public ResourceBase, public std::enable_shared_from_this<QueueResource> {
 public:
  using Tuple = std::vector<Tensor>;  // one tensor per component
  using EnqueueCallback = std::function<void(const Status&)>;
  // The dequeued tuples, in queue order (empty on failure).
  using DequeueCallback = std::function<void(const Status&, std::vector<Tuple>)>;

  ~QueueResource() override;

  // Checks a tuple against the component dtypes and shapes (InvalidArgument naming the
  // component and both shapes). try_enqueue does not check again: callers validate first.
  Status validate_tuple(const Tuple& tuple) const;
  // The same for a batch of rows (dimension 0 of every component; all must agree).
  Status validate_batch(const Tuple& batch) const;
  // The batch a dequeue_many(0) returns: InvalidArgument unless every component shape is fully
  // defined.
  StatusOr<Tuple> empty_batch() const;

  // Enqueues `rows` in order, waiting for room (it may complete partially as room frees).
  // `cm` (may be null) cancels the wait; it must outlive the attempt.
  void try_enqueue(std::vector<Tuple> rows, CancellationManager* cm, EnqueueCallback done);
  // Dequeues one tuple (`n` = 1, `many` = false), or `n` tuples: waits until n are available
  // (and, while the queue is open, min_after_dequeue() more stay queued);
  // on a closed queue with fewer, fails with OutOfRange leaving them queued, unless
  // `allow_small` (dequeue_up_to), which then returns what is left (at least one). With
  // `many`, the n tuples must share component shapes (else InvalidArgument, left queued).
  void try_dequeue(int64_t n, bool many, bool allow_small, CancellationManager* cm,
                   DequeueCallback done);
  void try_dequeue(CancellationManager* cm, DequeueCallback done) {
    try_dequeue(1, false, false, cm, std::move(done));
  }

  // The paths the kernels use (Note [Queue chunks]): enqueue the rows of a validated batch
  // without splitting it, or one validated element, and dequeue into one Tuple, the element (`many` = false) or the rows
  // stacked along a new dimension 0, copied straight from where they are queued.
  void try_enqueue_batch(Tuple batch, CancellationManager* cm, EnqueueCallback done);
  void try_enqueue_element(Tuple element, CancellationManager* cm, EnqueueCallback done);
  using StackedCallback = std::function<void(const Status&, Tuple)>;
  void try_dequeue_stacked(int64_t n, bool many, bool allow_small, CancellationManager* cm,
                           StackedCallback done);
  // Closes the queue. Without `cancel_pending_enqueues` the close is itself queued behind the
  // pending enqueues (which complete first, as room frees): `done` runs once the queue is
  // closed, with CancelledError if it was closed already. With it, pending enqueues fail with
  // CancelledError and `done` runs at once.
  void close(bool cancel_pending_enqueues, CancellationManager* cm, EnqueueCallback done);

  int64_t size() const;
  bool is_closed() const;
  const std::string& name() const { return name_; }
  const char* kind() const { return kind_; }  // "FIFOQueue" or "RandomShuffleQueue"
  int64_t capacity() const { return capacity_; }
  int64_t min_after_dequeue() const { return min_after_dequeue_; }
  const std::vector<DType>& dtypes() const { return dtypes_; }
  const std::vector<Shape>& shapes() const { return shapes_; }
  // Number of enqueue / dequeue attempts waiting (tests and debugging).
  int num_pending_enqueues() const;
  int num_pending_dequeues() const;

  std::string debug_string() const override;
  // Fails every waiting attempt with `reason` (the session or server is closing).
  void cancel_all(const Status& reason) override;

 protected:
  // `kind` names the queue type in messages (a string literal). `capacity` < 0: unbounded.
  // `min_after_dequeue`: elements a dequeue leaves queued while the queue is open (0: none).
  // `shapes` empty: element shapes unconstrained; else one (possibly partial) shape per component.
  QueueResource(const char* kind, std::string name, int64_t capacity, int64_t min_after_dequeue,
                std::vector<DType> dtypes, std::vector<Shape> shapes);

  // Queued elements in runs (Note [Queue chunks]): one element (`rows` false: `tensors` are its
  // components), or rows [begin, end) along dimension 0 of the batch tensors of an enqueue_many.
  struct Chunk {
    Tuple tensors;
    bool rows = false;
    int64_t begin = 0;
    int64_t end = 1;
    int64_t size() const { return end - begin; }
    Shape row_shape(std::size_t component) const {
      return rows ? tensors[component].shape().sub_shape(1) : tensors[component].shape();
    }
    Tuple row(int64_t i) const;  // element i of the chunk (a copy for batch rows)
  };

  // The element store (Note [Queue stores]); called with mu_ held, the base keeping the count.
  // Queues `chunk` (after every element queued before it, as far as the order matters).
  virtual void push_locked(Chunk chunk) = 0;
  // Removes `k` elements (1 <= k <= the count) and appends them to `out`.
  virtual void take_locked(int64_t k, std::vector<Chunk>* out) = 0;
  // Puts back the elements one dequeue took (`taken`, in the order take_locked gave them), as if
  // they had never been taken.
  virtual void put_back_locked(std::vector<Chunk> taken) = 0;

 private:
  enum class Kind { kEnqueue, kClose, kDequeue };
  enum class RunResult { kNoProgress, kProgress, kComplete };
  struct Attempt {
    int64_t id = 0;
    Kind kind = Kind::kEnqueue;
    std::vector<Chunk> chunks;  // enqueue: still to push, from `next`; dequeue: taken so far
    std::size_t next = 0;
    int64_t requested = 0;      // dequeue: elements wanted
    int64_t taken = 0;          // dequeue: elements in `chunks`
    bool many = false;
    bool allow_small = false;
    CancellationManager* cm = nullptr;  // Not owned.
    CancellationManager::Token token = CancellationManager::kInvalidToken;
    EnqueueCallback enqueue_done;
    DequeueCallback dequeue_done;   // one of these two for a dequeue
    StackedCallback stacked_done;
    Status status;
  };
  static Tuple stack_chunks(const std::vector<Chunk>& chunks, int64_t rows);
  using AttemptList = std::list<Attempt>;

  // The shared halves of the public entry points: an enqueue of chunks (none: done at once), and
  // a dequeue attempt without its callback.
  void enqueue_chunks(std::vector<Chunk> chunks, CancellationManager* cm, EnqueueCallback done);
  static Attempt dequeue_attempt(int64_t n, bool many, bool allow_small, CancellationManager* cm);
  void add_attempt(Attempt attempt);
  void cancel(int64_t id, const Status& reason);
  // Runs the attempts at the heads of both lists until neither progresses; completed attempts
  // are moved to `finished`. Requires mu_.
  void flush_locked(std::vector<Attempt>* finished);
  bool try_attempts_locked(AttemptList* attempts, std::vector<Attempt>* finished);
  RunResult run_enqueue_locked(Attempt* a);
  RunResult run_dequeue_locked(Attempt* a);
  // Puts a dequeue attempt's taken tuples back (put_back_locked). Requires mu_.
  void restore_locked(Attempt* a);
  // Fails every waiting attempt with `status`; `restore` puts partial batches back first.
  void fail_all(const Status& status, bool restore);
  // Deregisters and runs the callbacks of finished attempts. Must not hold mu_.
  static void finish(std::vector<Attempt>* finished);

  const char* const kind_;
  const std::string name_;
  const int64_t capacity_;
  const int64_t min_after_dequeue_;
  const std::vector<DType> dtypes_;
  const std::vector<Shape> shapes_;

  mutable std::mutex mu_;
  int64_t count_ = 0;           // guarded by mu_: elements in the store
  bool closed_ = false;         // guarded by mu_
  AttemptList enqueue_attempts_;  // guarded by mu_ (closes queue here too, in arrival order)
  AttemptList dequeue_attempts_;  // guarded by mu_
  int64_t next_id_ = 0;           // guarded by mu_
};

}  // namespace tessera::internal
