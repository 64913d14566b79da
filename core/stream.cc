#include "core/stream.h"

#include <cstdlib>
#include <exception>

#include "core/logging.h"

namespace tessera::internal {

// Note [Devices and streams]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A device is memory (its Allocator) plus ordered queues of work (its Streams). The model is
// CUDA's, so that the simulated accelerator exercises the same bridging code as the GPU will:
//
// * A stream runs its work in enqueue order, one item at a time. Enqueueing never waits: the
//   caller hands the work over and goes on. Kernels, copies and host callbacks are all stream
//   work; a copy is just work on a copy stream (SimDevice has one host-to-device and one
//   device-to-host stream next to its compute streams, as a GPU has copy engines).
// * Order across streams is expressed with Events: record(e) on stream A marks a point in A's
//   order; wait(e) on stream B holds back B's later work until A has passed that point. An event
//   completes with A's status, and a failed event puts the waiting stream in error too, so an
//   error travels along the dependency instead of being silently lost.
// * The completion path is Stream::then(done): it records a fresh event and asks the event to run
//   `done` when it completes, on the thread that completes it. No CPU thread ever blocks waiting
//   for device work (the executor's threads stay free); the only blocking calls are
//   Event::wait_for and Stream::synchronize, meant for tests and teardown.
// * QueuedStream is the host-side engine for streams whose work host threads run: a queue plus
//   "at most one run in flight". A wait on an incomplete event ends the run and registers a
//   callback on the event that schedules the next run, so a run never blocks either. The CPU
//   device schedules runs on the shared inter-op ThreadPool; SimDevice gives each stream its own
//   thread. The CUDA device will map enqueue/record/wait to launches, cudaEventRecord and
//   cudaStreamWaitEvent, and complete tessera Events from a host callback, so then() is the same.
// * A work item that throws puts its stream in error (sticky, as in CUDA): later work is skipped,
//   and events and then() callbacks get the error. Copies report their own failures through their
//   callback instead, so an allocation failure does not poison a copy stream.
// * Teardown drains: a device's destructor runs everything already queued (waits included, which
//   always end because every stream drains), then joins its threads. Work enqueued afterwards is
//   dropped and its events complete Cancelled, so nothing waits forever.

// ----- Event -----

struct Event::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool recorded = false;   // guarded by mu
  bool completed = false;  // guarded by mu
  Status status;           // guarded by mu
  std::vector<std::function<void(Status)>> callbacks;  // guarded by mu
  const void* native_owner = nullptr;  // guarded by mu; cleared on completion
  void* native = nullptr;              // guarded by mu
};

Event::Event() : state_(std::make_shared<State>()) {}

bool Event::recorded() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->recorded;
}

bool Event::completed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->completed;
}

Status Event::status() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

namespace {
void run_callback(const std::function<void(Status)>& fn, const Status& s) {
  try {
    fn(s);
  } catch (const std::exception& e) {
    TESSERA_LOG(kError, "a stream completion callback threw: {}", e.what());
    std::abort();
  }
}
}  // namespace

void Event::on_completed(std::function<void(Status)> fn) const {
  Status s;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->completed) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
    s = state_->status;
  }
  run_callback(fn, s);
}

bool Event::wait_for(std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, limit, [&] { return state_->completed; });
}

Status Event::mark_recorded() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->recorded) return errors::failed_precondition("event recorded twice (events are one-shot)");
  state_->recorded = true;
  return Status::ok_status();
}

void Event::set_native(const void* owner, void* handle) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->completed) return;
  state_->native_owner = owner;
  state_->native = handle;
}

bool Event::with_native(const void* owner, const std::function<void(void*)>& fn) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->completed || state_->native_owner != owner || owner == nullptr) return false;
  fn(state_->native);
  return true;
}

