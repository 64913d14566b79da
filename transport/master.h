// The master service of a cluster task: the sessions clients open on this task's target. See
// Note [Master] in transport/master.cc.
//
//   client -> master   CreateSession(graph, config) -> handle
//                      ExtendSession(handle, new nodes)
//                      RunStep(handle, feeds, fetches, targets) -> fetched tensors
//                      CloseSession(handle)
//
// Thread-safe; handlers never block a server thread on another task.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "transport/rpc.h"
#include "transport/wire.h"
#include "transport/worker.h"

namespace tessera::internal {

class MasterSession;

class Master {
 public:
  // `task`: this task's name, "/job:J/replica:0/task:T"; unconstrained ops are placed on it.
  Master(std::string task, std::shared_ptr<TaskChannels> channels);
  ~Master();

  void create_session(const wire::RequestHeader& header, const Responder& respond);
  void extend_session(const wire::RequestHeader& header, const Responder& respond);
  void run_step(const wire::RequestHeader& header, RpcMessage request, const Responder& respond);
  void close_session(const wire::RequestHeader& header, const Responder& respond);

  // Closes every session: their runs in flight fail with CancelledError.
  void stop();

 private:
  // The session `handle`, or null after answering the call NotFound.
  std::shared_ptr<MasterSession> find(const std::string& handle, const wire::RequestHeader& header,
                                      const Responder& respond);

  const std::string task_;
  const std::shared_ptr<TaskChannels> channels_;
  std::mutex mu_;
  bool stopped_ = false;                                                      // guarded by mu_
  uint64_t next_session_ = 1;                                                 // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<MasterSession>> sessions_;  // guarded by mu_
};

}  // namespace tessera::internal
