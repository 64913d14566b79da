// The sessions of the master service: a client's graph placed over the cluster, split into one
// partition per task, and run as steps on the tasks' workers.
#include "distributed/master_session.h"

#include <algorithm>
#include <optional>
#include <random>
#include <unordered_set>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/executor.h"
#include "core/file_util.h"
#include "core/graph_partition.h"
#include "core/op_registry.h"
#include "core/trace_json.h"
#include "distributed/service_names.h"
#include "tessera/errors.h"

namespace tessera::internal {

// Note [Master]
// ~~~~~~~~~~~~~
// A client's Session(graph, "tessera://host:port") is a MasterSession on that task. It holds a
// copy of the client's graph (CreateSession sends it whole, ExtendSession the nodes added since
// and the control inputs added to nodes it has, which drop the cached plans). The placements it
// makes go back to the client with the next RunStep reply (Operation::assigned_device there).
//
// Placement. Like TensorFlow's, the master places each op on a device of the cluster:
//   * an op whose device request names a job (and task) goes to that task; "/job:ps" alone means
//     any task of job ps;
//   * an op with no job in its request (no request, or only "/device:GPU:0") runs on the master's
//     own task, with the request's other fields kept; an op that uses a resource (variable, queue)
//     or asks to be colocated goes wherever its group goes;
//   * among the chosen task's devices (CPU, simulated accelerators, GPUs), the same placement pass
//     as a local session decides (core/placement.h), with the cost profiles each task reports.
// The devices of a task are asked for (GetStatus) the first time an op names the task, so creating
// a session never waits for tasks the graph does not use, and a task that is down fails only the
// runs that need it.

// Note [Master steps]
// ~~~~~~~~~~~~~~~~~~~
// Partitions. Per step signature (feeds, fetches, targets), the master prunes the graph to what the
// step needs and splits it by task with the partitioner every session uses (Note [Graph
// partition]): each task's partition keeps its nodes (their device reduced to "/device:TYPE:N";
// Note [Worker] in worker.cc says how the worker runs it), a Placeholder per fed tensor it
// consumes (the master sends every task the feeds it needs directly), a _Recv per tensor or
// control edge it takes from another task and a _Send per one it gives, and its share of the
// fetches and targets.
// The partitions are registered once per signature; then a step is one RunGraph per task, all
// started at once with the same step id, and the master waits for none of them on a thread: each
// reply arrives on an RPC thread, and the last one answers the client.
//
// Failure. The first failure of a step (a kernel error, a deadline, a task that cannot be reached
// or whose connection is lost) aborts the step on every other task of the step (CleanupGraph with
// the reason), so nothing waits for a tensor that will never come. The step reports the root cause:
// the first error that is not an echo of another task's failure (a _Recv that failed because
// its producer did). Errors crossing tasks keep their code and message.
//
// Step ids are random 64-bit numbers (a per-process random base plus a counter), because several
// masters (one per client) start steps on the same workers and the ids key the workers' exchanges.

namespace {

namespace pb = wire::pb;

std::atomic<uint64_t> step_counter{0};
const uint64_t step_base = [] {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}();

}  // namespace

int64_t new_step_id() {
  uint64_t id = (step_base + step_counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull);
  id &= 0x7FFFFFFFFFFFFFFFull;
  return id == 0 ? 1 : static_cast<int64_t>(id);
}

std::string signature_key(const wire::pb::RunStepRequest& r) {
  std::string key;
  for (const auto& f : r.feed()) key += f.name() + ",";
  key += "|";
  for (const auto& f : r.fetch()) key += f + ",";
  key += "|";
  for (const auto& t : r.target()) key += t + ",";
  return key;
}

namespace {

std::string tensor_name(const std::string& node, int index) { return fmt::format("{}:{}", node, index); }

// `st` naming the task it came from (once: a transport's error may name it already).
Status naming_task(const Status& st, const std::string& task) {
  const std::string prefix = fmt::format("task {}: ", task);
  return st.message().rfind(prefix, 0) == 0 ? st : st.with_prefix(prefix);
}

bool is_echo(const Status& s) {
  const std::string& m = s.message();
  return m.rfind("_recv/", 0) == 0 || m.rfind("_crecv/", 0) == 0;
}

}  // namespace

// One step in flight.
struct MasterSession::Step {
  int64_t id = 0;
  std::shared_ptr<const Plan> plan;
  std::vector<Tensor> feeds;
  std::mutex mu;
  int left = 0;                  // guarded by mu
  Status error;                  // guarded by mu: the root cause so far
  std::vector<Tensor> fetched;   // guarded by mu
  std::atomic<bool> aborted{false};
  // A traced step: its origin (now_micros() when its RunGraphs went out) and every task's spans
  // plus the master's own RunGraph calls, on this process's clock (guarded by mu).
  bool trace = false;
  int64_t start_us = 0;
  std::vector<TraceRecord> spans;