void Event::complete(const Status& status) {
  std::vector<std::function<void(Status)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->completed) return;
    state_->completed = true;
    state_->native_owner = nullptr;  // the handle may be recorded again from now on
    state_->native = nullptr;
    state_->status = status;
    callbacks.swap(state_->callbacks);
    state_->cv.notify_all();
  }
  for (auto& fn : callbacks) run_callback(fn, status);
}

// ----- Stream -----

void Stream::then(std::function<void(Status)> done) {
  Event e;
  Status s = record(e);
  TESSERA_CHECK(s.ok());  // a fresh event cannot have been recorded
  e.on_completed(std::move(done));
}

Status Stream::synchronize(std::chrono::milliseconds limit) {
  Event e;
  TESSERA_RETURN_IF_ERROR(record(e));
  if (!e.wait_for(limit)) {
    return errors::deadline_exceeded("stream {} did not finish its work within {} ms", name(), limit.count());
  }
  return e.status();
}

// ----- QueuedStream -----

void QueuedStream::push(Item item) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) {
      items_.push_back(std::move(item));
      if (!running_ && !blocked_) {
        running_ = true;
        schedule = true;
      }
      item.kind = Item::kWork;  // moved from: nothing left to drop below
    }
  }
  if (schedule) {
    schedule_run();
  } else if (item.kind == Item::kRecord) {
    // Shut down: the event would never complete otherwise.
    item.event->complete(errors::cancelled("stream {} is shut down", name_));
  }
}

void QueuedStream::enqueue(std::function<void()> work) { push(Item{Item::kWork, std::move(work), std::nullopt}); }

bool QueuedStream::enqueue_unless_closed(std::function<void()>& work) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    items_.push_back(Item{Item::kWork, std::move(work), std::nullopt});
    if (!running_ && !blocked_) {
      running_ = true;
      schedule = true;
    }
  }
  if (schedule) schedule_run();
  return true;
}

Status QueuedStream::record(Event& event) {
  TESSERA_RETURN_IF_ERROR(event.mark_recorded());
  push(Item{Item::kRecord, nullptr, event});
  return Status::ok_status();
}

Status QueuedStream::wait(const Event& event) {
  if (!event.recorded()) {
    return errors::failed_precondition("stream {} asked to wait on an event that was never recorded", name_);
  }
  push(Item{Item::kWait, nullptr, event});
  return Status::ok_status();
}

void QueuedStream::on_event_ready() {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocked_ = false;
    if (!items_.empty()) {
      running_ = true;
      schedule = true;
    } else {
      idle_cv_.notify_all();
    }
  }
  if (schedule) schedule_run();
}

void QueuedStream::run_pending() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (items_.empty()) {
      running_ = false;
      idle_cv_.notify_all();  // under the lock: shutdown() may destroy us right after
      return;
    }
    Item& head = items_.front();
    if (head.kind == Item::kWait) {
      if (!head.event->completed()) {
        // Park until the event completes; its callback schedules the next run. Registering may run
        // the callback at once (the event completed meanwhile), so do it without the lock.
        Event event = *head.event;
        blocked_ = true;
        running_ = false;
        lock.unlock();
        event.on_completed([this](Status) { on_event_ready(); });
        return;
      }
      Status s = head.event->status();
      if (!s.ok() && error_.ok()) error_ = s.with_prefix("waited-on event failed: ");
      items_.pop_front();
      continue;
    }
    Item item = std::move(head);
    items_.pop_front();
    Status error = error_;
    lock.unlock();
    if (item.kind == Item::kRecord) {
      item.event->complete(error);
    } else if (error.ok()) {
      Status failed;
      try {
        item.work();
      } catch (...) {
        failed = status_from_current_exception();
      }
      if (!failed.ok()) {
        lock.lock();
        if (error_.ok()) error_ = failed;
        lock.unlock();
      }
    }
    item = Item{};  // destroy captured state before taking the lock again
    lock.lock();
  }
}

void QueuedStream::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return items_.empty() && !running_ && !blocked_; });
  closed_ = true;
}

}  // namespace tessera::internal
