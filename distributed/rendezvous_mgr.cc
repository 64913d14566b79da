// Note [Remote rendezvous]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Where a tensor produced on task A is consumed on task B, the master's partitions hold a _Send on
// A and a _Recv on B under one name, "A's CPU;B's CPU;tensor" (Note [Graph partition]). The _Send
// puts the tensor into A's step rendezvous under that name; the _Recv pulls it from A (the task of
// the name's send device) through the TensorPuller, and A serves the pull as soon as the tensor is
// there (before or after the pull arrives: whichever comes second completes the pair). So tensors
// go directly from producer to consumer, never through the master.
//
// A step's state goes away once its runs here have finished and every slot has been pulled, so
// successful steps need no cleanup call. A failure anywhere aborts the step: the master aborts it
// on every task of the step, and a task whose own run failed aborts it here at once. Aborting
// fails every waiting and later exchange of the step with the reason, cancels this task's pulls in
// flight and its runs (a run may be blocked on a queue, not on an exchange). The last 1024 aborted
// step ids are remembered (Note [Memory of things past]), so an exchange that arrives after the
// abort fails at once instead of waiting for a tensor that will never come.
//
// Pulls for a step that has no run here wait start_timeout (ServerOptions::step_start_timeout,
// 60 s) for one to begin (the master starts every task's run at once, so a real step's pulls wait
// milliseconds), then fail Unavailable and the step is forgotten: a pull for a step that never
// comes (bogus, or of a master that died) costs nothing after that. A pull's caller may also give
// up earlier (serve()'s give-up: its deadline passed, its connection is gone).
#include "distributed/rendezvous_mgr.h"

#include <atomic>
#include <utility>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/map_util.h"

namespace tessera::internal {
namespace {

constexpr std::size_t kAbortedMemory = 1024;

// The task of a named key's send device: "/job:J/replica:0/task:T".
StatusOr<std::string> source_task(const std::string& key) {
  const std::size_t semi = key.find(';');
  auto spec = DeviceSpec::parse(key.substr(0, semi));
  if (semi == std::string::npos || !spec.ok() || !spec.value().job || !spec.value().task) {
    return errors::internal("rendezvous key '{}' does not name a task's device first", key);
  }
  return fmt::format("/job:{}/replica:{}/task:{}", *spec.value().job, spec.value().replica.value_or(0),
                     *spec.value().task);
}

// One pull from another task: finished by the tensor, an error, a cancellation or the step's
// abort, whichever comes first.
struct Pull : std::enable_shared_from_this<Pull> {
  std::mutex mu;
  bool finished = false;                 // guarded by mu
  std::function<void()> give_up;         // guarded by mu
  CancellationManager::Token token = CancellationManager::kInvalidToken;  // guarded by mu
  Rendezvous::Callback done;
  CancellationManager* cancellation = nullptr;

  // Registers with `cancellation` (set); false when it has fired already.
  bool watch_cancellation() {
    std::lock_guard<std::mutex> l(mu);  // a callback firing at once waits here, then finds `token`
    token = cancellation->register_callback([self = shared_from_this()](const Status& reason) { self->finish(reason); });
    return token != CancellationManager::kInvalidToken;
  }
  void finish(StatusOr<Tensor> r) {
    std::function<void()> release;
    CancellationManager::Token registered;
    {
      std::lock_guard<std::mutex> l(mu);
      if (finished) return;
      finished = true;
      release = std::move(give_up);
      registered = token;
    }
    if (registered != CancellationManager::kInvalidToken) cancellation->deregister_callback(registered);
    if (release && !r.ok()) release();  // ended early: the transport can drop the call
    auto d = std::move(done);
    if (r.ok()) {
      d(Status(), std::move(r).value());
    } else {
      d(r.status(), Tensor());
    }
  }
  void set_give_up(std::function<void()> g) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!finished) {
        give_up = std::move(g);
        return;
      }
    }
    if (g) g();
  }
};

}  // namespace

// ---- StepRendezvous ----

Status StepRendezvous::send(const RendezvousKey& key, Tensor value) {
  if (key.slot >= 0) return errors::internal("rendezvous of step {}: slot keys belong to in-process plans", step_id_);
  std::function<void(StatusOr<Tensor>)> waiter;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return aborted_;
    Slot& slot = slots_[key.name];
    if (slot.has_value) return errors::internal("key {} of step {} sent twice", key.debug_string(), step_id_);
    if (!slot.waiting) {
      slot.has_value = true;
      slot.value = std::move(value);
      return Status();
    }
    waiter = std::move(slot.waiter);
    slots_.erase(key.name);
    mgr_->maybe_forget(this);
  }
  waiter(std::move(value));
  return Status();
}

