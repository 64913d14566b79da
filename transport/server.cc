// train::Server: one task of a cluster, serving its peers over transport/rpc in the wire format of
// distributed/wire.proto.
#include "tessera/server.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/device.h"
#include "core/device_factory.h"
#include "core/device_name.h"
#include "core/host_blocks.h"
#include "core/logging.h"
#include "core/timer.h"
#include "tessera/errors.h"
#include "distributed/master.h"
#include "distributed/wire.h"
#include "distributed/worker.h"
#include "transport/rpc.h"
#include "transport/security.h"
#include "transport/server_impl.h"
#include "transport/service_messages.h"
#include "transport/task_channels.h"

namespace tessera::internal {

// Note [Server]
// ~~~~~~~~~~~~~
// A Server is a task's RpcServer (transport/rpc.h) plus the services it dispatches to by the method
// named in each request's wire header: GetStatus (the devices of this process, renamed from
// /job:localhost/replica:0/task:0 to the task's own /job:J/replica:0/task:N, so a master can place
// ops on them), the master service (distributed/master.h) and the worker service
// (distributed/worker.h). An unknown method is answered Unimplemented, naming it. Each start() makes
// fresh services (a restarted task starts empty, as a restarted process would); stop() closes the
// master's sessions and cancels the worker's runs before it closes the socket, and lets the replies
// that says so go out first.
//
// Threads. The RpcServer owns them: one I/O thread for the socket and `handler_threads` threads
// running serve_request(). Handlers see only a shared ServiceState (found through a slot the
// server fills while it serves), never the ServerImpl: RpcServer::stop() may leave a stuck handler
// behind (after its stop_grace), which must not touch a destroyed server. start() and stop() are
// serialized by lifecycle_mu_; join() waits on serving_cv_, so any thread may call any of them.
//
// Malformed input. Requests whose envelope is not transport/rpc's (stray or truncated traffic on
// the port) are dropped by the RpcServer and never reach a handler. A request whose header frame
// does not parse is answered InvalidArgument: in a ResponseHeader echoing its request id when the
// bytes are a RequestHeader that only fails validation (wrong version, no method), else as the
// call's RPC-level error (the caller is a well-formed RPC client, so telling it beats letting it
// wait for its deadline). A body that does not parse gets InvalidArgument in its ResponseHeader.
// Nothing a peer sends can abort the process or stop the server.
//
// What stop() guarantees. When it returns: the listening socket is closed and the port can be
// bound again; no handler starts again; replies still owed are dropped, so their callers meet their
// deadlines (Unavailable); join() has returned in every thread waiting in it. It returns within the
// RpcServer's stop_grace (300 ms) even if a handler is stuck. It is idempotent and the destructor
// calls it. A stopped server can be start()ed again on the same address.

// Note [Port zero]
// ~~~~~~~~~~~~~~~~
// The hole: API.md says port 0 is a valid address (the server binds a free port and reports it),
// as TensorFlow's ClusterSpec({"local": {37: "localhost:0"}}) and Server on it; ClusterSpec refused
// it. Now ClusterSpec accepts port 0 (several tasks may share such an address), and start() binds
// "tcp://HOST:0", reads the port back from the RpcServer (ZeroMQ's last endpoint, as cppzmq's
// tests do) and makes it this task's address: target() reports it, the task's own services see a
// cluster with it (with_task_address: its master reaches its own worker and GetStatus there, and
// its channels know its CURVE key under it), and a restart binds that port again so the target
// stays valid. The services are installed only once the port is known; a request in between is
// answered Unavailable ("not serving"), and nobody can know the port yet anyway. Server::cluster()
// stays as given. Another task whose address has port 0 cannot be reached from here (its port is
// its own secret): TaskChannels::get refuses it with InvalidArgument naming the task and saying
// why, so a session that needs it fails at once instead of waiting out its RPC deadline; a
// session target of port 0 is refused the same way (transport/remote_session.cc).
// create_local_server() binds 127.0.0.1:0 first and names its one-task cluster after the port.

// Note [Server security and signals]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Security. With ServerOptions::security.key_file, start() reads the key pair and the cluster keys
// file (again at each start, so a restart picks up new keys): the RpcServer is a CURVE server with
// that key pair admitting every key of the file (and its own), and the task's channels to the
// other tasks (TaskChannels, used by its master and worker) are CURVE clients with the same key
// pair, each expecting the key the file lists for the destination's address (for the task itself,
// its own key: the file need not list it). A task whose own address is listed with another key
// than its own refuses to start (its peers would refuse it).
// Without keys, start() serves only loopback addresses, where nobody from another host can
// connect; anything else (a host name binds every interface) needs security.insecure, and gets a
// warning on stderr. Note [RPC] ("Security") says what happens to refused connections.
//
// Signals. `tessera server` (tools/tessera_main.cc) runs a task until SIGINT or SIGTERM. Its signal
// handler only write()s a byte to a pipe (async-signal-safe); a thread blocked reading that pipe
// calls stop(), and the main thread, in join(), then returns and exits 0. A handler installed with
// sigaction applies to the whole process, so this works whichever thread the kernel delivers the
// signal to, including threads libzmq or the device runtime started before it was installed.

namespace {

namespace pb = wire::pb;

constexpr const char* kGetStatus = "GetStatus";

// The methods whose handlers never block: answered at once (GetStatus, CleanupGraph, KeepAlive),
// when the tensor is there (RecvTensor), or handed to other threads (RunGraph: the partition's
// session pool; RunStep, whose plan is built elsewhere when it is not cached). They run on the
// server's I/O thread.
// Only the method is read here (the handler parses the header).
bool never_blocks(const RpcMessage& request) {
  if (request.frames.empty()) return false;
  const zmq::message_t& frame = request.frames[0];
  const std::optional<std::string_view> method = wire::peek_request_method(frame.data(), frame.size());
  if (!method) return false;
  const std::string_view m = *method;
  return m == "RecvTensor" || m == "RunGraph" || m == "RunStep" || m == "CleanupGraph" || m == "KeepAlive" ||
         m == kGetStatus;
}

RpcServerOptions rpc_options(const train::ServerOptions& options, const Credentials* credentials) {
  RpcServerOptions rpc;
  rpc.handler_threads = options.handler_threads;
  rpc.run_inline = never_blocks;
  rpc.max_message_bytes = options.max_message_bytes;
  rpc.max_frames = options.max_frames_per_request;
  rpc.busy_poll = options.busy_poll;
  if (credentials != nullptr) rpc.curve = server_curve(*credentials);
  return rpc;
}

// `credentials` knowing this task's own address as its own key: a master calls its own worker
// too, and the cluster keys need not list the task itself (a local server's address is known only
// once it is bound).
std::shared_ptr<const Credentials> with_own_address(std::shared_ptr<const Credentials> credentials,
                                                    const std::string& address) {
  if (!credentials || credentials->cluster.server_key(address) != nullptr) return credentials;
  auto copy = std::make_shared<Credentials>(*credentials);
  copy->cluster.server_keys[address] = copy->own.public_key;
  return copy;
}

// The key pair and cluster keys the options name (null when none), raised as errors naming `who`.
std::shared_ptr<const Credentials> credentials_of(const train::ServerOptions& options, const std::string& who) {
  StatusOr<std::shared_ptr<const Credentials>> loaded = load_credentials(options.security, "ServerOptions.security");
  if (!loaded.ok()) loaded.status().with_prefix(who + ": ").raise();
  return std::move(loaded).value();
}

template <class Slot>
RpcServer::Handler make_handler(std::shared_ptr<Slot> slot) {
  return [slot = std::move(slot)](RpcMessage request, Responder respond) {
    std::shared_ptr<ServiceState> state;
    {
      std::lock_guard<std::mutex> l(slot->mu);
      state = slot->state;
    }
    if (!state) {
      respond.fail(errors::unavailable("the server is not serving"));
      return;
    }
    serve_request(*state, std::move(request), respond);
  };
}

// InvalidArgumentError for options no server can run with.
void validate(const train::ServerOptions& options) {
  if (options.rpc_timeout.count() <= 0) {
    throw InvalidArgumentError(
        fmt::format("ServerOptions.rpc_timeout must be > 0, got {} ms", options.rpc_timeout.count()));
  }
  if (options.handler_threads < 0) {
    throw InvalidArgumentError(
        fmt::format("ServerOptions.handler_threads must be >= 0, got {}", options.handler_threads));
  }
  if (options.max_frames_per_request <= 0 || options.max_graph_nodes <= 0) {
    throw InvalidArgumentError(fmt::format("ServerOptions.max_frames_per_request and max_graph_nodes must be > 0, "
                                           "got {} and {}",
                                           options.max_frames_per_request, options.max_graph_nodes));
  }
  if (options.max_message_bytes != -1 && options.max_message_bytes <= 0) {
    throw InvalidArgumentError(fmt::format("ServerOptions.max_message_bytes must be > 0 or -1 (no limit), got {}",
                                           options.max_message_bytes));
  }
  if (options.max_tensor_bytes <= 0) {
    throw InvalidArgumentError(
        fmt::format("ServerOptions.max_tensor_bytes must be > 0, got {}", options.max_tensor_bytes));
  }
  if (options.session_idle_timeout.count() < 0) {
    throw InvalidArgumentError(fmt::format("ServerOptions.session_idle_timeout must be >= 0 (0: never), got {} ms",
                                           options.session_idle_timeout.count()));
  }
  if (options.partition_lease.count() != 0 && options.partition_lease < std::chrono::milliseconds(100)) {
    throw InvalidArgumentError(fmt::format("ServerOptions.partition_lease must be 0 (never dropped) or >= 100 ms, "
                                           "got {} ms", options.partition_lease.count()));
  }
  if (options.step_start_timeout.count() <= 0) {
    throw InvalidArgumentError(fmt::format("ServerOptions.step_start_timeout must be > 0, got {} ms",
                                           options.step_start_timeout.count()));
  }
  if (options.max_sessions <= 0) {
    throw InvalidArgumentError(fmt::format("ServerOptions.max_sessions must be > 0, got {}", options.max_sessions));
  }
  check_busy_poll(options.busy_poll, "ServerOptions.busy_poll").raise();
  check_security_options(options.security, "ServerOptions.security").raise();
}

std::string task_name(const std::string& job, int task) { return fmt::format("/job:{}/task:{}", job, task); }

// This task's address; InvalidArgumentError naming the job or task when the cluster lacks it.
std::string task_address(const train::ClusterSpec& cluster, const std::string& job, int task) {
  try {
    return cluster.task_address(job, task);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(fmt::format("cannot serve {}: {}", task_name(job, task), e.message()));
  }
}

// `cluster` with task (`job`, `task`) at `address`: a task that bound port 0 reaches itself, and
// tells the others, at the port it got.
train::ClusterSpec with_task_address(const train::ClusterSpec& cluster, const std::string& job, int task,
                                     const std::string& address) {
  if (cluster.task_address(job, task) == address) return cluster;
  train::ClusterSpec::SparseJobs jobs;
  for (const std::string& j : cluster.jobs()) {
    for (int t : cluster.task_indices(j)) jobs[j][t] = cluster.task_address(j, t);
  }
  jobs[job][task] = address;
  return train::ClusterSpec(std::move(jobs));
}

bool has_port_zero(const std::string& address) { return address.ends_with(":0"); }

void reply(const Responder& respond, uint64_t request_id, const Status& status,
           const google::protobuf::Message* body) {
  RpcMessage out;
  out.frames.push_back(response_frame(request_id, status, body));
  respond(std::move(out));
}

// The `done` of a service call whose response carries no tensors: its reply to `respond`.
template <class M>
Done<M> replier(const Responder& respond, uint64_t request_id) {
  return [respond, request_id](StatusOr<M> r) {
    if (!r.ok()) return send_reply(respond, request_id, r.status(), nullptr);
    send_reply(respond, request_id, Status(), &r.value());
  };
}

// Replies `response` with `tensors` as its NamedTensor field `field` (`entries`, one per tensor,
// names set), written by named_tensors_reply.
void reply_with_tensors(const Responder& respond, uint64_t request_id, google::protobuf::Message* response,
                        google::protobuf::RepeatedPtrField<pb::NamedTensor>* entries, int field,
                        const std::vector<Tensor>& tensors) {
  StatusOr<RpcMessage> reply = named_tensors_reply(request_id, response, entries, field, tensors);
  if (!reply.ok()) return send_reply(respond, request_id, reply.status(), nullptr);
  respond(std::move(reply).value());
}

// The tensors `entries` (NamedTensor) point to among `request`'s frames; errors name the entry.
template <class Entries>
StatusOr<std::vector<Tensor>> tensors_from_frames(const Entries& entries, RpcMessage& request, uint64_t max_bytes,
                                                  const char* what) {
  std::vector<Tensor> out;
  out.reserve(static_cast<std::size_t>(entries.size()));
  for (const pb::NamedTensor& nt : entries) {
    auto t = tensor_from_frames(nt.meta(), request.frames, max_bytes);
    if (!t.ok()) return t.status().with_prefix(fmt::format("{} '{}': ", what, nt.name()));
    out.push_back(std::move(t).value());
  }
  return out;
}

// Parses the body of `h` into M, or answers InvalidArgument and returns nullopt.
template <class M>
std::optional<M> body_of(const wire::RequestHeaderView& h, const Responder& respond) {
  auto r = wire::parse_body<M>(h.body());
  if (!r.ok()) {
    send_reply(respond, h.request_id(), r.status(), nullptr);
    return std::nullopt;
  }
  return std::move(r).value();
}

// A call whose reply is one message: parses the request's body, calls `method` of the service
// `service_of` picks, and replies with what it answers.
using ShortHandler = std::function<void(const ServiceState&, const wire::RequestHeaderView&, const Responder&)>;
template <class Request, class Response, class Service>
ShortHandler short_call(Service* (*service_of)(const ServiceState&),
                        void (Service::*method)(const Request&, Done<Response>)) {
  return [service_of, method](const ServiceState& state, const wire::RequestHeaderView& h, const Responder& respond) {
    if (auto r = body_of<Request>(h, respond)) {
      (service_of(state)->*method)(*r, replier<Response>(respond, h.request_id()));
    }
  };
}
Worker* worker_of(const ServiceState& state) { return state.worker.get(); }
Master* master_of(const ServiceState& state) { return state.master.get(); }

const std::map<std::string, ShortHandler, std::less<>>& short_methods() {
  static const auto* table = new std::map<std::string, ShortHandler, std::less<>>{
      {"RegisterGraph", short_call(worker_of, &Worker::register_graph)},
      {"CleanupGraph", short_call(worker_of, &Worker::cleanup_graph)},
      {"DeregisterGraph", short_call(worker_of, &Worker::deregister_graph)},
      {"KeepAlive", short_call(worker_of, &Worker::keep_alive)},
      {"CreateSession", short_call(master_of, &Master::create_session)},
      {"CloseSession", short_call(master_of, &Master::close_session)},
  };
  return *table;
}

// Calls the task's master or worker for the request `h` (its tensors among `request`'s frames).
// False for a method neither serves.
bool call_service(const ServiceState& state, const wire::RequestHeaderView& h, RpcMessage& request,
                  const Responder& respond) {
  const std::string_view m = h.method();
  const uint64_t id = h.request_id();
  if (m == "RunGraph") {
    auto r = body_of<pb::RunGraphRequest>(h, respond);
    if (!r) return true;
    auto send = tensors_from_frames(r->send(), request, state.max_tensor_bytes, "feed");
    if (!send.ok()) {
      send_reply(respond, id, send.status().with_prefix(state.worker->task_name() + ": "), nullptr);
      return true;
    }
    state.worker->run_graph(*r, std::move(send).value(), [respond, id](StatusOr<RunGraphReply> reply) {
      if (!reply.ok()) return send_reply(respond, id, reply.status(), nullptr);
      RunGraphReply& out = reply.value();
      reply_with_tensors(respond, id, &out.response, out.response.mutable_recv(), pb::RunGraphResponse::kRecvFieldNumber,
                         out.recv);
    });
    // A master that is gone (killed, cut off, silent past the heartbeat timeout) cleans up nothing:
    // its step ends here now (Note [Masters that vanish] in distributed/worker.cc).
    respond.on_lost([worker = std::weak_ptr<Worker>(state.worker), step_id = r->step_id()] {
      if (auto w = worker.lock()) {
        w->abort_run(step_id, errors::cancelled("RunGraph of step {}: the connection of the master that started it "
                                                "was lost",
                                                step_id));
      }
    });
  } else if (m == "RecvTensor") {
    auto r = body_of<pb::RecvTensorRequest>(h, respond);
    if (!r) return true;
    // A caller that sets a deadline stops waiting then: so does the pull (its memory comes back).
    struct PullDeadline {
      std::mutex mu;
      bool served = false;                 // guarded by mu
      std::optional<TimerQueue::Id> timer;  // guarded by mu
    };
    auto deadline = h.deadline_ms() > 0 ? std::make_shared<PullDeadline>() : nullptr;
    auto give_up = state.worker->serve_recv_tensor(*r, [respond, id, deadline](StatusOr<Tensor> t) {
      if (deadline) {
        std::optional<TimerQueue::Id> timer;
        {
          std::lock_guard<std::mutex> l(deadline->mu);
          deadline->served = true;
          timer = deadline->timer;
        }
        if (timer) TimerQueue::global().cancel(*timer);
      }
      if (!t.ok()) return send_reply(respond, id, t.status(), nullptr);
      StatusOr<RpcMessage> reply = recv_tensor_reply(id, t.value());
      if (!reply.ok()) return send_reply(respond, id, reply.status(), nullptr);
      respond(std::move(reply).value());
    });
    // A caller that is gone (killed, or silent past the heartbeat timeout) no longer waits either.
    respond.on_lost([give_up] { give_up(errors::unavailable("RecvTensor: the caller's connection was lost")); });
    if (deadline) {
      std::lock_guard<std::mutex> l(deadline->mu);
      if (!deadline->served) {
        auto armed = TimerQueue::global().schedule(
            TimerQueue::Clock::now() + std::chrono::milliseconds(h.deadline_ms()), [give_up, ms = h.deadline_ms()] {
              give_up(errors::deadline_exceeded("RecvTensor: the caller's deadline of {} ms passed", ms));
            });
        if (armed.ok()) deadline->timer = armed.value();
      }
    }
  } else if (m == "ExtendSession") {  // the master takes this request by value
    if (auto r = body_of<pb::ExtendSessionRequest>(h, respond)) {
      state.master->extend_session(std::move(*r), replier<pb::ExtendSessionResponse>(respond, id));
    }
  } else if (m == "RunStep") {
    auto r = body_of<pb::RunStepRequest>(h, respond);
    if (!r) return true;
    auto feed = tensors_from_frames(r->feed(), request, state.max_tensor_bytes, "feed");
    if (!feed.ok()) {
      send_reply(respond, id, feed.status(), nullptr);
      return true;
    }
    auto reply = [respond, id](StatusOr<RunStepReply> reply) {
      if (!reply.ok()) return send_reply(respond, id, reply.status(), nullptr);
      RunStepReply& out = reply.value();
      reply_with_tensors(respond, id, &out.response, out.response.mutable_tensor(),
                         pb::RunStepResponse::kTensorFieldNumber, out.tensor);
    };
    auto cancel = state.master->run_step(std::move(*r), std::move(feed).value(), std::move(reply));
    // A client that is gone (killed, or silent past the heartbeat timeout) waits for no step: the
    // step ends and its tasks drop it (a run blocked on a queue included).
    if (cancel) {
      respond.on_lost([cancel] { cancel(errors::cancelled("RunStep: the client's connection was lost")); });
    }
  } else {
    auto short_method = short_methods().find(m);
    if (short_method == short_methods().end()) return false;
    short_method->second(state, h, respond);
  }
  return true;
}

void dispatch(const ServiceState& state, RpcMessage request, const Responder& respond) {
  if (request.frames.empty()) {
    respond.fail(errors::invalid_argument("{}: a request needs a header frame", state.task_name));
    return;
  }
  const zmq::message_t& frame = request.frames[0];
  StatusOr<wire::RequestHeaderView> header = wire::read_request_header(frame.data(), frame.size());
  if (!header.ok()) {
    Status bad = header.status().with_prefix(state.task_name + ": ");
    // Well-formed protobuf that failed validation: its request id is known, so answer in kind.
    pb::RequestHeader partial;
    if (frame.size() <= static_cast<std::size_t>(INT_MAX) &&
        partial.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
      reply(respond, partial.request_id(), bad, nullptr);
    } else {
      respond.fail(bad);
    }
    return;
  }
  const wire::RequestHeaderView& h = header.value();
  const std::string_view m = h.method();
  if (state.master && state.worker && call_service(state, h, request, respond)) return;
  if (m == kGetStatus) {
    pb::GetStatusRequest body;
    Status parsed = wire::parse_body(h.body(), &body);
    if (!parsed.ok()) {
      reply(respond, h.request_id(), parsed.with_prefix(state.task_name + ": GetStatus: "), nullptr);
      return;
    }
    pb::GetStatusResponse response = local_status(state.job, state.task);
    reply(respond, h.request_id(), Status(), &response);
    return;
  }
  reply(respond, h.request_id(),
        errors::unimplemented("{} serves no method '{}'", state.task_name, h.method()),
        nullptr);
}

}  // namespace

StatusOr<std::string> server_bind_endpoint(std::string_view address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return errors::invalid_argument("'{}' is not a host:port address", address);
  }
  const std::string host(address.substr(0, colon));
  const std::string_view port = address.substr(colon + 1);
  if (host.front() == '[') {
    return errors::unimplemented("cannot serve on {}: IPv6 addresses are not supported yet", address);
  }
  in_addr ipv4{};
  if (host == "localhost") return fmt::format("tcp://127.0.0.1:{}", port);
  if (::inet_pton(AF_INET, host.c_str(), &ipv4) == 1) return fmt::format("tcp://{}:{}", host, port);
  return fmt::format("tcp://*:{}", port);
}


