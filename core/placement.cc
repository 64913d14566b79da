// The placement pass: constraints, colocation groups, soft placement and the policies. See Note
// [Placement]. The cost model is in cost_model.cc, the cost policy's scheduling in
// placement_schedule.cc, placement_table in placement_table.cc.
#include "core/placement.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/logging.h"
#include "core/op_registry.h"
#include "core/placement_internal.h"

namespace tessera::internal {

PlacementPolicy policy_of(tessera::PlacementPolicy policy) {
  switch (policy) {
    case tessera::PlacementPolicy::cost: return PlacementPolicy::kCost;
    case tessera::PlacementPolicy::gpu_first: return PlacementPolicy::kGpuFirst;
    case tessera::PlacementPolicy::cpu_only: return PlacementPolicy::kCpuOnly;
  }
  return PlacementPolicy::kCost;
}

// Note [Placement]
// ~~~~~~~~~~~~~~~~
// place_nodes assigns every node to one device in three steps.
//
// 1. Hard constraints. Requests are parsed (a malformed one is an error naming the op). Nodes that
//    share a device form colocation groups (union-find): an op with its `resource` (Assign/Apply*
//    with their VariableV2, queue ops with their queue) and with its `colocate_with` nodes. A
//    group's requests are merged, the resource users' last: one of those that contradicts the
//    group is dropped and logged once (TF1's reference-connection rule: an update built under a
//    worker's device scope follows its ps variable); any other two that set a field differently
//    (CPU:0 vs SIM:0, /job:a vs /job:b) are an InvalidArgumentError naming both ops and specs,
//    with or without soft placement. A group's candidates: the devices its merged spec matches
//    with a kernel for every op of the group; only hosts when an op is host_only (queues) or has a
//    string input or output; only the fixed device when a member was placed before (`fixed`). A
//    resource or colocate_with target outside `nodes` and `fixed` constrains nothing.
// 2. Soft placement. A group without candidates loses its request in two steps, as TensorFlow's
//    does: first the device type and id (keeping job, replica and task), then everything;
//    kernels, host-only ops and fixed devices still constrain it. Each op whose request its final
//    device does not satisfy is reported in Placement::soft_placements. Without soft placement
//    (or when even the relaxed group has no device) it is an InvalidArgumentError that names the
//    op, its request, every device and what is missing (a matching device, a kernel, a host).
// 3. The policy places the groups that still have a choice. A group with a Placeholder goes to
//    its first host candidate (the default host device unless the request says otherwise)
//    whenever it has one, under every policy: feeds arrive in host memory.
//    * kCpuOnly: the first host candidate. An explicit request for an accelerator counts as
//      unsatisfiable (step 2) when a host device could run the group; a group no host device
//      can run goes to its first candidate.
//    * kGpuFirst: TensorFlow's rule, over every GPU: a GPU candidate, else another accelerator,
//      else the host; with several GPUs of one task, the one HEFT says finishes the group first,
//      so independent branches spread over them (TensorFlow puts all on GPU:0).
//    * kCost: a cost model, HEFT-like list scheduling, a safety net and a greedy search: Note
//      [Cost policy] in placement_schedule.cc.

namespace placement_detail {

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

}  // namespace placement_detail

using namespace placement_detail;

namespace {

// String tensors live in host memory only (DType::String): an op that reads or makes one runs on
// a host device, whatever it requested (a soft-placement decision, or an error without it).
bool has_string_tensor(const Node& n) {
  for (DType d : n.output_dtypes) {
    if (d == DType::String) return true;
  }
  for (const Endpoint& e : n.inputs) {
    if (e.node != nullptr && e.index < static_cast<int>(e.node->output_dtypes.size()) &&
        e.node->output_dtypes[e.index] == DType::String) {
      return true;
    }
  }
  return false;
}

// A loop's body runs on its host (Note [While loops] in core/while_ops.cc).
bool needs_host(const Node& n) {
  return (n.def != nullptr && n.def->host_only) || n.while_frame != nullptr || has_string_tensor(n);
}

bool small_and_known(const Shape& s, int64_t limit) {
  return s.fully_defined() && s.num_elements() <= limit;
}

// Every input and output fully known and at most `limit` elements (Note [Cost policy]).
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

// Logs (once per op) that `node`'s request gives way to its resource's group (Note [Placement]).
void log_ignored_request(const Node& node, const DeviceSpec& group) {
  if (!log_enabled(LogLevel::kInfo)) return;
  // Ops already reported, by node and name (a node's address may be reused by a later graph).
  static std::mutex mu;
  static std::unordered_map<const Node*, std::string> logged;
  {
    std::lock_guard<std::mutex> l(mu);
    auto [it, fresh] = logged.try_emplace(&node, node.name);
    if (!fresh && it->second == node.name) return;
    if (logged.size() > 100000) logged.clear();  // bounded; at worst an op is reported again
    logged[&node] = node.name;
  }
  log_format(LogLevel::kInfo,
             "ignoring device specification '{}' for {} because its input {} is a reference connection "
             "whose group requests '{}'",
             node.requested_device, node.debug_name(), node.resource->debug_name(), group.to_string());
}

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

std::string device_list(const std::vector<PlacementDevice>& devices) {
  std::string s = "[";
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (d) s += ", ";
    s += devices[d].name;
  }
  return s + "]";
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

// The devices kGpuFirst chooses among for a group: the accelerators of first_accelerator's kind
// (GPUs, else other accelerators) in its task, so parallel work spreads over every GPU of a
// machine; the first candidate alone when no accelerator can run the group.
DeviceBits preferred_accelerators(const std::vector<PlacementDevice>& devices, const DeviceBits& c) {
  const int first = first_accelerator(devices, c);
  DeviceBits out(static_cast<int>(devices.size()), false);
  if (devices[first].is_host()) {
    out.set(first);
    return out;
  }
  const std::string_view task = task_of(devices[first].name);
  c.for_each([&](int d) {
    if (devices[d].type == devices[first].type && task_of(devices[d].name) == task) out.set(d);
  });
  return out;
}

// kGpuFirst's assignment: each undecided group on one of its preferred accelerators, by HEFT's
// earliest finish among them (Note [Cost policy]), so independent branches spread over the GPUs
// and a chain stays on one.
void spread_over_accelerators(const Problem& p, const Groups& gr, const std::vector<PlacementDevice>& devices,
                              const std::vector<DeviceBits>& cand, std::vector<int>& gdev) {
  std::vector<DeviceBits> preferred(cand.size());
  for (std::size_t g = 0; g < cand.size(); ++g) preferred[g] = preferred_accelerators(devices, cand[g]);
  heft(p, gr, preferred, gdev);
}

}  // namespace

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

