// The one graph partitioner, for in-process sessions and cluster masters alike: splits the nodes a
// step needs, each placed on a device named in full (/job:J/replica:0/task:T/device:TYPE:N), into
// partitions, and joins them with one _Send/_Recv pair per tensor (or control edge) per destination
// partition. An in-process session partitions by device; a master by task (each task's worker
// then partitions its share by device, with this same code). See Note [Graph partition].
//
//   PartitionOptions opts;
//   opts.device_of = [&](const Node& n) { return placement.at(&n); };
//   opts.partition_of = [](const std::string& device) { return device; };  // one per device
//   opts.client_partition = host_device;           // feeds and fetches live there
//   auto step = partition_step(graph, feeds, fetches, targets, opts);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/node.h"
#include "core/status.h"

namespace tessera::internal {

struct PartitionOptions {
  // The full name of the device `node` is placed on.
  std::function<std::string(const Node& node)> device_of;
  // The partition of a device: the device itself, or its task ("/job:J/replica:0/task:T").
  std::function<std::string(const std::string& device)> partition_of;
  // The device a partition's transfers are named by (the _Send's send_device, the _Recv's
  // recv_device): the partition itself by default; a task's CPU for a master (the exchange between
  // tasks runs on the host; the task's own partitioner moves tensors to and from its devices).
  std::function<std::string(const std::string& partition)> transfer_device;
  // The partition that holds the step's feeds and fetches (an in-process session's host), or ""
  // when the client is outside every partition (a master): each partition is then fed the fed
  // tensors it consumes directly and yields the fetches it produces.
  std::string client_partition;
};

struct GraphPartition {
  std::string name;  // partition_of() of its nodes' devices
  // Its nodes: copies of the graph's (same name, attrs and device request; `origin` points at the
  // graph's node), Placeholders for feeds, and the _Send/_Recv nodes. Owned by the PartitionedStep.
  std::vector<Node*> nodes;
  std::vector<Endpoint> feeds;          // a Placeholder per step feed it takes
  std::vector<int> feed_index;          // the step feed each of `feeds` takes
  std::vector<Endpoint> fetches;        // what it yields (for a client partition: every fetch, in order)
  std::vector<const Node*> targets;     // its share of the step's targets, then its _Sends
};

struct PartitionedStep {
  std::vector<GraphPartition> partitions;  // the client partition first (when set and used)
  // Per step fetch, without a client partition: (partition, index into its fetches), or (-1, feed
  // index) for a fetch of a fed tensor. With one: (client partition, position).
  std::vector<std::pair<int, int>> fetch_from;
  std::vector<std::unique_ptr<Node>> nodes;  // every node the partitions hold
  // Each _Send and _Recv node -> the dense slot of its transfer (pairs share one).
  std::unordered_map<const Node*, int> slot_of;
  int num_slots = 0;      // transfers (data and control)
  int num_transfers = 0;  // data transfers
};

// Appends to `nodes` (the nodes of a step) the nodes of every While's loop among them, inner
// loops' too, that are not in it yet: a task runs a loop's nodes as steps of their own (Note [While
// loops] in core/while_ops.cc), so they are placed and shipped with the While, though no plan of
// the step runs them. Returns, for each node it appended, the While of the step that runs it.
std::unordered_map<const Node*, const Node*> append_loop_nodes(std::vector<const Node*>* nodes);

// `needed`: the nodes the step runs (prune_nodes, plus whatever else must come along), each placed.
// Takes no lock: the caller keeps `graph` from changing. The new nodes' ids continue the graph's.
StatusOr<PartitionedStep> partition_step(const GraphImpl& graph, const std::vector<const Node*>& needed,
                                         const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& fetches,
                                         const std::vector<const Node*>& targets, const PartitionOptions& options);

// The attrs of the nodes partition_step makes (ops registered in core/sendrecv_ops.cc):
//   _Send  input: the tensor (none for a control edge)   tensor_name, send_device, recv_device
//   _Recv  output: the tensor (a bool token for control)  tensor_name, send_device, recv_device,
//                                                         dtype, shape
// tensor_name is "node:index", or "^node" for a control edge.
inline constexpr const char* kSendOp = "_Send";
inline constexpr const char* kRecvOp = "_Recv";

}  // namespace tessera::internal
