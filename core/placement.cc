// The placement pass and its cost model. See Note [Placement].
#include "core/placement.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string_view>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "core/op_registry.h"

namespace tessera::internal {

// Note [Placement]
// ~~~~~~~~~~~~~~~~
// place_nodes assigns every node to one device in three steps.
//
// 1. Hard constraints. Each node's requested_device is parsed (a malformed spec is an
//    InvalidArgumentError naming the op). Nodes that must share a device form colocation groups
//    (union-find): an op with its `resource` (Assign/AssignAdd with their VariableV2, queue ops
//    with their FIFOQueue) and a node with every node of its `colocate_with` list. The requests of
//    a group are merged; two requests that set a field differently (/device:CPU:0 against
//    /device:SIM:0, SIM:0 against SIM:1, /job:a against /job:b) are an InvalidArgumentError naming
//    both ops and both specs, with or without soft placement. A group's candidates are the devices
//    its merged spec matches that have a kernel for every op of the group, only host devices when
//    an op of the group is host_only (queues), and only the fixed device when a member was placed
//    before (`fixed`). A resource or colocate_with target outside `nodes` and `fixed` is not
//    placed and does not constrain anything.
// 2. Soft placement. A group without candidates loses its request, in two steps as TensorFlow's
//    soft placement does: first the device type and id (keeping job, replica and task), then
//    everything; kernels, host-only ops and fixed devices still constrain it. Each op whose request
//    the final device does not satisfy is reported in Placement::soft_placements. Without soft
//    placement (or when even the relaxed group has no device) it is an InvalidArgumentError that
//    names the op, its request, every device, and what is missing (a matching device, a kernel,
//    a host device).
// 3. The policy places the groups that still have a choice. A group with a Placeholder goes to its
//    first host candidate (the default host device unless the request says otherwise) whenever
//    it has one, under every policy: feeds arrive in host memory.
//    * kCpuOnly: the first host candidate. An explicit request for an accelerator counts as
//      unsatisfiable (step 2) when a host device could run the group; a group no host device can
//      run goes to its first candidate.
//    * kGpuFirst: TensorFlow's rule: the first GPU candidate, else the first other accelerator,
//      else the host.
//    * kCost: groups of tiny ops (every input and output fully known and at most
//      tiny_op_elements elements) start on a host candidate: launching them on an accelerator
//      costs more than running them. The rest go through HEFT-like list scheduling: an op costs
//      kernel_seconds(op_flops, op_bytes) on a device, an edge costs the transfer of the tensor
//      (nothing on one device; host <-> accelerator the accelerator's transfer_seconds;
//      accelerator <-> accelerator both legs, through host memory). Upward ranks use the mean
//      cost over a group's candidates; in decreasing rank each op takes the candidate with the
//      earliest finish, and the first op of a group to be scheduled decides for the whole group
//      (the cost of the group's other ops on each device is added to its comparison). An op
//      without data inputs (a VariableV2, a Const) finishes about as early anywhere, so when it
//      decides it also looks one edge ahead: each candidate's finish time gets the longest
//      transfer of its outputs to its consumers' expected devices (the consumer group's device
//      when decided, else the consumer's cheapest candidate), and a variable goes where its
//      readers are headed even in graphs too big for the greedy passes. Then a safety net:
//      the all-host and the accelerator-first assignments (the kCpuOnly and kGpuFirst
//      rules, under the same constraints and requests) are simulated too and the best of the three is kept, so the
//      cost policy is never worse than either baseline under its own model. For graphs of up to
//      kImproveMaxNodes ops a bounded greedy search then moves one group at a time to another
//      candidate while the simulated makespan drops (at most kImprovePasses passes and
//      kImproveBudget simulated node visits; from all three starting points for graphs of up to
//      kImproveAllStartsMaxNodes ops, else from the best). The tiny-op start is a preference the
//      search may undo; the Placeholder rule and the constraints are not.
//
// Initialization runs once, a step runs many times. A session places the whole graph at once,
// variable initializers included, but the initializer subgraph runs once while the rest runs every
// step; costing both alike made a variable's group look no cheaper on the accelerator that reads
// it (its initial value's copy and its Assign there weighed as much as the weights' copy every
// step). So inside place_nodes the compute of init-only nodes, and every transfer into them (from
// outside too), count kInitOnlyWeight (1e-3) of their cost: in the HEFT ranks and finish times,
// and in the simulations of the baselines, the greedy passes and Placement::estimated_makespan.
// Init-only nodes:
//   * the Assign a Variable's constructor creates (attr "_initializer" = true, set in
//     core/variable_ops.cc) and a NoOp whose inputs are all such Assigns or such NoOps
//     (global_variables_initializer's group), when whatever consumes them is init-only too;
//   * a node with consumers among the placed nodes, all of them init-only (random_normal feeding
//     the initializer, the "initial_value" Const of Variable(graph, tensor)).
// A VariableV2 that a step reads is not init-only, nor is an Assign made by Variable::assign.
// Per-op estimates (Placement::estimated_seconds, placement_table) and the public
// simulate_makespan stay unweighted.
//
// The cost model's makespan (simulate_makespan) is a list schedule: each device runs one op at a
// time; ops go in decreasing upward rank computed with their assigned devices' costs (ties by
// node id), each starting when its device is free and its inputs have arrived. Transfers overlap
// everything (no link contention), control edges cost nothing, and results stay where their op ran
// (fetching them to the client is not charged). Inside place_nodes, inputs from
// nodes outside `nodes` and `fixed` are host-resident at time 0. Everything is deterministic:
// nodes are handled in id order and ties go to the lower device index.

namespace {

// Graphs up to this many nodes get the greedy improvement passes (each pass simulates every
// movable group on every other candidate), at most kImprovePasses of them and at most
// kImproveBudget simulated node visits in all (about 5 ms on a slow core; deterministic).
constexpr int kImproveMaxNodes = 200;
constexpr int kImprovePasses = 3;
constexpr int64_t kImproveBudget = 100'000;
// Node costs are tabulated up to this many (node, device) pairs (16 MiB).
constexpr std::size_t kCostTableMaxEntries = std::size_t{2} << 20;
// Graphs up to this many nodes improve all three starting points, not only the best.
constexpr int kImproveAllStartsMaxNodes = 32;
// Initialization runs once, a step runs many times: the compute of init-only nodes, and the
// transfers into them, count this much of their cost inside place_nodes (Note [Placement]).
constexpr double kInitOnlyWeight = 1e-3;
// The attr Variable's constructor sets on the Assign that initializes the variable
// (core/variable_ops.cc).
constexpr std::string_view kInitializerAttr = "_initializer";

// ---- The cost model: op classes ----

enum class OpKind {
  kNoData,          // no arithmetic and no data moved: Const, Placeholder, NoOp, VariableV2, queues
  kMove,            // copies its inputs: Identity, Cast, Assign, enqueue/dequeue
  kElementwise,     // one operation per output element
  kSqrt,            // four per output element
  kTranscendental,  // eight per output element
  kReduce,          // one per input element
  kRandom,          // ten per output element
  kMatMul,
  kOther,           // one per output element
};

OpKind op_kind(const std::string& type) {
  static const std::unordered_map<std::string_view, OpKind> kinds = {
      {"Const", OpKind::kNoData},          {"Placeholder", OpKind::kNoData},
      {"NoOp", OpKind::kNoData},           {"VariableV2", OpKind::kNoData},
      {"FIFOQueue", OpKind::kNoData},      {"QueueClose", OpKind::kNoData},
      {"QueueSize", OpKind::kNoData},      {"QueueIsClosed", OpKind::kNoData},
      {"Identity", OpKind::kMove},         {"Cast", OpKind::kMove},
      {"Assign", OpKind::kMove},           {"QueueEnqueue", OpKind::kMove},
      {"QueueEnqueueMany", OpKind::kMove}, {"QueueDequeue", OpKind::kMove},
      {"QueueDequeueMany", OpKind::kMove}, {"QueueDequeueUpTo", OpKind::kMove},
      {"Add", OpKind::kElementwise},       {"Sub", OpKind::kElementwise},
      {"Mul", OpKind::kElementwise},       {"Div", OpKind::kElementwise},
      {"Maximum", OpKind::kElementwise},   {"Minimum", OpKind::kElementwise},
      {"Neg", OpKind::kElementwise},       {"Relu", OpKind::kElementwise},
      {"Square", OpKind::kElementwise},    {"AssignAdd", OpKind::kElementwise},
      {"AssignSub", OpKind::kElementwise}, {"RandomShuffle", OpKind::kElementwise},
      {"Sqrt", OpKind::kSqrt},             {"Exp", OpKind::kTranscendental},
      {"Log", OpKind::kTranscendental},    {"Tanh", OpKind::kTranscendental},
      {"Sigmoid", OpKind::kTranscendental}, {"Sum", OpKind::kReduce},
      {"Mean", OpKind::kReduce},           {"Max", OpKind::kReduce},
      {"RandomUniform", OpKind::kRandom},  {"RandomNormal", OpKind::kRandom},
      {"MatMul", OpKind::kMatMul},
  };
  auto it = kinds.find(type);
  return it == kinds.end() ? OpKind::kOther : it->second;
}

// Elements of a shape, unknown dimensions (and an unknown rank) counting as 1.
double known_elements(const Shape& s) {
  if (s.unknown_rank()) return 1;
  double n = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s.dim(i) >= 0) n *= static_cast<double>(s.dim(i));
  }
  return n;
}