  // Kernel availability per node, cached for the registry's answer per op type and dtype of output
  // 0, which a kernel may constrain (KernelDTypes in core/op_registry.h).
  struct KernelKey {
    std::string_view type;  // the node's: nodes outlive placement
    int dtype;              // -1: no outputs
    bool operator==(const KernelKey&) const = default;
  };
  struct KernelKeyHash {
    std::size_t operator()(const KernelKey& k) const {
      return std::hash<std::string_view>{}(k.type) * 31 + static_cast<std::size_t>(k.dtype + 1);
    }
  };
  std::unordered_map<KernelKey, DeviceBits, KernelKeyHash> kernel_cache;
  auto kernels_of = [&](const Node& node) -> DeviceBits {
    if (options.has_kernel) {
      DeviceBits b(nd, false);
      for (int d = 0; d < nd; ++d) {
        if (options.has_kernel(node, devices[d])) b.set(d);
      }
      return b;
    }
    const KernelKey key{node.type, node.output_dtypes.empty() ? -1 : static_cast<int>(node.output_dtypes[0])};
    auto it = kernel_cache.find(key);
    if (it != kernel_cache.end()) return it->second;
    DeviceBits b(nd, false);
    for (int d = 0; d < nd; ++d) {
      if (OpRegistry::global().has_kernel(node, devices[d].type)) b.set(d);
    }
    return kernel_cache.emplace(key, b).first->second;
  };

