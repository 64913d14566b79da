// The worker service of a task and the _RemoteSend/_RemoteRecv ops that move tensors between
// tasks.
#include "transport/worker.h"

#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "host/direct_session.h"
#include "tessera/errors.h"
#include "tessera/graph.h"
#include "transport/security.h"
#include "transport/server_impl.h"

namespace tessera::internal {

// Note [Worker]
// ~~~~~~~~~~~~~
// A master splits each step signature of a session by task (transport/master.cc) and registers
// one partition per task with that task's worker: a GraphDef whose nodes carry their device as
// "/device:TYPE:N" (the task part removed), plus the partition's signature (feeds, fetches,
// targets). The worker decodes it into a Graph of its own and runs it with an ordinary SessionImpl,
// whose placement honours those devices and whose partitioner handles the devices inside the task
// (CPU, simulated accelerators, GPUs). Every partition of every session uses the task's one
// ResourceMgr, so a variable or queue named V on this task is the same object for all sessions and
// clients: between-graph replication, as in TensorFlow, and variables outlive sessions.
//
// Edges between tasks. Where a tensor produced on task A is consumed on task B, A's partition has
// a _RemoteSend (key K) and B's a _RemoteRecv (key K, source A); a control edge sends a bool token.
// Keys are unique within a step. A _RemoteSend puts the tensor into A's exchange under (step, K);
// B's _RemoteRecv pulls it with a RecvTensor call to A, which is answered as soon as the tensor is
// there (before or after the call arrives: whichever comes second completes the pair). So tensors
// go directly from producer to consumer, never through the master, and a big tensor crosses as one
// raw frame referencing the producer's buffer (no copy on send; none on receipt either: the frame
// becomes the tensor's buffer, see Note [RPC]).
//
// Step state. The exchange keeps, per step, the slots of keys sent but not yet pulled and pulls
// not yet served. A step's state goes away once its run here has finished and every slot has been
// pulled, so successful steps need no cleanup call. A failure anywhere aborts the step: the master
// sends CleanupGraph(step, abort) to every task of the step, and a task whose own run failed aborts
// it locally at once. Aborting fails every waiting and later exchange of the step with the reason
// and cancels this task's pulls in flight (so a run blocked in a _RemoteRecv ends). The last 1024
// aborted step ids are remembered, so an exchange that arrives after the abort fails at once
// instead of waiting for a tensor that will never come.
//
// Threads. RegisterGraph, RecvTensor and CleanupGraph return at once. RunGraph starts a thread for
// the run (a run may block for long, on a queue or on another task, and must never hold one of the
// server's few handler threads: two tasks each running steps that wait on the other would
// deadlock). A pull is a call_until_lost on the RpcChannel to the source task: it waits as long as
// the producer needs, and fails Unavailable as soon as the connection to that task is lost (a
// crash resets it; a hung task misses heartbeats).

namespace {

namespace pb = wire::pb;

constexpr std::size_t kAbortedMemory = 1024;

// What the exchange kernels find in the task's ResourceMgr.
class WorkerLink final : public ResourceBase {
 public:
  explicit WorkerLink(std::weak_ptr<Worker> worker) : worker(std::move(worker)) {}
  std::string debug_string() const override { return "the task's worker"; }
  const std::weak_ptr<Worker> worker;
};

StatusOr<std::shared_ptr<Worker>> worker_of(OpKernelContext& ctx) {
  auto link = ctx.resources().lookup<WorkerLink>(kWorkerResource);
  if (!link.ok()) {
    return errors::internal("{}: runs only in a partition a cluster master registered with a worker",
                            ctx.node().debug_name());
  }
  std::shared_ptr<Worker> worker = link.value()->worker.lock();
  if (!worker) return errors::cancelled("{}: the server is stopping", ctx.node().debug_name());
  return worker;
}

// ---- _RemoteSend / _RemoteRecv ----

Status remote_send_shape(ShapeContext& c) {
  if (c.num_inputs() > 1) return c.invalid("takes at most one input, got {}", c.num_inputs());
  return Status();
}

Status remote_recv_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"_RemoteSend", remote_send_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"_RemoteRecv", remote_recv_shape, /*stateful=*/true, /*host_only=*/true});

