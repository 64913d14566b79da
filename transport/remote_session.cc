#include "transport/remote_session.h"

#include "transport/service_messages.h"


#include <map>
#include <shared_mutex>

#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"
#include "transport/rpc.h"
#include "transport/security.h"
#include "distributed/wire.h"
#include "distributed/worker.h"

namespace tessera::internal {

namespace {

namespace pb = wire::pb;

// "tessera://host:port" -> "tcp://host:port" ("localhost" as 127.0.0.1, which servers bind).
std::string endpoint_of(const std::string& target) {
  const std::size_t scheme = target.find("://");
  const std::string address = target.substr(scheme + 3);
  const std::size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw InvalidArgumentError(fmt::format("session target '{}' is not tessera://host:port", target));
  }
  for (std::size_t i = colon + 1; i < address.size(); ++i) {
    if (address[i] < '0' || address[i] > '9') {
      throw InvalidArgumentError(fmt::format("session target '{}': the port is not a number", target));
    }
  }
  if (address.substr(colon + 1) == "0") {
    // A server given port 0 binds a free one and reports it in Server::target() (Note [Port zero]).
    throw InvalidArgumentError(fmt::format(
        "session target '{}': port 0 names no server (a server on port 0 listens on the port its target() "
        "reports)",
        target));
  }
  const std::string host = address.substr(0, colon);
  return "tcp://" + (host == "localhost" ? std::string("127.0.0.1") : host) + address.substr(colon);
}

const char* policy_name(PlacementPolicy p) {
  switch (p) {
    case PlacementPolicy::cost: return "cost";
    case PlacementPolicy::gpu_first: return "gpu_first";
    case PlacementPolicy::cpu_only: return "cpu_only";
  }
  return "cost";
}

// Sessions share one channel per (master, key pair, busy polling), as TensorFlow's clients share
// one gRPC channel per target: a channel is three ZeroMQ sockets, an I/O thread and a heartbeat, of
// which a process could hold only a few hundred (its ZeroMQ context has 1023 sockets), while a
// session is only a handle on the master. A channel lives while a session holds it; the next
// session made after the last one let go connects afresh.
std::shared_ptr<RpcChannel> shared_channel(const std::string& endpoint, RpcChannelOptions options) {
  struct Cache {
    std::mutex mu;
    std::map<std::string, std::weak_ptr<RpcChannel>> by_key;  // guarded by mu
  };
  static Cache* cache = new Cache();  // leaked: sessions in static objects may outlive statics
  std::string key = endpoint + '\n' + std::to_string(options.busy_poll.count());
  if (options.curve) {
    key += '\n' + options.curve->public_key + '\n' + options.curve->secret_key + '\n' + options.curve->server_key;
  }
  std::lock_guard<std::mutex> l(cache->mu);
  std::erase_if(cache->by_key, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<RpcChannel>& slot = cache->by_key[key];
  if (std::shared_ptr<RpcChannel> channel = slot.lock()) return channel;
  auto channel = std::make_shared<RpcChannel>(endpoint, std::move(options));
  slot = channel;
  return channel;
}

}  // namespace

namespace {

class RemoteSessionFactory final : public SessionFactory {
 public:
  std::unique_ptr<SessionBackend> create(Graph& graph, const std::string& target,
                                         const SessionOptions& options) override {
    return std::make_unique<RemoteSession>(graph, target, options);
  }
};
TESSERA_REGISTER_SESSION_FACTORY(RemoteSessionFactory, "tessera://", "grpc://");

}  // namespace

RemoteSession::RemoteSession(Graph& graph, const std::string& target, const SessionOptions& options)
    : graph_(graph), target_(target), rpc_timeout_(options.rpc_timeout) {
  if (rpc_timeout_.count() <= 0) {
    throw InvalidArgumentError(fmt::format("SessionOptions.rpc_timeout must be > 0, got {} ms", rpc_timeout_.count()));
  }
  check_busy_poll(options.busy_poll, "SessionOptions.busy_poll").raise();
  const std::string endpoint = endpoint_of(target);
  RpcChannelOptions channel_options;
  channel_options.busy_poll = options.busy_poll;
  StatusOr<std::shared_ptr<const Credentials>> credentials =
      load_credentials(options.security, "SessionOptions.security");
  credentials.status().with_prefix(fmt::format("session on {}: ", target_)).raise();
  if (credentials.value()) {
    // The master's server key is listed under the target's host:port.
    const std::string address = target.substr(target.find("://") + 3);
    StatusOr<RpcChannelOptions::Curve> curve = channel_curve(*credentials.value(), address);
    curve.status().with_prefix(fmt::format("session on {}: ", target_)).raise();
    channel_options.curve = std::move(curve).value();
  }
  channel_ = shared_channel(endpoint, std::move(channel_options));
  std::lock_guard<std::mutex> l(mu_);
  auto nodes = graph_.impl().nodes();  // one snapshot: what is sent is what is counted as sent
  const int total = static_cast<int>(nodes.size());
  auto def = wire::encode_graph(graph_.impl(), std::vector<const Node*>(nodes.begin(), nodes.end()));
  def.status().raise();
  pb::CreateSessionRequest request;
  request.set_version(wire::kWireVersion);
  *request.mutable_graph() = std::move(def).value();
  pb::SessionConfig* config = request.mutable_config();
  config->set_log_device_placement(options.log_device_placement);
  config->set_allow_soft_placement(options.allow_soft_placement);
  config->set_inter_op_threads(options.inter_op_threads);
  config->set_placement_policy(policy_name(options.placement_policy));
  config->set_allow_tf32(options.allow_tf32);
  config->set_disable_cuda_graphs(!options.cuda_graphs);
  pb::CreateSessionResponse response;
  parse_reply(channel_->call_sync(make_call("CreateSession", request), rpc_timeout_), &response)
      .with_prefix(fmt::format("creating a session on {}: ", target_))
      .raise();
  handle_ = response.session_handle();
  graph_version_ = response.graph_version();
  sent_nodes_ = total;
  sent_version_ = graph_.impl().version();
  for (const Node* n : nodes) sent_controls_.push_back(n->control_inputs.size());
}

RemoteSession::~RemoteSession() {
  try {
    close();
  } catch (...) {
    // A master that is gone has nothing to close.
  }
}

void RemoteSession::extend_locked() {
  GraphImpl& g = graph_.impl();
  const uint64_t version = g.version();
  const int total = g.num_nodes();
  if (total == sent_nodes_ && version == sent_version_) return;
  pb::ExtendSessionRequest request;
  std::vector<std::size_t> controls = sent_controls_;
  if (version != sent_version_) {
    // Control inputs added to nodes the master has (they only ever grow).
    std::shared_lock<std::shared_mutex> l(g.mutex());
    for (int id = 0; id < sent_nodes_; ++id) {
      const Node* n = g.node_locked(id);
      std::size_t& sent = controls[static_cast<std::size_t>(id)];
      for (; sent < n->control_inputs.size(); ++sent) {
        pb::ControlEdge* e = request.add_control_input();
        e->set_node(n->name);
        e->set_input(n->control_inputs[sent]->name);
      }
    }
  }
  std::vector<const Node*> fresh;
  for (int id = sent_nodes_; id < total; ++id) fresh.push_back(g.node(id));
  auto def = wire::encode_graph(g, fresh, /*refer_outside=*/true);
  def.status().raise();
  for (const Node* n : fresh) controls.push_back(n->control_inputs.size());
  request.set_version(wire::kWireVersion);
  request.set_session_handle(handle_);
  *request.mutable_graph() = std::move(def).value();
  request.set_current_graph_version(graph_version_);
  pb::ExtendSessionResponse response;
  parse_reply(channel_->call_sync(make_call("ExtendSession", request), rpc_timeout_), &response)
      .with_prefix(fmt::format("extending the session on {}: ", target_))
      .raise();
  graph_version_ = response.new_graph_version();
  sent_nodes_ = total;
  sent_version_ = version;
  sent_controls_ = std::move(controls);
}

std::vector<Tensor> RemoteSession::run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                       const std::vector<Operation>& targets, const RunOptions& options,
                                       RunMetadata* metadata) {
  if (closed_.load()) {
    throw CancelledError(fmt::format("attempted to use a closed session (on {}: close() ended it)", target_));
  }
  pb::RunStepRequest request;
  request.set_version(wire::kWireVersion);
  request.set_session_handle(handle_);
  request.set_timeout_ms(options.timeout.count());
  request.set_trace(options.trace);
  std::vector<zmq::message_t> frames;
  for (const auto& [out, value] : feeds) {
    checked_output(out, graph_.impl(), "feed").status().raise();
    if (value.is_null()) throw InvalidArgumentError(fmt::format("feed '{}': null tensor", out.name()));
    auto meta = tensor_to_frames(value, &frames, 1);
    meta.status().with_prefix(fmt::format("feed '{}': ", out.name())).raise();
    pb::NamedTensor* nt = request.add_feed();
    nt->set_name(out.name());
    *nt->mutable_meta() = std::move(meta).value();
  }
  for (const auto& f : fetches) {
    checked_output(f, graph_.impl(), "fetch").status().raise();
    request.add_fetch(f.name());
  }
  for (const auto& t : targets) {
    checked_target(t, graph_.impl()).status().raise();
    request.add_target(t.name());
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    extend_locked();
  }
  StatusOr<RpcMessage> reply = channel_->call_until_lost_sync(make_call("RunStep", request, std::move(frames)), rpc_timeout_);
  pb::RunStepResponse response;
  Status st = parse_reply(reply, &response);
  if (!st.ok() && !reply.ok()) st = st.with_prefix(fmt::format("the session's master {}: ", target_));
  st.raise();
  if (response.tensor_size() != static_cast<int>(fetches.size())) {
    throw InternalError(fmt::format("the master returned {} tensors for {} fetches", response.tensor_size(),
                                    fetches.size()));
  }
  std::vector<Tensor> results;
  results.reserve(fetches.size());
  for (const pb::NamedTensor& nt : response.tensor()) {
    auto t = tensor_from_frames(nt.meta(), reply.value().frames);
    t.status().raise();
    results.push_back(std::move(t).value());
  }
  if (metadata != nullptr) metadata->trace_json = response.trace_json();
  for (const pb::NodePlacement& p : response.placement()) {
    if (const Node* n = graph_.impl().find(p.node())) graph_.impl().record_placement(n, p.device());
  }
  return results;
}

void RemoteSession::close() {
  if (closed_.exchange(true)) return;
  pb::CloseSessionRequest request;
  request.set_version(wire::kWireVersion);
  request.set_session_handle(handle_);
  pb::CloseSessionResponse response;
  parse_reply(channel_->call_sync(make_call("CloseSession", request), rpc_timeout_), &response)
      .with_prefix(fmt::format("closing the session on {}: ", target_))
      .raise();
}

}  // namespace tessera::internal
