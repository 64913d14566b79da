// The master service: the sessions clients open on this task (master_session.cc runs them), found by
// handle, reclaimed when idle, bounded in number.
#include "distributed/master.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <functional>
#include <shared_mutex>
#include <utility>

#include <fmt/format.h>

#include "core/map_util.h"
#include "core/memory_release.h"
#include "core/thread_pool.h"
#include "distributed/incarnation.h"
#include "distributed/service_names.h"
#include "tessera/errors.h"

namespace tessera::internal {

namespace pb = wire::pb;

// ---- Master ----

// Note [Idle sessions]
// ~~~~~~~~~~~~~~~~~~~~
// A client that vanishes without closing its sessions (a killed process, a lost laptop) would leave
// them, their graphs and their workers' partitions here for good. As TensorFlow's master does, a
// session that has had no call in flight (RunStep, ExtendSession) for `session_idle_timeout` is
// closed by the path CloseSession takes (MasterSession::close(): partitions deregistered, off the
// caller's thread). A call in flight is never cut short, however long it waits (a dequeue may block
// for hours): the count of calls in flight sits beside the session in sessions_, so looking a
// session up and counting its call happen under one lock, and a session taken out with no call in
// flight can get none. Its clock restarts when its last call ends (a call ends when its `done` is
// called, or destroyed uncalled).
//
// No thread per session, and no polling: one check is armed on the process's timer
// (core/timer.h) for the earliest moment a session can have been idle for the timeout, and each
// check arms the next; none is armed while no session is idle. Checks are at least min(timeout/8,
// 1 s) apart, since each scans every session. A session becoming idle arms one if none is armed,
// which is also how a check the timer refused (ResourceExhausted) is tried again.
//
// The check runs on the timer's thread, so it only takes the idle sessions out; a thread of its own
// closes them (inline when no thread can be had: an idle session has no plan being built, and its
// workers are told asynchronously). The timer and the calls' `done`s reach the Master through a
// Link that outlives it: the destructor nulls it (waiting for a check or a call ending under way).
//
// Later calls naming a closed handle fail with Aborted saying why (TF's master answers Aborted for
// a session it does not have, which a monitored session takes as a reason to make a new one) (the last 1024 are remembered);
// CloseSession of one succeeds, as CloseSession of an unknown handle always has: a client that
// calls close() at the end of its work is not told off for having been slow. max_sessions bounds
// the sessions open at once, counting those being created.

struct Master::Link {
  std::shared_mutex mu;
  Master* master = nullptr;  // guarded by mu: null once the Master is being destroyed
};

struct Master::CallEnd {
  CallEnd(std::shared_ptr<Link> link, std::string handle) : link(std::move(link)), handle(std::move(handle)) {}
  ~CallEnd() { end(); }
  CallEnd(const CallEnd&) = delete;
  CallEnd& operator=(const CallEnd&) = delete;
  void end() {
    if (ended.exchange(true)) return;
    std::shared_lock<std::shared_mutex> l(link->mu);
    if (link->master != nullptr) link->master->end_call(handle);
  }
  const std::shared_ptr<Link> link;
  const std::string handle;
  std::atomic<bool> ended{false};
};

namespace {

// Closes `sessions` off the caller's thread (close() waits for a plan being built, which calls other
// tasks), then calls `then`; inline when no thread can be started.
void close_off_thread(std::vector<std::shared_ptr<MasterSession>> sessions, std::function<void()> then) {
  run_detached_or_inline([sessions = std::move(sessions), then = std::move(then)]() mutable {
    for (auto& s : sessions) s->close();
    sessions.clear();
    request_memory_release();  // what the sessions held goes back to the system
    if (then) then();
  });
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

Status no_thread(const std::string& task, const char* call) {
  return errors::resource_exhausted("{}: {}: no thread for the call (the process's thread limit)", task, call);
}

}  // namespace

Master::Master(std::string task, std::shared_ptr<WorkerCache> workers, int64_t max_graph_nodes,
               std::chrono::milliseconds session_idle_timeout, int64_t max_sessions,
               std::chrono::milliseconds partition_lease)
    : task_(std::move(task)), incarnation_(new_incarnation()), workers_(std::move(workers)), max_graph_nodes_(max_graph_nodes),
      idle_timeout_(std::min(session_idle_timeout, kLongestDelay)), max_sessions_(max_sessions),
      partition_lease_(std::clamp<std::chrono::milliseconds>(partition_lease, {}, kLongestDelay)),
      link_(std::make_shared<Link>()), reclaimed_(kRememberedReclaimed) {
  link_->master = this;
  std::lock_guard<std::mutex> l(mu_);
  arm_renewal_locked();
}

uint64_t Master::session_number(const std::string& handle) const {
  const std::string prefix = task_ + "/session/" + incarnation_ + "-";
  if (handle.size() <= prefix.size() || handle.compare(0, prefix.size(), prefix) != 0) return 0;
  uint64_t number = 0;
  const char* end = handle.data() + handle.size();
  auto [at, ec] = std::from_chars(handle.data() + prefix.size(), end, number);
  return ec == std::errc() && at == end ? number : 0;
}

Master::Reclaimed* Master::find_reclaimed_locked(const std::string& handle) {
  const uint64_t number = session_number(handle);
  if (number == 0) return nullptr;
  for (Reclaimed& r : reclaimed_) {  // on an unknown handle only: a scan of 1024 is nothing there
    if (r.number == number) return &r;
  }
  return nullptr;
}

Master::~Master() {
  stop();
  std::unique_lock<std::shared_mutex> l(link_->mu);  // waits for a check or a call ending under way
  link_->master = nullptr;
}

std::size_t Master::num_sessions() {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

StatusOr<std::shared_ptr<MasterSession>> Master::not_found_locked(const std::string& handle) {
  if (const Reclaimed* r = find_reclaimed_locked(handle)) {
    return errors::aborted("{}: session '{}' was closed after being idle for {:.1f} s (over "
                             "ServerOptions::session_idle_timeout, {:g} s); open a new session",
                             task_, handle, seconds(r->idle), seconds(idle_timeout_));
  }
  return errors::aborted("{}: no session '{}' (closed, or the task restarted)", task_, handle);
}

template <class R>
StatusOr<std::shared_ptr<MasterSession>> Master::begin_call(const std::string& handle, Done<R>* done) {
  std::shared_ptr<MasterSession> session;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return errors::cancelled("{} is stopping", task_);
    auto it = sessions_.find(handle);
    if (it == sessions_.end()) return not_found_locked(handle);
    ++it->second.in_flight;
    session = it->second.session;
  }
  auto call = std::make_shared<CallEnd>(link_, handle);
  *done = [call, inner = std::move(*done)](StatusOr<R> r) {
    call->end();
    inner(std::move(r));
  };
  return session;
}

void Master::end_call(const std::string& handle) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end() || --it->second.in_flight > 0) return;  // closed meanwhile, or still busy
  it->second.idle_since = Clock::now();
  arm_locked(it->second.idle_since + idle_timeout_);
}