// Hands its input (or, with none, a control token) to this task's exchange for the step.
class RemoteSendOp final : public OpKernel {
 public:
  explicit RemoteSendOp(const Node& node) : OpKernel(node), key_(node.attr<std::string>("key")) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    auto worker = worker_of(ctx);
    if (!worker.ok()) return ctx.fail(worker.status());
    Tensor value = ctx.num_inputs() == 1 ? ctx.input(0) : Tensor::scalar<bool>(true);
    Status s = worker.value()->send(ctx.step_id(), key_, std::move(value));
    if (!s.ok()) ctx.fail(s);
  }

 private:
  const std::string key_;
};

// Pulls its tensor from the producing task, holding no thread while it waits.
class RemoteRecvOp final : public OpKernel {
 public:
  explicit RemoteRecvOp(const Node& node)
      : OpKernel(node), key_(node.attr<std::string>("key")), src_(node.attr<std::string>("src_task")),
        dtype_(node.attr<DType>("dtype")), shape_(node.attr<Shape>("shape")) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override { ctx.fail(errors::internal("_RemoteRecv runs asynchronously only")); }

  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    auto worker = worker_of(ctx);
    if (!worker.ok()) {
      ctx.fail(worker.status());
      return done();
    }
    auto call = std::make_shared<Call>();
    call->ctx = &ctx;
    call->done = std::move(done);
    call->op = this;
    call->token = ctx.cancellation().register_callback([call](const Status& reason) { call->cancel(reason); });
    if (call->token == CancellationManager::kInvalidToken) {
      call->finish(ctx.cancellation().reason());
      return;
    }
    auto canceller = worker.value()->recv(src_, ctx.step_id(), key_,
                                          [call](StatusOr<Tensor> r) { call->finish(std::move(r)); });
    call->set_canceller(std::move(canceller));
  }

 private:
  // One pull: finished by the reply, an error, or a cancellation, whichever comes first.
  struct Call {
    std::mutex mu;
    bool finished = false;                                   // guarded by mu
    bool cancelled = false;                                  // guarded by mu
    Status cancel_reason;                                    // guarded by mu
    std::function<void(const Status&)> canceller;            // guarded by mu
    OpKernelContext* ctx = nullptr;
    std::function<void()> done;
    const RemoteRecvOp* op = nullptr;
    CancellationManager::Token token = CancellationManager::kInvalidToken;

    void cancel(const Status& reason) {
      std::function<void(const Status&)> c;
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished || cancelled) return;
        cancelled = true;
        cancel_reason = reason;
        c = canceller;
      }
      if (c) c(reason);  // finishes the pull with `reason`
    }
    void set_canceller(std::function<void(const Status&)> c) {
      Status reason;
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished) return;
        canceller = c;
        if (!cancelled) return;
        reason = cancel_reason;
      }
      c(reason);  // cancelled before the pull started
    }
    void finish(StatusOr<Tensor> r) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished) return;
        finished = true;
        canceller = nullptr;
      }
      if (token != CancellationManager::kInvalidToken) ctx->cancellation().deregister_callback(token);
      if (!r.ok()) {
        ctx->fail(r.status());
      } else if (r.value().dtype() != op->dtype_ || !op->shape_.compatible_with(r.value().shape())) {
        ctx->fail(errors::internal("received a {} tensor of shape {} for key '{}', expected {} {}",
                                   dtype_name(r.value().dtype()), r.value().shape().to_string(), op->key_,
                                   dtype_name(op->dtype_), op->shape_.to_string()));
      } else {
        ctx->set_output(0, std::move(r).value());
      }
      auto d = std::move(done);
      d();
    }
  };

  const std::string key_;
  const std::string src_;
  const DType dtype_;
  const Shape shape_;
};

TESSERA_REGISTER_KERNEL("_RemoteSend", "CPU", RemoteSendOp);
TESSERA_REGISTER_KERNEL("_RemoteRecv", "CPU", RemoteRecvOp);