  // Answers the client; the first answer wins (close() answers a step its workers then finish).
  void answer(StatusOr<RunStepReply> reply) {
    if (answered.exchange(true)) return;
    auto r = std::move(respond);
    r(std::move(reply));
  }
  Done<RunStepReply> respond;
  std::atomic<bool> answered{false};
};

StatusOr<Endpoint> MasterSession::endpoint_locked(const std::string& name, const char* what) {
  auto ep = find_tensor(graph_.impl(), name);
  if (!ep.ok()) return ep.status().with_prefix(fmt::format("{} '{}' in the session's graph: ", what, name));
  return ep;
}

Status MasterSession::add_task_devices_locked(const std::string& task) {
  if (tasks_.count(task)) return Status();
  auto worker = workers_->get(task);
  if (!worker.ok()) return worker.status();
  pb::GetStatusRequest request;
  request.set_version(wire::kWireVersion);
  auto status = call_and_wait<pb::GetStatusResponse>(
      [&](Done<pb::GetStatusResponse> done) { worker.value()->get_status(request, std::move(done)); });
  if (!status.ok()) return naming_task(status.status(), task);
  const pb::GetStatusResponse& response = status.value();
  for (const pb::DeviceAttributes& d : response.device()) {
    PlacementDevice pd;
    pd.name = d.name();
    pd.type = d.type();
    pd.cost.flops_per_second = d.flops_per_second();
    pd.cost.memory_bandwidth = d.memory_bandwidth();
    pd.cost.transfer_bandwidth = d.transfer_bandwidth();
    pd.cost.transfer_latency_seconds = d.transfer_latency_seconds();
    pd.cost.kernel_overhead_seconds = d.kernel_overhead_seconds();
    auto owner = task_of_device(pd.name);
    if (!owner.ok() || owner.value() != task) {
      return errors::internal("task {} reported device '{}', which is not one of its own", task, pd.name);
    }
    devices_.push_back(std::move(pd));
  }
  tasks_.insert(task);
  return Status();
}

// Note [Variables keep their device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A task's sessions share its variables by name, and a variable's value lives in the memory of
// the device that first initialized it. Placement, though, is per session: the cost model puts a
// ps variable with the GPU kernels that update it in a training graph, on the ps's CPU in the
// chief's evaluation session (which only reads the global step), and the two workers' masters,
// placing graphs that differ in their worker device, need not agree either; a kernel that then
// finds the value in the other device's memory fails the step (VariableResource::check_memory).
// So in a cluster a variable that names its task but no device type gets the device TensorFlow's
// placer would give it, whatever else the graph holds: the task's first GPU, else its first other
// accelerator, where the variable has a kernel; its CPU under the cpu_only policy or when there is
// none. Its colocation group (the ops that update it) follows. An explicit device type is honoured
// as written, and two graphs that name different ones still fail with that clear error. Local
// sessions keep the cost model's choice: their variables are their own.
namespace {

std::optional<std::string> cluster_variable_device(const Node& var, const std::vector<PlacementDevice>& devices,
                                                   PlacementPolicy policy) {
  auto spec = DeviceSpec::parse(var.requested_device);
  if (!spec.ok() || !spec.value().job || !spec.value().task || spec.value().type) return std::nullopt;
  const PlacementDevice* host = nullptr;
  const PlacementDevice* gpu = nullptr;
  const PlacementDevice* accelerator = nullptr;
  for (const PlacementDevice& d : devices) {
    auto full = DeviceSpec::parse(d.name);
    if (!full.ok() || !spec.value().matches(full.value())) continue;
    if (d.is_host()) {
      if (host == nullptr) host = &d;
    } else if (OpRegistry::global().has_kernel(var.type, d.type)) {
      if (d.type == "GPU" && gpu == nullptr) gpu = &d;
      if (accelerator == nullptr) accelerator = &d;
    }
  }
  const PlacementDevice* chosen = policy == PlacementPolicy::kCpuOnly ? host : gpu ? gpu : accelerator ? accelerator : host;
  if (chosen == nullptr) return std::nullopt;
  return chosen->name;
}

}  // namespace

Status MasterSession::place_locked(const std::vector<const Node*>& nodes) {
  auto local = DeviceSpec::parse(task_);
  TESSERA_CHECK(local.ok());
  std::vector<const Node*> fresh;
  std::set<std::string> wanted{task_};
  for (const Node* cn : nodes) {
    if (placement_.count(cn)) continue;
    Node* n = const_cast<Node*>(cn);
    fresh.push_back(n);
    auto spec = DeviceSpec::parse(n->requested_device);
    if (!spec.ok()) return spec.status().with_prefix(n->debug_name() + ": ");
    if (!spec.value().job) {
      // Unconstrained (as to the task) ops run on the master's task, unless a resource or a
      // colocation scope ties them to a group, which then decides.
      if (n->resource == nullptr && n->colocate_with.empty()) {
        n->requested_device = local.value().merged_with(spec.value()).to_string();
      }
      continue;
    }
    const std::string& job = *spec.value().job;
    if (spec.value().task) {
      wanted.insert(fmt::format("/job:{}/replica:0/task:{}", job, *spec.value().task));
      continue;
    }
    const std::vector<std::string> jobs = workers_->cluster().jobs();
    if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
      return errors::invalid_argument("{}: the cluster has no job '{}' (jobs: {})", n->debug_name(), job,
                                      fmt::join(jobs, ", "));
    }
    for (int t : workers_->cluster().task_indices(job)) wanted.insert(fmt::format("/job:{}/replica:0/task:{}", job, t));
  }
  if (fresh.empty()) return Status();
  for (const std::string& t : wanted) TESSERA_RETURN_IF_ERROR(add_task_devices_locked(t));
  // The master's own task first: placement's "host" is the first CPU.
  std::stable_partition(devices_.begin(), devices_.end(), [&](const PlacementDevice& d) {
    auto owner = task_of_device(d.name);
    return owner.ok() && owner.value() == task_;
  });
  // Ops placed before keep their device; their indices are found by name (devices_ may have grown
  // and been reordered since).
  std::unordered_map<std::string, int> index_of;
  for (int i = 0; i < static_cast<int>(devices_.size()); ++i) index_of[devices_[static_cast<std::size_t>(i)].name] = i;
  std::unordered_map<const Node*, int> fixed;
  for (const auto& [node, device] : placement_) fixed[node] = index_of.at(device);
  PlacementOptions opts;
  opts.allow_soft_placement = config_.allow_soft_placement();
  // create_session refused an unknown name: the config's policy is one of the three.
  const auto named = placement_policy_named(config_.placement_policy());
  opts.policy = policy_of(named.ok() ? named.value() : tessera::PlacementPolicy::cost);
  for (const Node* cn : fresh) {  // Note [Variables keep their device]
    if (cn->type != "VariableV2") continue;
    if (auto device = cluster_variable_device(*cn, devices_, opts.policy)) {
      const_cast<Node*>(cn)->requested_device = *device;
    }
  }
  auto placed = place_nodes(fresh, devices_, opts, fixed);
  if (!placed.ok()) return placed.status();
  for (const std::string& line : placed.value().soft_placements) {
    TESSERA_LOG(kInfo, "soft placement: {}", line);
  }
  {
    std::lock_guard<std::mutex> l(report_mu_);
    for (const Node* n : fresh) {
      const std::string& device = devices_[static_cast<std::size_t>(placed.value().device_of.at(n))].name;
      placement_[n] = device;
      unreported_.emplace_back(n->name, device);
    }
    has_unreported_.store(true, std::memory_order_release);
  }
  if (config_.log_device_placement()) {
    TESSERA_LOG(kInfo, "{}", placement_table(fresh, devices_, placed.value()));
  }
  return Status();
}

