// The in-process session: places a graph on this process's devices (the CPU, simulated
// accelerators, GPUs) and runs steps on them. See include/tessera/session.h for the contract,
// Note [Executor scheduling] in core/executor.cc for how a step runs and Note [Partitions] in
// core/partition.cc for steps that span devices.
//
// Thread-safe: run() from any number of threads; close() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "core/executor.h"
#include "core/partition.h"
#include "core/placement.h"
#include "core/resource_mgr.h"
#include "core/session_factory.h"
#include "core/trace_json.h"
#include "core/thread_pool.h"
#include "tessera/session.h"

namespace tessera::internal {

class SessionImpl final : public SessionBackend {
 public:
  // A session over `graph`; InvalidArgument for bad options, or the devices' error. With `shared`
  // (not owned; must outlive the session) its variables and queues live there instead of in a
  // ResourceMgr of its own: a cluster task's partitions all use the task's, and close() leaves
  // them alone. `private_resources` (a cluster task's partitions: their client session's) holds
  // the resources made without a shared name instead (Note [Private resources] in
  // distributed/worker.cc); kept alive by the session. The public Session raises the error
  // (DirectSessionFactory).
  static StatusOr<std::unique_ptr<SessionImpl>> make(Graph& graph, SessionOptions options, ResourceMgr* shared,
                                                     std::shared_ptr<ResourceMgr> private_resources = nullptr);
  // What make() builds once the options and devices are known good (checked again here).
  SessionImpl(Graph& graph, SessionOptions options, ResourceMgr* shared,
              std::shared_ptr<ResourceMgr> private_resources = nullptr);
  ~SessionImpl() override;