tessera::PlacementPolicy policy_from(const std::string& name) {
  if (name == "gpu_first") return tessera::PlacementPolicy::gpu_first;
  if (name == "cpu_only") return tessera::PlacementPolicy::cpu_only;
  return tessera::PlacementPolicy::cost;
}

}  // namespace

// Threads for runs that may block for long: a run never waits for a thread (a new one starts
// when none is idle, so runs that wait on each other cannot deadlock), and in steady state no
// thread is created per run (idle threads wait for the next one; a thread idle for 10 s exits).
// The threads share the queue's state, so the pool may be destroyed from one of its own runs.
class ElasticThreads {
 public:
  ElasticThreads() : core_(std::make_shared<Core>()) {}
  ElasticThreads(const ElasticThreads&) = delete;
  ElasticThreads& operator=(const ElasticThreads&) = delete;
  ~ElasticThreads() {
    std::lock_guard<std::mutex> l(core_->mu);
    core_->stopping = true;  // idle threads leave; busy ones finish the queue first
    core_->cv.notify_all();
  }

  void run(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(core_->mu);
    core_->work.push_back(std::move(fn));
    if (core_->idle >= static_cast<int>(core_->work.size())) {
      core_->cv.notify_one();
      return;
    }
    std::thread([core = core_] { loop(*core); }).detach();
  }

 private:
  struct Core {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> work;  // guarded by mu
    int idle = 0;                            // guarded by mu
    bool stopping = false;                   // guarded by mu
  };
  static void loop(Core& c) {
    std::unique_lock<std::mutex> l(c.mu);
    for (;;) {
      if (!c.work.empty()) {
        auto fn = std::move(c.work.front());
        c.work.pop_front();
        l.unlock();
        fn();
        fn = nullptr;  // destroyed outside the lock
        l.lock();
        continue;
      }
      if (c.stopping) return;
      ++c.idle;
      const bool woken = c.cv.wait_for(l, std::chrono::seconds(10), [&] { return c.stopping || !c.work.empty(); });
      --c.idle;
      if (!woken) return;  // idle too long
    }
  }
  std::shared_ptr<Core> core_;
};

// A registered partition: its graph and the session that runs it.
class WorkerGraph {
 public:
  Graph graph;
  std::vector<Output> feeds;
  std::vector<Output> fetches;
  std::vector<Operation> targets;
  std::unique_ptr<SessionImpl> session;
};

// ---- Helpers shared with the master ----

TaskChannels::TaskChannels(train::ClusterSpec cluster, std::chrono::milliseconds rpc_timeout,
                           std::shared_ptr<const Credentials> credentials, uint64_t max_tensor_bytes)
    : cluster_(std::move(cluster)), rpc_timeout_(rpc_timeout), credentials_(std::move(credentials)),
      max_tensor_bytes_(max_tensor_bytes) {}

StatusOr<RpcChannel*> TaskChannels::get(const std::string& task) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(task);
  if (!spec.ok()) return spec.status();
  if (!spec.value().job || !spec.value().task) {
    return errors::invalid_argument("'{}' does not name a task (/job:J/task:T)", task);
  }
  std::string address;
  try {
    address = cluster_.task_address(*spec.value().job, *spec.value().task);
  } catch (const Error& e) {
    return Status(e.code(), e.message());
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& channel = by_address_[address];
  if (!channel) {
    RpcChannelOptions options;
    if (credentials_) {
      StatusOr<RpcChannelOptions::Curve> curve = channel_curve(*credentials_, address);
      if (!curve.ok()) {
        by_address_.erase(address);
        return curve.status().with_prefix(fmt::format("{}: ", task));
      }
      options.curve = std::move(curve).value();
    }
    const std::string host = address.substr(0, address.rfind(':'));
    const std::string endpoint =
        host == "localhost" ? "tcp://127.0.0.1" + address.substr(address.rfind(':')) : "tcp://" + address;
    channel = std::make_unique<RpcChannel>(endpoint, std::move(options));
  }
  return channel.get();
}