Status MasterSession::closed_error() const {
  return errors::cancelled("attempted to use a closed session ({} was closed)", handle_);
}

StatusOr<std::shared_ptr<const MasterSession::Plan>> MasterSession::plan_for(const std::string& key,
                                                                             const std::vector<std::string>& feeds,
                                                                             const std::vector<std::string>& fetches,
                                                                             const std::vector<std::string>& targets) {
  if (closed_flag_.load()) return closed_error();
  {
    std::shared_lock<std::shared_mutex> l(plans_mu_);
    auto cached = plans_.find(key);
    if (cached != plans_.end()) return cached->second;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (closed_) return closed_error();
  {
    std::shared_lock<std::shared_mutex> pl(plans_mu_);  // built while this thread waited for mu_?
    auto cached = plans_.find(key);
    if (cached != plans_.end()) return cached->second;
  }
  std::vector<Endpoint> feed_eps, fetch_eps;
  std::vector<const Node*> target_nodes;
  std::unordered_set<std::string> fed;
  for (const auto& f : feeds) {
    // One value per tensor (a client's FeedMap cannot repeat one; a request could).
    if (!fed.insert(f).second) return errors::invalid_argument("feed {} is listed twice", quoted_prefix(f));
    auto ep = endpoint_locked(f, "feed");
    if (!ep.ok()) return ep.status();
    feed_eps.push_back(ep.value());
  }
  for (const auto& f : fetches) {
    auto ep = endpoint_locked(f, "fetch");
    if (!ep.ok()) return ep.status();
    fetch_eps.push_back(ep.value());
  }
  for (const auto& t : targets) {
    Node* n = graph_.impl().find(t);
    if (n == nullptr) return errors::invalid_argument("target '{}': no such op in the session's graph", t);
    target_nodes.push_back(n);
  }
  std::vector<const Node*> needed = prune_nodes(feed_eps, fetch_eps, target_nodes);
  // A While's loop goes with it to its task (Note [While loops on the wire] in distributed/wire.cc).
  append_loop_nodes(&needed);
  std::unordered_set<const Node*> in_step(needed.begin(), needed.end());
  for (std::size_t i = 0; i < needed.size(); ++i) {  // the resources the step's ops use
    const Node* r = needed[i]->resource;
    if (r != nullptr && in_step.insert(r).second) needed.push_back(r);
  }
  // Only what the step needs is placed (so a task that is down fails only the steps that use it).
  TESSERA_RETURN_IF_ERROR(place_locked(needed));
  // One partition per task (Note [Graph partition]); each task's worker splits its own by device.
  PartitionOptions popts;
  popts.device_of = [&](const Node& n) { return placement_.at(&n); };
  popts.partition_of = [](const std::string& device) {
    auto task = task_of_device(device);  // every device came from a task's GetStatus
    return task.ok() ? task.value() : device;
  };
  popts.transfer_device = [](const std::string& task) { return task + "/device:CPU:0"; };
  auto parted = partition_step(graph_.impl(), needed, feed_eps, fetch_eps, target_nodes, popts);
  if (!parted.ok()) return parted.status();

  auto plan = std::make_shared<Plan>();
  for (const Endpoint& f : feed_eps) {
    plan->feed_dtypes.push_back(f.node->output_dtypes[f.index]);
    plan->feed_shapes.push_back(f.node->output_shapes[f.index]);
    plan->feed_ops.push_back(f.node->debug_name());
  }
  plan->fetch_from = parted.value().fetch_from;
  for (GraphPartition& gp : parted.value().partitions) {
    // A worker places by "/device:TYPE:N" within its task; the transfers and feeds run on its CPU.
    for (Node* n : gp.nodes) {
      if (n->origin == nullptr) {
        n->requested_device = "/device:CPU:0";
        continue;
      }
      auto spec = DeviceSpec::parse(placement_.at(n->origin));
      if (!spec.ok() || !spec.value().type || !spec.value().id) {
        return errors::internal("{}: placed on '{}', not a device named in full", n->debug_name(),
                                placement_.at(n->origin));
      }
      n->requested_device = fmt::format("/device:{}:{}", *spec.value().type, *spec.value().id);
      n->colocate_with.clear();
    }
    auto def = wire::encode_graph(graph_.impl(), std::vector<const Node*>(gp.nodes.begin(), gp.nodes.end()));
    if (!def.ok()) return def.status().with_prefix(fmt::format("partition for task {}: ", gp.name));
    Part p;
    p.task = gp.name;
    p.feeds = gp.feed_index;
    for (const Endpoint& f : gp.feeds) p.feed_names.push_back(tensor_name(f.node->name, f.index));
    auto worker = workers_->get(p.task);
    if (!worker.ok()) return worker.status();
    p.worker = worker.value();
    // Register the partition with its worker.
    pb::RegisterGraphRequest request;
    request.set_version(wire::kWireVersion);
    request.set_session_handle(handle_);
    *request.mutable_graph() = std::move(def).value();
    for (const std::string& f : p.feed_names) request.add_feed(f);
    for (const Endpoint& f : gp.fetches) request.add_fetch(tensor_name(f.node->name, f.index));
    for (const Node* t : gp.targets) request.add_target(t->name);
    *request.mutable_config() = config_;
    request.set_lease_ms(partition_lease_.count());
    auto registered = call_and_wait<pb::RegisterGraphResponse>(
        [&](Done<pb::RegisterGraphResponse> done) { p.worker->register_graph(request, std::move(done)); });
    if (!registered.ok()) return naming_task(registered.status(), p.task);
    p.graph_handle = registered.value().graph_handle();
    registered_.emplace_back(p.worker, p.graph_handle);
    if (partition_lease_.count() > 0) {
      std::lock_guard<std::mutex> ll(lease_mu_);
      if (!closed_flag_.load() && std::find(leased_on_.begin(), leased_on_.end(), p.worker) == leased_on_.end()) {
        leased_on_.push_back(p.worker);
      }
    }
    plan->parts.push_back(std::move(p));
  }
  std::unique_lock<std::shared_mutex> pl(plans_mu_);
  plans_[key] = plan;
  return std::shared_ptr<const Plan>(plan);
}

void MasterSession::run(const pb::RunStepRequest& r, std::vector<Tensor> feed_values, Done<RunStepReply> respond,
                        int64_t step_id) {
  // The step is known to close() from here on, also while its plan is being built.
  auto step = std::make_shared<Step>();
  step->id = step_id;
  step->respond = std::move(respond);
  {
    std::lock_guard<std::mutex> l(steps_mu_);
    if (closed_flag_.load()) return step->answer(closed_error());
    if (Status early = cancelled_early_.take(step_id); !early.ok()) return step->answer(early);
    steps_[step->id] = step;
  }
  auto fail = [&](const Status& st) {
    {
      std::lock_guard<std::mutex> l(steps_mu_);
      steps_.erase(step->id);
    }
    step->answer(st);  // closed meanwhile: close() has answered Cancelled, and this is a consequence
  };
  std::vector<std::string> feeds, fetches(r.fetch().begin(), r.fetch().end()), targets(r.target().begin(), r.target().end());
  for (const pb::NamedTensor& f : r.feed()) feeds.push_back(f.name());
  if (feeds.size() != feed_values.size()) {
    return fail(errors::invalid_argument("RunStep names {} feeds and carries {} tensors", feeds.size(),
                                         feed_values.size()));
  }
  const std::string key = signature_key(r);
  auto plan = plan_for(key, feeds, fetches, targets);
  if (!plan.ok()) return fail(plan.status());
  // Feeds are checked on every run (their dtypes and shapes may vary from run to run).
  const Plan& p = *plan.value();
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const Tensor& v = feed_values[i];
    if (v.dtype() != p.feed_dtypes[i] || !p.feed_shapes[i].compatible_with(v.shape())) {
      return fail(errors::invalid_argument("{}: cannot feed a {} tensor of shape {} to '{}', which is {} {}",
                                           p.feed_ops[i], dtype_name(v.dtype()), v.shape().to_string(), feeds[i],
                                           dtype_name(p.feed_dtypes[i]), p.feed_shapes[i].to_string()));
    }
  }
  start(step, plan.value(), std::move(feed_values), r);
}