double dim_or_one(const Shape& s, int i) {
  if (s.unknown_rank() || i >= s.rank() || s.dim(i) < 0) return 1;
  return static_cast<double>(s.dim(i));
}

double output_elements(const Node& n) {
  double e = 0;
  for (const Shape& s : n.output_shapes) e += known_elements(s);
  return e;
}

bool small_and_known(const Shape& s, int64_t limit) {
  return s.fully_defined() && s.num_elements() <= limit;
}

// Every input and output fully known and at most `limit` elements (Note [Placement]).
bool is_tiny(const Node& n, int64_t limit) {
  for (const Shape& s : n.output_shapes) {
    if (!small_and_known(s, limit)) return false;
  }
  for (const Endpoint& e : n.inputs) {
    if (e.node == nullptr || e.index >= static_cast<int>(e.node->output_shapes.size())) continue;
    if (!small_and_known(e.node->output_shapes[e.index], limit)) return false;
  }
  return true;
}

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
  double edge(int from, int to, double b) const {
    if (b < 0 || from == to) return 0.0;
    return leg(from, b) + leg(to, b);
  }
  // The weighted cost of an edge of `b` bytes into node `dst`, from device `from` to device `to`.
  double edge_into(int dst, int from, int to, double b) const { return edge(from, to, b) * weight[dst]; }
};

// Whether `node` is the Assign a Variable's constructor made to initialize it.
bool is_variable_initializer(const Node& node) {
  auto it = node.attrs.find(std::string(kInitializerAttr));
  if (it == node.attrs.end()) return false;
  const bool* b = std::get_if<bool>(&it->second);
  return b != nullptr && *b;
}

