// Note [Partitions]
// ~~~~~~~~~~~~~~~~~
// A step whose needed ops all run on the host is one plan over the graph's own nodes: nothing is
// copied and nothing crosses a device, which keeps the one-device fast path exactly as it was.
// Otherwise partition_step (Note [Graph partition]) splits it by device, with the host as the
// client partition, and each partition becomes a plan run on its device; the _Send/_Recv pairs get
// kernels keyed by their slot that know both devices (Note [Send and Recv]). Constants hoisted
// into a device partition are copied into device memory once, when the plan is built, instead of
// once per step.
#include "core/partition.h"

#include <future>
#include <unordered_map>

#include "core/graph_partition.h"
#include "core/sendrecv_ops.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {
namespace {

StatusOr<Tensor> copy_to_device_now(Device& device, const Tensor& t) {
  std::promise<StatusOr<Tensor>> result;
  auto ready = result.get_future();
  device.copy_to_device(t, device.host_to_device_stream(),
                        [&result](StatusOr<Tensor> r) { result.set_value(std::move(r)); });
  return ready.get();
}

}  // namespace

StatusOr<std::shared_ptr<const StepPlan>> build_step_plan(const GraphImpl& graph, const std::vector<Endpoint>& feeds,
                                                          const std::vector<Endpoint>& fetches,
                                                          const std::vector<const Node*>& targets,
                                                          const DeviceOf& device_of, const KernelFor& kernel_for,
                                                          bool capture_partitions, FusedNodes* fused) {
  auto step = std::make_shared<StepPlan>();
  const std::vector<const Node*> needed = prune_nodes(feeds, fetches, targets);
  std::unordered_map<std::string, Device*> device_named{{kHostDeviceName, nullptr}};
  std::unordered_map<const Node*, std::string> device_of_node;
  for (const Node* n : needed) {
    Device* d = device_of(*n);
    if (d == nullptr) continue;
    device_named.emplace(d->name(), d);
    device_of_node.emplace(n, d->name());
  }
  if (device_of_node.empty()) {  // all on the host
    const Remap remap = fused != nullptr ? remap_ops(needed, feeds, fetches, targets, *fused) : Remap();
    auto plan =
        build_plan(graph, feeds, fetches, targets, [&](const Node& n) { return kernel_for(n, nullptr); }, remap);
    if (!plan.ok()) return plan.status();
    step->host = std::move(plan).value();
    return std::shared_ptr<const StepPlan>(std::move(step));
  }

  PartitionOptions options;
  options.device_of = [&](const Node& n) {
    auto it = device_of_node.find(&n);
    return it == device_of_node.end() ? std::string(kHostDeviceName) : it->second;
  };
  options.partition_of = [](const std::string& device) { return device; };
  options.client_partition = kHostDeviceName;
  auto parted = partition_step(graph, needed, feeds, fetches, targets, options);
  if (!parted.ok()) return parted.status();
  PartitionedStep& ps = parted.value();
  step->num_keys = ps.num_slots;
  step->num_transfers = ps.num_transfers;

  std::unordered_map<const Node*, OpKernel*> own_kernel;  // _Send/_Recv -> kernel
  for (const auto& [node, slot] : ps.slot_of) {
    if (node->type == kSendOp) {
      step->kernels.push_back(make_send_kernel(*node, RendezvousKey::of_slot(slot)));
    } else {
      step->kernels.push_back(make_recv_kernel(*node, RendezvousKey::of_slot(slot),
                                               device_named.at(node->attr<std::string>("send_device")),
                                               device_named.at(node->attr<std::string>("recv_device"))));
    }
    own_kernel[node] = step->kernels.back().get();
  }
  for (const GraphPartition& part : ps.partitions) {
    Device* device = device_named.at(part.name);
    // Constants hoisted into a device partition live in device memory.
    for (Node* n : part.nodes) {
      if (device == nullptr || n->origin == nullptr || n->type != "Const") continue;
      auto on_device = copy_to_device_now(*device, n->attr<Tensor>("value"));
      if (!on_device.ok()) return on_device.status().with_prefix(n->debug_name() + ": ");
      n->attrs["value"] = std::move(on_device).value();
    }
    auto make_kernel = [&](const Node& n) -> StatusOr<OpKernel*> {
      auto own = own_kernel.find(&n);
      if (own != own_kernel.end()) return own->second;
      return kernel_for(n.origin != nullptr ? *n.origin : n, device);
    };
    auto plan = build_plan(graph, part.feeds, part.fetches, part.targets, make_kernel);
    if (!plan.ok()) return plan.status();
    if (device == nullptr) {
      step->host = std::move(plan).value();
    } else {
      StepPlan::DevicePart dp{device, std::move(plan).value(), nullptr};
      if (capture_partitions) dp.captured = CapturedPartition::make(*dp.plan, *device);
      step->devices.push_back(std::move(dp));
    }
  }
  step->nodes = std::move(ps.nodes);
  return std::shared_ptr<const StepPlan>(std::move(step));
}

}  // namespace tessera::internal