void serve_request(const ServiceState& state, RpcMessage request, const Responder& respond) {
  try {
    dispatch(state, std::move(request), respond);
  } catch (...) {
    respond.fail(status_from_current_exception());  // ignored when a reply already went out
  }
}

std::shared_ptr<ServiceState> make_services(const train::ClusterSpec& cluster, const std::string& job, int task,
                                            const train::ServerOptions& options,
                                            std::shared_ptr<const Credentials> credentials) {
  auto state = std::make_shared<ServiceState>();
  state->job = job;
  state->task = task;
  state->task_name = task_name(job, task);
  state->max_tensor_bytes = static_cast<uint64_t>(options.max_tensor_bytes);
  const std::string full = fmt::format("/job:{}/replica:0/task:{}", job, task);
  auto channels = std::make_shared<TaskChannels>(cluster, options.rpc_timeout, std::move(credentials),
                                                 static_cast<uint64_t>(options.max_tensor_bytes), options.busy_poll);
  state->worker = std::make_shared<Worker>(full, channels, options.max_graph_nodes, options.step_start_timeout);
  state->master = std::make_shared<Master>(full, channels, options.max_graph_nodes, options.session_idle_timeout,
                                           options.max_sessions, options.partition_lease);
  return state;
}

ServerImpl::ServerImpl(train::ClusterSpec cluster, std::string job, int task, train::ServerOptions options)
    : cluster_(std::move(cluster)),
      address_(task_address(cluster_, job, task)),
      options_(options),
      job_(std::move(job)),
      task_(task) {
  validate(options_);
  local_devices().status().raise();
}

