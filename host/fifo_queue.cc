#include "host/fifo_queue.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/shape_util.h"

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
// puts those tuples back at the front, in order: they were the oldest elements, and only the
// head attempt holds any. A plain close() is queued in the enqueue list, so the enqueues that
// arrived before it complete first (as room frees) and the ones after it fail with
// CancelledError; close(cancel_pending_enqueues) fails every waiting enqueue at once.
//
// Cancellation: an attempt with a CancellationManager that cannot complete at once registers a
// callback (under mu_, right after the first try) that completes it with the cancellation
// reason; an attempt that completes at once never registers (most do). The callback holds only
// the attempt id and a weak reference, so it does nothing if the attempt already completed. The
// lock order is mu_ -> the manager's lock; the manager runs callbacks outside its lock.

namespace {

std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string out = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ", ";
    out += shapes[i].to_string();
  }
  return out + "]";
}

}  // namespace

FIFOQueueResource::FIFOQueueResource(std::string name, int64_t capacity, std::vector<DType> dtypes,
                                     std::vector<Shape> shapes)
    : name_(std::move(name)),
      capacity_(capacity),
      dtypes_(std::move(dtypes)),
      shapes_(std::move(shapes)) {
  TESSERA_CHECK(!dtypes_.empty());
  TESSERA_CHECK(shapes_.empty() || shapes_.size() == dtypes_.size());
}

FIFOQueueResource::~FIFOQueueResource() {
  // Normally empty: a closing session cancels its steps first. A step still waiting would never
  // end, so complete its attempts. (Cancellation callbacks hold only a weak reference.)
  cancel_all(errors::cancelled("queue '{}' was destroyed", name_));
}

