// The worker service of a task (worker.h): registered partitions, their runs, and the per-step
// exchange of tensors with the other tasks.
#include "transport/worker.h"

#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/device_name.h"
#include "host/direct_session.h"
#include "tessera/errors.h"
#include "tessera/graph.h"
#include "transport/elastic_threads.h"
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
// clients: between-graph replication, as in TensorFlow, and variables outlive sessions. Tensors
// crossing tasks: Note [Remote exchange].
//
// Threads. RegisterGraph, RecvTensor and CleanupGraph return at once. RunGraph starts a thread for
// the run (a run may block for long, on a queue or on another task, and must never hold one of the
// server's few handler threads: two tasks each running steps that wait on the other would
// deadlock; ElasticThreads in elastic_threads.h keeps such threads for the next runs). A pull is a
// call_until_lost on the RpcChannel to the source task: it waits as long as the producer needs,
// and fails Unavailable as soon as the connection to that task is lost (a crash resets it; a hung
// task misses heartbeats).

// Note [Remote exchange]
// ~~~~~~~~~~~~~~~~~~~~~~
// Where a tensor produced on task A is consumed on task B, A's partition has a _RemoteSend (key K)
// and B's a _RemoteRecv (key K, source A), the ops of remote_exchange_ops.cc; a control edge sends
// a bool token. Keys are unique within a step. A _RemoteSend puts the tensor into A's exchange
// under (step, K); B's _RemoteRecv pulls it with a RecvTensor call to A, which is answered as soon
// as the tensor is there (before or after the call arrives: whichever comes second completes the
// pair). So tensors go directly from producer to consumer, never through the master, and a big
// tensor crosses as one raw frame referencing the producer's buffer (no copy on send; none on
// receipt either: the frame becomes the tensor's buffer, Note [Zero-copy tensor frames] in
// tensor_frames.cc).
//
// Step state. The exchange keeps, per step, the slots of keys sent but not yet pulled and pulls
// not yet served. A step's state goes away once its run here has finished and every slot has been
// pulled, so successful steps need no cleanup call. A failure anywhere aborts the step: the master
// sends CleanupGraph(step, abort) to every task of the step, and a task whose own run failed aborts
// it locally at once. Aborting fails every waiting and later exchange of the step with the reason
// and cancels this task's pulls in flight (so a run blocked in a _RemoteRecv ends). The last 1024
// aborted step ids are remembered, so an exchange that arrives after the abort fails at once
// instead of waiting for a tensor that will never come.

namespace {

namespace pb = wire::pb;

constexpr std::size_t kAbortedMemory = 1024;

tessera::PlacementPolicy policy_from(const std::string& name) {
  if (name == "gpu_first") return tessera::PlacementPolicy::gpu_first;
  if (name == "cpu_only") return tessera::PlacementPolicy::cpu_only;
  return tessera::PlacementPolicy::cost;
}

}  // namespace

// A registered partition: its graph and the session that runs it.
class WorkerGraph {
 public:
  Graph graph;
  std::vector<Output> feeds;
  std::vector<Output> fetches;
  std::vector<Operation> targets;
  std::unique_ptr<SessionImpl> session;
};

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
    std::vector<Tensor> outputs;
    std::vector<TraceRecord> spans;
    Status st = wg->session->run_step(wg->fetches, *feeds, wg->targets, options, nullptr, step_id,
                                      options.trace ? &spans : nullptr, &outputs);
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