void MasterSession::start(const std::shared_ptr<Step>& step, std::shared_ptr<const Plan> plan,
                          std::vector<Tensor> feeds, const pb::RunStepRequest& r) {
  {
    std::lock_guard<std::mutex> l(step->mu);
    step->plan = plan;
    step->feeds = std::move(feeds);
    step->fetched.resize(plan->fetch_from.size());
    step->left = static_cast<int>(plan->parts.size());
    step->trace = r.trace();
    step->start_us = now_micros();
    for (std::size_t i = 0; i < plan->fetch_from.size(); ++i) {
      if (plan->fetch_from[i].first < 0) step->fetched[i] = step->feeds[static_cast<std::size_t>(plan->fetch_from[i].second)];
    }
  }
  auto finish = [self = shared_from_this(), step] {
    {
      std::lock_guard<std::mutex> l(self->steps_mu_);
      self->steps_.erase(step->id);
    }
    StatusOr<RunStepReply> answer = errors::internal("unset");
    {
      std::lock_guard<std::mutex> l(step->mu);
      if (!step->error.ok()) {
        answer = step->error;
      } else {
        RunStepReply reply;
        reply.response.set_version(wire::kWireVersion);
        for (Tensor& t : step->fetched) {
          reply.response.add_tensor();
          reply.tensor.push_back(std::move(t));
        }
        if (step->trace) reply.response.set_trace_json(trace_to_json(std::move(step->spans), step->start_us));
        for (auto& [node, device] : self->take_unreported_placements()) {
          pb::NodePlacement* p = reply.response.add_placement();
          p->set_node(std::move(node));
          p->set_device(std::move(device));
        }
        answer = std::move(reply);
      }
    }
    step->answer(std::move(answer));
  };
  // Closed while the plan was being built: close() has answered (and finish() is then a no-op).
  if (plan->parts.empty() || step->aborted.load()) return finish();
  for (std::size_t pi = 0; pi < plan->parts.size(); ++pi) {
    const Part& part = plan->parts[pi];
    pb::RunGraphRequest run;
    run.set_version(wire::kWireVersion);
    run.set_graph_handle(part.graph_handle);
    run.set_step_id(step->id);
    run.set_timeout_ms(r.timeout_ms());
    run.set_trace(r.trace());
    std::vector<Tensor> send;
    for (std::size_t k = 0; k < part.feeds.size(); ++k) {
      run.add_send()->set_name(part.feed_names[k]);
      send.push_back(step->feeds[static_cast<std::size_t>(part.feeds[k])]);
    }
    auto done = [self = shared_from_this(), step, pi, finish, sent_us = now_micros()](StatusOr<RunGraphReply> reply) {
      const Part& part = step->plan->parts[pi];
      Status st = reply.status();
      if (st.ok()) {
        const pb::RunGraphResponse& response = reply.value().response;
        std::vector<TraceRecord> spans;
        if (step->trace) {
          spans = wire::decode_trace(response.trace());
          // The call itself, from the master's side: the task's spans sit inside it.
          spans.push_back(TraceRecord{fmt::format("RunGraph {}", part.task), "RunGraph", self->task_,
                                      "RunGraph calls", 0, sent_us, now_micros()});
        }
        std::lock_guard<std::mutex> l(step->mu);
        for (TraceRecord& span : spans) step->spans.push_back(std::move(span));
        for (std::size_t i = 0; i < step->plan->fetch_from.size() && st.ok(); ++i) {
          const auto [from, pos] = step->plan->fetch_from[i];
          if (from != static_cast<int>(pi)) continue;
          if (pos >= static_cast<int>(reply.value().recv.size())) {
            st = errors::internal("task {} returned {} tensors, fewer than the step fetches from it", part.task,
                                  reply.value().recv.size());
            break;
          }
          step->fetched[i] = reply.value().recv[static_cast<std::size_t>(pos)];
        }
      }
      bool last;
      {
        std::lock_guard<std::mutex> l(step->mu);
        if (!st.ok() && (step->error.ok() || (is_echo(step->error) && !is_echo(st)))) step->error = st;
        last = --step->left == 0;
      }
      if (!st.ok()) self->abort(step, st);
      if (last) finish();
    };
    part.worker->run_graph(run, std::move(send), std::move(done));
  }
}

