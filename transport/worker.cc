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
// crossing tasks go through the step's rendezvous: Note [Remote rendezvous] in
// distributed/rendezvous_mgr.cc; the worker carries its pulls as RecvTensor calls and serves the
// RecvTensor calls of the other tasks from it.
//
// Threads. RegisterGraph, RecvTensor and CleanupGraph return at once. RunGraph starts a thread for
// the run (a run may block for long, on a queue or on another task, and must never hold one of the
// server's few handler threads: two tasks each running steps that wait on the other would
// deadlock; ElasticThreads in elastic_threads.h keeps such threads for the next runs). A pull is a
// call_until_lost on the RpcChannel to the source task: it waits as long as the producer needs,
// and fails Unavailable as soon as the connection to that task is lost (a crash resets it; a hung
// task misses heartbeats).

namespace {

namespace pb = wire::pb;

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
    : task_name_(std::move(task_name)), channels_(std::move(channels)), rendezvous_(task_name_, this),
      threads_(std::make_unique<ElasticThreads>()) {}

Worker::~Worker() = default;

void Worker::reply_tensor(const Responder& respond, uint64_t request_id, const Tensor& t) {
  std::vector<zmq::message_t> frames;
  auto meta = tensor_to_frames(t, &frames, 1);
  if (!meta.ok()) return send_reply(respond, request_id, meta.status(), nullptr);
  pb::RecvTensorResponse response;
  response.set_version(wire::kWireVersion);
  *response.mutable_tensor() = meta.value();
  send_reply(respond, request_id, Status(), &response, std::move(frames));
}

std::function<void()> Worker::pull(const std::string& task, int64_t step_id, const std::string& key, Done done) {
  StatusOr<RpcChannel*> channel = channels_->get(task);
  if (!channel.ok()) {
    done(channel.status());
    return nullptr;
  }
  pb::RecvTensorRequest request;
  request.set_version(wire::kWireVersion);
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  channel.value()->call_until_lost(
      make_call("RecvTensor", request), channels_->rpc_timeout(),
      [done = std::move(done), task, max_bytes = channels_->max_tensor_bytes()](StatusOr<RpcMessage> reply) {
        pb::RecvTensorResponse response;
        Status st = parse_reply(reply, &response);
        if (!st.ok()) {
          // An error of the producing task (its step failed) arrives as is; a transport failure
          // names the task.
          if (!reply.ok()) st = st.with_prefix(fmt::format("task {}: ", task));
          return done(st);
        }
        auto frames = std::move(reply.value().frames);
        done(tensor_from_frames(response.tensor(), frames, max_bytes));
      });
  return nullptr;  // the call runs to its reply or its lost connection; the pull has let go of it
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
  // An abort also cancels the run itself (it may be blocked on a queue, not on an exchange).
  Status begun = rendezvous_.begin_run(step_id, [wg, step_id](const Status& reason) { wg->session->cancel_step(step_id, reason); });
  if (!begun.ok()) return send_reply(respond, header.request_id(), begun, nullptr);
  std::shared_ptr<StepRendezvous> exchange = rendezvous_.find(step_id);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++active_runs_;
  }
  threads_->run([self = shared_from_this(), wg, r, feeds, exchange, step_id, respond, request_id = header.request_id()] {
    RunOptions options;
    options.timeout = std::chrono::milliseconds(r->timeout_ms());
    options.trace = r->trace();
    std::vector<Tensor> outputs;
    std::vector<TraceRecord> spans;
    Status st = wg->session->run_step(wg->fetches, *feeds, wg->targets, options, nullptr, step_id,
                                      options.trace ? &spans : nullptr, &outputs, exchange.get());
    self->rendezvous_.end_run(step_id, st);
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
  rendezvous_.serve(r.value().step_id(), r.value().rendezvous_key(),
                    [respond, request_id = header.request_id()](StatusOr<Tensor> t) {
                      if (!t.ok()) return send_reply(respond, request_id, t.status(), nullptr);
                      reply_tensor(respond, request_id, t.value());
                    });
}

void Worker::cleanup_graph(const wire::RequestHeader& header, const Responder& respond) {
  auto r = wire::parse_body<pb::CleanupGraphRequest>(header.body());
  if (!r.ok()) return send_reply(respond, header.request_id(), r.status(), nullptr);
  Status reason = wire::to_status(r.value().abort());
  if (reason.ok()) reason = errors::aborted("step {} was cleaned up", r.value().step_id());
  rendezvous_.abort_step(r.value().step_id(), reason);
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
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    graphs.swap(graphs_);
  }
  rendezvous_.stop(reason);
  resources_.cancel_all(reason);  // wakes runs blocked on the task's queues
  // Closing a session cancels its runs and waits for them; they end quickly once cancelled.
  std::vector<std::thread> closers;
  for (auto& [handle, wg] : graphs) closers.emplace_back([wg = wg] { wg->session->close(); });
  for (auto& t : closers) t.join();
  std::unique_lock<std::mutex> l(mu_);
  runs_cv_.wait_for(l, grace, [&] { return active_runs_ == 0; });
}

}  // namespace tessera::internal
