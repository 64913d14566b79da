// The master service: sessions on a cluster, placed over the devices of every task they use,
// split into one partition per task, and run as steps on the tasks' workers.
#include "distributed/master.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <random>
#include <set>
#include <shared_mutex>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/executor.h"
#include "core/file_util.h"
#include "core/graph_partition.h"
#include "core/memory_release.h"
#include "core/placement.h"
#include "core/trace_json.h"
#include "distributed/service_names.h"
#include "tessera/errors.h"
#include "tessera/graph.h"

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

int64_t new_step_id() {
  uint64_t id = (step_base + step_counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull);
  id &= 0x7FFFFFFFFFFFFFFFull;
  return id == 0 ? 1 : static_cast<int64_t>(id);
}

std::string tensor_name(const std::string& node, int index) { return fmt::format("{}:{}", node, index); }

}  // namespace

// The plan cache's key: feeds, fetches and targets, by name.
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

class MasterSession : public std::enable_shared_from_this<MasterSession> {
 public:
  MasterSession(std::string handle, std::string task, std::shared_ptr<WorkerCache> workers,
                pb::SessionConfig config, int64_t max_graph_nodes)
      : handle_(std::move(handle)), task_(std::move(task)), workers_(std::move(workers)),
        config_(std::move(config)), max_graph_nodes_(max_graph_nodes) {}

  const std::string& handle() const { return handle_; }

  // Adds `def`'s nodes, then the control inputs `edges` adds to nodes it has; the new graph
  // version. Aborted for a stale `current_version`.
  StatusOr<int64_t> extend(const pb::GraphDef& def, const google::protobuf::RepeatedPtrField<pb::ControlEdge>& edges,
                           int64_t current_version, bool check_version) {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return errors::cancelled("session {} is closed", handle_);
    if (check_version && current_version != graph_version_) {
      return errors::aborted("ExtendSession: the session's graph is at version {}, the client at {}", graph_version_,
                             current_version);
    }
    TESSERA_RETURN_IF_ERROR(wire::decode_graph(def, &graph_.impl(), nullptr, max_graph_nodes_));
    if (!edges.empty()) {
      GraphImpl& g = graph_.impl();
      for (const pb::ControlEdge& e : edges) {
        Node* node = g.find(e.node());
        Node* input = g.find(e.input());
        if (node == nullptr || input == nullptr) {
          return errors::invalid_argument("ExtendSession: control input '{}' -> '{}' names an op the session's graph "
                                          "does not have", e.input(), e.node());
        }
        g.add_control_input(node, input);
      }
      // Every step's partitions may change: plans are made again (those in flight keep theirs).
      std::unique_lock<std::shared_mutex> pl(plans_mu_);
      plans_.clear();
    }
    return ++graph_version_;
  }

  // The placements made since the last call (moved out), for a RunStep response.
  std::vector<std::pair<std::string, std::string>> take_unreported_placements() {
    if (!has_unreported_.load(std::memory_order_acquire)) return {};
    std::lock_guard<std::mutex> l(report_mu_);
    has_unreported_.store(false, std::memory_order_release);
    return std::exchange(unreported_, {});
  }

  // Runs step `step_id` (new_step_id()) of the signature `r` names.
  void run(const pb::RunStepRequest& r, std::vector<Tensor> feed_values, Done<RunStepReply> respond, int64_t step_id);
  // Ends step `step_id` with `reason` (its client is gone): answered now, aborted on its tasks. A
  // step not begun yet ends as soon as run() begins it (the last 1024 such ids are remembered).
  void cancel_step(int64_t step_id, const Status& reason);
  void close();

  // True when a plan for `key` is cached (the fast path: no thread needed). Never waits for a plan
  // being built.
  bool has_plan(const std::string& key) {
    std::shared_lock<std::shared_mutex> l(plans_mu_);
    return plans_.count(key) != 0;
  }

 private:
  struct Part {
    std::string task;
    WorkerInterface* worker = nullptr;
    std::string graph_handle;
    std::vector<int> feeds;           // step feed index per partition feed, in order
    std::vector<std::string> feed_names;
  };
  struct Plan {
    std::vector<Part> parts;
    // Per fetch: (part, position in that part's fetches), or (-1, feed index) for a fed tensor.
    std::vector<std::pair<int, int>> fetch_from;
    // Per feed: what the fed tensor must be, and the op it feeds (for messages).
    std::vector<DType> feed_dtypes;
    std::vector<Shape> feed_shapes;
    std::vector<std::string> feed_ops;
  };
  struct Step;

