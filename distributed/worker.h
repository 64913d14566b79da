// The worker service of a cluster task: runs the graph partitions a master registers with it, for
// the steps the master starts, and exchanges the tensors that cross tasks directly with the other
// tasks' workers. See Note [Worker] in distributed/worker.cc and Note [Remote rendezvous] in
// distributed/rendezvous_mgr.cc. Knows no transport: a transport's server calls it as a
// WorkerInterface, and it reaches the other tasks through a WorkerCache.
//
//   master -> worker   GetStatus()                          -> the task's devices
//                      RegisterGraph(partition, signature) -> graph handle
//                      RunGraph(handle, step id, feeds)    -> fetches (when the partition is done)
//                      CleanupGraph(step id, abort)        a step that failed elsewhere
//                      DeregisterGraph(handle)
//                      KeepAlive(session handles)          renews their partitions' leases
//   worker -> worker   RecvTensor(step id, key)            -> the tensor a _Send put there
//
// Thread-safe. Calls never block the caller's thread for long: runs go to threads of their own and
// RecvTensor replies when the tensor is there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/device_name.h"
#include "core/logging.h"
#include "core/recent_memo.h"
#include "core/resource_mgr.h"
#include "core/status.h"
#include "core/timer.h"
#include "distributed/rendezvous_mgr.h"
#include "distributed/worker_interface.h"

namespace tessera::internal {

class WorkerGraph;

class Worker final : public WorkerInterface, public std::enable_shared_from_this<Worker>, private TensorPuller {
 public:
  // `task_name`: "/job:J/replica:0/task:T"; `peers`: the other tasks' workers.
  // `max_graph_nodes`: the most nodes a registered graph may have (ResourceExhausted past it).
  // `step_start_timeout`: how long pulls of a step wait for its run to begin here (RendezvousMgr).
  Worker(std::string task_name, std::shared_ptr<WorkerCache> peers, int64_t max_graph_nodes = wire::kDefaultMaxGraphNodes,
         std::chrono::milliseconds step_start_timeout = RendezvousMgr::kDefaultStartTimeout);
  ~Worker() override;

  void get_status(const wire::pb::GetStatusRequest& request, Done<wire::pb::GetStatusResponse> done) override;
  void register_graph(const wire::pb::RegisterGraphRequest& request,
                      Done<wire::pb::RegisterGraphResponse> done) override;
  void run_graph(const wire::pb::RunGraphRequest& request, std::vector<Tensor> send,
                 Done<RunGraphReply> done) override;
  void recv_tensor(const wire::pb::RecvTensorRequest& request, Done<Tensor> done) override;
  // recv_tensor, plus a give-up for a transport that learns the caller has stopped waiting (its
  // deadline, its connection lost): RendezvousMgr::serve.
  RendezvousMgr::GiveUp serve_recv_tensor(const wire::pb::RecvTensorRequest& request, Done<Tensor> done);
  void cleanup_graph(const wire::pb::CleanupGraphRequest& request, Done<wire::pb::CleanupGraphResponse> done) override;
  void deregister_graph(const wire::pb::DeregisterGraphRequest& request,
                        Done<wire::pb::DeregisterGraphResponse> done) override;
  void keep_alive(const wire::pb::KeepAliveRequest& request, Done<wire::pb::KeepAliveResponse> done) override;
  // Aborts step `step_id` here as CleanupGraph would, with `reason`: for a transport that learns
  // the master that started the step's RunGraph is gone (its connection lost), so that nothing
  // it started (a dequeue blocked on a queue of this task) waits for a master that will never
  // clean it up (Note [Masters that vanish] in worker.cc).
  void abort_run(int64_t step_id, const Status& reason);

  // Cancels every run in flight (CancelledError) and every exchange, refuses new work, and waits up
  // to `grace` for the runs to return.
  void stop(std::chrono::milliseconds grace);

  const std::string& task_name() const { return task_name_; }
  ResourceMgr& resources() { return resources_; }
  // Partitions registered now (for tests).
  std::size_t num_graphs();

 private:
  // TensorPuller: a RecvTensor call to `task`'s worker.
  std::function<void()> pull(const std::string& task, int64_t step_id, const std::string& key, PullDone done) override;

  using Clock = std::chrono::steady_clock;
  // A session's partitions under lease (Note [Partition leases] in worker.cc).
  struct Lease {
    Clock::time_point until;
    std::chrono::milliseconds length{0};
    int64_t graphs = 0;  // its partitions here (a lease goes with the last one)
  };
  // The ResourceMgr of `session_handle`'s resources without a shared name (Note [Private
  // resources] in worker.cc), made when its first partition is registered.
  std::shared_ptr<ResourceMgr> private_resources(const std::string& session_handle);
  // Arms the lease check for `deadline` unless one is armed as early.
  void arm_lease_check_locked(Clock::time_point deadline);
  // The check armed as `generation`, on the timer's thread: drops the partitions of the leases
  // that ran out, and arms the next check.
  void drop_lapsed(uint64_t generation);
  struct LeaseCheck {
    TimerQueue::Id id = 0;
    Clock::time_point at;
    uint64_t generation = 0;  // which arming this is (a cancelled one may run all the same)
  };

  const std::string task_name_;
  const std::string incarnation_;  // in every graph handle (Note [Incarnations] in distributed/incarnation.h)
  const DeviceSpec task_;  // task_name_ parsed: its job and task index
  const int64_t max_graph_nodes_;
  const std::shared_ptr<WorkerCache> peers_;
  ResourceMgr resources_;
  RendezvousMgr rendezvous_;

  std::mutex mu_;
  bool stopped_ = false;                                                  // guarded by mu_
  uint64_t next_graph_ = 1;                                               // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<WorkerGraph>> graphs_;  // guarded by mu_
  std::unordered_map<std::string, Lease> leases_;                         // guarded by mu_: by session
  std::optional<LeaseCheck> lease_check_;                                 // guarded by mu_: the armed one
  uint64_t lease_checks_ = 0;                                             // guarded by mu_
  RecentMemo<std::string, std::string> lapsed_graphs_{1024};              // guarded by mu_: handle -> session
  // By session handle, while its partitions live (Note [Private resources]).
  std::unordered_map<std::string, std::weak_ptr<ResourceMgr>> private_resources_;  // guarded by mu_
  std::size_t private_swept_ = 0;  // guarded by mu_: private_resources_'s size after the last sweep
  LogRateLimit lapse_log_;
  int active_runs_ = 0;                                                   // guarded by mu_
  std::condition_variable runs_cv_;
};

// GetStatus's answer for task (`job`, `task`): this process's devices under their cluster names,
// with their cost profiles.
wire::pb::GetStatusResponse local_status(const std::string& job, int task);

}  // namespace tessera::internal
