// The workers of a cluster as one task (or client) reaches them over ZeroMQ: the WorkerCache
// (distributed/worker_interface.h) that the task's master and worker use, one RemoteWorker and
// RpcChannel per task, made on first use and kept.
//
//   TaskChannels channels(cluster, std::chrono::seconds(10), credentials);
//   StatusOr<WorkerInterface*> w = channels.get("/job:ps/replica:0/task:0");
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "distributed/worker_interface.h"
#include "tessera/cluster.h"
#include "transport/rpc.h"
#include "distributed/wire.h"

namespace tessera::internal {

struct Credentials;

// With `credentials` (transport/security.h) every channel is a CURVE client with this task's key
// pair, expecting the server key the cluster keys give for the task's address. Thread-safe.
class TaskChannels final : public WorkerCache {
 public:
  // `busy_poll`: RpcChannelOptions::busy_poll of every channel (the task's ServerOptions::busy_poll).
  TaskChannels(train::ClusterSpec cluster, std::chrono::milliseconds rpc_timeout,
               std::shared_ptr<const Credentials> credentials = nullptr,
               uint64_t max_tensor_bytes = wire::kMaxTensorBytes,
               std::chrono::microseconds busy_poll = std::chrono::microseconds{0});
  // The worker of task "/job:J/replica:0/task:T" (or "/job:J/task:T"). InvalidArgument when the
  // cluster has no such task, or when its address has port 0 (it cannot be reached: the port it
  // bound is known to it only); FailedPrecondition naming its address when the cluster keys have no
  // key for it.
  StatusOr<WorkerInterface*> get(const std::string& task) override;
  const train::ClusterSpec& cluster() const override { return cluster_; }
  std::chrono::milliseconds rpc_timeout() const override { return rpc_timeout_; }
  // The task's cap on a tensor received from a peer (ServerOptions::max_tensor_bytes).
  uint64_t max_tensor_bytes() const { return max_tensor_bytes_; }

 private:
  const train::ClusterSpec cluster_;
  const std::chrono::milliseconds rpc_timeout_;
  const std::shared_ptr<const Credentials> credentials_;  // null: plain TCP
  const uint64_t max_tensor_bytes_;
  const std::chrono::microseconds busy_poll_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<WorkerInterface>> by_task_;  // guarded by mu_
};

}  // namespace tessera::internal