StatusOr<Endpoint> find_tensor(const GraphImpl& graph, const std::string& name) {
  const std::size_t colon = name.rfind(':');
  const std::string node = colon == std::string::npos ? name : name.substr(0, colon);
  Node* n = graph.find(node);
  if (n == nullptr) return errors::invalid_argument("no op '{}'", node);
  int index = 0;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      index = std::stoi(name.substr(colon + 1), &used);
      if (used != name.size() - colon - 1) index = -1;
    } catch (const std::exception&) {
      index = -1;
    }
  }
  if (index < 0 || index >= static_cast<int>(n->output_dtypes.size())) {
    return errors::invalid_argument("op '{}' has no output '{}'", node,
                                    colon == std::string::npos ? std::string("0") : name.substr(colon + 1));
  }
  return Endpoint{n, index};
}

StatusOr<std::string> task_of_device(const std::string& device) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(device);
  if (!spec.ok()) return spec.status();
  if (!spec.value().job || !spec.value().task) {
    return errors::invalid_argument("device '{}' does not name a job and task", device);
  }
  return fmt::format("/job:{}/replica:0/task:{}", *spec.value().job, *spec.value().task);
}

namespace {
zmq::message_t serialize(const google::protobuf::Message& message) {
  zmq::message_t frame(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(frame.data()));
  return frame;
}
std::atomic<uint64_t> next_request_id{1};
}  // namespace

RpcMessage make_call(const std::string& method, const google::protobuf::Message& body,
                     std::vector<zmq::message_t> payload) {
  RpcMessage m;
  m.frames.reserve(payload.size() + 1);
  m.frames.push_back(serialize(
      wire::make_request_header(next_request_id.fetch_add(1, std::memory_order_relaxed), method, body)));
  for (auto& f : payload) m.frames.push_back(std::move(f));
  return m;
}

Status parse_reply(const StatusOr<RpcMessage>& reply, google::protobuf::Message* body) {
  if (!reply.ok()) return reply.status();
  const auto& frames = reply.value().frames;
  if (frames.empty()) return errors::internal("an empty reply");
  auto header = wire::parse_response_header(frames[0].data(), frames[0].size());
  if (!header.ok()) return header.status();
  Status st = wire::to_status(header.value().status());
  if (!st.ok()) return st;
  return wire::parse_body(header.value().body(), body);
}

void send_reply(const Responder& respond, uint64_t request_id, const Status& status,
                const google::protobuf::Message* body, std::vector<zmq::message_t> payload) {
  RpcMessage out;
  out.frames.reserve(payload.size() + 1);
  out.frames.push_back(serialize(wire::make_response_header(request_id, status, status.ok() ? body : nullptr)));
  if (status.ok()) {
    for (auto& f : payload) out.frames.push_back(std::move(f));
  }
  respond(std::move(out));
}

StatusOr<Tensor> tensor_from_frames(const wire::TensorMeta& meta, std::vector<zmq::message_t>& frames,
                                    uint64_t max_bytes) {
  const uint32_t index = meta.frame();
  if (index == 0 || index >= frames.size()) {
    return errors::invalid_argument("a tensor refers to frame {}, but the message has frames 1..{}", index,
                                    frames.size() - 1);
  }
  TESSERA_RETURN_IF_ERROR(wire::validate_tensor_meta(meta, frames[index].size(), max_bytes));
  auto dtype = wire::decode_dtype(meta.dtype());
  if (!dtype.ok()) return dtype.status();
  TESSERA_RETURN_IF_ERROR(wire::validate_tensor_content(dtype.value(), frames[index].data(), frames[index].size()));
  std::vector<int64_t> dims(meta.dims().begin(), meta.dims().end());
  Shape shape(dims);
  return frame_to_tensor(std::move(frames[index]), dtype.value(), shape, dtype_size(dtype.value()));
}

