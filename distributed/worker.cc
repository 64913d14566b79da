// The worker service of a task (worker.h): registered partitions, their runs, and the per-step
// exchange of tensors with the other tasks.
#include "distributed/worker.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "core/device_factory.h"
#include "core/device_name.h"
#include "core/map_util.h"
#include "core/memory_release.h"
#include "core/thread_pool.h"
#include "distributed/incarnation.h"
#include "distributed/service_names.h"
#include "core/direct_session.h"
#include "tessera/errors.h"
#include "tessera/graph.h"

namespace tessera::internal {

// Note [Worker]
// ~~~~~~~~~~~~~
// A master splits each step signature of a session by task (distributed/master.cc) and registers
// one partition per task with that task's worker: a GraphDef whose nodes carry their device as
// "/device:TYPE:N" (the task part removed), plus the partition's signature (feeds, fetches,
// targets). The worker decodes it into a Graph of its own and runs it with an ordinary SessionImpl,
// whose placement honours those devices and whose partitioner handles the devices inside the task
// (CPU, simulated accelerators, GPUs). Every partition of every session uses the task's one
// ResourceMgr, so a variable named V (or a queue or accumulator whose shared name is V) on this
// task is the same object for all sessions and clients: between-graph replication, as in
// TensorFlow, and variables outlive sessions; what has no shared name is the client session's own
// (Note [Private resources]). Tensors
// crossing tasks go through the step's rendezvous: Note [Remote rendezvous] in
// distributed/rendezvous_mgr.cc; the worker carries its pulls as RecvTensor calls and serves the
// RecvTensor calls of the other tasks from it.
//
// Threads. Every call returns at once. RunGraph runs the partition with run_step_async (Note
// [Asynchronous steps] in core/direct_session.cc): a run blocked on a queue or on another task
// holds no thread, neither one of the server's few handler threads (two tasks each running steps
// that wait on the other would deadlock) nor one of its own, so blocked runs cost memory only. A
// pull is a RecvTensor call to the source task's worker: it waits as long as the producer needs,
// and fails Unavailable as soon as the transport loses that task (ZeroMQ's: a crash resets the
// connection; a hung task misses heartbeats).

// Note [Masters that vanish]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The hole: a master that died (kill -9, its machine lost) or was cut off never sends the
// CleanupGraph or DeregisterGraph that would end its steps here, so a step it started that waits
// on this task (a dequeue from an empty queue) waited forever, and took the next element someone
// enqueued, for nobody. Idle-session closing cannot help: that session lived on the dead master.
// The fix: the worker ends a step when the RunGraph call that started it loses its caller. The
// transport knows when that happens (transport/server.cc: Responder::on_lost, Note [Lost callers]
// in rpc_server.cc): a killed master's connection resets at once, a hung or cut off one misses
// ZMTP heartbeats and is dropped after heartbeat_timeout (3 s). It then calls abort_run(step,
// Cancelled), which is CleanupGraph's abort: the run is cancelled (its dequeue leaves the queue),
// the step's exchanges fail, and the step id is remembered as aborted, so a late pull of it fails
// at once. Why not per session (the master task lost, all its steps aborted)? A worker does not
// know which task a caller is, and one connection per RunGraph caller is what the transport sees;
// the master holds one channel per task, so every step a dead master started here ends together.
// A master that is alive but lost its connection briefly loses nothing: its own call fails
// "lost the connection" (Note [RPC deadlines]) at the same moment, so the step was failing anyway.

// Note [Partition leases]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Note [Masters that vanish] ends the steps a lost master left running, but a master that died
// between steps left its partitions here for good: its DeregisterGraph never comes. Idle time
// cannot tell a dead master from a live one (a live session may leave one signature's partition
// here unused for hours while it runs others, or while another task's part of a step blocks), so
// the master says it is alive. It registers a session's partitions with a lease
// (RegisterGraphRequest.lease_ms, from ServerOptions::partition_lease) and, while the session is
// open, renews it every lease/4 on each worker holding one of them: one KeepAlive per worker,
// naming all its sessions there. A lease not renewed in time (its master killed, hung, or cut off
// for longer than the lease) ends as DeregisterGraph would end its session's partitions: their
// sessions are closed off the timer's thread (a run still in flight is cancelled), and a warning
// says so. A later RunGraph of one fails Aborted saying why (the last 1024 handles are
// remembered), which a monitored session answers by making a new session. Leases run on the
// worker's clock alone: the two clocks need not agree. As the master's idle check, one check is
// armed on the process's timer for the earliest end of a lease and each check arms the next;
// none while no lease is held. A lease of 0 (partition_lease 0) never ends.

// Note [Private resources]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// TensorFlow's queues, accumulators and readers made without a shared_name are private to their
// kernel ("Empty shared_name means private resource", ResourceOpKernel): two clients whose graphs
// both make an unnamed FIFOQueue "fifo_queue" on one task get two queues, and sharing one takes a
// shared_name (SyncReplicasOptimizer's "sync_token_q", its "<var>/grad_accum"s). A worker keys
// its kernels by session, so the unit is the master's session: every partition it registers here
// (one per step signature) sees the same private queue, another session never does. So each
// session handle gets a ResourceMgr of its own beside the task's, shared by its partitions'
// SessionImpls (OpKernelContext::private_resources()), and gone with the last of them
// (DeregisterGraph at the session's close, or its lease's end). Epoch counters (the epochs local
// variable that TF's sessions each initialize) live there too. Before this, such resources were
// found by op name in the task's ResourceMgr: two unrelated clients silently shared a queue, or
// failed when its capacity differed.

namespace pb = wire::pb;

namespace {

// A lease from the wire, at most kLongestDelay (core/timer.h).
std::chrono::milliseconds lease_of(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, kLongestDelay.count()));
}