ServerImpl::~ServerImpl() { stop(); }

std::unique_ptr<ServerImpl> ServerImpl::start_local(train::ServerOptions options) {
  validate(options);
  local_devices().status().raise();
  const std::string job = "localhost";
  std::shared_ptr<const Credentials> credentials = credentials_of(options, "cannot start a local server");
  // The cluster is known once the port is: requests wait for it in the slot (null until then).
  auto slot = std::make_shared<StateSlot>();
  auto rpc = RpcServer::start("tcp://127.0.0.1:0", make_handler(slot), rpc_options(options, credentials.get()));
  if (!rpc.ok()) rpc.status().with_prefix("cannot start a local server: ").raise();
  const std::string& endpoint = rpc.value()->endpoint();  // "tcp://127.0.0.1:PORT"
  const std::string address = "127.0.0.1" + endpoint.substr(endpoint.rfind(':'));
  auto impl = std::make_unique<ServerImpl>(train::ClusterSpec({{job, {address}}}), job, 0, options);
  {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->state = make_services(impl->cluster_, job, 0, options, with_own_address(credentials, address));
  }
  impl->slot_ = slot;
  impl->rpc_ = std::move(rpc).value();
  impl->serving_ = true;  // not shared yet: no lock needed
  return impl;
}

std::string ServerImpl::target() const {
  std::lock_guard<std::mutex> l(address_mu_);
  return "tessera://" + address_;
}