StatusOr<wire::TensorMeta> tensor_to_frames(const Tensor& t, std::vector<zmq::message_t>* frames,
                                            std::size_t first_frame) {
  auto frame = tensor_frame(t);
  if (!frame.ok()) return frame.status();
  const auto index = static_cast<uint32_t>(first_frame + frames->size());
  frames->push_back(std::move(frame).value());
  return wire::encode_tensor_meta(t, index);
}

// ---- Worker ----

Worker::Worker(std::string task_name, std::shared_ptr<TaskChannels> channels)
    : task_name_(std::move(task_name)), channels_(std::move(channels)), threads_(std::make_unique<ElasticThreads>()) {}

Worker::~Worker() = default;

std::shared_ptr<Worker::StepState> Worker::step(int64_t step_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto& s = steps_[step_id];
  if (!s) {
    s = std::make_shared<StepState>();
    auto aborted = aborted_.find(step_id);
    if (aborted != aborted_.end()) s->aborted = aborted->second;
    if (stopped_) s->aborted = errors::cancelled("{} is stopping", task_name_);
  }
  return s;
}

void Worker::maybe_forget(int64_t step_id, const std::shared_ptr<StepState>& s) {
  // Done here: no run, nothing waiting or unpulled, and the run has been (or, aborted, never will
  // be). An exchange arriving later for an aborted step finds the abort in aborted_.
  if (s->runs != 0 || !s->slots.empty() || (!s->ran && s->aborted.ok())) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = steps_.find(step_id);
  if (it != steps_.end() && it->second == s) steps_.erase(it);
}

void Worker::abort_step(int64_t step_id, const Status& reason) {
  std::shared_ptr<StepState> s;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_.emplace(step_id, reason).second) {
      aborted_order_.push_back(step_id);
      if (aborted_order_.size() > kAbortedMemory) {
        aborted_.erase(aborted_order_.front());
        aborted_order_.pop_front();
      }
    }
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    s = it->second;
  }
  std::vector<std::function<void(const Status&)>> cancels;
  std::vector<std::pair<Responder, uint64_t>> waiters;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->aborted.ok()) return;
    s->aborted = reason;
    for (auto& [key, slot] : s->slots) {
      if (slot.waiting) waiters.emplace_back(slot.waiter, slot.waiter_request);
    }
    s->slots.clear();
    cancels.swap(s->on_abort);
    maybe_forget(step_id, s);
  }
  for (auto& [respond, id] : waiters) send_reply(respond, id, reason, nullptr);
  for (auto& c : cancels) c(reason);
}

void Worker::reply_tensor(const Responder& respond, uint64_t request_id, const Tensor& t) {
  std::vector<zmq::message_t> frames;
  auto meta = tensor_to_frames(t, &frames, 1);
  if (!meta.ok()) return send_reply(respond, request_id, meta.status(), nullptr);
  pb::RecvTensorResponse response;
  response.set_version(wire::kWireVersion);
  *response.mutable_tensor() = meta.value();
  send_reply(respond, request_id, Status(), &response, std::move(frames));
}

Status Worker::send(int64_t step_id, const std::string& key, Tensor value) {
  std::shared_ptr<StepState> s = step(step_id);
  Responder waiter;
  uint64_t waiter_request = 0;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->aborted.ok()) return s->aborted;
    Slot& slot = s->slots[key];
    if (slot.has_value) return errors::internal("key '{}' of step {} sent twice", key, step_id);
    if (!slot.waiting) {
      slot.has_value = true;
      slot.value = std::move(value);
      return Status();
    }
    waiter = std::move(slot.waiter);
    waiter_request = slot.waiter_request;
    s->slots.erase(key);
    maybe_forget(step_id, s);
  }
  reply_tensor(waiter, waiter_request, value);
  return Status();
}

