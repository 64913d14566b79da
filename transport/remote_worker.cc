#include "transport/remote_worker.h"

#include <utility>

#include <fmt/format.h>

#include "transport/service_messages.h"

namespace tessera::internal {

namespace pb = wire::pb;

RemoteWorker::RemoteWorker(std::string task, std::unique_ptr<RpcChannel> channel, std::chrono::milliseconds rpc_timeout,
                           uint64_t max_tensor_bytes)
    : task_(std::move(task)), channel_(std::move(channel)), rpc_timeout_(rpc_timeout),
      max_tensor_bytes_(max_tensor_bytes) {}

template <class Response>
void RemoteWorker::short_call(const char* method, const google::protobuf::Message& request, Done<Response> done) {
  channel_->call(make_call(method, request), rpc_timeout_,
                 [task = task_, done = std::move(done)](StatusOr<RpcMessage> reply) {
                   Response response;
                   Status st = parse_reply(reply, &response);
                   if (!st.ok()) return done(reply.ok() ? st : st.with_prefix(fmt::format("task {}: ", task)));
                   done(std::move(response));
                 });
}

void RemoteWorker::get_status(const pb::GetStatusRequest& request, Done<pb::GetStatusResponse> done) {
  short_call<pb::GetStatusResponse>("GetStatus", request, std::move(done));
}

void RemoteWorker::register_graph(const pb::RegisterGraphRequest& request, Done<pb::RegisterGraphResponse> done) {
  short_call<pb::RegisterGraphResponse>("RegisterGraph", request, std::move(done));
}

void RemoteWorker::cleanup_graph(const pb::CleanupGraphRequest& request, Done<pb::CleanupGraphResponse> done) {
  short_call<pb::CleanupGraphResponse>("CleanupGraph", request, std::move(done));
}

void RemoteWorker::deregister_graph(const pb::DeregisterGraphRequest& request, Done<pb::DeregisterGraphResponse> done) {
  short_call<pb::DeregisterGraphResponse>("DeregisterGraph", request, std::move(done));
}

void RemoteWorker::keep_alive(const pb::KeepAliveRequest& request, Done<pb::KeepAliveResponse> done) {
  short_call<pb::KeepAliveResponse>("KeepAlive", request, std::move(done));
}

void RemoteWorker::run_graph(const pb::RunGraphRequest& request, std::vector<Tensor> send, Done<RunGraphReply> done) {
  if (static_cast<std::size_t>(request.send_size()) != send.size()) {
    return done(errors::internal("RunGraph for task {}: {} feeds named, {} tensors", task_, request.send_size(),
                                 send.size()));
  }
  pb::RunGraphRequest run = request;
  std::vector<zmq::message_t> frames;
  for (std::size_t k = 0; k < send.size(); ++k) {
    auto meta = tensor_to_frames(send[k], &frames, 1);
    if (!meta.ok()) return done(meta.status().with_prefix(fmt::format("feed '{}': ", run.send(static_cast<int>(k)).name())));
    *run.mutable_send(static_cast<int>(k))->mutable_meta() = std::move(meta).value();
  }
  channel_->call_until_lost(
      make_call("RunGraph", run, std::move(frames)), rpc_timeout_,
      [task = task_, max_bytes = max_tensor_bytes_, done = std::move(done)](StatusOr<RpcMessage> reply) {
        RunGraphReply out;
        Status st = parse_reply(reply, &out.response);
        if (!st.ok()) return done(reply.ok() ? st : st.with_prefix(fmt::format("task {}: ", task)));
        auto frames = std::move(reply.value().frames);
        for (const pb::NamedTensor& nt : out.response.recv()) {
          auto t = tensor_from_frames(nt.meta(), frames, max_bytes);
          if (!t.ok()) return done(t.status().with_prefix(fmt::format("task {}: ", task)));
          out.recv.push_back(std::move(t).value());
        }
        done(std::move(out));
      });
}

void RemoteWorker::recv_tensor(const pb::RecvTensorRequest& request, Done<Tensor> done) {
  channel_->call_until_lost(
      make_call("RecvTensor", request), rpc_timeout_,
      [task = task_, max_bytes = max_tensor_bytes_, done = std::move(done)](StatusOr<RpcMessage> reply) {
        pb::RecvTensorResponse response;
        Status st = parse_reply(reply, &response);
        // An error of the producing task (its step failed) arrives as is; a transport failure
        // names the task.
        if (!st.ok()) return done(reply.ok() ? st : st.with_prefix(fmt::format("task {}: ", task)));
        if (response.is_dead()) return done(Tensor());  // from an untaken branch of a cond
        auto frames = std::move(reply.value().frames);
        done(tensor_from_frames(response.tensor(), frames, max_bytes));
      });
}

}  // namespace tessera::internal