// `weigh_init`: find the init-only nodes and give them kInitOnlyWeight (Note [Placement]);
// otherwise every weight is 1 (simulate_makespan's plain model).
Problem build_problem(const std::vector<const Node*>& work, const NodeIndex& index,
                      const std::vector<PlacementDevice>& devices, int host, bool external_inputs,
                      bool weigh_init) {
  Problem p;
  p.devices = &devices;
  p.host = host;
  p.n = static_cast<int>(work.size());
  p.is_host.resize(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) p.is_host[d] = devices[d].is_host();
  p.flops.resize(p.n);
  p.bytes.resize(p.n);
  struct Edge {
    int src, dst;
    double bytes;
  };
  std::vector<Edge> edges;
  edges.reserve(work.size() * 2);
  for (int i = 0; i < p.n; ++i) {
    const Node& node = *work[i];
    p.flops[i] = op_flops(node);
    p.bytes[i] = op_bytes(node);
    for (const Endpoint& e : node.inputs) {
      int src = index.find(e.node);
      if (src >= 0) {
        edges.push_back({src, i, output_bytes(*e.node, e.index)});
      } else if (external_inputs && e.node != nullptr) {
        edges.push_back({-1, i, output_bytes(*e.node, e.index)});
      }
    }
    for (const Node* c : node.control_inputs) {
      int src = index.find(c);
      if (src >= 0) edges.push_back({src, i, -1.0});
    }
  }
  // Kahn's algorithm in position order; whatever a cycle leaves is appended in position order and
  // the edges against the order are dropped.
  std::vector<int> indeg(p.n, 0);
  std::vector<int> succ_count(p.n, 0);
  for (const Edge& e : edges) {
    if (e.src >= 0) {
      ++indeg[e.dst];
      ++succ_count[e.src];
    }
  }
  std::vector<int> succ_off(p.n + 1, 0);
  for (int i = 0; i < p.n; ++i) succ_off[i + 1] = succ_off[i] + succ_count[i];
  std::vector<int> succ(succ_off[p.n]);
  {
    std::vector<int> fill(succ_off.begin(), succ_off.end() - 1);
    for (const Edge& e : edges) {
      if (e.src >= 0) succ[fill[e.src]++] = e.dst;
    }
  }
  p.topo.reserve(p.n);
  for (int i = 0; i < p.n; ++i) {
    if (indeg[i] == 0) p.topo.push_back(i);
  }
  for (std::size_t h = 0; h < p.topo.size(); ++h) {
    int i = p.topo[h];
    for (int k = succ_off[i]; k < succ_off[i + 1]; ++k) {
      if (--indeg[succ[k]] == 0) p.topo.push_back(succ[k]);
    }
  }
  if (static_cast<int>(p.topo.size()) < p.n) {
    std::vector<char> seen(p.n, 0);
    for (int i : p.topo) seen[i] = 1;
    for (int i = 0; i < p.n; ++i) {
      if (!seen[i]) p.topo.push_back(i);
    }
    std::vector<int> pos(p.n);
    for (int k = 0; k < p.n; ++k) pos[p.topo[k]] = k;
    std::erase_if(edges, [&](const Edge& e) { return e.src >= 0 && pos[e.src] >= pos[e.dst]; });
  }
  // CSR, keeping each node's edges in input order.
  p.in_off.assign(p.n + 1, 0);
  p.out_off.assign(p.n + 1, 0);
  for (const Edge& e : edges) {
    ++p.in_off[e.dst + 1];
    if (e.src >= 0) ++p.out_off[e.src + 1];
  }
  for (int i = 0; i < p.n; ++i) {
    p.in_off[i + 1] += p.in_off[i];
    p.out_off[i + 1] += p.out_off[i];
  }
  p.in_src.resize(p.in_off[p.n]);
  p.in_bytes.resize(p.in_off[p.n]);
  p.out_dst.resize(p.out_off[p.n]);
  p.out_bytes.resize(p.out_off[p.n]);
  std::vector<int> in_fill(p.in_off.begin(), p.in_off.end() - 1);
  std::vector<int> out_fill(p.out_off.begin(), p.out_off.end() - 1);
  for (const Edge& e : edges) {
    p.in_src[in_fill[e.dst]] = e.src;
    p.in_bytes[in_fill[e.dst]++] = e.bytes;
    if (e.src >= 0) {
      p.out_dst[out_fill[e.src]] = e.dst;
      p.out_bytes[out_fill[e.src]++] = e.bytes;
    }
  }
  p.weight.assign(p.n, 1.0);
  if (weigh_init) {
    // Groups of initializers first (forward): a NoOp whose inputs are all initializer Assigns
    // or such groups (global_variables_initializer). Then, backward, a node is init-only when
    // it has consumers and all of them are init-only; an initializer Assign or a group of them is
    // when its consumers (if any) all are.
    std::vector<char> seed(p.n, 0), init(p.n, 0);
    for (int i : p.topo) {
      if (is_variable_initializer(*work[i])) {
        seed[i] = 1;
      } else if (work[i]->type == "NoOp" && p.in_off[i + 1] > p.in_off[i]) {
        bool all = true;
        for (int k = p.in_off[i]; k < p.in_off[i + 1] && all; ++k) all = p.in_src[k] >= 0 && seed[p.in_src[k]];
        seed[i] = all;
      }
    }
    for (auto it = p.topo.rbegin(); it != p.topo.rend(); ++it) {
      const int i = *it;
      bool all = true;
      for (int k = p.out_off[i]; k < p.out_off[i + 1] && all; ++k) all = init[p.out_dst[k]];
      init[i] = all && (seed[i] || p.out_off[i + 1] > p.out_off[i]);
      if (init[i]) p.weight[i] = kInitOnlyWeight;
    }
  }
  if (static_cast<std::size_t>(p.n) * devices.size() <= kCostTableMaxEntries) {
    std::vector<double> table(static_cast<std::size_t>(p.n) * devices.size());
    for (int i = 0; i < p.n; ++i) {
      for (std::size_t d = 0; d < devices.size(); ++d) table[i * devices.size() + d] = p.cost(i, static_cast<int>(d));
    }
    p.cost_table = std::move(table);
  }
  return p;
}

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

// The list schedule of Note [Placement] for complete assignments; buffers are reused across runs.
class Simulator {
 public:
  explicit Simulator(const Problem& p) : p_(p), rank_(p.n), finish_(p.n), indeg_(p.n), free_(p.num_devices()) {}

