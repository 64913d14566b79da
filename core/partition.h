// The in-process step planner: splits one step (feeds, fetches, targets) of a placed graph into
// one plan per device with partition_step (core/graph_partition.h), joined by _Send/_Recv pairs
// on every edge that crosses devices.
//
//   auto step = build_step_plan(graph, feeds, fetches, targets, device_of, kernel_for).value();
//   // step->host runs on the host with the feeds and yields the fetches;
//   // step->devices[i].plan runs on step->devices[i].device; all share one Rendezvous per step.
//
// See Note [Partitions] in partition.cc.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/captured_partition.h"
#include "core/device.h"
#include "core/executor.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/remapper.h"
#include "core/status.h"

namespace tessera::internal {

struct StepPlan {
  // Runs on the host CPU: takes the feeds (in signature order) and yields the fetches.
  std::shared_ptr<const Plan> host;
  struct DevicePart {
    Device* device = nullptr;  // Not owned.
    std::shared_ptr<const Plan> plan;
    // Its capture and replays, when it may be captured and the session wants it
    // (SessionOptions::cuda_graphs; Note [Captured partitions]). Null otherwise.
    std::shared_ptr<CapturedPartition> captured;
  };
  std::vector<DevicePart> devices;  // empty when the whole step runs on the host
  int num_keys = 0;                 // rendezvous keys (one per transfer)
  int num_transfers = 0;            // data transfers (control transfers excluded)
  // The partitions' copies of the graph's nodes and the _Send/_Recv nodes, and the kernels of the
  // latter (the graph's own kernels belong to the session).
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::unique_ptr<OpKernel>> kernels;
};

// Where a node runs: nullptr = the host CPU.
using DeviceOf = std::function<Device*(const Node& node)>;
// The session's kernel for a graph node placed on `device` (nullptr = host).
using KernelFor = std::function<StatusOr<OpKernel*>(const Node& node, Device* device)>;

// Prunes to what the step needs and splits it by device. When every needed node is on the host,
// `host` is build_plan over the graph's own nodes and nothing is copied; with `fused` (the
// session's), its chains of ops are fused there (Note [Op fusion] in core/remapper.cc).
StatusOr<std::shared_ptr<const StepPlan>> build_step_plan(const GraphImpl& graph, const std::vector<Endpoint>& feeds,
                                                          const std::vector<Endpoint>& fetches,
                                                          const std::vector<const Node*>& targets,
                                                          const DeviceOf& device_of, const KernelFor& kernel_for,
                                                          bool capture_partitions = false,
                                                          FusedNodes* fused = nullptr);

}  // namespace tessera::internal