Status FIFOQueueResource::validate_tuple(const Tuple& tuple) const {
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

Status FIFOQueueResource::validate_batch(const Tuple& batch) const {
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

std::vector<FIFOQueueResource::Tuple> FIFOQueueResource::split_batch(const Tuple& batch) {
  const int64_t rows = batch.empty() ? 0 : batch[0].shape().dim(0);
  std::vector<Tuple> out(static_cast<std::size_t>(rows));
  for (const Tensor& component : batch) {
    const Shape row_shape = component.shape().sub_shape(1);
    const auto* src = static_cast<const char*>(component.raw_data());
    for (int64_t r = 0; r < rows; ++r) {
      Tensor row(component.dtype(), row_shape);
      const std::size_t bytes = row.bytes();
      if (bytes) std::memcpy(row.raw_mutable_data(), src + r * bytes, bytes);
      out[r].push_back(std::move(row));
    }
  }
  return out;
}

FIFOQueueResource::Tuple FIFOQueueResource::stack_tuples(const std::vector<Tuple>& tuples) {
  TESSERA_CHECK(!tuples.empty());
  const auto n = static_cast<int64_t>(tuples.size());
  Tuple out;
  for (std::size_t c = 0; c < tuples[0].size(); ++c) {
    const Tensor& first = tuples[0][c];
    Tensor batch(first.dtype(), prepend_dim(n, first.shape()));
    const std::size_t bytes = first.bytes();
    auto* dst = static_cast<char*>(batch.raw_mutable_data());
    for (int64_t r = 0; r < n; ++r) {
      if (bytes) std::memcpy(dst + r * bytes, tuples[r][c].raw_data(), bytes);
    }
    out.push_back(std::move(batch));
  }
  return out;
}

StatusOr<FIFOQueueResource::Tuple> FIFOQueueResource::empty_batch() const {
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

void FIFOQueueResource::try_enqueue(std::vector<Tuple> rows, CancellationManager* cm,
                                    EnqueueCallback done) {
  if (rows.empty()) {  // an empty enqueue_many succeeds at once, as in TensorFlow
    done(Status());
    return;
  }
  Attempt a;
  a.kind = Kind::kEnqueue;
  a.tuples = std::move(rows);
  a.cm = cm;
  a.enqueue_done = std::move(done);
  add_attempt(std::move(a));
}

void FIFOQueueResource::try_dequeue(int64_t n, bool many, bool allow_small,
                                    CancellationManager* cm, DequeueCallback done) {
  TESSERA_CHECK(n >= 1);
  Attempt a;
  a.kind = Kind::kDequeue;
  a.requested = n;
  a.many = many;
  a.allow_small = allow_small;
  a.cm = cm;
  a.dequeue_done = std::move(done);
  add_attempt(std::move(a));
}

void FIFOQueueResource::close(bool cancel_pending_enqueues, CancellationManager* cm,
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

void FIFOQueueResource::add_attempt(Attempt attempt) {
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
        std::weak_ptr<FIFOQueueResource> self = weak_from_this();
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

void FIFOQueueResource::cancel(int64_t id, const Status& reason) {
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

void FIFOQueueResource::cancel_all(const Status& reason) {
  std::vector<Attempt> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    const Status status = reason.ok() ? errors::cancelled("queue '{}' was reset", name_) : reason;
    // Back to front so restored partial batches keep their order.
    for (auto it = dequeue_attempts_.rbegin(); it != dequeue_attempts_.rend(); ++it) {
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

void FIFOQueueResource::flush_locked(std::vector<Attempt>* finished) {
  bool changed;
  do {
    changed = try_attempts_locked(&enqueue_attempts_, finished);
    changed = try_attempts_locked(&dequeue_attempts_, finished) || changed;
  } while (changed);
}

bool FIFOQueueResource::try_attempts_locked(AttemptList* attempts, std::vector<Attempt>* finished) {
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

FIFOQueueResource::RunResult FIFOQueueResource::run_enqueue_locked(Attempt* a) {
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
  while (a->next < a->tuples.size() &&
         (capacity_ < 0 || static_cast<int64_t>(elements_.size()) < capacity_)) {
    elements_.push_back(std::move(a->tuples[a->next++]));
    result = RunResult::kProgress;
  }
  if (a->next == a->tuples.size()) {
    a->tuples.clear();
    return RunResult::kComplete;
  }
  return result;
}

FIFOQueueResource::RunResult FIFOQueueResource::run_dequeue_locked(Attempt* a) {
  const auto wanted = [a] { return a->requested - static_cast<int64_t>(a->tuples.size()); };
  if (closed_ && static_cast<int64_t>(elements_.size()) < wanted()) {
    const int64_t asked = a->requested;
    restore_locked(a);
    if (a->allow_small && !elements_.empty()) {
      a->requested = static_cast<int64_t>(elements_.size());  // what is left
    } else {
      a->status = errors::out_of_range(
          "queue '{}' is closed and has insufficient elements (requested {}, current size {})",
          name_, asked, elements_.size());
      return RunResult::kComplete;
    }
  }
  RunResult result = RunResult::kNoProgress;
  while (wanted() > 0 && !elements_.empty()) {
    a->tuples.push_back(std::move(elements_.front()));
    elements_.pop_front();
    result = RunResult::kProgress;
  }
  if (wanted() > 0) return result;
  if (a->many) {
    // A queue without (full) shapes can batch only elements that share them.
    const Tuple& first = a->tuples.front();
    for (std::size_t r = 1; r < a->tuples.size(); ++r) {
      for (std::size_t c = 0; c < first.size(); ++c) {
        if (a->tuples[r][c].shape() != first[c].shape()) {
          a->status = errors::invalid_argument(
              "cannot batch {} elements of queue '{}': component {} has shape {} in element 0 "
              "and {} in element {} (give the queue shapes, or use dequeue)",
              a->tuples.size(), name_, c, first[c].shape().to_string(),
              a->tuples[r][c].shape().to_string(), r);
          restore_locked(a);
          return RunResult::kComplete;
        }
      }
    }
  }
  return RunResult::kComplete;
}

void FIFOQueueResource::restore_locked(Attempt* a) {
  for (auto it = a->tuples.rbegin(); it != a->tuples.rend(); ++it) {
    elements_.push_front(std::move(*it));
  }
  a->tuples.clear();
}

void FIFOQueueResource::finish(std::vector<Attempt>* finished) {
  for (Attempt& a : *finished) {
    if (a.cm != nullptr && a.token != CancellationManager::kInvalidToken) {
      // False when the cancellation callback is running: it finds no attempt and returns.
      (void)a.cm->deregister_callback(a.token);
    }
    if (a.kind == Kind::kDequeue) {
      std::vector<Tuple> got;
      if (a.status.ok()) got = std::move(a.tuples);
      a.dequeue_done(a.status, std::move(got));
    } else {
      a.enqueue_done(a.status);
    }
  }
  finished->clear();
}

int64_t FIFOQueueResource::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(elements_.size());
}

bool FIFOQueueResource::is_closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

int FIFOQueueResource::num_pending_enqueues() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const Attempt& a : enqueue_attempts_) n += a.kind == Kind::kEnqueue;
  return n;
}

int FIFOQueueResource::num_pending_dequeues() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(dequeue_attempts_.size());
}

std::string FIFOQueueResource::debug_string() const {
  std::lock_guard<std::mutex> l(mu_);
  return fmt::format("FIFOQueue '{}' (size {}, capacity {}, {}; {} enqueues and {} dequeues waiting)",
                     name_, elements_.size(), capacity_ < 0 ? std::string("unbounded") : std::to_string(capacity_),
                     closed_ ? "closed" : "open", enqueue_attempts_.size(), dequeue_attempts_.size());
}

}  // namespace tessera::internal