void ServerImpl::start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (rpc_ != nullptr) return;
  const std::string who = task_name(job_, task_);
  std::string address;  // only this thread writes address_ (under lifecycle_mu_)
  {
    std::lock_guard<std::mutex> l(address_mu_);
    address = address_;
  }
  StatusOr<std::string> endpoint = server_bind_endpoint(address);
  if (!endpoint.ok()) endpoint.status().with_prefix(who + ": ").raise();
  std::shared_ptr<const Credentials> credentials = credentials_of(options_, who);
  if (credentials) {
    const std::string* listed = credentials->cluster.server_key(address);
    if (listed != nullptr && *listed != credentials->own.public_key) {
      throw InvalidArgumentError(fmt::format(
          "{}: the cluster keys file '{}' lists {} for this task's address {}, but its key file '{}' holds {}: the "
          "other tasks would refuse it",
          who, credentials->cluster.file, *listed, address, options_.security.key_file,
          credentials->own.public_key));
    }
  } else if (!is_loopback_endpoint(endpoint.value())) {
    if (!options_.security.insecure) {
      throw FailedPreconditionError(fmt::format(
          "{} will not serve {} ({}) without authentication: any host that reaches it could run code in this "
          "process. Give it keys (ServerOptions.security.key_file and cluster_keys_file, made with `tessera keygen`; "
          "`tessera server --keys FILE --cluster-keys FILE`), or, on a trusted network, set "
          "ServerOptions.security.insecure (`--insecure`)",
          who, address, endpoint.value()));
    }
    TESSERA_LOG(kWarning,
                "warning: {} serves {} without authentication or encryption (security.insecure): any host that "
                "reaches it can run code in this process",
                who, address);
  }
  // The services go in first, so that peers already calling a known port are served at once; with
  // port 0 they wait for the port (requests meanwhile are answered Unavailable, "not serving").
  auto install_services = [&] {
    std::lock_guard<std::mutex> l(slot_->mu);
    slot_->state = make_services(with_task_address(cluster_, job_, task_, address), job_, task_, options_,
                                 with_own_address(credentials, address));
  };
  const bool port_zero = has_port_zero(address);
  if (!port_zero) install_services();
  auto rpc = RpcServer::start(endpoint.value(), make_handler(slot_), rpc_options(options_, credentials.get()));
  if (!rpc.ok()) {
    // Unavailable for a port in use (or an address this machine does not have), as RpcServer says.
    rpc.status().with_prefix(fmt::format("{} cannot listen on {}: ", task_name(job_, task_), address)).raise();
  }
  if (port_zero) {
    const std::string& bound = rpc.value()->endpoint();  // "tcp://HOST:PORT"
    address = address.substr(0, address.rfind(':')) + bound.substr(bound.rfind(':'));
    {
      std::lock_guard<std::mutex> l(address_mu_);
      address_ = address;
    }
    install_services();
  }
  rpc_ = std::move(rpc).value();
  std::lock_guard<std::mutex> l(serving_mu_);
  serving_ = true;
}

