#include "kernels/queue_resource.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/shape_util.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {

// Note [Queue attempts]
// A queue op never blocks a thread. Each enqueue, dequeue and (plain) close is an Attempt: a
// record with its callback, appended to one of two lists in arrival order. flush_locked() runs
// the attempt at the head of each list until neither makes progress; only a head attempt ever
// moves elements, which gives TensorFlow's ordering: a dequeue_many(5) at the head takes
// elements as they arrive and a later dequeue waits behind it, and an enqueue_many larger than
// the free room pushes what fits and stays at the head. Completed attempts are moved out and
// their callbacks run after mu_ is released, so a callback may start another queue op (the
// executor continuing a step) without deadlock.
//
// A dequeue_many that holds part of its batch when the queue closes (or when it is cancelled)
// puts those elements back (a FIFO at the front, in order: they were the oldest elements, and
// only the head attempt holds any). A plain close() is queued in the enqueue list, so the enqueues that
// arrived before it complete first (as room frees) and the ones after it fail with
// CancelledError; close(cancel_pending_enqueues) fails every waiting enqueue at once.
//
// Note [Queue chunks]
// Elements are queued in chunks: a single element, or a run of rows of the batch tensors an
// enqueue_many gave, kept as they are (rows [begin, end)). Nothing is split or copied on the way
// in; a dequeue that takes part of a chunk narrows it. Results are assembled once, outside the
// lock: a dequeue copies its row out, a dequeue_many copies each chunk's rows into the stacked
// output with one memcpy per chunk and component. So moving a batch costs a few allocations, not
// a tensor and a tuple per element (which, freed on the consumer's thread, also made glibc's
// arena locks contend).
//
// Cancellation: an attempt with a CancellationManager that cannot complete at once registers a
// callback (under mu_, right after the first try) that completes it with the cancellation
// reason; an attempt that completes at once never registers (most do). The callback holds only
// the attempt id and a weak reference, so it does nothing if the attempt already completed. The
// lock order is mu_ -> the manager's lock; the manager runs callbacks outside its lock.

// Note [Queue stores]
// Where elements wait and which ones a dequeue takes is the subclass's: push_locked,
// take_locked and put_back_locked, called under mu_. Everything else (attempts, waiting, close,
// cancellation, batching, the count) is shared, so every queue type blocks and fails alike.
// FIFOQueueResource keeps chunks in a deque and takes from the front, narrowing a chunk it takes
// part of; put_back_locked pushes to the front, restoring the order. RandomShuffleQueueResource
// keeps single elements (a batch row stays a one-row view of the enqueued batch, no copy) and
// takes each from a uniformly random position; the order of what it puts back does not matter.
// A random shuffle queue's min_after_dequeue is the one policy the base applies itself: while
// the queue is open, a dequeue takes only elements beyond the first min_after_dequeue (so it
// waits until more than min_after_dequeue are queued), and once closed it drains, as in
// TensorFlow. A FIFO queue has 0.

namespace {

}  // namespace

QueueResource::QueueResource(const char* kind, std::string name, int64_t capacity,
                             int64_t min_after_dequeue, std::vector<DType> dtypes,
                             std::vector<Shape> shapes)
    : kind_(kind),
      name_(std::move(name)),
      capacity_(capacity),
      min_after_dequeue_(min_after_dequeue),
      dtypes_(std::move(dtypes)),
      shapes_(std::move(shapes)) {
  TESSERA_CHECK(!dtypes_.empty());
  TESSERA_CHECK(shapes_.empty() || shapes_.size() == dtypes_.size());
  TESSERA_CHECK(min_after_dequeue_ >= 0);
}

QueueResource::~QueueResource() {
  // Normally empty: a closing session cancels its steps first. A step still waiting would never
  // end, so complete its attempts. (Cancellation callbacks hold only a weak reference.) Nothing
  // is put back: the subclass's store is gone already.
  fail_all(errors::cancelled("queue '{}' was destroyed", name_), /*restore=*/false);
}