// "/job:J/replica:0/task:T" (the server's name for its own task) as a spec with a job and a task.
DeviceSpec parse_task(const std::string& task) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(task);
  TESSERA_CHECK(spec.ok() && spec.value().job && spec.value().task);
  return std::move(spec).value();
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
  std::string session_handle;  // the master's session that registered it
  bool leased = false;         // under that session's lease (Note [Partition leases])
};

// ---- Worker ----

Worker::Worker(std::string task_name, std::shared_ptr<WorkerCache> peers, int64_t max_graph_nodes,
               std::chrono::milliseconds step_start_timeout)
    : task_name_(std::move(task_name)), incarnation_(new_incarnation()), task_(parse_task(task_name_)),
      max_graph_nodes_(max_graph_nodes),
      peers_(std::move(peers)), rendezvous_(task_name_, this, step_start_timeout) {}

Worker::~Worker() = default;

pb::GetStatusResponse local_status(const std::string& job, int task) {
  pb::GetStatusResponse response;
  response.set_version(wire::kWireVersion);
  // The devices were made when the server started (local_devices() in its constructor).
  StatusOr<std::vector<Device*>> devices = local_devices();
  TESSERA_CHECK(devices.ok());
  for (const Device* d : devices.value()) {
    StatusOr<std::string> name = task_device_name(d->name(), job, task);
    TESSERA_CHECK(name.ok());  // the registry holds full names only
    pb::DeviceAttributes* attrs = response.add_device();
    attrs->set_name(std::move(name).value());
    attrs->set_type(d->type());
    attrs->set_memory_limit(0);  // unknown: allocators have no fixed limit yet
    const DeviceCostProfile& cost = d->cost_profile();
    attrs->set_flops_per_second(cost.flops_per_second);
    attrs->set_memory_bandwidth(cost.memory_bandwidth);
    attrs->set_transfer_bandwidth(cost.transfer_bandwidth);
    attrs->set_transfer_latency_seconds(cost.transfer_latency_seconds);
    attrs->set_kernel_overhead_seconds(cost.kernel_overhead_seconds);
  }
  return response;
}

void Worker::get_status(const pb::GetStatusRequest& request, Done<pb::GetStatusResponse> done) {
  done(local_status(*task_.job, *task_.task));
}

std::function<void()> Worker::pull(const std::string& task, int64_t step_id, const std::string& key, PullDone done) {
  StatusOr<WorkerInterface*> peer = peers_->get(task);
  if (!peer.ok()) {
    done(peer.status());
    return nullptr;
  }
  pb::RecvTensorRequest request;
  request.set_version(wire::kWireVersion);
  request.set_step_id(step_id);
  request.set_rendezvous_key(key);
  peer.value()->recv_tensor(request, std::move(done));
  return nullptr;  // the call runs to its reply or to losing the task; the pull has let go of it
}

