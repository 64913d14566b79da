// Streams: ordered queues of asynchronous work on a device, and Events that order work across
// streams. QueuedStream is the engine for streams whose work host threads run.
//
//   s.enqueue([&] { run_kernel(); });
//   Event done;
//   s.record(done).ignore();                       // fresh event: cannot fail
//   other.wait(done).ignore();                     // later work on `other` follows run_kernel()
//   s.then([](Status st) { /* host callback, runs when everything above has run */ });
//
// The model (streams, events, the completion path, copies) is Note [Devices and streams] in
// core/stream.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::internal {

// A point in a stream's order. A Stream records it; it completes (with that stream's status) when
// everything enqueued before the record has run. Copying an Event copies a handle to the same
// event. One-shot: an event is recorded at most once. Thread-safe.
class Event {
 public:
  Event();

  bool recorded() const;
  bool completed() const;
  // The recording stream's status at completion (OK until completed).
  Status status() const;
  // Runs `fn(status)` once the event completes: right now on this thread when it already has,
  // else on the thread that completes it. `fn` must not throw and must not block for long.
  void on_completed(std::function<void(Status)> fn) const;
  // Blocks up to `limit`; true when completed. For tests and teardown, never inside stream work.
  bool wait_for(std::chrono::milliseconds limit) const;

  // For Stream implementations: marks the event recorded (FailedPrecondition when it already
  // was), then completes it and runs the callbacks.
  [[nodiscard]] Status mark_recorded();
  void complete(const Status& status);
  // For Stream implementations whose device can wait on its own events without the host (CUDA's
  // cudaStreamWaitEvent): the recording stream attaches its device's handle (`owner` names the
  // device) until the event completes; nothing when it already has.
  void set_native(const void* owner, void* handle);
  // Calls fn(handle) under the event's lock, so the handle stays the one recorded here, when the
  // event has not completed and carries a handle of `owner`; false otherwise (completed: nothing to
  // wait for; no handle: wait through the host).
  bool with_native(const void* owner, const std::function<void(void*)>& fn) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// An ordered queue of asynchronous work on a device. Work runs in enqueue order, one item at a
// time; a wait() holds back later work until an event completes; a work item that throws puts
// the stream in error (later work is skipped, recorded events and then() callbacks get the error).
// Thread-safe: any thread may enqueue.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;

  virtual void enqueue(std::function<void()> work) = 0;
  // FailedPrecondition when `event` was already recorded.
  [[nodiscard]] virtual Status record(Event& event) = 0;
  // Later work waits for `event`. FailedPrecondition when it was never recorded.
  [[nodiscard]] virtual Status wait(const Event& event) = 0;

  // The async completion path: `done(status)` runs once everything enqueued so far has run, on the
  // thread that finished it. Nothing blocks waiting. `done` must not throw.
  void then(std::function<void(Status)> done);
  // Blocks until everything enqueued so far has run; its status. For tests and teardown.
  Status synchronize(std::chrono::milliseconds limit = std::chrono::minutes(10));
};

// A Stream whose work host threads run: subclasses say which thread runs the queue by
// implementing schedule_run(), and call shutdown() first thing in their destructor.
// See Note [Devices and streams]. Thread-safe.
class QueuedStream : public Stream {
 public:
  explicit QueuedStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void enqueue(std::function<void()> work) override;
  // As enqueue(), but false (and `work` not taken) once the stream is shut down, where enqueue()
  // drops the work.
  [[nodiscard]] bool enqueue_unless_closed(std::function<void()>& work);
  [[nodiscard]] Status record(Event& event) override;
  [[nodiscard]] Status wait(const Event& event) override;

 protected:
  // Arrange for run_pending() to be called soon, on some thread. Called without locks held,
  // never while a run is scheduled or in progress.
  virtual void schedule_run() = 0;
  // Runs queued items in order until the queue is empty or the head waits on an incomplete event
  // (which then reschedules the run when it completes). Never blocks.
  void run_pending();
  // Runs everything queued (drain), then refuses new work: later work is dropped, later events
  // complete Cancelled. Blocks until drained.
  void shutdown();

 private:
  struct Item {
    enum Kind { kWork, kRecord, kWait } kind;
    std::function<void()> work;
    std::optional<Event> event;  // kRecord, kWait (work items allocate no event state)
  };
  void push(Item item);
  void on_event_ready();

  const std::string name_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Item> items_;  // guarded by mu_
  bool running_ = false;    // a run is scheduled or in progress; guarded by mu_
  bool blocked_ = false;    // the head waits on an event; guarded by mu_
  bool closed_ = false;     // guarded by mu_
  Status error_;            // sticky; guarded by mu_
};

}  // namespace tessera::internal
