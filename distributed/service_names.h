// Names the cluster services resolve in the messages they exchange: a tensor of a partition
// ("node:index"), and the task a device name names. Shared by the master and the worker.
#pragma once

#include <string>

#include "core/node.h"
#include "core/status.h"
#include "tessera/session.h"

namespace tessera::internal {

// The output a tensor name ("node:index", or "node" for output 0) names in `graph`:
// InvalidArgument when there is no such node, or the index is not a number or not one of its
// outputs.
StatusOr<Endpoint> find_tensor(const GraphImpl& graph, const std::string& name);

// "/job:J/replica:0/task:T" for a device name or spec naming a job and task; InvalidArgument
// otherwise.
StatusOr<std::string> task_of_device(const std::string& device);

// `local_name`, a device of this process ("/job:localhost/replica:0/task:0/device:CPU:0"), as the
// cluster knows it: "/job:<job>/replica:0/task:<task>/device:CPU:0". InvalidArgument when
// `local_name` is not a device name.
StatusOr<std::string> task_device_name(const std::string& local_name, const std::string& job, int task);

// SessionConfig.placement_policy: "cost" (or "", the default), "gpu_first", "cpu_only"; anything
// else is InvalidArgument naming it (a prefix of it, when long).
StatusOr<tessera::PlacementPolicy> placement_policy_named(const std::string& name);

}  // namespace tessera::internal