void ServerImpl::stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (rpc_ == nullptr) return;
  std::shared_ptr<ServiceState> state;
  {
    std::lock_guard<std::mutex> l(slot_->mu);
    state = slot_->state;
  }
  // Sessions first (their runs in flight are answered Cancelled), then the worker's runs, while
  // the services still answer (a run building its plan calls this task's own worker); then the
  // socket, once the callers have read the replies just given (Note [Goodbye] in
  // rpc_server_peers.cc: a second at most to send them, another at most for the callers to
  // answer).
  if (state) {
    state->master->stop();
    state->worker->stop(std::chrono::milliseconds(1000));
  }
  {
    std::lock_guard<std::mutex> l(slot_->mu);
    slot_->state.reset();
  }
  rpc_->stop(std::chrono::milliseconds(1000));
  rpc_.reset();
  {
    std::lock_guard<std::mutex> l(serving_mu_);
    serving_ = false;
    ++stops_;
  }
  serving_cv_.notify_all();
}

void ServerImpl::join() {
  std::unique_lock<std::mutex> l(serving_mu_);
  const uint64_t stops = stops_;
  // stops_ too: a stop() followed at once by a start() must still release this join().
  serving_cv_.wait(l, [&] { return !serving_ || stops_ != stops; });
}

}  // namespace tessera::internal

