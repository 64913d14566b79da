// How the distributed layer reaches a task's worker service, whatever carries the calls: the
// master registers, runs and cleans up partitions through it, and a worker pulls the tensors of
// another task's rendezvous through it. The transport implements it for remote tasks
// (transport/remote_worker.h, over ZeroMQ); the worker service (distributed/worker.h) is the
// implementation a transport's server calls into.
//
//   StatusOr<WorkerInterface*> w = workers.get("/job:ps/replica:0/task:0");
//   w.value()->run_graph(request, {feed}, [](StatusOr<RunGraphReply> r) { ... });
//
// Messages are the protobufs of distributed/wire.proto; tensors travel beside them, in the order of
// the message's NamedTensor entries (how is the transport's business: ZeroMQ sends each as a raw
// frame). A call's `done` runs exactly once, on any thread; errors keep their code, and a call
// that could not reach the task (or lost it) names the task.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "core/status.h"
#include "distributed/wire.h"
#include "tessera/cluster.h"
#include "tessera/tensor.h"

namespace tessera::internal {

template <class M>
using Done = std::function<void(StatusOr<M>)>;

struct RunGraphReply {
  wire::pb::RunGraphResponse response;
  std::vector<Tensor> recv;  // one per response.recv() entry
};

class WorkerInterface {
 public:
  virtual ~WorkerInterface() = default;
  virtual void get_status(const wire::pb::GetStatusRequest& request, Done<wire::pb::GetStatusResponse> done) = 0;
  virtual void register_graph(const wire::pb::RegisterGraphRequest& request,
                              Done<wire::pb::RegisterGraphResponse> done) = 0;
  // `send`: one tensor per request.send() entry. Waits as long as the run takes; a remote task
  // lost meanwhile fails it Unavailable.
  virtual void run_graph(const wire::pb::RunGraphRequest& request, std::vector<Tensor> send,
                         Done<RunGraphReply> done) = 0;
  // The tensor the task's rendezvous holds (or will hold) under the key. Waits like run_graph.
  virtual void recv_tensor(const wire::pb::RecvTensorRequest& request, Done<Tensor> done) = 0;
  virtual void cleanup_graph(const wire::pb::CleanupGraphRequest& request,
                             Done<wire::pb::CleanupGraphResponse> done) = 0;
  virtual void deregister_graph(const wire::pb::DeregisterGraphRequest& request,
                                Done<wire::pb::DeregisterGraphResponse> done) = 0;
  // Renews the leases of the named sessions' partitions (Note [Partition leases] in worker.cc).
  virtual void keep_alive(const wire::pb::KeepAliveRequest& request, Done<wire::pb::KeepAliveResponse> done) = 0;
};

// The workers of a cluster, as seen from one task (or client). Thread-safe.
class WorkerCache {
 public:
  virtual ~WorkerCache() = default;
  // Task "/job:J/replica:0/task:T"'s worker (kept by the cache). InvalidArgument for a task the
  // cluster lacks; FailedPrecondition when it cannot be reached securely (no key for it).
  virtual StatusOr<WorkerInterface*> get(const std::string& task) = 0;
  virtual const train::ClusterSpec& cluster() const = 0;
  // How long a call may take to reach its task (and a short call to answer).
  virtual std::chrono::milliseconds rpc_timeout() const = 0;
};

// Runs `call` and waits for its reply (never from a `done` callback of the same cache).
template <class M, class Call>
StatusOr<M> call_and_wait(Call&& call) {
  std::promise<StatusOr<M>> result;
  auto ready = result.get_future();
  call([&result](StatusOr<M> r) { result.set_value(std::move(r)); });
  return ready.get();
}

}  // namespace tessera::internal