void Worker::register_graph(const pb::RegisterGraphRequest& r, Done<pb::RegisterGraphResponse> done) {
  auto wg = std::make_shared<WorkerGraph>();
  Status st = wire::decode_graph(r.graph(), &wg->graph.impl(), nullptr, max_graph_nodes_);
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
  auto policy = placement_policy_named(r.config().placement_policy());
  if (st.ok() && !policy.ok()) st = policy.status();
  if (st.ok()) {
    SessionOptions options;
    options.allow_soft_placement = true;
    options.placement_policy = policy.value();
    options.allow_tf32 = r.config().allow_tf32();
    options.cuda_graphs = !r.config().disable_cuda_graphs();
    auto session = SessionImpl::make(wg->graph, options, &resources_, private_resources(r.session_handle()));
    if (session.ok()) wg->session = std::move(session).value();
    else st = session.status();
  }
  if (!st.ok()) return done(st.with_prefix(task_name_ + ": RegisterGraph: "));
  std::string handle;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return done(errors::cancelled("{} is stopping", task_name_));
    handle = fmt::format("{}/graph/{}-{}", task_name_, incarnation_, next_graph_++);  // Note [Incarnations]
    wg->session_handle = r.session_handle();
    graphs_[handle] = wg;
    if (const std::chrono::milliseconds length = lease_of(r.lease_ms()); length.count() > 0) {
      Lease& lease = leases_[r.session_handle()];
      lease.length = length;
      lease.until = Clock::now() + length;
      ++lease.graphs;
      wg->leased = true;
      arm_lease_check_locked(lease.until);
    }
  }
  pb::RegisterGraphResponse response;
  response.set_version(wire::kWireVersion);
  response.set_graph_handle(handle);
  done(std::move(response));
}

void Worker::run_graph(const pb::RunGraphRequest& request, std::vector<Tensor> send, Done<RunGraphReply> done) {
  const pb::RunGraphRequest* r = &request;
  std::shared_ptr<WorkerGraph> wg;
  std::string lapsed;  // the session whose lease ended, when that dropped the graph
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return done(errors::cancelled("{} is stopping", task_name_));
    auto it = graphs_.find(r->graph_handle());
    if (it != graphs_.end()) wg = it->second;
    else if (const std::string* session = lapsed_graphs_.find(r->graph_handle())) lapsed = *session;
  }
  if (!wg && !lapsed.empty()) {
    return done(errors::aborted("{}: graph '{}' of session '{}' was dropped: its master did not renew its lease in "
                                "time (the master is gone, or was cut off for longer than "
                                "ServerOptions::partition_lease)", task_name_, r->graph_handle(), lapsed));
  }
  if (!wg) {
    // Aborted, as TF's GraphMgr ("Graph handle is not found ... this worker just restarted"): the
    // caller's session is gone here, and a monitored session makes a new one.
    return done(errors::aborted("{}: no registered graph '{}' (deregistered, or the task restarted)", task_name_,
                                  r->graph_handle()));
  }
  if (r->send_size() != static_cast<int>(wg->feeds.size()) || send.size() != wg->feeds.size()) {
    return done(errors::invalid_argument("{}: RunGraph feeds {} tensors, the graph takes {}", task_name_,
                                         r->send_size(), wg->feeds.size()));
  }
  FeedMap feeds;
  for (std::size_t i = 0; i < send.size(); ++i) feeds[wg->feeds[i]] = std::move(send[i]);
  const int64_t step_id = r->step_id();
  // An abort also cancels the run itself (it may be blocked on a queue, not on an exchange).
  auto begun = rendezvous_.begin_run(step_id, [wg, step_id](const Status& reason) {
    wg->session->cancel_step(step_id, reason);
  });
  if (!begun.ok()) return done(begun.status());
  std::shared_ptr<StepRendezvous> exchange = std::move(begun).value();
  {
    std::lock_guard<std::mutex> l(mu_);
    ++active_runs_;
  }
  RunOptions options;
  options.timeout = std::chrono::milliseconds(r->timeout_ms());
  options.trace = r->trace();
  // Asynchronous: the run holds no thread while it waits (Note [Worker]).
  wg->session->run_step_async(
      wg->fetches, std::move(feeds), wg->targets, options, step_id, options.trace, exchange.get(),
      [self = shared_from_this(), wg, exchange, step_id, done = std::move(done)](
          Status st, std::vector<Tensor> outputs, std::vector<TraceRecord> spans) {
        self->rendezvous_.end_run(step_id, st);
        if (!st.ok()) {
          done(st);
        } else {
          RunGraphReply reply;
          reply.response.set_version(wire::kWireVersion);
          for (std::size_t i = 0; i < outputs.size(); ++i) reply.response.add_recv()->set_name(wg->fetches[i].name());
          reply.recv = std::move(outputs);
          if (!spans.empty()) {
            // The partition ran on this process's devices: the trace names them as the cluster does
            // (task_device_name, as GetStatus reports them).
            for (TraceRecord& span : spans) {
              auto name = task_device_name(span.device, *self->task_.job, *self->task_.task);
              if (name.ok()) span.device = std::move(name).value();
            }
            wire::encode_trace(spans, reply.response.mutable_trace());
          }
          done(std::move(reply));
        }
        std::lock_guard<std::mutex> l(self->mu_);
        if (--self->active_runs_ == 0) self->runs_cv_.notify_all();
      });
}