namespace tessera::train {

Server::Server(ClusterSpec cluster, std::string job_name, int task_index, ServerOptions options, bool start)
    : impl_(std::make_unique<internal::ServerImpl>(std::move(cluster), std::move(job_name), task_index,
                                                   options)) {
  if (start) impl_->start();
}

Server::Server(std::unique_ptr<internal::ServerImpl> impl) : impl_(std::move(impl)) {}

Server Server::create_local_server(ServerOptions options) {
  return Server(internal::ServerImpl::start_local(options));
}

Server::~Server() = default;
Server::Server(Server&&) noexcept = default;
Server& Server::operator=(Server&&) noexcept = default;

internal::ServerImpl& Server::impl() const {
  if (impl_ == nullptr) throw FailedPreconditionError("this Server was moved from");
  return *impl_;
}

void Server::start() { impl().start(); }

void Server::stop() {
  if (impl_ != nullptr) impl_->stop();
}

void Server::join() {
  if (impl_ != nullptr) impl_->join();
}

std::string Server::target() const { return impl().target(); }
const ClusterSpec& Server::cluster() const { return impl().cluster(); }
const std::string& Server::job_name() const { return impl().job_name(); }
int Server::task_index() const { return impl().task_index(); }

std::string apply_server_malloc_settings(char** argv) {
  std::string reason;
  auto tunables = internal::server_glibc_tunables([](const char* name) -> const char* { return std::getenv(name); },
                                                  &reason);
  if (!tunables) return reason;
  if (argv == nullptr || argv[0] == nullptr) return "no arguments to run again";
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::optional<std::string> old = before != nullptr ? std::optional<std::string>(before) : std::nullopt;
  if (::setenv("GLIBC_TUNABLES", tunables->c_str(), 1) != 0) return std::string("setenv: ") + std::strerror(errno);
  ::execv("/proc/self/exe", argv);  // returns only on failure
  const std::string failed = std::string("exec /proc/self/exe: ") + std::strerror(errno);
  // The environment as it was, so that what the process runs later sees no change either.
  if (old) ::setenv("GLIBC_TUNABLES", old->c_str(), 1);
  else ::unsetenv("GLIBC_TUNABLES");
  return failed;
}

}  // namespace tessera::train
