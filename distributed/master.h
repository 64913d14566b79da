// The master service of a cluster task: the sessions clients open on this task's target. See
// Note [Master] in distributed/master.cc. Knows no transport: a transport's server calls it, and
// it reaches the tasks' workers through a WorkerCache.
//
//   client -> master   CreateSession(graph, config) -> handle
//                      ExtendSession(handle, new nodes, new control inputs)
//                      RunStep(handle, feeds, fetches, targets) -> fetched tensors
//                      CloseSession(handle)
//
// Thread-safe; calls never block the caller's thread on another task (`done` runs later, on
// whichever thread finishes the call).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/wire.h"
#include "distributed/worker_interface.h"

namespace tessera::internal {

class MasterSession;

struct RunStepReply {
  wire::pb::RunStepResponse response;
  std::vector<Tensor> tensor;  // one per response.tensor() entry: the fetches, in order
};

class Master {
 public:
  // `task`: this task's name, "/job:J/replica:0/task:T"; unconstrained ops are placed on it.
  // `max_graph_nodes`: the most nodes a session's graph may have (ResourceExhausted past it).
  Master(std::string task, std::shared_ptr<WorkerCache> workers, int64_t max_graph_nodes = wire::kDefaultMaxGraphNodes);
  ~Master();

  void create_session(const wire::pb::CreateSessionRequest& request, Done<wire::pb::CreateSessionResponse> done);
  void extend_session(wire::pb::ExtendSessionRequest request, Done<wire::pb::ExtendSessionResponse> done);
  // `feed`: one tensor per request.feed() entry.
  void run_step(wire::pb::RunStepRequest request, std::vector<Tensor> feed, Done<RunStepReply> done);
  void close_session(const wire::pb::CloseSessionRequest& request, Done<wire::pb::CloseSessionResponse> done);

  // Closes every session: their runs in flight fail with CancelledError.
  void stop();

 private:
  // The session `handle`, or NotFound.
  StatusOr<std::shared_ptr<MasterSession>> find(const std::string& handle);

  const std::string task_;
  const std::shared_ptr<WorkerCache> workers_;
  const int64_t max_graph_nodes_;
  std::mutex mu_;
  bool stopped_ = false;                                                      // guarded by mu_
  uint64_t next_session_ = 1;                                                 // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<MasterSession>> sessions_;  // guarded by mu_
};

}  // namespace tessera::internal