std::function<void(const Status&)> Worker::recv(const std::string& src_task, int64_t step_id, const std::string& key,
                                                RecvDone done) {
  struct Once {
    std::atomic<bool> fired{false};
    RecvDone done;
    void operator()(StatusOr<Tensor> r) {
      if (!fired.exchange(true)) done(std::move(r));
    }
  };
  auto once = std::make_shared<Once>();
  once->done = std::move(done);
  auto cancel = [once](const Status& reason) { (*once)(reason); };
  StatusOr<RpcChannel*> channel = channels_->get(src_task);
  if (!channel.ok()) {
    (*once)(channel.status());
    return cancel;
  }
  {
    // This step's pulls end when it is aborted here.
    std::shared_ptr<StepState> s = step(step_id);
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->aborted.ok()) {
      Status reason = s->aborted;
      maybe_forget(step_id, s);
      (*once)(reason);
      return cancel;
    }
    s->on_abort.push_back(cancel);
  }
  pb::RecvTensorRequest request;
  request.set_version(wire::kWireVersion);
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  channel.value()->call_until_lost(
      make_call("RecvTensor", request), channels_->rpc_timeout(),
      [once, src_task, key, max_bytes = channels_->max_tensor_bytes()](StatusOr<RpcMessage> reply) {
        pb::RecvTensorResponse response;
        Status st = parse_reply(reply, &response);
        if (!st.ok()) {
          // An error of the producing task (its step failed) arrives as is; a transport failure
          // names the task.
          if (!reply.ok()) st = st.with_prefix(fmt::format("task {}: ", src_task));
          return (*once)(st);
        }
        auto frames = std::move(reply.value().frames);
        (*once)(tensor_from_frames(response.tensor(), frames, max_bytes));
      });
  return cancel;
}

void Worker::register_graph(const wire::RequestHeader& header, const Responder& respond) {
  auto request = wire::parse_body<pb::RegisterGraphRequest>(header.body());
  if (!request.ok()) return send_reply(respond, header.request_id(), request.status(), nullptr);
  const pb::RegisterGraphRequest& r = request.value();
  auto wg = std::make_shared<WorkerGraph>();
  Status st;
  try {
    st = wire::decode_graph(r.graph(), &wg->graph.impl());
    for (const std::string& name : r.feed()) {
      if (!st.ok()) break;
      auto ep = find_tensor(wg->graph.impl(), name);
      if (!ep.ok()) st = ep.status().with_prefix(fmt::format("tensor '{}' of the partition: ", name));
      else wg->feeds.emplace_back(ep.value().node, ep.value().index);
    }
    for (const std::string& name : r.fetch()) {
      if (!st.ok()) break;
      auto ep = find_tensor(wg->graph.impl(), name);
      if (!ep.ok()) st = ep.status().with_prefix(fmt::format("tensor '{}' of the partition: ", name));
      else wg->fetches.emplace_back(ep.value().node, ep.value().index);
    }
    for (const std::string& name : r.target()) {
      if (!st.ok()) break;
      Node* n = wg->graph.impl().find(name);
      if (n == nullptr) st = errors::invalid_argument("no target node '{}' in the partition", name);
      else wg->targets.emplace_back(n);
    }
    if (st.ok()) {
      auto link = resources_.lookup_or_create<WorkerLink>(
          kWorkerResource, [this]() -> StatusOr<std::shared_ptr<WorkerLink>> {
            return std::make_shared<WorkerLink>(weak_from_this());
          });
      if (!link.ok()) st = link.status();
    }
    if (st.ok()) {
      SessionOptions options;
      options.allow_soft_placement = true;
      options.placement_policy = policy_from(r.config().placement_policy());
      wg->session = std::make_unique<SessionImpl>(wg->graph, options, &resources_);
    }
  } catch (...) {
    st = status_from_current_exception();
  }
  if (!st.ok()) {
    return send_reply(respond, header.request_id(), st.with_prefix(task_name_ + ": RegisterGraph: "), nullptr);
  }
  std::string handle;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) {
      return send_reply(respond, header.request_id(), errors::cancelled("{} is stopping", task_name_), nullptr);
    }
    handle = fmt::format("{}/graph/{}", task_name_, next_graph_++);
    graphs_[handle] = wg;
  }
  pb::RegisterGraphResponse response;
  response.set_version(wire::kWireVersion);
  response.set_graph_handle(handle);
  send_reply(respond, header.request_id(), Status(), &response);
}

