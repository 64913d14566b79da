// TaskChannels (task_channels.h): one RemoteWorker (and RpcChannel) per task of the cluster, CURVE
// clients when the task has keys.
#include "transport/task_channels.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/device_name.h"
#include "tessera/errors.h"
#include "transport/remote_worker.h"
#include "transport/security.h"

namespace tessera::internal {

TaskChannels::TaskChannels(train::ClusterSpec cluster, std::chrono::milliseconds rpc_timeout,
                           std::shared_ptr<const Credentials> credentials, uint64_t max_tensor_bytes,
                           std::chrono::microseconds busy_poll)
    : cluster_(std::move(cluster)), rpc_timeout_(rpc_timeout), credentials_(std::move(credentials)),
      max_tensor_bytes_(max_tensor_bytes), busy_poll_(busy_poll) {}

StatusOr<WorkerInterface*> TaskChannels::get(const std::string& task) {
  StatusOr<DeviceSpec> spec = DeviceSpec::parse(task);
  if (!spec.ok()) return spec.status();
  if (!spec.value().job || !spec.value().task) {
    return errors::invalid_argument("'{}' does not name a task (/job:J/task:T)", task);
  }
  const std::string& job = *spec.value().job;
  const std::vector<std::string> jobs = cluster_.jobs();
  if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
    return errors::invalid_argument("no job '{}' in the cluster (jobs: {})", job, fmt::join(jobs, ", "));
  }
  const std::vector<int> tasks = cluster_.task_indices(job);
  if (std::find(tasks.begin(), tasks.end(), *spec.value().task) == tasks.end()) {
    return errors::invalid_argument("no task {} in job '{}' (tasks: {})", *spec.value().task, job, fmt::join(tasks, ", "));
  }
  const std::string address = cluster_.task_address(job, *spec.value().task);  // there: cannot throw
  const std::string name = fmt::format("/job:{}/replica:0/task:{}", *spec.value().job, *spec.value().task);
  if (address.ends_with(":0")) {
    // A task of port 0 binds a free port that only it knows (the task itself has its bound port
    // here: transport/server.cc puts it in its own view of the cluster).
    return errors::invalid_argument(
        "cannot reach task {}: its address in the cluster is {}, and a task with port 0 listens on a free port "
        "only it knows; give it a fixed port in the cluster spec to reach it from other tasks",
        name, address);
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& worker = by_task_[name];
  if (!worker) {
    RpcChannelOptions options;
    options.busy_poll = busy_poll_;
    if (credentials_) {
      StatusOr<RpcChannelOptions::Curve> curve = channel_curve(*credentials_, address);
      if (!curve.ok()) {
        by_task_.erase(name);
        return curve.status().with_prefix(fmt::format("{}: ", task));
      }
      options.curve = std::move(curve).value();
    }
    const std::string host = address.substr(0, address.rfind(':'));
    const std::string endpoint =
        host == "localhost" ? "tcp://127.0.0.1" + address.substr(address.rfind(':')) : "tcp://" + address;
    worker = std::make_unique<RemoteWorker>(name, std::make_unique<RpcChannel>(endpoint, std::move(options)),
                                            rpc_timeout_, max_tensor_bytes_);
  }
  return worker.get();
}

}  // namespace tessera::internal
