// The master service of a cluster task: the sessions clients open on this task's target (Note
// [Master] in distributed/master_session.cc). Knows no transport: a transport's server calls it,
// and it reaches the tasks' workers through a WorkerCache.
//
//   client -> master   CreateSession(graph, config) -> handle
//                      ExtendSession(handle, new nodes, new control inputs)
//                      RunStep(handle, feeds, fetches, targets) -> fetched tensors
//                      CloseSession(handle)
//
// Thread-safe; calls never block the caller's thread on another task (`done` runs later, on
// whichever thread finishes the call).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/logging.h"
#include "core/timer.h"
#include "distributed/master_session.h"
#include "distributed/wire.h"
#include "distributed/worker_interface.h"

namespace tessera::internal {

class Master {
 public:
  static constexpr std::chrono::milliseconds kDefaultSessionIdleTimeout{3'600'000};
  static constexpr int64_t kDefaultMaxSessions = 10'000;
  // Reclaimed handles remembered for their Aborted message (older ones get the ordinary one).
  static constexpr std::size_t kRememberedReclaimed = 1024;

  // `task`: this task's name, "/job:J/replica:0/task:T"; unconstrained ops are placed on it.
  // `max_graph_nodes`: the most nodes a session's graph may have (ResourceExhausted past it).
  // `session_idle_timeout`: a session with no call in flight and none started for this long is
  // closed (Note [Idle sessions] in master.cc); 0: never. `max_sessions` (> 0): the most sessions
  // open at once (CreateSession is ResourceExhausted past it). `partition_lease`: the lease its
  // sessions' partitions are registered with, renewed every lease/4 while they are open (Note
  // [Partition leases] in worker.cc); 0: none, kept until deregistered.
  Master(std::string task, std::shared_ptr<WorkerCache> workers, int64_t max_graph_nodes = wire::kDefaultMaxGraphNodes,
         std::chrono::milliseconds session_idle_timeout = kDefaultSessionIdleTimeout,
         int64_t max_sessions = kDefaultMaxSessions, std::chrono::milliseconds partition_lease = {});
  ~Master();  // stop()

  void create_session(const wire::pb::CreateSessionRequest& request, Done<wire::pb::CreateSessionResponse> done);
  void extend_session(wire::pb::ExtendSessionRequest request, Done<wire::pb::ExtendSessionResponse> done);
  // `feed`: one tensor per request.feed() entry. Returns what ends the step early (its client is
  // gone: answered with the reason, aborted on its tasks; nothing once it is over), or null when
  // `done` has run already.
  using CancelStep = std::function<void(const Status&)>;
  CancelStep run_step(wire::pb::RunStepRequest request, std::vector<Tensor> feed, Done<RunStepReply> done);
  void close_session(const wire::pb::CloseSessionRequest& request, Done<wire::pb::CloseSessionResponse> done);

  // Closes every session: their runs in flight fail with CancelledError.
  void stop();

  // Sessions open now (for tests).
  std::size_t num_sessions();

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::shared_ptr<MasterSession> session;
    int in_flight = 0;             // RunStep and ExtendSession calls not answered yet
    Clock::time_point idle_since;  // when the last call ended (or the session was made)
  };
  struct Link;     // what the timer and the calls in flight reach the Master through
  struct CallEnd;  // ends a call in flight once

  // The session `handle`, or Aborted (saying so when the idle timeout closed it), counting a call
  // in flight on the session until `*done` (which this wraps) is called or destroyed uncalled.
  template <class R>
  StatusOr<std::shared_ptr<MasterSession>> begin_call(const std::string& handle, Done<R>* done);
  void end_call(const std::string& handle);
  // Arms the idle check for `deadline` (or a little later) unless one is armed.
  void arm_locked(Clock::time_point deadline);
  // The check, on the timer's thread: takes the idle sessions out (to be closed by the caller) and
  // arms the next check.
  std::vector<std::shared_ptr<MasterSession>> take_idle();
  // Arms the next lease renewal, partition_lease / 4 from now.
  void arm_renewal_locked();
  // The renewal, on the timer's thread: one KeepAlive per worker holding partitions of open
  // sessions, naming those sessions; then arms the next.
  void renew_leases();
  StatusOr<std::shared_ptr<MasterSession>> not_found_locked(const std::string& handle);

  const std::string task_;
  const std::string incarnation_;  // in every session handle (Note [Incarnations] in distributed/incarnation.h)
  const std::shared_ptr<WorkerCache> workers_;
  const int64_t max_graph_nodes_;
  const std::chrono::milliseconds idle_timeout_;
  const int64_t max_sessions_;
  const std::chrono::milliseconds partition_lease_;
  const std::shared_ptr<Link> link_;
  std::mutex mu_;
  bool stopped_ = false;                             // guarded by mu_
  uint64_t next_session_ = 1;                        // guarded by mu_
  int64_t creating_ = 0;                             // guarded by mu_: slots held by CreateSessions
  std::unordered_map<std::string, Entry> sessions_;  // guarded by mu_
  std::optional<TimerQueue::Id> check_;              // guarded by mu_: the armed idle check
  std::optional<TimerQueue::Id> renewal_;            // guarded by mu_: the armed lease renewal
  // The sessions the idle timeout closed (the most recent kRememberedReclaimed): each one's number
  // (its handle is "<task>/session/<incarnation>-<number>"; 0: an empty place) and how long it had been idle. A
  // ring allocated once, so that what a sweep remembers allocates nothing amid the memory the
  // sweep frees (small blocks left there would keep their pages resident); guarded by mu_.
  struct Reclaimed {
    uint64_t number = 0;
    Clock::duration idle{};
  };
  std::vector<Reclaimed> reclaimed_;
  std::size_t reclaimed_next_ = 0;  // guarded by mu_: the place the next one takes
  // The number in a handle of this master's sessions; 0 when it is not one.
  uint64_t session_number(const std::string& handle) const;
  Reclaimed* find_reclaimed_locked(const std::string& handle);
  LogRateLimit sweep_log_, timer_log_, renewal_log_;
};

}  // namespace tessera::internal