  // The makespan of `dev` (a device per position).
  double run(const std::vector<int>& dev) {
    const Problem& p = p_;
    for (auto it = p.topo.rbegin(); it != p.topo.rend(); ++it) {
      const int i = *it;
      double tail = 0;
      for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
        const int j = p.out_dst[k];
        tail = std::max(tail, p.edge_into(j, dev[i], dev[j], p.out_bytes[k]) + rank_[j]);
      }
      rank_[i] = p.cost(i, dev[i]) + tail;
    }
    std::fill(free_.begin(), free_.end(), 0.0);
    ready_.reset(&rank_);
    for (int i = 0; i < p.n; ++i) {
      int internal = 0;
      for (int k = p.in_off[i]; k < p.in_off[i + 1]; ++k) internal += p.in_src[k] >= 0;
      indeg_[i] = internal;
      if (internal == 0) ready_.push(i);
    }
    double makespan = 0;
    while (!ready_.empty()) {
      const int i = ready_.pop();
      const int d = dev[i];
      double start = free_[d];
      for (int k = p.in_off[i]; k < p.in_off[i + 1]; ++k) {
        const int s = p.in_src[k];
        const double arrive = s < 0 ? p.edge_into(i, p.host, d, p.in_bytes[k])
                                    : finish_[s] + p.edge_into(i, dev[s], d, p.in_bytes[k]);
        start = std::max(start, arrive);
      }
      finish_[i] = start + p.cost(i, d);
      free_[d] = finish_[i];
      makespan = std::max(makespan, finish_[i]);
      for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
        if (--indeg_[p.out_dst[k]] == 0) ready_.push(p.out_dst[k]);
      }
    }
    return makespan;
  }

  // The weighted seconds `dev` spends moving tensors between devices (every edge, overlapped or
  // not): the tie-break between assignments of equal makespan.
  double transfer(const std::vector<int>& dev) const {
    const Problem& p = p_;
    double total = 0;
    for (int i = 0; i < p.n; ++i) {
      for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
        const int j = p.out_dst[k];
        total += p.edge_into(j, dev[i], dev[j], p.out_bytes[k]);
      }
    }
    return total;
  }

 private:
  const Problem& p_;
  std::vector<double> rank_, finish_;
  std::vector<int> indeg_;
  std::vector<double> free_;
  ReadyQueue ready_;
};

// ---- Colocation groups ----

struct UnionFind {
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
  std::vector<int> parent;
};

struct Groups {
  int count = 0;
  std::vector<int> of;             // group of each position
  std::vector<int> off, members;   // CSR: members of group g in increasing position
  int size(int g) const { return off[g + 1] - off[g]; }
};

Groups build_groups(UnionFind& uf, int n) {
  Groups gr;
  gr.of.assign(n, -1);
  std::vector<int> root_group(n, -1);
  for (int i = 0; i < n; ++i) {
    int r = uf.find(i);
    if (root_group[r] < 0) root_group[r] = gr.count++;
    gr.of[i] = root_group[r];
  }
  gr.off.assign(gr.count + 1, 0);
  for (int i = 0; i < n; ++i) ++gr.off[gr.of[i] + 1];
  for (int g = 0; g < gr.count; ++g) gr.off[g + 1] += gr.off[g];
  gr.members.resize(n);
  std::vector<int> fill(gr.off.begin(), gr.off.end() - 1);
  for (int i = 0; i < n; ++i) gr.members[fill[gr.of[i]]++] = i;
  return gr;
}

// Sorts by node id (stable) and drops repeated nodes.
void sort_unique_by_id(std::vector<const Node*>& nodes) {
  std::stable_sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
  std::size_t out = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    // Repeats have the same id: look back over the run of equal ids (one node, nearly always).
    bool repeat = false;
    for (std::size_t j = out; j-- > 0 && nodes[j]->id == nodes[i]->id;) {
      if (nodes[j] == nodes[i]) {
        repeat = true;
        break;
      }
    }
    if (!repeat) nodes[out++] = nodes[i];
  }
  nodes.resize(out);
}

std::string device_list(const std::vector<PlacementDevice>& devices) {
  std::string s = "[";
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (d) s += ", ";
    s += devices[d].name;
  }
  return s + "]";
}

// ---- The cost policy ----