void Master::arm_locked(Clock::time_point deadline) {
  if (check_ || stopped_ || idle_timeout_.count() == 0) return;
  // A check scans every session: not more often than this, whatever the deadlines.
  const Clock::duration gap = std::min<Clock::duration>(idle_timeout_ / 8, std::chrono::seconds(1));
  deadline = std::max(deadline, Clock::now() + gap);
  auto id = TimerQueue::global().schedule(deadline, [w = std::weak_ptr<Link>(link_)] {
    auto link = w.lock();
    if (!link) return;
    std::vector<std::shared_ptr<MasterSession>> idle;
    {
      std::shared_lock<std::shared_mutex> l(link->mu);
      if (link->master == nullptr) return;
      idle = link->master->take_idle();
    }
    if (!idle.empty()) close_off_thread(std::move(idle), nullptr);
  });
  if (!id.ok()) {
    log_limited(timer_log_, LogLevel::kWarning, "{}: idle sessions go unchecked until the next session activity: {}",
                task_, id.status().message());
    return;
  }
  check_ = id.value();
}

std::vector<std::shared_ptr<MasterSession>> Master::take_idle() {
  std::vector<std::shared_ptr<MasterSession>> idle;
  {
    std::lock_guard<std::mutex> l(mu_);
    check_.reset();  // this one has fired
    if (stopped_) return idle;
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Entry& e = it->second;
      const Clock::time_point deadline = e.idle_since + idle_timeout_;
      if (e.in_flight > 0 || deadline > now) {
        if (e.in_flight == 0 && (!next || deadline < *next)) next = deadline;
        ++it;
        continue;
      }
      reclaimed_[reclaimed_next_] = Reclaimed{session_number(it->first), now - e.idle_since};
      reclaimed_next_ = (reclaimed_next_ + 1) % reclaimed_.size();
      idle.push_back(std::move(e.session));
      it = sessions_.erase(it);
    }
    shrink_if_sparse(sessions_);
    if (next) arm_locked(*next);
  }
  if (!idle.empty()) {
    log_limited(sweep_log_, LogLevel::kInfo, "{} closed {} session{} idle for over {:g} s "
                "(ServerOptions::session_idle_timeout)", task_, idle.size(), idle.size() == 1 ? "" : "s",
                seconds(idle_timeout_));
  }
  return idle;
}

