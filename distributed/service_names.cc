// Names the cluster services resolve (service_names.h): a tensor of a partition, the task of a
// device.
#include "distributed/service_names.h"

#include <charconv>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/file_util.h"

namespace tessera::internal {

StatusOr<Endpoint> find_tensor(const GraphImpl& graph, const std::string& name) {
  const std::size_t colon = name.rfind(':');
  const std::string node = colon == std::string::npos ? name : name.substr(0, colon);
  Node* n = graph.find(node);
  if (n == nullptr) return errors::invalid_argument("no op '{}'", node);
  int index = 0;
  if (colon != std::string::npos) {
    const char* first = name.data() + colon + 1;
    const char* last = name.data() + name.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec != std::errc() || end != last || first == last) index = -1;
  }
  if (index < 0 || index >= static_cast<int>(n->output_dtypes.size())) {
    return errors::invalid_argument("op '{}' has no output '{}'", node,
                                    colon == std::string::npos ? std::string("0") : name.substr(colon + 1));
  }
  return Endpoint{n, index};
}

StatusOr<std::string> task_of_device(const std::string& device) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(device);
  if (!spec.ok()) return spec.status();
  if (!spec.value().job || !spec.value().task) {
    return errors::invalid_argument("device '{}' does not name a job and task", device);
  }
  return fmt::format("/job:{}/replica:0/task:{}", *spec.value().job, *spec.value().task);
}

StatusOr<std::string> task_device_name(const std::string& local_name, const std::string& job, int task) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(local_name);
  if (!spec.ok()) return spec.status();
  DeviceSpec s = std::move(spec).value();
  if (!s.type || !s.id) return errors::invalid_argument("'{}' is not a full device name", local_name);
  s.job = job;
  s.replica = 0;
  s.task = task;
  return s.to_string();
}

StatusOr<tessera::PlacementPolicy> placement_policy_named(const std::string& name) {
  if (name.empty() || name == "cost") return tessera::PlacementPolicy::cost;
  if (name == "gpu_first") return tessera::PlacementPolicy::gpu_first;
  if (name == "cpu_only") return tessera::PlacementPolicy::cpu_only;
  return errors::invalid_argument("unknown placement policy {} (cost, gpu_first or cpu_only)", quoted_prefix(name, 40));
}

}  // namespace tessera::internal