void Worker::recv_tensor(const pb::RecvTensorRequest& request, Done<Tensor> done) {
  serve_recv_tensor(request, std::move(done));
}

RendezvousMgr::GiveUp Worker::serve_recv_tensor(const pb::RecvTensorRequest& request, Done<Tensor> done) {
  return rendezvous_.serve(request.step_id(), request.rendezvous_key(), std::move(done));
}

void Worker::cleanup_graph(const pb::CleanupGraphRequest& request, Done<pb::CleanupGraphResponse> done) {
  Status reason = wire::to_status(request.abort());
  if (reason.ok()) reason = errors::aborted("step {} was cleaned up", request.step_id());
  rendezvous_.abort_step(request.step_id(), reason);
  pb::CleanupGraphResponse response;
  response.set_version(wire::kWireVersion);
  done(std::move(response));
}

void Worker::abort_run(int64_t step_id, const Status& reason) { rendezvous_.abort_step(step_id, reason); }

std::shared_ptr<ResourceMgr> Worker::private_resources(const std::string& session_handle) {
  std::lock_guard<std::mutex> l(mu_);
  std::weak_ptr<ResourceMgr>& slot = private_resources_[session_handle];
  std::shared_ptr<ResourceMgr> mgr = slot.lock();
  if (!mgr) {
    mgr = std::make_shared<ResourceMgr>();
    slot = mgr;
    if (private_resources_.size() > 2 * private_swept_ + 64) {  // forget the sessions gone since
      std::erase_if(private_resources_, [](const auto& entry) { return entry.second.expired(); });
      private_swept_ = private_resources_.size();
    }
  }
  return mgr;
}

void Worker::deregister_graph(const pb::DeregisterGraphRequest& request, Done<pb::DeregisterGraphResponse> done) {
  std::shared_ptr<WorkerGraph> wg;
  {
    std::lock_guard<std::mutex> l(mu_);
    wg = take(graphs_, request.graph_handle());
    shrink_if_sparse(graphs_);
    if (wg && wg->leased) {  // the session's last leased partition takes its lease with it
      auto lease = leases_.find(wg->session_handle);
      if (lease != leases_.end() && --lease->second.graphs == 0) {
        leases_.erase(lease);
        shrink_if_sparse(leases_);
      }
    }
  }
  pb::DeregisterGraphResponse response;
  response.set_version(wire::kWireVersion);
  done(std::move(response));
  // The session closes (waiting for its runs) off the caller's thread: a run may still need a while
  // (on this one when no thread can be had). Then what it held goes back to the system.
  if (!wg) return;
  run_detached_or_inline([wg]() mutable {
    wg->session->close();
    wg.reset();
    request_memory_release();
  });
}

void Worker::keep_alive(const pb::KeepAliveRequest& request, Done<pb::KeepAliveResponse> done) {
  pb::KeepAliveResponse response;
  response.set_version(wire::kWireVersion);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return done(errors::cancelled("{} is stopping", task_name_));
    const Clock::time_point now = Clock::now();
    const std::chrono::milliseconds length = lease_of(request.lease_ms());
    for (const std::string& session : request.session_handle()) {
      auto it = leases_.find(session);
      if (it == leases_.end()) {
        response.add_unknown_session(session);
        continue;
      }
      if (length.count() > 0) it->second.length = length;
      it->second.until = now + it->second.length;
      // Usually later than before (an armed check then finds nothing due and arms the next), but
      // earlier when the lease was shortened.
      arm_lease_check_locked(it->second.until);
    }
  }
  done(std::move(response));
}