Status QueueResource::validate_tuple(const Tuple& tuple) const {
  if (tuple.size() != dtypes_.size()) {
    return errors::invalid_argument("queue '{}' expects {} components, got {}", name_,
                                    dtypes_.size(), tuple.size());
  }
  for (std::size_t i = 0; i < tuple.size(); ++i) {
    if (tuple[i].is_null()) return errors::invalid_argument("component {} is a null tensor", i);
    if (tuple[i].dtype() != dtypes_[i]) {
      return errors::invalid_argument("type mismatch in tuple component {}: expected {}, got {}", i,
                                      dtype_name(dtypes_[i]), dtype_name(tuple[i].dtype()));
    }
    if (!shapes_.empty() && !shapes_[i].is_compatible_value(tuple[i].shape())) {
      return errors::invalid_argument("Shape mismatch in tuple component {}. Expected {}, got {}", i,
                                      shapes_[i].to_string(), tuple[i].shape().to_string());
    }
  }
  return Status();
}

Status QueueResource::validate_batch(const Tuple& batch) const {
  if (batch.size() != dtypes_.size()) {
    return errors::invalid_argument("queue '{}' expects {} components, got {}", name_,
                                    dtypes_.size(), batch.size());
  }
  int64_t rows = -1;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Tensor& t = batch[i];
    if (t.is_null()) return errors::invalid_argument("component {} is a null tensor", i);
    if (t.dtype() != dtypes_[i]) {
      return errors::invalid_argument("type mismatch in tuple component {}: expected {}, got {}", i,
                                      dtype_name(dtypes_[i]), dtype_name(t.dtype()));
    }
    if (t.shape().rank() < 1) {
      return errors::invalid_argument(
          "enqueue_many needs components of rank >= 1 (rows along dimension 0); component {} has "
          "shape {}",
          i, t.shape().to_string());
    }
    if (rows < 0) {
      rows = t.shape().dim(0);
    } else if (t.shape().dim(0) != rows) {
      return errors::invalid_argument(
          "All input tensors must have the same size in the 0th dimension. Component {} has {}, "
          "and should have {}",
          i, t.shape().dim(0), rows);
    }
    if (!shapes_.empty() && !shapes_[i].is_compatible_value(t.shape().sub_shape(1))) {
      return errors::invalid_argument("Shape mismatch in tuple component {}. Expected {}, got {}", i,
                                      prepend_dim(rows, shapes_[i]).to_string(),
                                      t.shape().to_string());
    }
  }
  return Status();
}

QueueResource::Tuple QueueResource::Chunk::row(int64_t i) const {
  if (!rows) return tensors;
  Tuple out;
  out.reserve(tensors.size());
  for (const Tensor& batch : tensors) {
    Tensor r(batch.dtype(), batch.shape().sub_shape(1));
    const int64_t n = r.num_elements();
    copy_elements(r, 0, batch, (begin + i) * n, n);
    out.push_back(std::move(r));
  }
  return out;
}

QueueResource::Tuple QueueResource::stack_chunks(const std::vector<Chunk>& chunks, int64_t rows) {
  TESSERA_CHECK(!chunks.empty());
  Tuple out;
  for (std::size_t c = 0; c < chunks[0].tensors.size(); ++c) {
    const Tensor& first = chunks[0].tensors[c];
    Tensor batch(first.dtype(), prepend_dim(rows, chunks[0].row_shape(c)));
    const int64_t row_elements = rows == 0 ? 0 : batch.num_elements() / rows;
    int64_t dst = 0;
    for (const Chunk& chunk : chunks) {
      const int64_t n = chunk.size() * row_elements;
      copy_elements(batch, dst, chunk.tensors[c], chunk.rows ? chunk.begin * row_elements : 0, n);
      dst += n;
    }
    out.push_back(std::move(batch));
  }
  return out;
}

StatusOr<QueueResource::Tuple> QueueResource::empty_batch() const {
  Tuple out;
  for (std::size_t i = 0; i < dtypes_.size(); ++i) {
    if (shapes_.empty() || !shapes_[i].fully_defined()) {
      return errors::invalid_argument(
          "dequeue_many(0) of queue '{}' needs fully specified shapes for every component, the "
          "queue has {}",
          name_, shapes_.empty() ? std::string("none") : shapes_string(shapes_));
    }
    out.emplace_back(dtypes_[i], prepend_dim(0, shapes_[i]));
  }
  return out;
}

// ---- Attempts ----