// HEFT-like list scheduling (Note [Placement]). `gdev` holds the groups already decided (pinned
// or preferred) and receives the others.
void heft(const Problem& p, const Groups& gr, const std::vector<DeviceBits>& cand, std::vector<int>& gdev) {
  const int n = p.n;
  const int nd = p.num_devices();
  // Candidate-set statistics per group for the mean costs.
  std::vector<int> ncand(gr.count);
  for (int g = 0; g < gr.count; ++g) ncand[g] = gdev[g] >= 0 ? 1 : cand[g].count();
  auto for_cands = [&](int g, auto&& fn) {
    if (gdev[g] >= 0) {
      fn(gdev[g]);
    } else {
      cand[g].for_each(fn);
    }
  };
  auto sum_legs = [&](int g, double b) {
    double s = 0;
    for_cands(g, [&](int d) { s += p.leg(d, b); });
    return s;
  };
  std::vector<double> mean_cost(n), rank(n, 0.0);
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for_cands(gr.of[i], [&](int d) { s += p.cost(i, d); });
    mean_cost[i] = s / ncand[gr.of[i]];
  }
  // Mean transfer over all pairs of candidates: pairs (a, b), a != b, cost leg(a) + leg(b).
  auto mean_edge = [&](int gs, int gd, double b) {
    if (b < 0) return 0.0;
    const double np = ncand[gs], ns = ncand[gd];
    double total = ns * sum_legs(gs, b) + np * sum_legs(gd, b);
    if (gs == gd) {
      total -= 2 * sum_legs(gs, b);
    } else {
      for_cands(gs, [&](int d) {
        bool shared = gdev[gd] >= 0 ? gdev[gd] == d : cand[gd].has(d);
        if (shared) total -= 2 * p.leg(d, b);
      });
    }
    return total / (np * ns);
  };
  for (auto it = p.topo.rbegin(); it != p.topo.rend(); ++it) {
    const int i = *it;
    double tail = 0;
    for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
      const int j = p.out_dst[k];
      tail = std::max(tail, mean_edge(gr.of[i], gr.of[j], p.out_bytes[k]) * p.weight[j] + rank[j]);
    }
    rank[i] = mean_cost[i] + tail;
  }

  std::vector<int> dev(n, -1);
  std::vector<double> finish(n, 0.0), device_free(nd, 0.0);
  std::vector<int> indeg(n, 0);
  ReadyQueue ready;
  ready.reset(&rank);
  for (int i = 0; i < n; ++i) {
    for (int k = p.in_off[i]; k < p.in_off[i + 1]; ++k) indeg[i] += p.in_src[k] >= 0;
    if (indeg[i] == 0) ready.push(i);
  }
  auto ready_time = [&](int i, int d) {
    double t = device_free[d];
    for (int k = p.in_off[i]; k < p.in_off[i + 1]; ++k) {
      const int s = p.in_src[k];
      t = std::max(t, s < 0 ? p.edge_into(i, p.host, d, p.in_bytes[k])
                            : finish[s] + p.edge_into(i, dev[s], d, p.in_bytes[k]));
    }
    return t;
  };
  // The device a consumer is expected on: its group's when decided, else its cheapest candidate.
  auto expected_device = [&](int j) {
    const int g = gr.of[j];
    if (gdev[g] >= 0) return gdev[g];
    int pick = -1;
    double best = 0;
    cand[g].for_each([&](int c) {
      const double t = p.cost(j, c);
      if (pick < 0 || t < best) {
        best = t;
        pick = c;
      }
    });
    return pick;
  };
  while (!ready.empty()) {
    const int i = ready.pop();
    const int g = gr.of[i];
    int d = gdev[g];
    if (d < 0) {
      // A node without data inputs (a variable, a constant) finishes as early anywhere: it looks
      // one edge ahead, to its consumers' expected devices (Note [Placement]).
      bool source = true;
      for (int k = p.in_off[i]; k < p.in_off[i + 1] && source; ++k) source = p.in_bytes[k] < 0;
      double best = 0;
      cand[g].for_each([&](int c) {
        double eft = ready_time(i, c) + p.cost(i, c);
        for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
          if (gr.members[k] != i) eft += p.cost(gr.members[k], c);
        }
        if (source) {
          double ahead = 0;
          for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
            const int j = p.out_dst[k];
            if (p.out_bytes[k] < 0 || gr.of[j] == g) continue;
            ahead = std::max(ahead, p.edge_into(j, c, expected_device(j), p.out_bytes[k]));
          }
          eft += ahead;
        }
        if (d < 0 || eft < best) {
          best = eft;
          d = c;
        }
      });
      gdev[g] = d;
    }
    dev[i] = d;
    finish[i] = ready_time(i, d) + p.cost(i, d);
    device_free[d] = finish[i];
    for (int k = p.out_off[i]; k < p.out_off[i + 1]; ++k) {
      if (--indeg[p.out_dst[k]] == 0) ready.push(p.out_dst[k]);
    }
  }
}

void expand(const Groups& gr, const std::vector<int>& gdev, std::vector<int>& dev) {
  dev.resize(gr.of.size());
  for (std::size_t i = 0; i < gr.of.size(); ++i) dev[i] = gdev[gr.of[i]];
}

// Moves one movable group at a time to another candidate while the makespan drops (or stays and
// less time goes to transfers: a copy that overlaps compute still costs bandwidth every step) and
// `budget` (simulated node visits) lasts.
void improve(const Groups& gr, const std::vector<DeviceBits>& cand, const std::vector<int>& movable,
             Simulator& sim, std::vector<int>& gdev, double& makespan, int64_t& budget) {
  std::vector<int> dev;
  expand(gr, gdev, dev);
  double moved = sim.transfer(dev);
  auto move = [&](int g, int d) {
    gdev[g] = d;
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) dev[gr.members[k]] = d;
  };
  for (int pass = 0; pass < kImprovePasses; ++pass) {
    bool improved = false;
    for (int g : movable) {
      const int current = gdev[g];
      int best_d = current;
      cand[g].for_each([&](int d) {
        if (d == current || budget <= 0) return;
        budget -= 2 * static_cast<int64_t>(dev.size());
        move(g, d);
        const double m = sim.run(dev);
        if (m > makespan * (1 + 1e-12)) return;
        const double t = sim.transfer(dev);
        if (m < makespan * (1 - 1e-12) || t < moved * (1 - 1e-9)) {
          makespan = std::min(makespan, m);
          moved = t;
          best_d = d;
        }
      });
      move(g, best_d);
      improved |= best_d != current;
    }
    if (!improved || budget <= 0) break;
  }
}

// The device of a group that has a choice, by a fixed rule.
int first_host(const std::vector<char>& is_host, const DeviceBits& c) {
  int pick = -1;
  c.for_each([&](int d) {
    if (pick < 0 && is_host[d]) pick = d;
  });
  return pick >= 0 ? pick : c.first();
}

int first_accelerator(const std::vector<PlacementDevice>& devices, const DeviceBits& c) {
  int gpu = -1, accel = -1;
  c.for_each([&](int d) {
    if (gpu < 0 && devices[d].type == "GPU") gpu = d;
    if (accel < 0 && !devices[d].is_host()) accel = d;
  });
  if (gpu >= 0) return gpu;
  return accel >= 0 ? accel : c.first();
}

}  // namespace

// ---- The cost model ----

double output_bytes(const Node& node, int index) {
  if (index < 0 || index >= static_cast<int>(node.output_shapes.size()) ||
      index >= static_cast<int>(node.output_dtypes.size())) {
    return 0;
  }
  return known_elements(node.output_shapes[index]) * static_cast<double>(dtype_size(node.output_dtypes[index]));
}