  StatusOr<std::shared_ptr<const Plan>> plan_for(const std::string& key, const std::vector<std::string>& feeds,
                                                 const std::vector<std::string>& fetches,
                                                 const std::vector<std::string>& targets);
  // Places those of `nodes` not placed yet.
  Status place_locked(const std::vector<const Node*>& nodes);
  Status add_task_devices_locked(const std::string& task);
  StatusOr<Endpoint> endpoint_locked(const std::string& name, const char* what);
  void start(const std::shared_ptr<Step>& step, std::shared_ptr<const Plan> plan, std::vector<Tensor> feeds,
             const pb::RunStepRequest& r);
  void abort(const std::shared_ptr<Step>& step, const Status& reason);

  const std::string handle_;
  const std::string task_;
  const std::shared_ptr<WorkerCache> workers_;
  const pb::SessionConfig config_;
  const int64_t max_graph_nodes_;

  std::mutex mu_;  // the graph, placement, plans
  Graph graph_;
  int64_t graph_version_ = 0;
  bool closed_ = false;
  std::vector<PlacementDevice> devices_;
  std::set<std::string> tasks_;  // tasks whose devices are in devices_
  std::unordered_map<const Node*, std::string> placement_;  // the device of each node placed so far
  // Placements not yet reported to the client (take_unreported_placements).
  std::mutex report_mu_;
  std::vector<std::pair<std::string, std::string>> unreported_;  // guarded by report_mu_: (node, device)
  std::atomic<bool> has_unreported_{false};
  std::vector<std::pair<WorkerInterface*, std::string>> registered_;  // (worker, graph handle)
  // Never held while calling another task: a step with a cached plan starts on a server thread.
  std::shared_mutex plans_mu_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;  // guarded by plans_mu_

  std::atomic<bool> closed_flag_{false};  // closed_, readable without mu_
  std::mutex steps_mu_;
  std::unordered_map<int64_t, std::shared_ptr<Step>> steps_;  // guarded by steps_mu_: in flight
  std::unordered_map<int64_t, Status> cancelled_early_;       // guarded by steps_mu_ (cancel_step)
  std::deque<int64_t> cancelled_early_order_;                 // guarded by steps_mu_: oldest first
};

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