void QueueResource::try_enqueue(std::vector<Tuple> rows, CancellationManager* cm,
                                EnqueueCallback done) {
  std::vector<Chunk> chunks;
  chunks.reserve(rows.size());
  for (Tuple& row : rows) chunks.push_back(Chunk{std::move(row)});
  enqueue_chunks(std::move(chunks), cm, std::move(done));
}

void QueueResource::try_enqueue_element(Tuple element, CancellationManager* cm, EnqueueCallback done) {
  std::vector<Chunk> chunks;
  chunks.push_back(Chunk{std::move(element)});
  enqueue_chunks(std::move(chunks), cm, std::move(done));
}

void QueueResource::try_enqueue_batch(Tuple batch, CancellationManager* cm, EnqueueCallback done) {
  const int64_t rows = batch.empty() ? 0 : batch[0].shape().dim(0);
  std::vector<Chunk> chunks;
  if (rows > 0) chunks.push_back(Chunk{std::move(batch), /*rows=*/true, 0, rows});
  enqueue_chunks(std::move(chunks), cm, std::move(done));
}

void QueueResource::enqueue_chunks(std::vector<Chunk> chunks, CancellationManager* cm,
                                   EnqueueCallback done) {
  if (chunks.empty()) {  // an empty enqueue_many succeeds at once, as in TensorFlow
    done(Status());
    return;
  }
  Attempt a;
  a.kind = Kind::kEnqueue;
  a.chunks = std::move(chunks);
  a.cm = cm;
  a.enqueue_done = std::move(done);
  add_attempt(std::move(a));
}

void QueueResource::try_dequeue(int64_t n, bool many, bool allow_small,
                                CancellationManager* cm, DequeueCallback done) {
  Attempt a = dequeue_attempt(n, many, allow_small, cm);
  a.dequeue_done = std::move(done);
  add_attempt(std::move(a));
}

void QueueResource::try_dequeue_stacked(int64_t n, bool many, bool allow_small,
                                        CancellationManager* cm, StackedCallback done) {
  Attempt a = dequeue_attempt(n, many, allow_small, cm);
  a.stacked_done = std::move(done);
  add_attempt(std::move(a));
}

QueueResource::Attempt QueueResource::dequeue_attempt(int64_t n, bool many, bool allow_small,
                                                      CancellationManager* cm) {
  TESSERA_CHECK(n >= 1);
  Attempt a;
  a.kind = Kind::kDequeue;
  a.requested = n;
  a.many = many;
  a.allow_small = allow_small;
  a.cm = cm;
  return a;
}

void QueueResource::close(bool cancel_pending_enqueues, CancellationManager* cm,
                          EnqueueCallback done) {
  if (!cancel_pending_enqueues) {
    Attempt a;
    a.kind = Kind::kClose;
    a.cm = cm;
    a.enqueue_done = std::move(done);
    add_attempt(std::move(a));
    return;
  }
  std::vector<Attempt> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    const Status cancelled =
        errors::cancelled("queue '{}' is closed: pending enqueue cancelled", name_);
    for (Attempt& a : enqueue_attempts_) {
      a.status = cancelled;
      finished.push_back(std::move(a));
    }
    enqueue_attempts_.clear();
    flush_locked(&finished);  // blocked dequeues now drain or fail
  }
  finish(&finished);
  done(Status());
}

void QueueResource::add_attempt(Attempt attempt) {
  std::vector<Attempt> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    attempt.id = next_id_++;
    const int64_t id = attempt.id;
    CancellationManager* cm = attempt.cm;
    if (cm != nullptr && cm->is_cancelled()) {
      attempt.status = cm->reason();
      if (attempt.status.ok()) attempt.status = errors::cancelled("operation was cancelled");
      finished.push_back(std::move(attempt));
    } else {
      AttemptList& list = attempt.kind == Kind::kDequeue ? dequeue_attempts_ : enqueue_attempts_;
      list.push_back(std::move(attempt));
      flush_locked(&finished);
      // Only an attempt that has to wait registers for cancellation: most complete at once.
      auto waiting = std::find_if(list.rbegin(), list.rend(), [id](const Attempt& a) { return a.id == id; });
      if (cm != nullptr && waiting != list.rend()) {
        std::weak_ptr<QueueResource> self = weak_from_this();
        TESSERA_CHECK(!self.expired());  // owned by a shared_ptr, as documented
        waiting->token = cm->register_callback([self, id](const Status& reason) {
          if (auto q = self.lock()) q->cancel(id, reason);
        });
        if (waiting->token == CancellationManager::kInvalidToken) {  // cancelled meanwhile
          Attempt& a = *waiting;
          a.status = cm->reason();
          if (a.status.ok()) a.status = errors::cancelled("operation was cancelled");
          if (a.kind == Kind::kDequeue) restore_locked(&a);
          finished.push_back(std::move(a));
          list.erase(std::next(waiting).base());
          flush_locked(&finished);
        }
      }
    }
  }
  finish(&finished);
}