double op_flops(const Node& node) {
  switch (op_kind(node.type)) {
    case OpKind::kNoData:
    case OpKind::kMove:
      return 0;
    case OpKind::kElementwise:
    case OpKind::kOther:
      return output_elements(node);
    case OpKind::kSqrt:
      return 4 * output_elements(node);
    case OpKind::kTranscendental:
      return 8 * output_elements(node);
    case OpKind::kRandom:
      return 10 * output_elements(node);
    case OpKind::kReduce: {
      if (node.inputs.empty() || node.inputs[0].node == nullptr) return output_elements(node);
      const Endpoint& in = node.inputs[0];
      if (in.index >= static_cast<int>(in.node->output_shapes.size())) return 1;
      return known_elements(in.node->output_shapes[in.index]);
    }
    case OpKind::kMatMul: {
      if (node.output_shapes.empty()) return 0;
      const Shape& out = node.output_shapes[0];
      const double m = dim_or_one(out, 0);
      const double n = dim_or_one(out, 1);
      double k = 1;
      if (!node.inputs.empty() && node.inputs[0].node != nullptr) {
        const Endpoint& a = node.inputs[0];
        if (a.index < static_cast<int>(a.node->output_shapes.size())) {
          k = dim_or_one(a.node->output_shapes[a.index], node.attr_or<bool>("transpose_a", false) ? 0 : 1);
        }
      }
      return 2 * m * n * k;
    }
  }
  return 0;
}

double op_bytes(const Node& node) {
  if (op_kind(node.type) == OpKind::kNoData) return 0;
  double b = 0;
  for (const Endpoint& e : node.inputs) {
    if (e.node != nullptr) b += output_bytes(*e.node, e.index);
  }
  for (int i = 0; i < static_cast<int>(node.output_shapes.size()); ++i) b += output_bytes(node, i);
  return b;
}

double op_seconds(const Node& node, const PlacementDevice& device) {
  return device.cost.kernel_seconds(op_flops(node), op_bytes(node));
}

double transfer_seconds(const PlacementDevice& from, const PlacementDevice& to, double bytes) {
  if (&from == &to || from.name == to.name) return 0;
  const auto b = static_cast<std::size_t>(bytes);
  double t = 0;
  if (!from.is_host()) t += from.cost.transfer_seconds(b);
  if (!to.is_host()) t += to.cost.transfer_seconds(b);
  return t;
}

double simulate_makespan(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                         const std::unordered_map<const Node*, int>& device_of) {
  std::vector<const Node*> work;
  work.reserve(nodes.size());
  for (const Node* n : nodes) {
    if (n != nullptr) work.push_back(n);
  }
  sort_unique_by_id(work);
  int host = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (devices[d].is_host()) {
      host = static_cast<int>(d);
      break;
    }
  }
  NodeIndex index(work);
  Problem p = build_problem(work, index, devices, host, /*external_inputs=*/false, /*weigh_init=*/false);
  std::vector<int> dev(work.size());
  for (std::size_t i = 0; i < work.size(); ++i) {
    auto it = device_of.find(work[i]);
    TESSERA_CHECK(it != device_of.end());
    TESSERA_CHECK(it->second >= 0 && it->second < static_cast<int>(devices.size()));
    dev[i] = it->second;
  }
  Simulator sim(p);
  return sim.run(dev);
}

// ---- The pass ----

