// TaskChannels (task_channels.h): one RpcChannel per task address of the cluster, CURVE clients
// when the task has keys.
#include "transport/task_channels.h"

#include <utility>

#include <fmt/format.h>

#include "core/device_name.h"
#include "tessera/errors.h"
#include "transport/security.h"

namespace tessera::internal {

TaskChannels::TaskChannels(train::ClusterSpec cluster, std::chrono::milliseconds rpc_timeout,
                           std::shared_ptr<const Credentials> credentials, uint64_t max_tensor_bytes)
    : cluster_(std::move(cluster)), rpc_timeout_(rpc_timeout), credentials_(std::move(credentials)),
      max_tensor_bytes_(max_tensor_bytes) {}

StatusOr<RpcChannel*> TaskChannels::get(const std::string& task) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(task);
  if (!spec.ok()) return spec.status();
  if (!spec.value().job || !spec.value().task) {
    return errors::invalid_argument("'{}' does not name a task (/job:J/task:T)", task);
  }
  std::string address;
  try {
    address = cluster_.task_address(*spec.value().job, *spec.value().task);
  } catch (const Error& e) {
    return Status(e.code(), e.message());
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& channel = by_address_[address];
  if (!channel) {
    RpcChannelOptions options;
    if (credentials_) {
      StatusOr<RpcChannelOptions::Curve> curve = channel_curve(*credentials_, address);
      if (!curve.ok()) {
        by_address_.erase(address);
        return curve.status().with_prefix(fmt::format("{}: ", task));
      }
      options.curve = std::move(curve).value();
    }
    const std::string host = address.substr(0, address.rfind(':'));
    const std::string endpoint =
        host == "localhost" ? "tcp://127.0.0.1" + address.substr(address.rfind(':')) : "tcp://" + address;
    channel = std::make_unique<RpcChannel>(endpoint, std::move(options));
  }
  return channel.get();
}

}  // namespace tessera::internal
