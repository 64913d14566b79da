// The worker service of a cluster task: runs the graph partitions a master registers with it, for
// the steps the master starts, and exchanges the tensors that cross tasks directly with the other
// tasks' workers. See Note [Worker] and Note [Remote exchange] in transport/worker.cc.
//
//   master -> worker   RegisterGraph(partition, signature) -> graph handle
//                      RunGraph(handle, step id, feeds)    -> fetches (when the partition is done)
//                      CleanupGraph(step id, abort)        a step that failed elsewhere
//                      DeregisterGraph(handle)
//   worker -> worker   RecvTensor(step id, key)            -> the tensor a _RemoteSend put there
//
// Thread-safe. Handlers never block a server thread for long: runs go to threads of their own and
// RecvTensor replies when the tensor is there.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/resource_mgr.h"
#include "core/status.h"
#include "tessera/cluster.h"
#include "tessera/server.h"
#include "transport/rpc.h"
#include "transport/service_messages.h"
#include "transport/service_names.h"
#include "transport/task_channels.h"
#include "transport/wire.h"

namespace tessera::internal {

class WorkerGraph;
class ElasticThreads;

class Worker : public std::enable_shared_from_this<Worker> {
 public:
  Worker(std::string task_name, std::shared_ptr<TaskChannels> channels);
  ~Worker();

  // Request handlers (frame 0 already parsed into `header`). Reply exactly once.
  void register_graph(const wire::RequestHeader& header, const Responder& respond);
  void run_graph(const wire::RequestHeader& header, RpcMessage request, const Responder& respond);
  void recv_tensor(const wire::RequestHeader& header, const Responder& respond);
  void cleanup_graph(const wire::RequestHeader& header, const Responder& respond);
  void deregister_graph(const wire::RequestHeader& header, const Responder& respond);

  // Cancels every run in flight (CancelledError) and every exchange, refuses new work, and waits up
  // to `grace` for the runs to return.
  void stop(std::chrono::milliseconds grace);

  // ---- For the _RemoteSend / _RemoteRecv kernels ----
  // Puts `value` under `key` for step `step_id` (a waiting RecvTensor gets it now).
  Status send(int64_t step_id, const std::string& key, Tensor value);
  // Pulls `key` of step `step_id` from task `src_task`; `done` runs once (on an RPC thread) with the
  // tensor or the error. Returns a function that cancels the pull (done then gets `reason`).
  using RecvDone = std::function<void(StatusOr<Tensor>)>;
  std::function<void(const Status& reason)> recv(const std::string& src_task, int64_t step_id,
                                                 const std::string& key, RecvDone done);

  const std::string& task_name() const { return task_name_; }
  ResourceMgr& resources() { return resources_; }

 private:
  struct Slot {
    bool has_value = false;
    Tensor value;
    Responder waiter;  // a RecvTensor that came first
    uint64_t waiter_request = 0;
    bool waiting = false;
  };
  struct StepState {
    std::mutex mu;
    Status aborted;             // guarded by mu
    std::unordered_map<std::string, Slot> slots;  // guarded by mu
    int runs = 0;               // guarded by mu: RunGraphs of this step running here
    bool ran = false;           // guarded by mu
    std::vector<std::function<void(const Status&)>> on_abort;  // guarded by mu: cancels local runs
  };
  std::shared_ptr<StepState> step(int64_t step_id);
  void maybe_forget(int64_t step_id, const std::shared_ptr<StepState>& s);  // s->mu held
  void abort_step(int64_t step_id, const Status& reason);
  static void reply_tensor(const Responder& respond, uint64_t request_id, const Tensor& t);

  const std::string task_name_;
  const std::shared_ptr<TaskChannels> channels_;
  ResourceMgr resources_;

  std::mutex mu_;
  bool stopped_ = false;                                               // guarded by mu_
  uint64_t next_graph_ = 1;                                            // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<WorkerGraph>> graphs_;  // guarded by mu_
  std::unordered_map<int64_t, std::shared_ptr<StepState>> steps_;      // guarded by mu_
  // Steps aborted lately (bounded): an exchange arriving after the abort fails at once.
  std::deque<int64_t> aborted_order_;                                  // guarded by mu_: oldest first
  std::unordered_map<int64_t, Status> aborted_;                        // guarded by mu_
  int active_runs_ = 0;                                                // guarded by mu_
  std::condition_variable runs_cv_;
  std::unique_ptr<ElasticThreads> threads_;  // runs RunGraphs (a run may block for long)
};

// The name under which the task's ResourceMgr holds the worker link the exchange kernels use.
inline constexpr const char* kWorkerResource = "__tessera_worker";

// What the exchange kernels (remote_exchange_ops.cc) find in the task's ResourceMgr.
class WorkerLink final : public ResourceBase {
 public:
  explicit WorkerLink(std::weak_ptr<Worker> worker) : worker(std::move(worker)) {}
  std::string debug_string() const override { return "the task's worker"; }
  const std::weak_ptr<Worker> worker;
};

}  // namespace tessera::internal