StatusOr<std::shared_ptr<const MasterSession::Plan>> MasterSession::plan_for(const std::string& key,
                                                                             const std::vector<std::string>& feeds,
                                                                             const std::vector<std::string>& fetches,
                                                                             const std::vector<std::string>& targets) {
  if (closed_flag_.load()) return errors::cancelled("attempted to use a closed session");
  {
    std::shared_lock<std::shared_mutex> l(plans_mu_);
    auto cached = plans_.find(key);
    if (cached != plans_.end()) return cached->second;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (closed_) return errors::cancelled("attempted to use a closed session");
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
    auto registered = call_and_wait<pb::RegisterGraphResponse>(
        [&](Done<pb::RegisterGraphResponse> done) { p.worker->register_graph(request, std::move(done)); });
    if (!registered.ok()) return naming_task(registered.status(), p.task);
    p.graph_handle = registered.value().graph_handle();
    registered_.emplace_back(p.worker, p.graph_handle);
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
    if (closed_flag_.load()) return step->answer(errors::cancelled("attempted to use a closed session"));
    if (auto early = cancelled_early_.find(step_id); early != cancelled_early_.end()) {
      Status reason = std::move(early->second);
      cancelled_early_.erase(early);
      return step->answer(reason);
    }
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
      if (cancelled_early_.emplace(step_id, reason).second) {
        cancelled_early_order_.push_back(step_id);
        if (cancelled_early_order_.size() > 1024) {
          cancelled_early_.erase(cancelled_early_order_.front());
          cancelled_early_order_.pop_front();
        }
      }
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

// ---- Master ----

// Note [Idle sessions]
// ~~~~~~~~~~~~~~~~~~~~
// A client that vanishes without closing its sessions (a killed process, a lost laptop) would leave
// them, their graphs and their workers' partitions here for good. As TensorFlow's master does, a
// session that has had no call in flight (RunStep, ExtendSession) for `session_idle_timeout` is
// closed by the path CloseSession takes (MasterSession::close(): partitions deregistered, off the
// caller's thread). A call in flight is never cut short, however long it waits (a dequeue may block
// for hours): the count of calls in flight sits beside the session in sessions_, so looking a
// session up and counting its call happen under one lock, and a session taken out with no call in
// flight can get none. Its clock restarts when its last call ends (a call ends when its `done` is
// called, or destroyed uncalled).
//
// No thread per session, and no polling: one check is armed on the process's timer
// (core/timer.h) for the earliest moment a session can have been idle for the timeout, and each
// check arms the next; none is armed while no session is idle. Checks are at least min(timeout/8,
// 1 s) apart, since each scans every session. A session becoming idle arms one if none is armed,
// which is also how a check the timer refused (ResourceExhausted) is tried again.
//
// The check runs on the timer's thread, so it only takes the idle sessions out; a thread of its own
// closes them (inline when no thread can be had: an idle session has no plan being built, and its
// workers are told asynchronously). The timer and the calls' `done`s reach the Master through a
// Link that outlives it: the destructor nulls it (waiting for a check or a call ending under way).
//
// Later calls naming a closed handle fail with NotFound saying why (the last 1024 are remembered);
// CloseSession of one succeeds, as CloseSession of an unknown handle always has: a client that
// calls close() at the end of its work is not told off for having been slow. max_sessions bounds
// the sessions open at once, counting those being created.

struct Master::Link {
  std::shared_mutex mu;
  Master* master = nullptr;  // guarded by mu: null once the Master is being destroyed
};

struct Master::CallEnd {
  CallEnd(std::shared_ptr<Link> link, std::string handle) : link(std::move(link)), handle(std::move(handle)) {}
  ~CallEnd() { end(); }
  CallEnd(const CallEnd&) = delete;
  CallEnd& operator=(const CallEnd&) = delete;
  void end() {
    if (ended.exchange(true)) return;
    std::shared_lock<std::shared_mutex> l(link->mu);
    if (link->master != nullptr) link->master->end_call(handle);
  }
  const std::shared_ptr<Link> link;
  const std::string handle;
  std::atomic<bool> ended{false};
};

namespace {

// Closes `sessions` off the caller's thread (close() waits for a plan being built, which calls other
// tasks), then calls `then`; inline when no thread can be started.
void close_off_thread(std::vector<std::shared_ptr<MasterSession>> sessions, std::function<void()> then) {
  struct Job {
    std::vector<std::shared_ptr<MasterSession>> sessions;
    std::function<void()> then;
    void operator()() {
      for (auto& s : sessions) s->close();
      sessions.clear();
      request_memory_release();  // what the sessions held goes back to the system
      if (then) then();
    }
  };
  // Shared: when std::thread throws, the copy it was given is gone and this one does the work.
  auto job = std::make_shared<Job>(Job{std::move(sessions), std::move(then)});
  try {
    std::thread([job] { (*job)(); }).detach();
  } catch (const std::system_error&) {
    (*job)();
  }
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Runs `fn` on a detached thread of its own; false (and `fn` not run) when the process cannot make
// one (its thread limit): the caller answers with an error instead of terminating.
bool start_thread(std::function<void()> fn) {
  try {
    std::thread(std::move(fn)).detach();
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

Status no_thread(const std::string& task, const char* call) {
  return errors::resource_exhausted("{}: {}: no thread for the call (the process's thread limit)", task, call);
}

}  // namespace

Master::Master(std::string task, std::shared_ptr<WorkerCache> workers, int64_t max_graph_nodes,
               std::chrono::milliseconds session_idle_timeout, int64_t max_sessions)
    : task_(std::move(task)), workers_(std::move(workers)), max_graph_nodes_(max_graph_nodes),
      // A century is never: longer ones would overflow the clock's deadlines.
      idle_timeout_(std::min<std::chrono::milliseconds>(session_idle_timeout, std::chrono::hours(24 * 365 * 100))),
      max_sessions_(max_sessions), link_(std::make_shared<Link>()) {
  link_->master = this;
}

Master::~Master() {
  stop();
  std::unique_lock<std::shared_mutex> l(link_->mu);  // waits for a check or a call ending under way
  link_->master = nullptr;
}

std::size_t Master::num_sessions() {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

StatusOr<std::shared_ptr<MasterSession>> Master::not_found_locked(const std::string& handle) {
  auto it = reclaimed_.find(handle);
  if (it != reclaimed_.end()) {
    return errors::not_found("{}: session '{}' was closed after being idle for {:.1f} s (over "
                             "ServerOptions::session_idle_timeout, {:g} s); open a new session",
                             task_, handle, seconds(it->second), seconds(idle_timeout_));
  }
  return errors::not_found("{}: no session '{}' (closed, or the task restarted)", task_, handle);
}

template <class R>
StatusOr<std::shared_ptr<MasterSession>> Master::begin_call(const std::string& handle, Done<R>* done) {
  std::shared_ptr<MasterSession> session;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return errors::cancelled("{} is stopping", task_);
    auto it = sessions_.find(handle);
    if (it == sessions_.end()) return not_found_locked(handle);
    ++it->second.in_flight;
    session = it->second.session;
  }
  auto call = std::make_shared<CallEnd>(link_, handle);
  *done = [call, inner = std::move(*done)](StatusOr<R> r) {
    call->end();
    inner(std::move(r));
  };
  return session;
}

void Master::end_call(const std::string& handle) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end() || --it->second.in_flight > 0) return;  // closed meanwhile, or still busy
  it->second.idle_since = Clock::now();
  arm_locked(it->second.idle_since + idle_timeout_);
}

void Master::arm_locked(Clock::time_point deadline) {
  if (check_ || stopped_ || idle_timeout_.count() == 0) return;
  // A check scans every session: not more often than this, whatever the deadlines.
  const Clock::duration gap = std::min<Clock::duration>(idle_timeout_ / 8, std::chrono::seconds(1));
  deadline = std::max(deadline, Clock::now() + gap);
  auto id = TimerQueue::global().schedule(deadline, [w = std::weak_ptr<Link>(link_)] {
    auto link = w.lock();
    if (!link) return;
    std::vector<std::shared_ptr<MasterSession>> idle;
    {
      std::shared_lock<std::shared_mutex> l(link->mu);
      if (link->master == nullptr) return;
      idle = link->master->take_idle();
    }
    if (!idle.empty()) close_off_thread(std::move(idle), nullptr);
  });
  if (!id.ok()) {
    log_limited(timer_log_, LogLevel::kWarning, "{}: idle sessions go unchecked until the next session activity: {}",
                task_, id.status().message());
    return;
  }
  check_ = id.value();
}

std::vector<std::shared_ptr<MasterSession>> Master::take_idle() {
  std::vector<std::shared_ptr<MasterSession>> idle;
  {
    std::lock_guard<std::mutex> l(mu_);
    check_.reset();  // this one has fired
    if (stopped_) return idle;
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Entry& e = it->second;
      const Clock::time_point deadline = e.idle_since + idle_timeout_;
      if (e.in_flight > 0 || deadline > now) {
        if (e.in_flight == 0 && (!next || deadline < *next)) next = deadline;
        ++it;
        continue;
      }
      reclaimed_[it->first] = now - e.idle_since;
      reclaimed_order_.push_back(it->first);
      if (reclaimed_order_.size() > kRememberedReclaimed) {
        reclaimed_.erase(reclaimed_order_.front());
        reclaimed_order_.pop_front();
      }
      idle.push_back(std::move(e.session));
      it = sessions_.erase(it);
    }
    if (next) arm_locked(*next);
  }
  if (!idle.empty()) {
    log_limited(sweep_log_, LogLevel::kInfo, "{} closed {} session{} idle for over {:g} s "
                "(ServerOptions::session_idle_timeout)", task_, idle.size(), idle.size() == 1 ? "" : "s",
                seconds(idle_timeout_));
  }
  return idle;
}

void Master::create_session(const pb::CreateSessionRequest& request, Done<pb::CreateSessionResponse> done) {
  if (auto policy = placement_policy_named(request.config().placement_policy()); !policy.ok()) {
    return done(policy.status().with_prefix("CreateSession: "));
  }
  std::string handle;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return done(errors::cancelled("{} is stopping", task_));
    if (static_cast<int64_t>(sessions_.size()) + creating_ >= max_sessions_) {
      return done(errors::resource_exhausted("CreateSession: task {} has {} open sessions "
                                             "(ServerOptions::max_sessions); close some first",
                                             task_, max_sessions_));
    }
    ++creating_;  // the slot is held while the graph is built
    handle = fmt::format("{}/session/{}", task_, next_session_++);
  }
  auto session = std::make_shared<MasterSession>(handle, task_, workers_, request.config(), max_graph_nodes_);
  auto version = session->extend(request.graph(), {}, 0, /*check_version=*/false);
  bool stopped;
  {
    std::lock_guard<std::mutex> l(mu_);
    --creating_;
    stopped = stopped_;
    if (version.ok() && !stopped) {
      const Clock::time_point now = Clock::now();
      sessions_[handle] = Entry{session, 0, now};
      arm_locked(now + idle_timeout_);
    }
  }
  if (!version.ok()) return done(version.status());
  if (stopped) {
    session->close();  // nothing registered yet: closing does not wait
    return done(errors::cancelled("{} is stopping", task_));
  }
  pb::CreateSessionResponse response;
  response.set_version(wire::kWireVersion);
  response.set_session_handle(handle);
  response.set_graph_version(version.value());
  done(std::move(response));
}

void Master::extend_session(pb::ExtendSessionRequest request, Done<pb::ExtendSessionResponse> done) {
  auto session = begin_call(request.session_handle(), &done);
  if (!session.ok()) return done(session.status());
  // Waits for a plan being built (which calls other tasks): not on the caller's thread.
  auto reply = std::make_shared<Done<pb::ExtendSessionResponse>>(std::move(done));
  const bool started = start_thread([session = std::move(session).value(), body = std::move(request), reply] {
    auto version = session->extend(body.graph(), body.control_input(), body.current_graph_version(),
                                   /*check_version=*/true);
    if (!version.ok()) return (*reply)(version.status());
    pb::ExtendSessionResponse response;
    response.set_version(wire::kWireVersion);
    response.set_new_graph_version(version.value());
    (*reply)(std::move(response));
  });
  if (!started) (*reply)(no_thread(task_, "ExtendSession"));
}

Master::CancelStep Master::run_step(pb::RunStepRequest request, std::vector<Tensor> feed, Done<RunStepReply> done) {
  auto found = begin_call(request.session_handle(), &done);
  if (!found.ok()) {
    done(found.status());
    return nullptr;
  }
  std::shared_ptr<MasterSession> session = std::move(found).value();
  const int64_t step_id = new_step_id();
  CancelStep cancel = [weak = std::weak_ptr<MasterSession>(session), step_id](const Status& reason) {
    if (auto s = weak.lock()) s->cancel_step(step_id, reason);
  };
  // With its plan cached, a step only sends RunGraphs: it starts right here. Building a plan calls
  // other tasks (GetStatus, RegisterGraph) and waits for them: not on the caller's thread.
  if (session->has_plan(signature_key(request))) {
    session->run(request, std::move(feed), std::move(done), step_id);
    return cancel;
  }
  auto reply = std::make_shared<Done<RunStepReply>>(std::move(done));
  const bool started =
      start_thread([session, body = std::move(request), feed = std::move(feed), reply, step_id]() mutable {
        session->run(body, std::move(feed), std::move(*reply), step_id);
      });
  if (!started) {
    (*reply)(no_thread(task_, "RunStep"));
    return nullptr;
  }
  return cancel;
}

void Master::close_session(const pb::CloseSessionRequest& request, Done<pb::CloseSessionResponse> done) {
  std::shared_ptr<MasterSession> session;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(request.session_handle());
    if (it != sessions_.end()) {
      session = std::move(it->second.session);
      sessions_.erase(it);
    }
    // A handle closed for being idle: closed already (Note [Idle sessions]), and now forgotten.
    reclaimed_.erase(request.session_handle());
  }
  auto respond = [done = std::move(done)] {
    pb::CloseSessionResponse response;
    response.set_version(wire::kWireVersion);
    done(std::move(response));
  };
  if (!session) return respond();
  close_off_thread({std::move(session)}, std::move(respond));
}

void Master::stop() {
  std::unordered_map<std::string, Entry> sessions;
  std::optional<TimerQueue::Id> check;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    sessions.swap(sessions_);
    check = std::exchange(check_, std::nullopt);
  }
  if (check) TimerQueue::global().cancel(*check);
  for (auto& [handle, e] : sessions) e.session->close();
}

}  // namespace tessera::internal