  // `step_id` 0: a fresh one. A cluster worker passes the master's, and `remote`, the step's
  // rendezvous with the other tasks (not owned; null outside a cluster step): the partition's
  // _Send/_Recv graph nodes go through it. A traced step's spans go to `metadata` as JSON and,
  // when `records` is given, to it as they are (now_micros() clock; a worker sends them on).
  // Internal callers (the cluster worker) use run_step; run() is the public edge, which throws.
  [[nodiscard]] Status run_step(const std::vector<Output>& fetches, const FeedMap& feeds,
                                const std::vector<Operation>& targets, const RunOptions& options,
                                RunMetadata* metadata, int64_t step_id, std::vector<TraceRecord>* records,
                                std::vector<Tensor>* outputs, Rendezvous* remote = nullptr);
  // run_step without holding a thread while the step waits (Note [Asynchronous steps]): the step is
  // prepared and started on the session's pool and `done` runs once, on whichever thread ends it,
  // with the status, the fetched tensors and (`want_records`, a traced step) the spans. The
  // session must stay alive until `done` has run (the cluster worker's `done` owns its partition).
  using StepDone = std::function<void(Status, std::vector<Tensor>, std::vector<TraceRecord>)>;
  void run_step_async(std::vector<Output> fetches, FeedMap feeds, std::vector<Operation> targets,
                      const RunOptions& options, int64_t step_id, bool want_records, Rendezvous* remote,
                      StepDone done);
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata) override;
  // A callable that keeps its signature's checked endpoints and plan (Note [Callables]).
  std::shared_ptr<CallableBackend> make_callable(const std::vector<Output>& fetches, const std::vector<Output>& feeds,
                                                 const std::vector<Operation>& targets) override;
  void close() override;
  // Cancels the runs of step `step_id` in flight (a cluster step that failed on another task).
  void cancel_step(int64_t step_id, const Status& reason);
  Graph& graph() const override { return graph_; }
  ResourceMgr& resources() { return *resources_; }

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<uint64_t>& k) const noexcept;
  };
  StatusOr<std::shared_ptr<const StepPlan>> get_plan(const std::vector<uint64_t>& key,
                                                     const std::vector<Endpoint>& feeds,
                                                     const std::vector<Endpoint>& fetches,
                                                     const std::vector<const Node*>& targets);
  StatusOr<OpKernel*> kernel_for(const Node& node, Device* device);
  struct MultiStep;
  struct AsyncStep;
  class DirectCallable;
  // The step's options for plan `sp`, once its devices are known healthy.
  Status step_options(const StepPlan& sp, const RunOptions& options, int64_t step_id, Rendezvous* remote,
                      RunState::Options* ro);
  // Runs a prepared step whose feeds `set_feeds(rs)` sets, in the plan's order.
  template <class SetFeeds>
  Status run_prepared(const StepPlan& sp, RunState::Options& ro, SetFeeds&& set_feeds, const RunOptions& options,
                      RunMetadata* metadata, std::vector<TraceRecord>* records, std::size_t num_fetches,
                      std::vector<Tensor>* outputs, Rendezvous* remote);
  // Runs host partition `rs` (and `multi`'s device partitions, when not null) registered as in
  // flight, then finish_step.
  Status run_registered(RunState& rs, MultiStep* multi, const RunOptions& options, RunMetadata* metadata,
                        std::vector<TraceRecord>* records, std::size_t num_fetches, std::vector<Tensor>* outputs);
  // Checks the step's feeds, fetches and targets, finds (or makes) its plan and fills the host
  // partition's options: what run_step and run_step_async share before the step starts.
  Status prepare_step(const std::vector<Output>& fetches, const FeedMap& feeds, const std::vector<Operation>& targets,
                      const RunOptions& options, int64_t step_id, Rendezvous* remote, const StepPlan** plan,
                      RunState::Options* ro);
  // Where a step in flight is registered: its shard, and whether in the shard's solo slot. A
  // negative shard: not registered, the session is closed.
  struct RunTicket {
    int shard = -1;
    bool solo = false;
  };
  // A step in flight, for close() and cancel_step() (Note [Session fast path]).
  RunTicket register_run(RunState* rs);
  void unregister_run(RunState* rs, RunTicket ticket);
  // After the step's partitions ended with `status`: the root cause, the trace and the fetches.
  Status finish_step(Status status, RunState& rs, MultiStep* multi, bool trace, RunMetadata* metadata,
                     std::vector<TraceRecord>* records, std::size_t num_fetches, std::vector<Tensor>* outputs);
  // Places the graph's nodes that this session has not placed yet. Under the graph's lock.
  Status place_new_nodes();
  // The partitions of a step that spans devices: they share a rendezvous and fail together.
  struct MultiStep {
    // Makes the device partitions' run states and points the host's options at the rendezvous
    // and `abort`. `remote`: the cluster step's rendezvous (may be null), aborted with the step.
    MultiStep(const StepPlan& sp, RunState::Options& host_options, Rendezvous* remote);
    // Starts the device partitions, runs the host partition on this thread, then waits for the
    // others; the first failure among them.
    Status run(RunState& host, std::chrono::milliseconds timeout);

    // Gives each captured partition its step's outcome (after run(), the parts still alive). The
    // destructor does it for a step that never ran (its captures are then tried again).
    void end_captures();
    ~MultiStep();

    LocalRendezvous rendezvous;
    Rendezvous* remote;
    std::vector<std::unique_ptr<RunState>> parts;
    // Per part: its captured partition (or null) and how this step runs it; its outcome.
    std::vector<CapturedPartition*> captured;
    std::vector<CapturedPartition::Step> capture_steps;
    std::vector<Status> part_status;
    bool ran = false;
    bool ended = false;
    std::function<void(const Status&)> abort;  // the first call aborts the step
    std::atomic<bool> aborting{false};
    Status root_cause;  // the first failure: written once, by whoever set `aborting`
  };
  Graph& graph_;  // Not owned: must outlive the session.
  GraphImpl& g_;
  SessionOptions options_;
  std::unique_ptr<ThreadPool> own_pool_;  // when options_.inter_op_threads > 0
  ThreadPool* pool_;                      // own_pool_ or the shared pool. Not owned.
  Runner runner_;
  ResourceMgr own_resources_;
  ResourceMgr* resources_;  // &own_resources_ or a cluster task's. Not owned.
  std::shared_ptr<ResourceMgr> private_resources_;  // null: resources_ holds them too

  // The devices ops are placed on; devices_[0] is the host CPU. Placement results: node -> index
  // into devices_, written under the graph's lock by place_new_nodes().
  std::vector<Device*> devices_;
  std::vector<PlacementDevice> placement_devices_;
  std::unordered_map<const Node*, int> placement_;
  int placed_nodes_ = 0;  // nodes [0, placed_nodes_) of the graph are placed

  // The fused nodes its plans read (SessionOptions::remapping): declared before the kernels and
  // plans that point at them, so that it outlives them.
  FusedNodes fused_;
  std::mutex kernels_mu_;
  std::unordered_map<const Node*, std::unique_ptr<OpKernel>> kernels_;  // guarded by kernels_mu_

  std::shared_mutex plans_mu_;
  std::unordered_map<std::vector<uint64_t>, std::shared_ptr<const StepPlan>, KeyHash> plans_;  // guarded
  std::vector<std::shared_ptr<const StepPlan>> retired_plans_;  // guarded by plans_mu_

  // Steps in flight, so close() can cancel them. Sharded by calling thread: concurrent runs
  // register without sharing a lock (Note [Session fast path] in direct_session.cc).
  struct alignas(64) RunShard {
    std::mutex mu;
    // Signalled when the shard empties while closing, and when a cancelled solo step is handed
    // back.
    std::condition_variable cv;
    std::atomic<RunState*> solo{nullptr};  // a step registered without the lock, or kCancellingSolo
    std::vector<RunState*> runs;  // guarded by mu; no allocation per run once grown
  };
  // Runs `cancel` on the shard's solo step, if any, holding it so that it cannot unregister.
  template <class Cancel>
  void cancel_solo(RunShard& shard, Cancel&& cancel);
  static constexpr int kRunShards = 8;
  RunShard shards_[kRunShards];
  std::atomic<bool> closed_{false};
  const uint64_t serial_;  // unique per session in this process (keys the per-thread plan cache)
};


}  // namespace tessera::internal
