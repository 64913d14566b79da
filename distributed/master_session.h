// A client's session on the master of a cluster task (Note [Master] in master_session.cc): its copy
// of the client's graph, the placement over the cluster's devices, the plan of each step signature
// (one partition per task, registered on the task's worker) and the steps in flight. The Master
// (master.h) owns the sessions and finds them by handle; a transport never sees this class.
//
//   auto session = std::make_shared<MasterSession>(handle, task, workers, config, max_graph_nodes);
//   session->extend(request.graph(), {}, 0, /*check_version=*/false);
//   session->run(run_step_request, feeds, done, new_step_id());
//   session->close();
//
// Thread-safe; run() never blocks the caller's thread on another task.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/placement.h"
#include "core/recent_memo.h"
#include "distributed/wire.h"
#include "distributed/worker_interface.h"
#include "tessera/graph.h"

namespace tessera::internal {

struct RunStepReply {
  wire::pb::RunStepResponse response;
  std::vector<Tensor> tensor;  // one per response.tensor() entry: the fetches, in order
};

// A fresh step id: random 64-bit numbers (a per-process random base plus a counter), since several
// masters start steps on the same workers and the ids key the workers' exchanges.
int64_t new_step_id();
// The plan cache's key: feeds, fetches and targets, by name.
std::string signature_key(const wire::pb::RunStepRequest& r);

class MasterSession : public std::enable_shared_from_this<MasterSession> {
 public:
  // `partition_lease`: the lease its partitions are registered with (Note [Partition leases] in
  // worker.cc; the Master renews it); 0: none.
  MasterSession(std::string handle, std::string task, std::shared_ptr<WorkerCache> workers,
                wire::pb::SessionConfig config, int64_t max_graph_nodes,
                std::chrono::milliseconds partition_lease = {})
      : handle_(std::move(handle)), task_(std::move(task)), workers_(std::move(workers)),
        config_(std::move(config)), max_graph_nodes_(max_graph_nodes), partition_lease_(partition_lease) {}

  const std::string& handle() const { return handle_; }

  // The workers holding partitions of this session under lease (none once it is closed). Never
  // waits for a plan being built.
  std::vector<WorkerInterface*> leased_workers() {
    std::lock_guard<std::mutex> l(lease_mu_);
    return leased_on_;
  }

  // Adds `def`'s nodes, then the control inputs `edges` adds to nodes it has; the new graph
  // version. Aborted for a stale `current_version`.
  StatusOr<int64_t> extend(const wire::pb::GraphDef& def, const google::protobuf::RepeatedPtrField<wire::pb::ControlEdge>& edges,
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
      for (const wire::pb::ControlEdge& e : edges) {
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
  void run(const wire::pb::RunStepRequest& r, std::vector<Tensor> feed_values, Done<RunStepReply> respond, int64_t step_id);
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
             const wire::pb::RunStepRequest& r);
  void abort(const std::shared_ptr<Step>& step, const Status& reason);
  // What a run or a plan of a closed session fails with (it names the session).
  Status closed_error() const;

  const std::string handle_;
  const std::string task_;
  const std::shared_ptr<WorkerCache> workers_;
  const wire::pb::SessionConfig config_;
  const int64_t max_graph_nodes_;
  const std::chrono::milliseconds partition_lease_;

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
  std::mutex lease_mu_;
  std::vector<WorkerInterface*> leased_on_;  // guarded by lease_mu_: each worker once
  // Never held while calling another task: a step with a cached plan starts on a server thread.
  std::shared_mutex plans_mu_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;  // guarded by plans_mu_

  std::atomic<bool> closed_flag_{false};  // closed_, readable without mu_
  std::mutex steps_mu_;
  std::unordered_map<int64_t, std::shared_ptr<Step>> steps_;  // guarded by steps_mu_: in flight
  // Steps cancelled before they began (cancel_step), the latest 1024; and the latest reason kept.
  RecentMemo<int64_t, Status> cancelled_early_{1024};  // guarded by steps_mu_
  Status cancelled_reason_;                            // guarded by steps_mu_
};

}  // namespace tessera::internal