void StepRendezvous::recv_async(const RendezvousKey& key, CancellationManager* cancellation, Callback done) {
  if (key.slot >= 0) {
    return done(errors::internal("rendezvous of step {}: slot keys belong to in-process plans", step_id_), Tensor());
  }
  auto src = source_task(key.name);
  if (!src.ok()) return done(src.status(), Tensor());
  if (src.value() == mgr_->task()) {  // both ends on this task
    mgr_->serve(step_id_, key.name, [done = std::move(done)](StatusOr<Tensor> r) {
      if (r.ok()) return done(Status(), std::move(r).value());
      done(r.status(), Tensor());
    });
    return;
  }
  auto pull = std::make_shared<Pull>();
  pull->done = std::move(done);
  pull->cancellation = cancellation;
  if (cancellation != nullptr && !pull->watch_cancellation()) return pull->finish(cancellation->reason());
  Status aborted;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) {
      aborted = aborted_;
      mgr_->maybe_forget(this);
    } else {
      on_abort_.push_back([pull](const Status& reason) { pull->finish(reason); });  // the step's abort ends it
    }
  }
  if (!aborted.ok()) return pull->finish(aborted);
  pull->set_give_up(mgr_->puller_->pull(src.value(), step_id_, key.name,
                                        [pull](StatusOr<Tensor> r) { pull->finish(std::move(r)); }));
}

void StepRendezvous::abort(const Status& status) { mgr_->abort_step(step_id_, status); }

// ---- RendezvousMgr ----

RendezvousMgr::RendezvousMgr(std::string task, TensorPuller* puller, std::chrono::milliseconds start_timeout)
    : task_(std::move(task)), puller_(puller), start_timeout_(start_timeout), live_(std::make_shared<Liveness>()),
      aborted_(kAbortedMemory) {
  live_->mgr = this;
}

RendezvousMgr::~RendezvousMgr() {
  {
    std::lock_guard<std::mutex> l(live_->mu);  // waits for a timer callback in progress
    live_->mgr = nullptr;
  }
  std::vector<std::shared_ptr<StepRendezvous>> steps;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, r] : steps_) steps.push_back(r);
  }
  for (auto& r : steps) {
    std::lock_guard<std::mutex> rl(r->mu_);
    if (r->start_timer_) TimerQueue::global().cancel(*r->start_timer_);
  }
}

std::shared_ptr<StepRendezvous> RendezvousMgr::find(int64_t step_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto& r = steps_[step_id];
  if (!r) {
    r.reset(new StepRendezvous(this, step_id));
    if (const Status* aborted = aborted_.find(step_id)) r->aborted_ = *aborted;
    if (!stopped_.ok()) r->aborted_ = stopped_;
  }
  return r;
}