StatusOr<Placement> place_nodes(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                                const PlacementOptions& options,
                                const std::unordered_map<const Node*, int>& fixed) {
  const int nd = static_cast<int>(devices.size());
  if (nd == 0) return errors::invalid_argument("placement: no devices to place ops on");
  int host = -1;
  for (int d = 0; d < nd; ++d) {
    if (devices[d].is_host()) {
      host = d;
      break;
    }
  }
  if (host < 0) {
    return errors::invalid_argument("placement: no host (CPU) device among {}", device_list(devices));
  }
  std::vector<DeviceSpec> dev_spec(nd);
  std::vector<char> is_host(nd);
  DeviceBits host_bits(nd, false);
  for (int d = 0; d < nd; ++d) {
    auto s = DeviceSpec::parse(devices[d].name);
    if (!s.ok()) return s.status().with_prefix("placement: device list: ");
    dev_spec[d] = std::move(s).value();
    // A name without a device part (a whole task) takes its type from PlacementDevice::type.
    if (!dev_spec[d].type) dev_spec[d].type = devices[d].type;
    is_host[d] = devices[d].is_host();
    if (is_host[d]) host_bits.set(d);
  }

  // The nodes to place: `nodes` and `fixed`, once each, in id order.
  std::vector<const Node*> work;
  work.reserve(nodes.size() + fixed.size());
  for (const Node* n : nodes) {
    if (n != nullptr) work.push_back(n);
  }
  for (const auto& [n, d] : fixed) {
    if (n == nullptr) continue;
    if (d < 0 || d >= nd) {
      return errors::invalid_argument("placement: {} is fixed on device index {}, but there are {} devices",
                                      n->debug_name(), d, nd);
    }
    work.push_back(n);
  }
  sort_unique_by_id(work);
  const int n = static_cast<int>(work.size());
  Placement out;
  if (n == 0) return out;
  NodeIndex index(work);

  // 1. Requests.
  std::vector<DeviceSpec> req(n);
  for (int i = 0; i < n; ++i) {
    if (work[i]->requested_device.empty()) continue;
    auto s = DeviceSpec::parse(work[i]->requested_device);
    if (!s.ok()) return s.status().with_prefix(work[i]->debug_name() + ": ");
    req[i] = std::move(s).value();
  }
  std::vector<int> fixed_dev(n, -1);
  for (const auto& [node, d] : fixed) {
    int i = index.find(node);
    if (i >= 0) fixed_dev[i] = d;
  }

  // 2. Colocation groups.
  UnionFind uf(n);
  for (int i = 0; i < n; ++i) {
    int r = index.find(work[i]->resource);
    if (r >= 0) uf.unite(i, r);
    for (const Node* c : work[i]->colocate_with) {
      int j = index.find(c);
      if (j >= 0) uf.unite(i, j);
    }
  }
  const Groups gr = build_groups(uf, n);

  // Kernel availability per node, cached per op type for the registry's answer.
  std::unordered_map<std::string, DeviceBits> kernel_cache;
  auto kernels_of = [&](const Node& node) -> DeviceBits {
    if (options.has_kernel) {
      DeviceBits b(nd, false);
      for (int d = 0; d < nd; ++d) {
        if (options.has_kernel(node, devices[d])) b.set(d);
      }
      return b;
    }
    auto it = kernel_cache.find(node.type);
    if (it != kernel_cache.end()) return it->second;
    DeviceBits b(nd, false);
    for (int d = 0; d < nd; ++d) {
      if (OpRegistry::global().has_kernel(node.type, devices[d].type)) b.set(d);
    }
    return kernel_cache.emplace(node.type, b).first->second;
  };

  // 3. Candidates per group.
  const DeviceBits all_bits(nd, true);
  std::vector<DeviceBits> cand(gr.count);
  std::vector<char> group_pinned(gr.count, 0);  // a hard rule decided the device
  std::vector<int> gdev(gr.count, -1);
  std::vector<char> has_placeholder(gr.count, 0), tiny(gr.count, 1);
  for (int g = 0; g < gr.count; ++g) {
    DeviceSpec merged;
    int fixed_member = -1;
    bool host_only = false;
    DeviceBits kernels = all_bits;
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
      const int i = gr.members[k];
      const Node& node = *work[i];
      if (!req[i].empty()) {
        if (!merged.compatible_with(req[i])) {
          // Name the earlier member whose request this one contradicts.
          for (int k2 = gr.off[g]; k2 < k; ++k2) {
            const int j = gr.members[k2];
            if (!req[j].empty() && !req[j].compatible_with(req[i])) {
              return errors::invalid_argument("cannot colocate {} requested '{}' with {} requested '{}'",
                                              node.debug_name(), node.requested_device,
                                              work[j]->debug_name(), work[j]->requested_device);
            }
          }
          return errors::invalid_argument("cannot colocate {} requested '{}' with the requests of its group ('{}')",
                                          node.debug_name(), node.requested_device, merged.to_string());
        }
        merged = merged.merged_with(req[i]);
      }
      if (fixed_dev[i] >= 0) {
        if (fixed_member >= 0 && fixed_dev[fixed_member] != fixed_dev[i]) {
          return errors::invalid_argument("cannot colocate {} placed on {} with {} placed on {}", node.debug_name(),
                                          devices[fixed_dev[i]].name, work[fixed_member]->debug_name(),
                                          devices[fixed_dev[fixed_member]].name);
        }
        fixed_member = i;
      }
      if (node.def != nullptr && node.def->host_only) host_only = true;
      if (node.type == "Placeholder") has_placeholder[g] = 1;
      if (tiny[g] && !is_tiny(node, options.tiny_op_elements)) tiny[g] = 0;
      kernels &= kernels_of(node);
    }
    DeviceBits allowed = kernels;
    if (host_only) allowed &= host_bits;
    if (fixed_member >= 0) {
      DeviceBits f(nd, false);
      f.set(fixed_dev[fixed_member]);
      allowed &= f;
    }
    // kCpuOnly: a host device whenever one can run the group (Note [Placement]).
    const bool host_possible = !(allowed & host_bits).empty();
    if (options.policy == PlacementPolicy::kCpuOnly && fixed_member < 0 && host_possible) allowed &= host_bits;

    auto matching = [&](const DeviceSpec& spec) {
      DeviceBits b(nd, false);
      for (int d = 0; d < nd; ++d) {
        if (spec.matches(dev_spec[d])) b.set(d);
      }
      return b;
    };
    DeviceBits c = merged.empty() ? allowed : (allowed & matching(merged));
    const int first = gr.members[gr.off[g]];
    // The member to name in errors: the first one with a request, else the first; the request
    // shown is the group's merged one when several members made one.
    int culprit = first;
    int requesters = 0;
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
      if (req[gr.members[k]].empty()) continue;
      if (requesters++ == 0) culprit = gr.members[k];
    }
    const std::string requested = requesters > 1 ? merged.to_string() : work[culprit]->requested_device;
    auto why = [&]() {
      // What is missing, on the devices the request matches (all of them without a request).
      DeviceBits m = merged.empty() ? all_bits : matching(merged);
      if (m.empty()) return std::string("no device matches the request");
      std::vector<std::string> reasons;
      for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
        const Node& node = *work[gr.members[k]];
        std::vector<std::string> missing;
        m.for_each([&](int d) {
          const std::string& t = devices[d].type;
          if (!kernels_of(node).has(d) && std::find(missing.begin(), missing.end(), t) == missing.end()) {
            missing.push_back(t);
          }
        });
        for (const auto& t : missing) reasons.push_back(fmt::format("no {} kernel for {}", t, node.debug_name()));
        if (node.def != nullptr && node.def->host_only && (m & host_bits).empty()) {
          reasons.push_back(fmt::format("{} runs only on host devices", node.debug_name()));
        }
      }
      if (fixed_member >= 0 && !m.has(fixed_dev[fixed_member])) {
        reasons.push_back(fmt::format("{} was placed on {} before", work[fixed_member]->debug_name(),
                                      devices[fixed_dev[fixed_member]].name));
      }
      if (options.policy == PlacementPolicy::kCpuOnly && host_possible && (m & host_bits).empty()) {
        reasons.push_back("policy cpu_only runs ops on host devices only");
      }
      std::string s;
      for (const auto& r : reasons) s += (s.empty() ? "" : "; ") + r;
      return s.empty() ? std::string("no device satisfies every constraint of the colocation group") : s;
    };
    if (c.empty()) {
      if (!merged.empty() && !options.allow_soft_placement) {
        return errors::invalid_argument("{}: cannot assign a device for the op: requested '{}', available devices: {} ({})",
                                        work[culprit]->debug_name(), requested, device_list(devices), why());
      }
      if (!merged.empty()) {
        // Soft placement: keep where the request points (job, replica, task) if possible.
        DeviceSpec relaxed = merged;
        relaxed.type.reset();
        relaxed.id.reset();
        c = relaxed.empty() ? allowed : (allowed & matching(relaxed));
        if (c.empty()) c = allowed;
      }
      if (c.empty()) {
        return errors::invalid_argument("{}: no device can run the op: {}; available devices: {}",
                                        work[culprit]->debug_name(), why(), device_list(devices));
      }
    }
    cand[g] = std::move(c);
    if (fixed_member >= 0 || cand[g].count() == 1) {
      gdev[g] = cand[g].first();
      group_pinned[g] = 1;
    } else if (has_placeholder[g] && !(cand[g] & host_bits).empty()) {
      gdev[g] = first_host(is_host, cand[g]);
      group_pinned[g] = 1;
    }
  }

  // 4. The policy.
  std::vector<int> dev;
  const Problem p = build_problem(work, index, devices, host, /*external_inputs=*/true, /*weigh_init=*/true);
  Simulator sim(p);
  double makespan = 0;
  switch (options.policy) {
    case PlacementPolicy::kCpuOnly:
      for (int g = 0; g < gr.count; ++g) {
        if (gdev[g] < 0) gdev[g] = first_host(is_host, cand[g]);
      }
      expand(gr, gdev, dev);
      makespan = sim.run(dev);
      break;
    case PlacementPolicy::kGpuFirst:
      for (int g = 0; g < gr.count; ++g) {
        if (gdev[g] < 0) gdev[g] = first_accelerator(devices, cand[g]);
      }
      expand(gr, gdev, dev);
      makespan = sim.run(dev);
      break;
    case PlacementPolicy::kCost: {
      std::vector<int> movable;
      for (int g = 0; g < gr.count; ++g) {
        if (!group_pinned[g]) movable.push_back(g);
      }
      std::vector<int> heft_dev = gdev;
      for (int g : movable) {
        if (tiny[g] && !(cand[g] & host_bits).empty()) heft_dev[g] = first_host(is_host, cand[g]);
      }
      heft(p, gr, cand, heft_dev);
      std::vector<int> host_dev = gdev, accel_dev = gdev;
      for (int g : movable) {
        host_dev[g] = first_host(is_host, cand[g]);
        accel_dev[g] = first_accelerator(devices, cand[g]);
      }
      // The best of the three (ties keep the earlier one), then the greedy passes.
      std::vector<std::vector<int>*> starts = {&heft_dev, &host_dev, &accel_dev};
      std::vector<double> spans;
      for (auto* s : starts) {
        expand(gr, *s, dev);
        spans.push_back(sim.run(dev));
      }
      int best = 0;
      for (int k = 1; k < 3; ++k) {
        if (spans[k] < spans[best]) best = k;
      }
      int64_t budget = kImproveBudget;
      if (n <= kImproveAllStartsMaxNodes && !movable.empty()) {
        // Small graphs: improve every start and keep the best result.
        for (int k = 0; k < 3; ++k) improve(gr, cand, movable, sim, *starts[k], spans[k], budget);
        // The shortest makespan; among equal ones, the least transfer (as in improve()).
        std::vector<double> moved;
        for (auto* st : starts) {
          expand(gr, *st, dev);
          moved.push_back(sim.transfer(dev));
        }
        best = 0;
        for (int k = 1; k < 3; ++k) {
          if (spans[k] < spans[best] * (1 - 1e-12) ||
              (spans[k] <= spans[best] * (1 + 1e-12) && moved[k] < moved[best] * (1 - 1e-9))) {
            best = k;
          }
        }
      } else if (n <= kImproveMaxNodes && !movable.empty()) {
        improve(gr, cand, movable, sim, *starts[best], spans[best], budget);
      }
      gdev = *starts[best];
      makespan = spans[best];
      expand(gr, gdev, dev);
      break;
    }
  }

  // 5. The answer.
  out.device_of.reserve(n);
  out.estimated_seconds.reserve(n);
  for (int i = 0; i < n; ++i) {
    out.device_of.emplace(work[i], dev[i]);
    out.estimated_seconds.emplace(work[i], p.kernel_seconds(i, dev[i]));
    // Fixed nodes were reported when they were placed.
    if (!req[i].empty() && fixed_dev[i] < 0 && !req[i].matches(dev_spec[dev[i]])) {
      out.soft_placements.push_back(fmt::format("{}: requested '{}', placed on {}", work[i]->debug_name(),
                                                work[i]->requested_device, devices[dev[i]].name));
    }
  }
  out.estimated_makespan = makespan;
  return out;
}

std::string placement_table(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                            const Placement& placement) {
  std::vector<const Node*> sorted;
  for (const Node* n : nodes) {
    if (n != nullptr) sorted.push_back(n);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
  std::size_t width = 0;
  for (const Node* n : sorted) width = std::max(width, n->debug_name().size());
  std::string s;
  for (const Node* n : sorted) {
    auto it = placement.device_of.find(n);
    std::string device = "(unplaced)";
    if (it != placement.device_of.end() && it->second >= 0 && it->second < static_cast<int>(devices.size())) {
      device = devices[it->second].name;
    }
    auto est = placement.estimated_seconds.find(n);
    const double us = est == placement.estimated_seconds.end() ? 0.0 : est->second * 1e6;
    s += fmt::format("{:<{}} -> {}   est {:.1f} us\n", n->debug_name(), width, device, us);
  }
  return s;
}

}  // namespace tessera::internal