void QueueResource::cancel(int64_t id, const Status& reason) {
  std::vector<Attempt> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (AttemptList* list : {&enqueue_attempts_, &dequeue_attempts_}) {
      auto it = std::find_if(list->begin(), list->end(), [id](const Attempt& a) { return a.id == id; });
      if (it == list->end()) continue;
      it->status = reason.ok() ? errors::cancelled("operation was cancelled") : reason;
      if (it->kind == Kind::kDequeue) restore_locked(&*it);
      finished.push_back(std::move(*it));
      list->erase(it);
      flush_locked(&finished);  // the attempts behind it may proceed now
      break;
    }
  }
  finish(&finished);
}

void QueueResource::cancel_all(const Status& reason) {
  fail_all(reason.ok() ? errors::cancelled("queue '{}' was reset", name_) : reason, /*restore=*/true);
}

void QueueResource::fail_all(const Status& status, bool restore) {
  std::vector<Attempt> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Back to front so restored partial batches keep their order.
    for (auto it = dequeue_attempts_.rbegin(); restore && it != dequeue_attempts_.rend(); ++it) {
      restore_locked(&*it);
    }
    for (AttemptList* list : {&enqueue_attempts_, &dequeue_attempts_}) {
      for (Attempt& a : *list) {
        a.status = status;
        finished.push_back(std::move(a));
      }
      list->clear();
    }
  }
  finish(&finished);
}

void QueueResource::flush_locked(std::vector<Attempt>* finished) {
  bool changed;
  do {
    changed = try_attempts_locked(&enqueue_attempts_, finished);
    changed = try_attempts_locked(&dequeue_attempts_, finished) || changed;
  } while (changed);
}

bool QueueResource::try_attempts_locked(AttemptList* attempts, std::vector<Attempt>* finished) {
  bool progress = false;
  while (!attempts->empty()) {
    Attempt& head = attempts->front();
    RunResult r = head.kind == Kind::kDequeue ? run_dequeue_locked(&head) : run_enqueue_locked(&head);
    if (r == RunResult::kComplete) {
      finished->push_back(std::move(head));
      attempts->pop_front();
      progress = true;
      continue;
    }
    if (r == RunResult::kProgress) progress = true;
    break;
  }
  return progress;
}

QueueResource::RunResult QueueResource::run_enqueue_locked(Attempt* a) {
  if (a->kind == Kind::kClose) {
    if (closed_) {
      a->status = errors::cancelled("queue '{}' is already closed", name_);
    } else {
      closed_ = true;
    }
    return RunResult::kComplete;
  }
  if (closed_) {
    a->status = errors::cancelled("queue '{}' is closed", name_);
    return RunResult::kComplete;
  }
  RunResult result = RunResult::kNoProgress;
  while (a->next < a->chunks.size() && (capacity_ < 0 || count_ < capacity_)) {
    Chunk& c = a->chunks[a->next];
    const int64_t fit = capacity_ < 0 ? c.size() : std::min(c.size(), capacity_ - count_);
    if (fit == c.size()) {
      push_locked(std::move(c));
      ++a->next;
    } else {  // room for part of a batch: queue its first rows now
      Chunk part = c;
      part.end = c.begin + fit;
      c.begin += fit;
      push_locked(std::move(part));
    }
    count_ += fit;
    result = RunResult::kProgress;
  }
  if (a->next == a->chunks.size()) {
    a->chunks.clear();
    return RunResult::kComplete;
  }
  return result;
}

