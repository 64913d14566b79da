// The in-process session: runs a graph on this process's CPU device. See include/tessera/session.h
// for the contract and Note [Executor scheduling] in core/executor.cc for how a step runs.
//
// Thread-safe: run() from any number of threads; close() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "core/executor.h"
#include "core/resource_mgr.h"
#include "host/thread_pool.h"
#include "tessera/session.h"

namespace tessera::internal {

class SessionImpl {
 public:
  SessionImpl(Graph& graph, SessionOptions options);
  ~SessionImpl();

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata);
  void close();
  Graph& graph() const { return graph_; }
  ResourceMgr& resources() { return resources_; }

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<uint64_t>& k) const noexcept;
  };
  StatusOr<std::shared_ptr<const Plan>> get_plan(const std::vector<uint64_t>& key,
                                                 const std::vector<Endpoint>& feeds,
                                                 const std::vector<Endpoint>& fetches,
                                                 const std::vector<const Node*>& targets);
  StatusOr<OpKernel*> kernel_for(const Node& node);
  Status place(const Node& node);
  std::string trace_json(RunState& rs, const Plan& plan) const;

  Graph& graph_;  // Not owned: must outlive the session.
  GraphImpl& g_;
  SessionOptions options_;
  std::unique_ptr<ThreadPool> own_pool_;  // when options_.inter_op_threads > 0
  ThreadPool* pool_;                      // own_pool_ or the shared pool. Not owned.
  Runner runner_;
  ResourceMgr resources_;

  std::mutex kernels_mu_;
  std::unordered_map<const Node*, std::unique_ptr<OpKernel>> kernels_;  // guarded by kernels_mu_

  std::shared_mutex plans_mu_;
  std::unordered_map<std::vector<uint64_t>, std::shared_ptr<const Plan>, KeyHash> plans_;  // guarded
  std::vector<std::shared_ptr<const Plan>> retired_plans_;  // guarded by plans_mu_

  // Steps in flight, so close() can cancel them. Sharded by calling thread: concurrent runs
  // register without sharing a lock (Note [Session fast path] in direct_session.cc).
  struct alignas(64) RunShard {
    std::mutex mu;
    std::condition_variable cv;   // signalled when `runs` empties while closing
    std::vector<RunState*> runs;  // guarded by mu; no allocation per run once grown
  };
  static constexpr int kRunShards = 8;
  RunShard shards_[kRunShards];
  std::atomic<bool> closed_{false};
  const uint64_t serial_;  // unique per session in this process (keys the per-thread plan cache)
};

}  // namespace tessera::internal
