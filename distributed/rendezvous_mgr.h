// A cluster task's side of the exchange between tasks: per step, a Rendezvous (core/rendezvous.h)
// whose named keys ("send_device;recv_device;tensor") are served to the tasks that pull them and
// pulled from the tasks that hold them. Knows no transport: pulls go through a TensorPuller, which
// the transport implements, and the transport hands the pulls it receives to serve().
// See Note [Remote rendezvous] in rendezvous_mgr.cc.
//
//   RendezvousMgr mgr("/job:worker/replica:0/task:1", &puller);
//   auto r = mgr.begin_run(step_id, cancel);      // the step's rendezvous, or why it cannot run
//   // ... runs the partition with r.value().get(), which its _Send/_Recv nodes go through ...
//   mgr.end_run(step_id, run_status);
//   auto give_up = mgr.serve(step_id, key, done); // another task's pull (RecvTensor)
//   give_up(errors::deadline_exceeded(...));      // its caller's deadline passed: `done` fails now
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/recent_memo.h"
#include "core/rendezvous.h"
#include "core/status.h"
#include "core/timer.h"

namespace tessera::internal {

// Reaches the other tasks' rendezvous.
class TensorPuller {
 public:
  using PullDone = std::function<void(StatusOr<Tensor>)>;
  virtual ~TensorPuller() = default;
  // Asks task `task` for what its rendezvous holds under `key` in step `step_id`; `done` runs once,
  // when the tensor arrives or the pull fails (a task lost is UnavailableError). Returns a function
  // that gives up on the pull (then `done` may never run).
  virtual std::function<void()> pull(const std::string& task, int64_t step_id, const std::string& key, PullDone done) = 0;
};

class RendezvousMgr;

// One step's rendezvous on this task. Slot keys belong to in-process plans and are refused here.
class StepRendezvous final : public Rendezvous {
 public:
  Status send(const RendezvousKey& key, Tensor value) override;
  void recv_async(const RendezvousKey& key, CancellationManager* cancellation, Callback done) override;
  // Aborts the step on this task (RendezvousMgr::abort_step).
  void abort(const Status& status) override;

 private:
  friend class RendezvousMgr;
  struct Slot {
    bool has_value = false;
    Tensor value;
    bool waiting = false;
    std::function<void(StatusOr<Tensor>)> waiter;  // a pull that came first
    uint64_t waiter_id = 0;                        // which serve() the waiter is (its give-up's)
  };
  StepRendezvous(RendezvousMgr* mgr, int64_t step_id) : mgr_(mgr), step_id_(step_id) {}

  RendezvousMgr* const mgr_;  // Not owned: outlives its steps.
  const int64_t step_id_;
  std::mutex mu_;
  Status aborted_;                                   // guarded by mu_
  std::unordered_map<std::string, Slot> slots_;      // guarded by mu_
  int runs_ = 0;                                     // guarded by mu_: runs of the step here
  bool ran_ = false;                                 // guarded by mu_
  std::vector<std::function<void(const Status&)>> on_abort_;  // guarded by mu_
  std::optional<TimerQueue::Id> start_timer_;  // guarded by mu_: pulls came before any run (serve())
};

class RendezvousMgr {
 public:
  // `task`: this task ("/job:J/replica:0/task:T"); `puller`: not owned, outlives this.
  // `start_timeout`: how long pulls of a step that has no run on this task wait for one to begin
  // before they fail (a step that never comes: a bogus or stale RecvTensor).
  static constexpr std::chrono::milliseconds kDefaultStartTimeout{60000};
  RendezvousMgr(std::string task, TensorPuller* puller, std::chrono::milliseconds start_timeout = kDefaultStartTimeout);
  ~RendezvousMgr();
  RendezvousMgr(const RendezvousMgr&) = delete;
  RendezvousMgr& operator=(const RendezvousMgr&) = delete;

  const std::string& task() const { return task_; }
  // The step's rendezvous, made on first use (aborted from the start for a step aborted lately or
  // after stop()).
  std::shared_ptr<StepRendezvous> find(int64_t step_id);
  // A run of the step starts here; `cancel` runs if the step is aborted before end_run. The step's
  // rendezvous, or the abort status when the step is aborted already.
  StatusOr<std::shared_ptr<StepRendezvous>> begin_run(int64_t step_id, std::function<void(const Status&)> cancel);
  // The run ended with `status`; a failure aborts the step here (its pulls, its waiting servers).
  void end_run(int64_t step_id, const Status& status);
  // Another task pulls `key` of step `step_id`: `done` runs once, with the tensor as soon as it is
  // sent here, or with the step's abort status, or UnavailableError when no run of the step has
  // begun here within the start timeout. Returns a give-up: calling it with a reason before the
  // pull is served fails `done` with that reason at once and drops the pull (its caller's deadline
  // passed, or its connection is gone); later calls, or calls after `done` ran, do nothing.
  using GiveUp = std::function<void(const Status&)>;
  GiveUp serve(int64_t step_id, const std::string& key, std::function<void(StatusOr<Tensor>)> done);
  // Fails the step's waiting and later exchanges here with `reason` and cancels its runs and pulls.
  void abort_step(int64_t step_id, const Status& reason);
  // Aborts every step, and every later one, with `reason`.
  void stop(const Status& reason);
  // Steps with state here (for tests: a successful step leaves none).
  int num_steps();

 private:
  friend class StepRendezvous;
  // Drops the step's state once nothing refers to it (r->mu_ held); `unstarted`: also a step that
  // has not run here, once its pulls gave up.
  void maybe_forget(StepRendezvous* r, bool unstarted = false);
  // The start timeout of step `step_id` passed: fails its waiting pulls if no run has begun.
  void expire_unstarted(int64_t step_id);
  // Lets a timer callback reach this manager only while it lives.
  struct Liveness {
    std::mutex mu;
    RendezvousMgr* mgr;  // guarded by mu; null once destroyed
  };

  const std::string task_;
  TensorPuller* const puller_;
  const std::chrono::milliseconds start_timeout_;
  const std::shared_ptr<Liveness> live_;
  std::atomic<uint64_t> next_waiter_{1};
  std::mutex mu_;
  Status stopped_;                                                         // guarded by mu_
  std::unordered_map<int64_t, std::shared_ptr<StepRendezvous>> steps_;     // guarded by mu_
  RecentMemo<int64_t, Status> aborted_;                                    // guarded by mu_: the latest 1024
  Status aborted_reason_;                                                  // guarded by mu_: the latest kept
};

}  // namespace tessera::internal
