// Names the cluster services resolve (service_names.h): a tensor of a partition, the task of a
// device.
#include "transport/service_names.h"

#include <exception>

#include <fmt/format.h>

#include "core/device_name.h"

namespace tessera::internal {

StatusOr<Endpoint> find_tensor(const GraphImpl& graph, const std::string& name) {
  const std::size_t colon = name.rfind(':');
  const std::string node = colon == std::string::npos ? name : name.substr(0, colon);
  Node* n = graph.find(node);
  if (n == nullptr) return errors::invalid_argument("no op '{}'", node);
  int index = 0;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      index = std::stoi(name.substr(colon + 1), &used);
      if (used != name.size() - colon - 1) index = -1;
    } catch (const std::exception&) {
      index = -1;
    }
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

}  // namespace tessera::internal