void Master::arm_renewal_locked() {
  if (stopped_ || partition_lease_.count() == 0) return;
  auto id = TimerQueue::global().schedule(Clock::now() + partition_lease_ / 4, [w = std::weak_ptr<Link>(link_)] {
    auto link = w.lock();
    if (!link) return;
    std::shared_lock<std::shared_mutex> l(link->mu);
    if (link->master != nullptr) link->master->renew_leases();
  });
  if (!id.ok()) {
    // Tried again when the next session is made; till then, partitions may lapse on their workers.
    renewal_.reset();
    log_limited(renewal_log_, LogLevel::kWarning, "{}: partition leases go unrenewed: {}", task_,
                id.status().message());
    return;
  }
  renewal_ = id.value();
}

void Master::renew_leases() {
  std::vector<std::shared_ptr<MasterSession>> sessions;
  {
    std::lock_guard<std::mutex> l(mu_);
    renewal_.reset();  // this one has fired
    if (stopped_) return;
    sessions.reserve(sessions_.size());
    for (auto& [handle, e] : sessions_) sessions.push_back(e.session);
    arm_renewal_locked();
  }
  // Sessions being made are not among them: their leases began with their registrations, a
  // quarter of a lease ago at most.
  std::unordered_map<WorkerInterface*, pb::KeepAliveRequest> requests;
  for (const auto& session : sessions) {
    for (WorkerInterface* worker : session->leased_workers()) {
      pb::KeepAliveRequest& r = requests[worker];
      r.add_session_handle(session->handle());
    }
  }
  for (auto& [worker, request] : requests) {
    request.set_version(wire::kWireVersion);
    request.set_lease_ms(partition_lease_.count());
    // A worker that cannot be reached fails the session's next run anyway; nothing to do here.
    worker->keep_alive(request, [](StatusOr<pb::KeepAliveResponse>) {});
  }
}

void Master::create_session(const pb::CreateSessionRequest& request, Done<pb::CreateSessionResponse> done) {
  if (auto policy = placement_policy_named(request.config().placement_policy()); !policy.ok()) {
    return done(policy.status().with_prefix("CreateSession: "));
  }
  std::string handle;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return done(errors::cancelled("{} is stopping", task_));
    if (static_cast<int64_t>(sessions_.size()) + creating_ >= max_sessions_) {
      return done(errors::resource_exhausted("CreateSession: task {} has {} open sessions "
                                             "(ServerOptions::max_sessions); close some first",
                                             task_, max_sessions_));
    }
    ++creating_;  // the slot is held while the graph is built
    handle = fmt::format("{}/session/{}-{}", task_, incarnation_, next_session_++);  // Note [Incarnations]
  }
  auto session = std::make_shared<MasterSession>(handle, task_, workers_, request.config(), max_graph_nodes_,
                                                 partition_lease_);
  auto version = session->extend(request.graph(), {}, 0, /*check_version=*/false);
  bool stopped;
  {
    std::lock_guard<std::mutex> l(mu_);
    --creating_;
    stopped = stopped_;
    if (version.ok() && !stopped) {
      const Clock::time_point now = Clock::now();
      sessions_[handle] = Entry{session, 0, now};
      arm_locked(now + idle_timeout_);
      if (!renewal_) arm_renewal_locked();
    }
  }
  if (!version.ok()) return done(version.status());
  if (stopped) {
    session->close();  // nothing registered yet: closing does not wait
    return done(errors::cancelled("{} is stopping", task_));
  }
  pb::CreateSessionResponse response;
  response.set_version(wire::kWireVersion);
  response.set_session_handle(handle);
  response.set_graph_version(version.value());
  done(std::move(response));
}

