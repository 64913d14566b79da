// Internal to the placement pass: what core/placement.cc (the pass: constraints, colocation,
// soft placement, policies) and core/placement_schedule.cc (the scheduling problem, the makespan
// simulator, HEFT and the greedy search) share. The public API is core/placement.h; the cost
// model's functions are declared there and defined in core/cost_model.cc. Positions index the
// pass's node list (`work`, sorted by id). Thread-compatible.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/placement.h"

namespace tessera::internal::placement_detail {

// Graphs up to this many nodes get the greedy improvement passes (each pass simulates every
// movable group on every other candidate), at most kImprovePasses of them and at most
// kImproveBudget simulated node visits in all (deterministic; what the budget costs in time:
// benchmarks/README.md, Placement). Note [Cost policy] in placement_schedule.cc.
inline constexpr int kImproveMaxNodes = 200;
inline constexpr int kImprovePasses = 3;
inline constexpr int64_t kImproveBudget = 100'000;
// Graphs up to this many nodes improve all three starting points, not only the best.
inline constexpr int kImproveAllStartsMaxNodes = 32;

// ---- Device sets: one bit per device, W words per set ----

class DeviceBits {
 public:
  DeviceBits() = default;
  DeviceBits(int num_devices, bool all) : words_((num_devices + 63) / 64) {
    if (words_ > 1) more_.assign(words_ - 1, 0);
    if (all) {
      for (int d = 0; d < num_devices; ++d) set(d);
    }
  }
  void set(int d) { word(d / 64) |= uint64_t{1} << (d % 64); }
  bool has(int d) const { return (word(d / 64) >> (d % 64)) & 1; }
  bool empty() const {
    for (int i = 0; i < words_; ++i) {
      if (word(i)) return false;
    }
    return true;
  }
  int count() const {
    int c = 0;
    for (int i = 0; i < words_; ++i) c += std::popcount(word(i));
    return c;
  }
  DeviceBits& operator&=(const DeviceBits& o) {
    for (int i = 0; i < words_; ++i) word(i) &= o.word(i);
    return *this;
  }
  friend DeviceBits operator&(DeviceBits a, const DeviceBits& b) { return a &= b; }
  // Calls fn(d) for each device in increasing index order.
  template <class F>
  void for_each(F&& fn) const {
    for (int i = 0; i < words_; ++i) {
      uint64_t x = word(i);
      while (x) {
        fn(i * 64 + std::countr_zero(x));
        x &= x - 1;
      }
    }
  }
  int first() const {
    for (int i = 0; i < words_; ++i) {
      if (word(i)) return i * 64 + std::countr_zero(word(i));
    }
    return -1;
  }

 private:
  // Up to 64 devices need no allocation.
  uint64_t& word(int i) { return i == 0 ? first_ : more_[i - 1]; }
  uint64_t word(int i) const { return i == 0 ? first_ : more_[i - 1]; }
  int words_ = 0;
  uint64_t first_ = 0;
  std::vector<uint64_t> more_;
};

// ---- Node lookup: by id when the nodes share a graph, else by pointer ----

class NodeIndex {
 public:
  explicit NodeIndex(const std::vector<const Node*>& nodes) : nodes_(nodes) {
    graph_ = nodes.empty() ? nullptr : nodes[0]->graph;
    int max_id = -1;
    dense_ = true;
    for (const Node* n : nodes) {
      if (n->graph != graph_ || n->id < 0) dense_ = false;
      max_id = std::max(max_id, n->id);
    }
    if (dense_ && static_cast<std::size_t>(max_id) > 4 * nodes.size() + 1024) dense_ = false;
    if (dense_) {
      by_id_.assign(static_cast<std::size_t>(max_id) + 1, -1);
      for (std::size_t i = 0; i < nodes.size(); ++i) by_id_[nodes[i]->id] = static_cast<int>(i);
    } else {
      by_ptr_.reserve(nodes.size());
      for (std::size_t i = 0; i < nodes.size(); ++i) by_ptr_.emplace(nodes[i], static_cast<int>(i));
    }
  }
  // The node's position, or -1.
  int find(const Node* n) const {
    if (n == nullptr) return -1;
    if (dense_) {
      if (n->graph != graph_ || n->id < 0 || static_cast<std::size_t>(n->id) >= by_id_.size()) return -1;
      int i = by_id_[n->id];
      return i >= 0 && nodes_[i] == n ? i : -1;
    }
    auto it = by_ptr_.find(n);
    return it == by_ptr_.end() ? -1 : it->second;
  }

 private:
  const std::vector<const Node*>& nodes_;
  const GraphImpl* graph_ = nullptr;
  bool dense_ = false;
  std::vector<int> by_id_;
  std::unordered_map<const Node*, int> by_ptr_;
};

// ---- The scheduling problem: costs and edges by position ----

struct Problem {
  const std::vector<PlacementDevice>* devices = nullptr;
  std::vector<char> is_host;
  int host = 0;  // default host device: inputs from outside the problem live there
  int n = 0;
  std::vector<double> flops, bytes;
  // Edges in CSR form. in_src -1 = a tensor from outside, on the host, ready at time 0. Bytes < 0
  // = a control edge (ordering only).
  std::vector<int> in_off, in_src;
  std::vector<double> in_bytes;
  std::vector<int> out_off, out_dst;
  std::vector<double> out_bytes;
  std::vector<int> topo;  // a topological order (edges against it were dropped: cycles)