std::size_t Worker::num_graphs() {
  std::lock_guard<std::mutex> l(mu_);
  return graphs_.size();
}

void Worker::arm_lease_check_locked(Clock::time_point deadline) {
  if (stopped_ || (lease_check_ && lease_check_->at <= deadline)) return;
  if (lease_check_) TimerQueue::global().cancel(lease_check_->id);  // this one comes first
  const uint64_t generation = ++lease_checks_;
  auto id = TimerQueue::global().schedule(deadline, [w = weak_from_this(), generation] {
    if (auto self = w.lock()) self->drop_lapsed(generation);
  });
  if (!id.ok()) {  // the next registration or check arms one again
    lease_check_.reset();
    log_limited(lapse_log_, LogLevel::kWarning, "{}: partition leases go unchecked for now: {}", task_name_,
                id.status().message());
    return;
  }
  lease_check_ = LeaseCheck{id.value(), deadline, generation};
}

void Worker::drop_lapsed(uint64_t generation) {
  std::vector<std::shared_ptr<WorkerGraph>> dropped;
  std::vector<std::string> sessions;
  std::chrono::milliseconds length{0};
  {
    std::lock_guard<std::mutex> l(mu_);
    if (lease_check_ && lease_check_->generation == generation) lease_check_.reset();  // this one has fired
    if (stopped_) return;
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.until > now) {
        if (!next || it->second.until < *next) next = it->second.until;
        ++it;
        continue;
      }
      sessions.push_back(it->first);
      length = it->second.length;
      it = leases_.erase(it);
    }
    if (!sessions.empty()) {
      const std::unordered_set<std::string> lapsed(sessions.begin(), sessions.end());
      for (auto it = graphs_.begin(); it != graphs_.end();) {
        if (!it->second->leased || lapsed.count(it->second->session_handle) == 0) {
          ++it;
          continue;
        }
        lapsed_graphs_.remember(it->first, it->second->session_handle);
        dropped.push_back(std::move(it->second));
        it = graphs_.erase(it);
      }
      shrink_if_sparse(graphs_);
      shrink_if_sparse(leases_);
    }
    if (next) arm_lease_check_locked(*next);
  }
  if (dropped.empty()) return;
  log_limited(lapse_log_, LogLevel::kWarning,
              "{}: dropped {} partition{} of {} session{} (such as '{}') whose master renewed no lease for {:g} s: "
              "it is gone, or cut off (ServerOptions::partition_lease)",
              task_name_, dropped.size(), dropped.size() == 1 ? "" : "s", sessions.size(),
              sessions.size() == 1 ? "" : "s", sessions.front(), std::chrono::duration<double>(length).count());
  // As DeregisterGraph: the sessions close (cancelling a run still in flight) off this thread.
  run_detached_or_inline([dropped = std::move(dropped)]() mutable {
    for (auto& wg : dropped) wg->session->close();
    dropped.clear();
    request_memory_release();
  });
}

void Worker::stop(std::chrono::milliseconds grace) {
  const Status reason = errors::cancelled("{} is stopping", task_name_);
  std::unordered_map<std::string, std::shared_ptr<WorkerGraph>> graphs;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    graphs.swap(graphs_);
    leases_.clear();
    if (lease_check_) TimerQueue::global().cancel(lease_check_->id);
    lease_check_.reset();
  }
  std::vector<std::shared_ptr<ResourceMgr>> sessions_own;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [handle, weak] : private_resources_) {
      if (auto mgr = weak.lock()) sessions_own.push_back(std::move(mgr));
    }
  }
  rendezvous_.stop(reason);
  resources_.cancel_all(reason);  // wakes runs blocked on the task's queues
  for (auto& mgr : sessions_own) mgr->cancel_all(reason);  // and on the sessions' own
  // Closing a session cancels its runs and waits for them; they end quickly once cancelled.
  std::vector<std::thread> closers;
  for (auto& [handle, wg] : graphs) {
    try {
      closers.emplace_back([wg = wg] { wg->session->close(); });
    } catch (const std::system_error&) {
      wg->session->close();  // no thread to spare: this one closes it (stop must complete)
    }
  }
  for (auto& t : closers) t.join();
  std::unique_lock<std::mutex> l(mu_);
  runs_cv_.wait_for(l, grace, [&] { return active_runs_ == 0; });
}

}  // namespace tessera::internal
