// The worker service of a cluster task: runs the graph partitions a master registers with it, for
// the steps the master starts, and exchanges the tensors that cross tasks directly with the other
// tasks' workers. See Note [Worker] in transport/worker.cc and Note [Remote rendezvous] in
// distributed/rendezvous_mgr.cc.
//
//   master -> worker   RegisterGraph(partition, signature) -> graph handle
//                      RunGraph(handle, step id, feeds)    -> fetches (when the partition is done)
//                      CleanupGraph(step id, abort)        a step that failed elsewhere
//                      DeregisterGraph(handle)
//   worker -> worker   RecvTensor(step id, key)            -> the tensor a _Send put there
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
#include "distributed/rendezvous_mgr.h"
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

class Worker : public std::enable_shared_from_this<Worker>, private TensorPuller {
 public:
  Worker(std::string task_name, std::shared_ptr<TaskChannels> channels);
  ~Worker() override;

  // Request handlers (frame 0 already parsed into `header`). Reply exactly once.
  void register_graph(const wire::RequestHeader& header, const Responder& respond);
  void run_graph(const wire::RequestHeader& header, RpcMessage request, const Responder& respond);
  void recv_tensor(const wire::RequestHeader& header, const Responder& respond);
  void cleanup_graph(const wire::RequestHeader& header, const Responder& respond);
  void deregister_graph(const wire::RequestHeader& header, const Responder& respond);

  // Cancels every run in flight (CancelledError) and every exchange, refuses new work, and waits up
  // to `grace` for the runs to return.
  void stop(std::chrono::milliseconds grace);

  const std::string& task_name() const { return task_name_; }
  ResourceMgr& resources() { return resources_; }

 private:
  // TensorPuller: a RecvTensor call to `task`.
  std::function<void()> pull(const std::string& task, int64_t step_id, const std::string& key, Done done) override;
  static void reply_tensor(const Responder& respond, uint64_t request_id, const Tensor& t);

  const std::string task_name_;
  const std::shared_ptr<TaskChannels> channels_;
  ResourceMgr resources_;
  RendezvousMgr rendezvous_;

  std::mutex mu_;
  bool stopped_ = false;                                               // guarded by mu_
  uint64_t next_graph_ = 1;                                            // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<WorkerGraph>> graphs_;  // guarded by mu_
  int active_runs_ = 0;                                                // guarded by mu_
  std::condition_variable runs_cv_;
  std::unique_ptr<ElasticThreads> threads_;  // runs RunGraphs (a run may block for long)
};

}  // namespace tessera::internal