  // The task of each device (an index into the distinct task_of(name)), and what a tensor costs
  // between two tasks. num_tasks 1: no network charge anywhere.
  std::vector<int> task;
  int num_tasks = 1;
  NetworkCostProfile network;

  // Each node's weight: 1, or kInitOnlyWeight for an init-only node (when build_problem was
  // asked to weigh initialization). It scales the node's cost and the edges into it.
  std::vector<double> weight;
  // cost(i, d) for every node and device, when that table is not too big (kCostTableMaxEntries).
  std::vector<double> cost_table;

  int num_devices() const { return static_cast<int>(devices->size()); }
  // One run of node i on device d, unweighted: op_seconds.
  double kernel_seconds(int i, int d) const { return (*devices)[d].cost.kernel_seconds(flops[i], bytes[i]); }
  // The weighted cost the schedules use.
  double cost(int i, int d) const {
    if (!cost_table.empty()) return cost_table[static_cast<std::size_t>(i) * devices->size() + d];
    return kernel_seconds(i, d) * weight[i];
  }
  double leg(int d, double b) const {
    return is_host[d] ? 0.0 : (*devices)[d].cost.transfer_seconds(static_cast<std::size_t>(b));
  }
  // Between tasks, the network too (Note [Cost policy]).
  double net(int from, int to, double b) const {
    return num_tasks > 1 && task[from] != task[to] ? network.seconds(b) : 0.0;
  }
  double edge(int from, int to, double b) const {
    if (b < 0 || from == to) return 0.0;
    return leg(from, b) + leg(to, b) + net(from, to, b);
  }
  // The weighted cost of an edge of `b` bytes into node `dst`, from device `from` to device `to`.
  double edge_into(int dst, int from, int to, double b) const { return edge(from, to, b) * weight[dst]; }
};

// The problem of placing `work` (sorted by id, no repeats) on `devices`. `external_inputs`: inputs
// from nodes outside `work` become edges from the host at time 0 (else they are ignored).
// `weigh_init`: find the init-only nodes and give them kInitOnlyWeight (Note [Init-only
// weighting] in placement_schedule.cc); otherwise every weight is 1 (simulate_makespan's plain
// model).
Problem build_problem(const std::vector<const Node*>& work, const NodeIndex& index,
                      const std::vector<PlacementDevice>& devices, int host, bool external_inputs,
                      bool weigh_init, const NetworkCostProfile& network);

// Ready nodes by decreasing priority, ties by position. A binary heap over a reused vector.
class ReadyQueue {
 public:
  void reset(const std::vector<double>* priority) {
    prio_ = priority;
    heap_.clear();
  }
  void push(int i) {
    heap_.push_back(i);
    std::push_heap(heap_.begin(), heap_.end(), Less{prio_});
  }
  int pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Less{prio_});
    int i = heap_.back();
    heap_.pop_back();
    return i;
  }
  bool empty() const { return heap_.empty(); }

 private:
  struct Less {
    const std::vector<double>* prio;
    bool operator()(int a, int b) const {
      double pa = (*prio)[a], pb = (*prio)[b];
      return pa < pb || (pa == pb && a > b);
    }
  };
  const std::vector<double>* prio_ = nullptr;
  std::vector<int> heap_;
};

// The list schedule of Note [Makespan model] (placement_schedule.cc) for complete assignments;
// buffers are reused across runs.
class Simulator {
 public:
  explicit Simulator(const Problem& p) : p_(p), rank_(p.n), finish_(p.n), indeg_(p.n), free_(p.num_devices()) {}

  // The makespan of `dev` (a device per position).
  double run(const std::vector<int>& dev);

  // The weighted seconds `dev` spends moving tensors between devices (every edge, overlapped or
  // not): the tie-break between assignments of equal makespan.
  double transfer(const std::vector<int>& dev) const;

 private:
  const Problem& p_;  // Not owned.
  std::vector<double> rank_, finish_;
  std::vector<int> indeg_;
  std::vector<double> free_;
  ReadyQueue ready_;
};

// Colocation groups (Note [Placement] in placement.cc).
struct Groups {
  int count = 0;
  std::vector<int> of;             // group of each position
  std::vector<int> off, members;   // CSR: members of group g in increasing position
  int size(int g) const { return off[g + 1] - off[g]; }
};

// Sorts by node id (stable) and drops repeated nodes.
void sort_unique_by_id(std::vector<const Node*>& nodes);

// The cost policy's steps (Note [Cost policy] in placement_schedule.cc).
//
// HEFT-like list scheduling. `gdev` holds the groups already decided (pinned or preferred) and
// receives the others.
void heft(const Problem& p, const Groups& gr, const std::vector<DeviceBits>& cand, std::vector<int>& gdev);
// The device of each position from the device of each group.
void expand(const Groups& gr, const std::vector<int>& gdev, std::vector<int>& dev);
// The greedy search: moves one movable group at a time to another candidate while the makespan
// drops (or stays and less time goes to transfers), within `budget` simulated node visits.
void improve(const Groups& gr, const std::vector<DeviceBits>& cand, const std::vector<int>& movable,
             Simulator& sim, std::vector<int>& gdev, double& makespan, int64_t& budget);

}  // namespace tessera::internal::placement_detail