QueueResource::RunResult QueueResource::run_dequeue_locked(Attempt* a) {
  const auto wanted = [a] { return a->requested - a->taken; };
  if (closed_ && count_ < wanted()) {
    const int64_t asked = a->requested;
    restore_locked(a);
    if (a->allow_small && count_ > 0) {
      a->requested = count_;  // what is left
    } else {
      a->status = errors::out_of_range(
          "queue '{}' is closed and has insufficient elements (requested {}, current size {})",
          name_, asked, count_);
      return RunResult::kComplete;
    }
  }
  // While open, the first min_after_dequeue_ elements stay (Note [Queue stores]).
  const int64_t take = std::min(wanted(), closed_ ? count_ : count_ - min_after_dequeue_);
  if (take <= 0) return RunResult::kNoProgress;
  take_locked(take, &a->chunks);
  a->taken += take;
  count_ -= take;
  if (wanted() > 0) return RunResult::kProgress;
  if (a->many) {
    // A queue without (full) shapes can batch only elements that share them. Rows of one chunk
    // share their shapes, so comparing chunks is enough.
    const Chunk& first = a->chunks.front();
    int64_t row = first.size();
    for (std::size_t k = 1; k < a->chunks.size(); ++k) {
      for (std::size_t c = 0; c < first.tensors.size(); ++c) {
        const Shape expected = first.row_shape(c);
        const Shape got = a->chunks[k].row_shape(c);
        if (got != expected) {
          a->status = errors::invalid_argument(
              "cannot batch {} elements of queue '{}': component {} has shape {} in element 0 "
              "and {} in element {} (give the queue shapes, or use dequeue)",
              a->taken, name_, c, expected.to_string(), got.to_string(), row);
          restore_locked(a);
          return RunResult::kComplete;
        }
      }
      row += a->chunks[k].size();
    }
  }
  return RunResult::kComplete;
}

void QueueResource::restore_locked(Attempt* a) {
  if (!a->chunks.empty()) put_back_locked(std::move(a->chunks));
  count_ += a->taken;
  a->chunks.clear();
  a->taken = 0;
}

void QueueResource::finish(std::vector<Attempt>* finished) {
  for (Attempt& a : *finished) {
    if (a.cm != nullptr && a.token != CancellationManager::kInvalidToken) {
      // False when the cancellation callback is running: it finds no attempt and returns.
      (void)a.cm->deregister_callback(a.token);
    }
    if (a.kind != Kind::kDequeue) {
      a.enqueue_done(a.status);
      continue;
    }
    // The results are assembled here, outside the lock (copies of batch rows, stacking).
    Status status = a.status;
    if (a.stacked_done) {
      Tuple out;
      if (status.ok()) {
        try {
          Chunk& first = a.chunks.front();
          if (a.many) {
            out = stack_chunks(a.chunks, a.taken);
          } else {
            out = first.rows ? first.row(0) : std::move(first.tensors);  // an element: hand it over
          }
        } catch (...) {
          status = status_from_current_exception();
        }
      }
      a.stacked_done(status, std::move(out));
    } else {
      std::vector<Tuple> got;
      if (status.ok()) {
        try {
          got.reserve(static_cast<std::size_t>(a.taken));
          for (const Chunk& c : a.chunks) {
            for (int64_t i = 0; i < c.size(); ++i) got.push_back(c.row(i));
          }
        } catch (...) {
          status = status_from_current_exception();
          got.clear();
        }
      }
      a.dequeue_done(status, std::move(got));
    }
  }
  finished->clear();
}

int64_t QueueResource::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return count_;
}

bool QueueResource::is_closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

int QueueResource::num_pending_enqueues() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const Attempt& a : enqueue_attempts_) n += a.kind == Kind::kEnqueue;
  return n;
}

int QueueResource::num_pending_dequeues() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(dequeue_attempts_.size());
}

std::string QueueResource::debug_string() const {
  std::lock_guard<std::mutex> l(mu_);
  return fmt::format("{} '{}' (size {}, capacity {}, {}; {} enqueues and {} dequeues waiting)",
                     kind_, name_, count_, capacity_ < 0 ? std::string("unbounded") : std::to_string(capacity_),
                     closed_ ? "closed" : "open", enqueue_attempts_.size(), dequeue_attempts_.size());
}

}  // namespace tessera::internal