void Worker::run_graph(const wire::RequestHeader& header, RpcMessage request, const Responder& respond) {
  auto parsed = wire::parse_body<pb::RunGraphRequest>(header.body());
  if (!parsed.ok()) return send_reply(respond, header.request_id(), parsed.status(), nullptr);
  auto r = std::make_shared<pb::RunGraphRequest>(std::move(parsed).value());
  std::shared_ptr<WorkerGraph> wg;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) {
      return send_reply(respond, header.request_id(), errors::cancelled("{} is stopping", task_name_), nullptr);
    }
    auto it = graphs_.find(r->graph_handle());
    if (it != graphs_.end()) wg = it->second;
  }
  if (!wg) {
    return send_reply(respond, header.request_id(),
                      errors::not_found("{}: no registered graph '{}' (deregistered, or the task restarted)",
                                        task_name_, r->graph_handle()),
                      nullptr);
  }
  if (r->send_size() != static_cast<int>(wg->feeds.size())) {
    return send_reply(respond, header.request_id(),
                      errors::invalid_argument("{}: RunGraph feeds {} tensors, the graph takes {}", task_name_,
                                               r->send_size(), wg->feeds.size()),
                      nullptr);
  }
  auto feeds = std::make_shared<FeedMap>();
  for (int i = 0; i < r->send_size(); ++i) {
    auto t = tensor_from_frames(r->send(i).meta(), request.frames, channels_->max_tensor_bytes());
    if (!t.ok()) {
      return send_reply(respond, header.request_id(),
                        t.status().with_prefix(fmt::format("{}: feed '{}': ", task_name_, r->send(i).name())), nullptr);
    }
    (*feeds)[wg->feeds[static_cast<std::size_t>(i)]] = std::move(t).value();
  }
  const int64_t step_id = r->step_id();
  std::shared_ptr<StepState> s = step(step_id);
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->aborted.ok()) {
      maybe_forget(step_id, s);
      return send_reply(respond, header.request_id(), s->aborted, nullptr);
    }
    ++s->runs;
    // An abort also cancels the run itself (it may be blocked on a queue, not on an exchange).
    s->on_abort.push_back([wg, step_id](const Status& reason) { wg->session->cancel_step(step_id, reason); });
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ++active_runs_;
  }
  threads_->run([self = shared_from_this(), wg, r, feeds, s, step_id, respond, request_id = header.request_id()] {
    RunOptions options;
    options.timeout = std::chrono::milliseconds(r->timeout_ms());
    options.trace = r->trace();
    Status st;
    std::vector<Tensor> outputs;
    std::vector<TraceRecord> spans;
    try {
      outputs = wg->session->run(wg->fetches, *feeds, wg->targets, options, nullptr, step_id,
                                 options.trace ? &spans : nullptr);
    } catch (...) {
      st = status_from_current_exception();
    }
    bool abort = false;
    {
      std::lock_guard<std::mutex> l(s->mu);
      --s->runs;
      s->ran = true;
      abort = !st.ok() && s->aborted.ok();
      if (!abort) self->maybe_forget(step_id, s);
    }
    if (abort) self->abort_step(step_id, st);
    if (!st.ok()) {
      send_reply(respond, request_id, st, nullptr);
    } else {
      std::vector<zmq::message_t> frames;
      pb::RunGraphResponse response;
      response.set_version(wire::kWireVersion);
      for (std::size_t i = 0; i < outputs.size() && st.ok(); ++i) {
        auto meta = tensor_to_frames(outputs[i], &frames, 1);
        if (!meta.ok()) {
          st = meta.status();
          break;
        }
        pb::NamedTensor* nt = response.add_recv();
        nt->set_name(wg->fetches[i].name());
        *nt->mutable_meta() = meta.value();
      }
      if (options.trace) {
        // The partition ran on this process's devices: the trace names them as the cluster does
        // (task_device_name, as GetStatus reports them).
        const StatusOr<DeviceSpec> task = DeviceSpec::parse(self->task_name_);  // "/job:J/replica:0/task:T"
        TESSERA_CHECK(task.ok() && task.value().job && task.value().task);
        for (TraceRecord& span : spans) {
          auto name = task_device_name(span.device, *task.value().job, *task.value().task);
          if (name.ok()) span.device = std::move(name).value();
        }
        wire::encode_trace(spans, response.mutable_trace());
      }
      send_reply(respond, request_id, st, &response, std::move(frames));
    }
    std::lock_guard<std::mutex> l(self->mu_);
    if (--self->active_runs_ == 0) self->runs_cv_.notify_all();
  });
}