void MasterSession::abort(const std::shared_ptr<Step>& step, const Status& reason) {
  if (step->aborted.exchange(true)) return;
  std::shared_ptr<const Plan> plan;
  {
    std::lock_guard<std::mutex> l(step->mu);
    plan = step->plan;
  }
  if (!plan) return;  // not started: start() sees `aborted` and sends nothing
  pb::CleanupGraphRequest request;
  request.set_version(wire::kWireVersion);
  request.set_step_id(step->id);
  *request.mutable_abort() = wire::from_status(reason);
  for (const Part& part : plan->parts) part.worker->cleanup_graph(request, [](StatusOr<pb::CleanupGraphResponse>) {});
}

void MasterSession::cancel_step(int64_t step_id, const Status& reason) {
  std::shared_ptr<Step> step;
  {
    std::lock_guard<std::mutex> l(steps_mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) {
      // Not begun (its plan is being looked up on another thread), or over (then never begun
      // again: the entry only costs room until it is pushed out).
      cancelled_early_.remember(step_id, same_reason(&cancelled_reason_, reason));
      return;
    }
    step = it->second;
  }
  {
    std::lock_guard<std::mutex> l(step->mu);
    if (step->error.ok()) step->error = reason;
  }
  step->answer(reason);
  abort(step, reason);
}

void MasterSession::close() {
  closed_flag_.store(true);
  std::vector<std::pair<WorkerInterface*, std::string>> registered;
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    registered.swap(registered_);
  }
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    leased_on_.clear();  // its partitions are deregistered below: nothing to renew
  }
  std::vector<std::shared_ptr<Step>> steps;
  {
    std::lock_guard<std::mutex> l(steps_mu_);
    for (auto& [id, s] : steps_) steps.push_back(s);
  }
  const Status reason = errors::cancelled("the session was closed");
  for (auto& s : steps) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      if (s->error.ok()) s->error = reason;
    }
    s->answer(reason);  // now: the workers' replies, which follow, find the step answered
    abort(s, reason);
  }
  pb::DeregisterGraphRequest request;
  request.set_version(wire::kWireVersion);
  for (auto& [worker, handle] : registered) {
    request.set_graph_handle(handle);
    worker->deregister_graph(request, [](StatusOr<pb::DeregisterGraphResponse>) {});
  }
}
}  // namespace tessera::internal