  // 3. Candidates per group.
  const DeviceBits all_bits(nd, true);
  std::vector<DeviceBits> cand(gr.count);
  std::vector<char> group_pinned(gr.count, 0);  // a hard rule decided the device
  std::vector<int> gdev(gr.count, -1);
  std::vector<char> has_placeholder(gr.count, 0), tiny(gr.count, 1);
  // The members that use a resource of the group (an update of a variable, a queue op): their
  // requests yield to the group's (Note [Placement], the resource rule).
  std::vector<char> uses_resource(n, 0);
  for (int i = 0; i < n; ++i) uses_resource[i] = index.find(work[i]->resource) >= 0;
  for (int g = 0; g < gr.count; ++g) {
    DeviceSpec merged;
    int fixed_member = -1;
    bool host_only = false;
    DeviceBits kernels = all_bits;
    // The requests: the resources' and the colocate_with members' first (a conflict is an
    // error), then the resource users', each dropped when it contradicts them.
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
      const int i = gr.members[k];
      const Node& node = *work[i];
      if (req[i].empty() || uses_resource[i]) continue;
      if (!merged.compatible_with(req[i])) {
        // Name the earlier member whose request this one contradicts.
        for (int k2 = gr.off[g]; k2 < k; ++k2) {
          const int j = gr.members[k2];
          if (!req[j].empty() && !uses_resource[j] && !req[j].compatible_with(req[i])) {
            return errors::invalid_argument("cannot colocate {} requested '{}' with {} requested '{}'",
                                            node.debug_name(), node.requested_device, work[j]->debug_name(),
                                            work[j]->requested_device);
          }
        }
        return errors::invalid_argument("cannot colocate {} requested '{}' with the requests of its group ('{}')",
                                        node.debug_name(), node.requested_device, merged.to_string());
      }
      merged = merged.merged_with(req[i]);
    }
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
      const int i = gr.members[k];
      if (req[i].empty() || !uses_resource[i]) continue;
      if (merged.compatible_with(req[i])) {
        merged = merged.merged_with(req[i]);
      } else {
        log_ignored_request(*work[i], merged);
        req[i] = DeviceSpec{};
      }
    }
    for (int k = gr.off[g]; k < gr.off[g + 1]; ++k) {
      const int i = gr.members[k];
      const Node& node = *work[i];
      if (fixed_dev[i] >= 0) {
        if (fixed_member >= 0 && fixed_dev[fixed_member] != fixed_dev[i]) {
          return errors::invalid_argument("cannot colocate {} placed on {} with {} placed on {}", node.debug_name(),
                                          devices[fixed_dev[i]].name, work[fixed_member]->debug_name(),
                                          devices[fixed_dev[fixed_member]].name);
        }
        fixed_member = i;
      }
      if (needs_host(node)) host_only = true;
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
        if (needs_host(node) && (m & host_bits).empty()) {
          reasons.push_back(fmt::format("{} runs only on host devices{}", node.debug_name(),
                                        has_string_tensor(node) ? " (it has a string input or output)" : ""));
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
  const Problem p =
      build_problem(work, index, devices, host, /*external_inputs=*/true, /*weigh_init=*/true, options.network);
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
      spread_over_accelerators(p, gr, devices, cand, gdev);
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
      for (int g : movable) host_dev[g] = first_host(is_host, cand[g]);
      spread_over_accelerators(p, gr, devices, cand, accel_dev);  // the kGpuFirst assignment
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

}  // namespace tessera::internal