void Worker::recv_tensor(const wire::RequestHeader& header, const Responder& respond) {
  auto r = wire::parse_body<pb::RecvTensorRequest>(header.body());
  if (!r.ok()) return send_reply(respond, header.request_id(), r.status(), nullptr);
  const int64_t step_id = r.value().step_id();
  const std::string& key = r.value().rendezvous_key();
  std::shared_ptr<StepState> s = step(step_id);
  Tensor value;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->aborted.ok()) {
      maybe_forget(step_id, s);
      return send_reply(respond, header.request_id(), s->aborted, nullptr);
    }
    Slot& slot = s->slots[key];
    if (slot.waiting) {
      return send_reply(respond, header.request_id(),
                        errors::invalid_argument("{}: key '{}' of step {} pulled twice", task_name_, key, step_id),
                        nullptr);
    }
    if (!slot.has_value) {
      slot.waiting = true;
      slot.waiter = respond;
      slot.waiter_request = header.request_id();
      return;
    }
    value = std::move(slot.value);
    s->slots.erase(key);
    maybe_forget(step_id, s);
  }
  reply_tensor(respond, header.request_id(), value);
}

void Worker::cleanup_graph(const wire::RequestHeader& header, const Responder& respond) {
  auto r = wire::parse_body<pb::CleanupGraphRequest>(header.body());
  if (!r.ok()) return send_reply(respond, header.request_id(), r.status(), nullptr);
  Status reason = wire::to_status(r.value().abort());
  if (reason.ok()) reason = errors::aborted("step {} was cleaned up", r.value().step_id());
  abort_step(r.value().step_id(), reason);
  pb::CleanupGraphResponse response;
  response.set_version(wire::kWireVersion);
  send_reply(respond, header.request_id(), Status(), &response);
}

void Worker::deregister_graph(const wire::RequestHeader& header, const Responder& respond) {
  auto r = wire::parse_body<pb::DeregisterGraphRequest>(header.body());
  if (!r.ok()) return send_reply(respond, header.request_id(), r.status(), nullptr);
  std::shared_ptr<WorkerGraph> wg;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = graphs_.find(r.value().graph_handle());
    if (it != graphs_.end()) {
      wg = std::move(it->second);
      graphs_.erase(it);
    }
  }
  pb::DeregisterGraphResponse response;
  response.set_version(wire::kWireVersion);
  send_reply(respond, header.request_id(), Status(), &response);
  // The session closes (waiting for its runs) off the handler thread: a run may still need a while.
  if (wg) std::thread([wg] { wg->session->close(); }).detach();
}

void Worker::stop(std::chrono::milliseconds grace) {
  const Status reason = errors::cancelled("{} is stopping", task_name_);
  std::unordered_map<std::string, std::shared_ptr<WorkerGraph>> graphs;
  std::vector<int64_t> steps;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    graphs.swap(graphs_);
    for (const auto& [id, s] : steps_) steps.push_back(id);
  }
  for (int64_t id : steps) abort_step(id, reason);
  resources_.cancel_all(reason);  // wakes runs blocked on the task's queues
  // Closing a session cancels its runs and waits for them; they end quickly once cancelled.
  std::vector<std::thread> closers;
  for (auto& [handle, wg] : graphs) closers.emplace_back([wg = wg] { wg->session->close(); });
  for (auto& t : closers) t.join();
  std::unique_lock<std::mutex> l(mu_);
  runs_cv_.wait_for(l, grace, [&] { return active_runs_ == 0; });
}

}  // namespace tessera::internal