void RendezvousMgr::maybe_forget(StepRendezvous* r, bool unstarted) {
  // Done here: no run, nothing waiting or unpulled, and the run has been (or, aborted, never will
  // be; or, `unstarted`, its pulls gave up before it began: a run that comes later starts afresh).
  // An exchange arriving later for an aborted step finds the abort in aborted_.
  if (r->runs_ != 0 || !r->slots_.empty()) return;
  if (!r->ran_ && r->aborted_.ok() && !(unstarted && r->on_abort_.empty())) return;
  if (r->start_timer_) {  // its pulls are gone: so goes their start timeout (and what it holds)
    TimerQueue::global().cancel(*r->start_timer_);
    r->start_timer_.reset();
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = steps_.find(r->step_id_);
  if (it != steps_.end() && it->second.get() == r) {
    steps_.erase(it);
    shrink_if_sparse(steps_);
  }
}

StatusOr<std::shared_ptr<StepRendezvous>> RendezvousMgr::begin_run(int64_t step_id,
                                                                    std::function<void(const Status&)> cancel) {
  std::shared_ptr<StepRendezvous> r = find(step_id);
  std::lock_guard<std::mutex> l(r->mu_);
  if (!r->aborted_.ok()) {
    maybe_forget(r.get());
    return r->aborted_;
  }
  if (r->start_timer_) {  // the pulls that came first now wait for this run
    TimerQueue::global().cancel(*r->start_timer_);
    r->start_timer_.reset();
  }
  ++r->runs_;
  r->on_abort_.push_back(std::move(cancel));
  return r;
}

void RendezvousMgr::end_run(int64_t step_id, const Status& status) {
  std::shared_ptr<StepRendezvous> r = find(step_id);
  bool abort = false;
  {
    std::lock_guard<std::mutex> l(r->mu_);
    --r->runs_;
    r->ran_ = true;
    abort = !status.ok() && r->aborted_.ok();
    if (!abort) maybe_forget(r.get());
  }
  if (abort) abort_step(step_id, status);
}

RendezvousMgr::GiveUp RendezvousMgr::serve(int64_t step_id, const std::string& key,
                                           std::function<void(StatusOr<Tensor>)> done) {
  std::shared_ptr<StepRendezvous> r = find(step_id);
  StatusOr<Tensor> result = errors::internal("unset");
  {
    std::lock_guard<std::mutex> l(r->mu_);
    if (!r->aborted_.ok()) {
      result = r->aborted_;
      maybe_forget(r.get());
    } else {
      StepRendezvous::Slot& slot = r->slots_[key];
      if (slot.waiting) {
        result = errors::invalid_argument("{}: key '{}' of step {} pulled twice", task_, key, step_id);
      } else if (!slot.has_value) {
        slot.waiting = true;
        slot.waiter = std::move(done);
        slot.waiter_id = next_waiter_.fetch_add(1, std::memory_order_relaxed);
        if (r->runs_ == 0 && !r->ran_ && !r->start_timer_) {
          // No run of the step here yet: it has start_timeout_ to begin (Note [Remote rendezvous]).
          auto armed = TimerQueue::global().schedule(TimerQueue::Clock::now() + start_timeout_,
                                                     [live = live_, step_id] {
                                                       std::lock_guard<std::mutex> l(live->mu);
                                                       if (live->mgr != nullptr) live->mgr->expire_unstarted(step_id);
                                                     });
          if (armed.ok()) r->start_timer_ = armed.value();  // else: it waits as before, for the step or an abort
        }
        return [live = live_, r, key, id = slot.waiter_id](const Status& reason) {
          std::function<void(StatusOr<Tensor>)> waiter;
          {
            std::lock_guard<std::mutex> l(live->mu);
            if (live->mgr == nullptr) return;
            std::lock_guard<std::mutex> rl(r->mu_);
            auto it = r->slots_.find(key);
            if (it == r->slots_.end() || !it->second.waiting || it->second.waiter_id != id) return;  // served
            waiter = std::move(it->second.waiter);
            r->slots_.erase(it);
            live->mgr->maybe_forget(r.get(), /*unstarted=*/true);
          }
          waiter(reason);
        };
      } else {
        result = std::move(slot.value);
        r->slots_.erase(key);
        maybe_forget(r.get());
      }
    }
  }
  done(std::move(result));
  return [](const Status&) {};
}

void RendezvousMgr::expire_unstarted(int64_t step_id) {
  std::shared_ptr<StepRendezvous> r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    r = it->second;
  }
  std::vector<std::function<void(StatusOr<Tensor>)>> waiters;
  {
    std::lock_guard<std::mutex> l(r->mu_);
    r->start_timer_.reset();
    if (r->runs_ != 0 || r->ran_) return;
    for (auto it = r->slots_.begin(); it != r->slots_.end();) {
      if (it->second.waiting) {
        waiters.push_back(std::move(it->second.waiter));
        it = r->slots_.erase(it);
      } else {
        ++it;
      }
    }
    maybe_forget(r.get(), /*unstarted=*/true);
  }
  const Status reason = errors::unavailable("{}: step {} did not start on this task within {} ms of a pull of it",
                                            task_, step_id, start_timeout_.count());
  for (auto& w : waiters) w(reason);
}

void RendezvousMgr::abort_step(int64_t step_id, const Status& reason) {
  std::shared_ptr<StepRendezvous> r;
  {
    std::lock_guard<std::mutex> l(mu_);
    aborted_.remember(step_id, same_reason(&aborted_reason_, reason));
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    r = it->second;
  }
  std::vector<std::function<void(const Status&)>> cancels;
  std::vector<std::function<void(StatusOr<Tensor>)>> waiters;
  {
    std::lock_guard<std::mutex> l(r->mu_);
    if (!r->aborted_.ok()) return;
    r->aborted_ = reason;
    for (auto& [key, slot] : r->slots_) {
      if (slot.waiting) waiters.push_back(std::move(slot.waiter));
    }
    r->slots_.clear();
    cancels.swap(r->on_abort_);
    maybe_forget(r.get());
  }
  for (auto& w : waiters) w(reason);
  for (auto& c : cancels) c(reason);
}

void RendezvousMgr::stop(const Status& reason) {
  std::vector<int64_t> steps;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = reason;
    for (const auto& [id, r] : steps_) steps.push_back(id);
  }
  for (int64_t id : steps) abort_step(id, reason);
}

int RendezvousMgr::num_steps() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(steps_.size());
}

}  // namespace tessera::internal
