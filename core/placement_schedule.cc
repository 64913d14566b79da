// The placement pass's scheduling: the problem (costs and edges by position), the makespan
// simulator, HEFT-like list scheduling and the greedy search, and simulate_makespan. See Note
// [Cost policy], Note [Init-only weighting] and Note [Makespan model].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/placement.h"
#include "core/placement_internal.h"

namespace tessera::internal {
namespace placement_detail {

// Note [Init-only weighting]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
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

namespace {

// Node costs are tabulated up to this many (node, device) pairs (16 MiB).
constexpr std::size_t kCostTableMaxEntries = std::size_t{2} << 20;
// Initialization runs once, a step runs many times: the compute of init-only nodes, and the
// transfers into them, count this much of their cost inside place_nodes (Note [Init-only
// weighting]).
constexpr double kInitOnlyWeight = 1e-3;
// The attr Variable's constructor sets on the Assign that initializes the variable
// (core/variable_ops.cc).
constexpr std::string_view kInitializerAttr = "_initializer";

// Whether `node` is the Assign a Variable's constructor made to initialize it.
bool is_variable_initializer(const Node& node) {
  auto it = node.attrs.find(std::string(kInitializerAttr));
  if (it == node.attrs.end()) return false;
  const bool* b = std::get_if<bool>(&it->second);
  return b != nullptr && *b;
}

}  // namespace

Problem build_problem(const std::vector<const Node*>& work, const NodeIndex& index,
                      const std::vector<PlacementDevice>& devices, int host, bool external_inputs,
                      bool weigh_init, const NetworkCostProfile& network) {
  Problem p;
  p.devices = &devices;
  p.host = host;
  p.n = static_cast<int>(work.size());
  p.is_host.resize(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) p.is_host[d] = devices[d].is_host();
  {
    std::vector<std::string_view> tasks;
    p.task.resize(devices.size());
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const std::string_view t = task_of(devices[d].name);
      auto it = std::find(tasks.begin(), tasks.end(), t);
      p.task[d] = static_cast<int>(it - tasks.begin());
      if (it == tasks.end()) tasks.push_back(t);
    }
    p.num_tasks = std::max<int>(1, static_cast<int>(tasks.size()));
    p.network = network;
  }
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

// Note [Makespan model]
// ~~~~~~~~~~~~~~~~~~~~~
// The cost model's makespan (simulate_makespan) is a list schedule: each device runs one op at a
// time; ops go in decreasing upward rank computed with their assigned devices' costs (ties by
// node id), each starting when its device is free and its inputs have arrived. Transfers overlap
// everything (no link contention), control edges cost nothing, and results stay where their op ran
// (fetching them to the client is not charged). Inside place_nodes, inputs from
// nodes outside `nodes` and `fixed` are host-resident at time 0. Everything is deterministic:
// nodes are handled in id order and ties go to the lower device index.

double Simulator::run(const std::vector<int>& dev) {
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

double Simulator::transfer(const std::vector<int>& dev) const {
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

// ---- The cost policy ----

// Note [Cost policy]
// ~~~~~~~~~~~~~~~~~~
// kCost, step 3 of Note [Placement]. Groups of tiny ops (every input and output fully known and
// at most tiny_op_elements elements) start on a host candidate: launching them on an accelerator
// costs more than running them. The rest go through HEFT-like list scheduling (heft): an op costs
// kernel_seconds(op_flops, op_bytes) on a device, an edge the transfer of its tensor (nothing on
// one device; host <-> accelerator the accelerator's transfer_seconds; accelerator <->
// accelerator both legs, through host memory; between two tasks also the network, latency +
// bytes / bandwidth: PlacementOptions::network, 10 Gb/s and 50 us unless TESSERA_NETWORK_* say
// otherwise). Upward ranks use the mean cost over a group's candidates (the network's share by
// the pairs of candidates in two tasks); in decreasing rank each op takes the candidate with the
// earliest finish, and the first op of a group to be scheduled decides for the whole group (the
// cost of the group's other ops on each device is added). An op without data inputs (a VariableV2, a
// Const) finishes about as early anywhere, so when it decides it also looks one edge ahead: each
// candidate's finish time gets the longest transfer of its outputs to its consumers' expected
// devices (the consumer group's device when decided, else the consumer's cheapest candidate),
// and a variable goes where its readers are headed even in graphs too big for the greedy passes.
//
// Then a safety net (in place_nodes): the all-host and the accelerator-first assignments (the
// kCpuOnly and kGpuFirst rules, under the same constraints and requests) are simulated too and the
// best of the three is kept, so the cost policy is never worse than either baseline under its own
// model. For graphs of up to kImproveMaxNodes ops a bounded greedy search (improve) then moves one
// group at a time to another candidate while the simulated makespan drops (at most kImprovePasses
// passes and kImproveBudget simulated node visits; from all three starting points for graphs of
// up to kImproveAllStartsMaxNodes ops, else from the best). The tiny-op start is a preference the
// search may undo; the Placeholder rule and the constraints are not.

// HEFT-like list scheduling (Note [Cost policy]).
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
  // With several tasks: how many candidates each group has in each task, for the network's share
  // of the mean transfer (the pairs of candidates in two different tasks).
  std::vector<std::vector<int>> in_task;
  if (p.num_tasks > 1) {
    in_task.assign(gr.count, std::vector<int>(p.num_tasks, 0));
    for (int g = 0; g < gr.count; ++g) for_cands(g, [&](int d) { ++in_task[g][p.task[d]]; });
  }
  // Mean transfer over all pairs of candidates: pairs (a, b), a != b, cost leg(a) + leg(b), plus
  // the network's charge when a and b belong to different tasks.
  auto mean_edge = [&](int gs, int gd, double b) {
    if (b < 0) return 0.0;
    const double np = ncand[gs], ns = ncand[gd];
    double network = 0;
    if (!in_task.empty()) {
      double same_task = 0;
      for (int t = 0; t < p.num_tasks; ++t) same_task += static_cast<double>(in_task[gs][t]) * in_task[gd][t];
      network = p.network.seconds(b) * (np * ns - same_task);
    }
    double total = ns * sum_legs(gs, b) + np * sum_legs(gd, b);
    if (gs == gd) {
      total -= 2 * sum_legs(gs, b);
    } else {
      for_cands(gs, [&](int d) {
        bool shared = gdev[gd] >= 0 ? gdev[gd] == d : cand[gd].has(d);
        if (shared) total -= 2 * p.leg(d, b);
      });
    }
    return (total + network) / (np * ns);
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
      // one edge ahead, to its consumers' expected devices (Note [Cost policy]).
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

}  // namespace placement_detail

using namespace placement_detail;

double simulate_makespan(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                         const std::unordered_map<const Node*, int>& device_of, const NetworkCostProfile& network) {
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
  Problem p = build_problem(work, index, devices, host, /*external_inputs=*/false, /*weigh_init=*/false, network);
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

}  // namespace tessera::internal