void Master::extend_session(pb::ExtendSessionRequest request, Done<pb::ExtendSessionResponse> done) {
  auto session = begin_call(request.session_handle(), &done);
  if (!session.ok()) return done(session.status());
  // Waits for a plan being built (which calls other tasks): not on the caller's thread.
  auto reply = std::make_shared<Done<pb::ExtendSessionResponse>>(std::move(done));
  const bool started = try_run_detached([session = std::move(session).value(), body = std::move(request), reply] {
    auto version = session->extend(body.graph(), body.control_input(), body.current_graph_version(),
                                   /*check_version=*/true);
    if (!version.ok()) return (*reply)(version.status());
    pb::ExtendSessionResponse response;
    response.set_version(wire::kWireVersion);
    response.set_new_graph_version(version.value());
    (*reply)(std::move(response));
  });
  if (!started) (*reply)(no_thread(task_, "ExtendSession"));
}

Master::CancelStep Master::run_step(pb::RunStepRequest request, std::vector<Tensor> feed, Done<RunStepReply> done) {
  auto found = begin_call(request.session_handle(), &done);
  if (!found.ok()) {
    done(found.status());
    return nullptr;
  }
  std::shared_ptr<MasterSession> session = std::move(found).value();
  const int64_t step_id = new_step_id();
  CancelStep cancel = [weak = std::weak_ptr<MasterSession>(session), step_id](const Status& reason) {
    if (auto s = weak.lock()) s->cancel_step(step_id, reason);
  };
  // With its plan cached, a step only sends RunGraphs: it starts right here. Building a plan calls
  // other tasks (GetStatus, RegisterGraph) and waits for them: not on the caller's thread.
  if (session->has_plan(signature_key(request))) {
    session->run(request, std::move(feed), std::move(done), step_id);
    return cancel;
  }
  auto reply = std::make_shared<Done<RunStepReply>>(std::move(done));
  const bool started =
      try_run_detached([session, body = std::move(request), feed = std::move(feed), reply, step_id]() mutable {
        session->run(body, std::move(feed), std::move(*reply), step_id);
      });
  if (!started) {
    (*reply)(no_thread(task_, "RunStep"));
    return nullptr;
  }
  return cancel;
}

void Master::close_session(const pb::CloseSessionRequest& request, Done<pb::CloseSessionResponse> done) {
  std::shared_ptr<MasterSession> session;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(request.session_handle());
    if (it != sessions_.end()) {
      session = std::move(it->second.session);
      sessions_.erase(it);
      shrink_if_sparse(sessions_);
    }
    // A handle closed for being idle: closed already (Note [Idle sessions]), and now forgotten.
    if (Reclaimed* r = find_reclaimed_locked(request.session_handle())) *r = Reclaimed{};
  }
  auto respond = [done = std::move(done)] {
    pb::CloseSessionResponse response;
    response.set_version(wire::kWireVersion);
    done(std::move(response));
  };
  if (!session) return respond();
  close_off_thread({std::move(session)}, std::move(respond));
}

void Master::stop() {
  std::unordered_map<std::string, Entry> sessions;
  std::optional<TimerQueue::Id> check, renewal;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    sessions.swap(sessions_);
    check = std::exchange(check_, std::nullopt);
    renewal = std::exchange(renewal_, std::nullopt);
  }
  if (check) TimerQueue::global().cancel(*check);
  if (renewal) TimerQueue::global().cancel(*renewal);
  for (auto& [handle, e] : sessions) e.session->close();
}

}  // namespace tessera::internal
