// A remote task's worker service over ZeroMQ: each WorkerInterface call (distributed/
// worker_interface.h) is an RPC on the task's RpcChannel, its tensors raw frames beside the
// message (Note [Zero-copy tensor frames] in tensor_frames.cc). The server side is
// transport/server.cc, which decodes the same frames and calls the task's distributed Worker.
//
//   RemoteWorker w("/job:ps/replica:0/task:0", std::make_unique<RpcChannel>(endpoint), timeout, max_bytes);
//   w.run_graph(request, {feed}, [](StatusOr<RunGraphReply> r) { ... });
//
// Short calls (GetStatus, RegisterGraph, CleanupGraph, DeregisterGraph, KeepAlive) fail
// DeadlineExceeded after `rpc_timeout`; RunGraph and RecvTensor wait as long as the task works on
// them and fail Unavailable as soon as the connection to it is lost. A call that fails in the
// transport names the task. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "distributed/worker_interface.h"
#include "transport/rpc.h"

namespace tessera::internal {

class RemoteWorker final : public WorkerInterface {
 public:
  RemoteWorker(std::string task, std::unique_ptr<RpcChannel> channel, std::chrono::milliseconds rpc_timeout,
               uint64_t max_tensor_bytes);

  void get_status(const wire::pb::GetStatusRequest& request, Done<wire::pb::GetStatusResponse> done) override;
  void register_graph(const wire::pb::RegisterGraphRequest& request,
                      Done<wire::pb::RegisterGraphResponse> done) override;
  void run_graph(const wire::pb::RunGraphRequest& request, std::vector<Tensor> send,
                 Done<RunGraphReply> done) override;
  void recv_tensor(const wire::pb::RecvTensorRequest& request, Done<Tensor> done) override;
  void cleanup_graph(const wire::pb::CleanupGraphRequest& request,
                     Done<wire::pb::CleanupGraphResponse> done) override;
  void deregister_graph(const wire::pb::DeregisterGraphRequest& request,
                        Done<wire::pb::DeregisterGraphResponse> done) override;
  void keep_alive(const wire::pb::KeepAliveRequest& request, Done<wire::pb::KeepAliveResponse> done) override;

 private:
  // A short call whose reply is a message without tensors.
  template <class Response>
  void short_call(const char* method, const google::protobuf::Message& request, Done<Response> done);

  const std::string task_;
  const std::unique_ptr<RpcChannel> channel_;
  const std::chrono::milliseconds rpc_timeout_;
  const uint64_t max_tensor_bytes_;
};

}  // namespace tessera::internal
