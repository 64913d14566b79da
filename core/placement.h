// The placement pass: assigns every op of a graph to one device.
//
//   std::vector<PlacementDevice> devices = {cpu_info, sim0_info};
//   PlacementOptions opts;                      // policy kCost, soft placement on
//   StatusOr<Placement> p = place_nodes(graph.nodes(), devices, opts);
//   int d = p.value().device_of.at(node);       // index into `devices`
//
// Order of decisions (Note [Placement] in placement.cc; the cost policy: Note [Cost policy] in
// placement_schedule.cc):
//   1. hard constraints: explicit requests (full or partial specs), colocation groups (an op
//      with the variable or queue it uses, `colocate_with` scopes), kernel availability, host-only
//      ops (queues) on a host device. Incompatible requests inside one group raise
//      InvalidArgumentError naming both ops, except that an op's request that contradicts the
//      resource it uses (a variable's update under another device scope) is dropped and logged.
//   2. soft placement: a request no device satisfies falls back to a device that can run the
//      group (and is reported in Placement::soft_placements); without soft placement it raises
//      InvalidArgumentError listing the available devices.
//   3. the policy places what is left: kCost by a cost model and HEFT-like list scheduling,
//      kGpuFirst on an accelerator whenever one has a kernel (TensorFlow's rule), kCpuOnly on
//      the host.
//
// Pure function of its inputs: no device objects, no I/O but that log line, so the cluster master
// can place over remote tasks' devices with it too. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/device_name.h"
#include "core/node.h"
#include "core/status.h"
#include "tessera/session.h"

namespace tessera::internal {

enum class PlacementPolicy { kCost, kGpuFirst, kCpuOnly };
// The public SessionOptions::placement_policy as placement knows it.
PlacementPolicy policy_of(tessera::PlacementPolicy policy);

// What placement knows of a device.
struct PlacementDevice {
  std::string name;  // full name: "/job:localhost/replica:0/task:0/device:SIM:0"
  std::string type;  // "CPU", "SIM", "GPU"
  DeviceCostProfile cost;
  // True for devices whose memory is host memory and that run host-only ops (type CPU).
  bool is_host() const { return type == "CPU"; }
};

// What moving a tensor between two tasks (processes, usually machines) costs, over and above the
// accelerators' own legs to and from host memory: latency + bytes / bandwidth per transfer.
// Defaults: a 10 Gb/s Ethernet link (1.25e9 bytes/s) and 50 us per transfer (a loopback or
// datacenter round trip through the transport, roughly); no calibration measures the network yet.
struct NetworkCostProfile {
  double bandwidth = 1.25e9;      // bytes/s
  double latency_seconds = 50e-6;
  // 0 bandwidth: no charge per byte (and both 0: tasks cost nothing more than devices of one task).
  double seconds(double bytes) const { return latency_seconds + (bandwidth > 0 ? bytes / bandwidth : 0.0); }
};
// The defaults above, with TESSERA_NETWORK_BANDWIDTH (bytes/s) and TESSERA_NETWORK_LATENCY (seconds)
// overriding them (a bad value is reported once and ignored). Read once; thread-safe.
NetworkCostProfile default_network_cost();
// "/job:worker/replica:0/task:1" of a full device name: devices with the same prefix share a task.
std::string_view task_of(std::string_view device_name);

struct PlacementOptions {
  PlacementPolicy policy = PlacementPolicy::kCost;
  bool allow_soft_placement = true;
  // Whether `node` has a kernel for device `d`. Default (empty): OpRegistry::global().has_kernel.
  std::function<bool(const Node& node, const PlacementDevice& d)> has_kernel;
  // Ops whose inputs and outputs are all fully known and have at most this many elements start on
  // a host device unless constrained (kCost only; the greedy passes may still move them).
  int64_t tiny_op_elements = 64;
  // What a tensor costs between devices of different tasks (kCost; Note [Cost policy]).
  NetworkCostProfile network = default_network_cost();
};

struct Placement {
  // Every node of the input (and every node of `fixed`) -> index into the devices.
  std::unordered_map<const Node*, int> device_of;
  // The cost model's estimate of each placed node's run time on its device, in seconds.
  std::unordered_map<const Node*, double> estimated_seconds;
  // One line per op whose request could not be honoured: "op (Type): requested '...', placed on ...".
  std::vector<std::string> soft_placements;
  // The cost model's makespan of the chosen placement, in seconds (simulated list schedule), with
  // variable initialization discounted as running once (Note [Init-only weighting] in
  // placement_schedule.cc); without initializers the same model as simulate_makespan's.
  double estimated_makespan = 0;
};

// Places `nodes` on `devices` (which must include at least one host device; the first host
// device is the default). `fixed` holds assignments made earlier (the graph grew): those nodes
// keep their device and constrain their groups. Inputs of `nodes` outside `nodes` and `fixed` are
// treated as living on the default host device.
StatusOr<Placement> place_nodes(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                                const PlacementOptions& options,
                                const std::unordered_map<const Node*, int>& fixed = {});

// ---- The cost model (exposed for tests and benchmarks) ----

// Arithmetic operations of one run of `node`, from its inferred shapes (unknown dimensions count
// as 1). MatMul 2*m*n*k; elementwise ops one per output element (Sqrt 4, Exp/Log/Tanh/Sigmoid 8);
// reductions one per input element; random ops 10 per element; 0 for copies (Identity, Cast,
// Assign, enqueue/dequeue) and for ops that move no data (Const, Placeholder, NoOp, VariableV2,
// FIFOQueue, QueueClose/Size/IsClosed).
double op_flops(const Node& node);
// Bytes `node` reads and writes in one run (inputs plus outputs); 0 for ops that move no data.
double op_bytes(const Node& node);
// Bytes of output `index` of `node` (unknown dimensions count as 1).
double output_bytes(const Node& node, int index);
// Seconds `node` takes on `device`.
double op_seconds(const Node& node, const PlacementDevice& device);
// Seconds moving `bytes` from device `from` to device `to` (0 when they are the same device;
// through host memory between two accelerators; plus `network` between devices of two tasks).
double transfer_seconds(const PlacementDevice& from, const PlacementDevice& to, double bytes,
                        const NetworkCostProfile& network = default_network_cost());

// The simulated makespan of a complete assignment, with the list schedule placement uses: nodes
// in decreasing upward rank, each starting when its device is free and its inputs have arrived.
// `device_of` must cover every node of `nodes`; predecessors outside `nodes` are ignored. Every node
// counts in full, variable initializers included (place_nodes discounts those).
double simulate_makespan(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                         const std::unordered_map<const Node*, int>& device_of,
                         const NetworkCostProfile& network = default_network_cost());

// One line per node: "name (Type) -> device   est 12.3 us", in node id order.
std::string placement_table(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                            const Placement& placement);

}  // namespace tessera::internal
