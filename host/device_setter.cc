// train::replica_device_setter (include/tessera/device_setter.h): TensorFlow 1's
// _ReplicaDeviceChooser with its two strategies, round robin and greedy load balancing by bytes.
#include "tessera/device_setter.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/device_name.h"
#include "tessera/errors.h"

namespace tessera::train {

namespace {

using internal::DeviceSpec;

constexpr std::string_view kPsJob = "ps";

// TensorFlow's STANDARD_PS_OPS: the op types that hold a variable's state. Queues, readers and
// accumulators stay with the worker, as in TensorFlow.
bool is_ps_op(std::string_view type) {
  static constexpr std::string_view kPsOps[] = {
      "VariableV2",        "Variable",          "AutoReloadVariable",        "VarHandleOp",
      "MutableHashTable",  "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
      "MutableDenseHashTable", "MutableDenseHashTableV2",
  };
  return std::find(std::begin(kPsOps), std::end(kPsOps), type) != std::end(kPsOps);
}

// TensorFlow's byte_size_load_fn: the bytes of the op's one output.
double byte_size(const Operation& op) {
  if (op.num_outputs() != 1) {
    throw InvalidArgumentError(fmt::format("replica_device_setter (greedy_bytes): {} ({}) has {} outputs, not 1",
                                           op.name(), op.type(), op.num_outputs()));
  }
  const Output out = op.output(0);
  const Shape shape = out.shape();
  if (!shape.fully_defined()) {
    throw InvalidArgumentError(fmt::format(
        "replica_device_setter (greedy_bytes): the shape of {} ({}) is {}, not fully defined: its bytes are unknown",
        op.name(), op.type(), shape.to_string()));
  }
  return static_cast<double>(shape.num_elements()) * static_cast<double>(dtype_size(out.dtype()));
}

// What every copy of one setter shares. Thread-safe.
class Chooser {
 public:
  Chooser(std::vector<int> ps_tasks, DeviceSpec worker, bool greedy)
      : ps_tasks_(std::move(ps_tasks)), worker_(std::move(worker)), greedy_(greedy), load_(ps_tasks_.size(), 0.0) {}

  std::string device_for(const Operation& op) {
    const DeviceSpec current = DeviceSpec::parse(op.device()).value_or_raise();
    if (!ps_tasks_.empty() && is_ps_op(op.type())) {
      DeviceSpec ps;
      ps.job = std::string(kPsJob);
      // A variable made under another job stays there (TensorFlow: the task is chosen only when
      // the op's job is the ps job or unset).
      if (!current.job || *current.job == kPsJob) ps.task = next_task(op);
      return ps.merged_with(current).to_string();
    }
    return worker_.merged_with(current).to_string();
  }

 private:
  int next_task(const Operation& op) {
    std::lock_guard<std::mutex> l(mu_);
    std::size_t k = 0;
    if (greedy_) {
      const double bytes = byte_size(op);
      k = static_cast<std::size_t>(std::min_element(load_.begin(), load_.end()) - load_.begin());
      load_[k] += bytes;
    } else {
      k = next_;
      next_ = (next_ + 1) % ps_tasks_.size();
    }
    return ps_tasks_[k];
  }

  const std::vector<int> ps_tasks_;  // the ps job's task indices, sorted
  const DeviceSpec worker_;
  const bool greedy_;
  std::mutex mu_;
  std::size_t next_ = 0;      // guarded by mu_: round robin's next position in ps_tasks_
  std::vector<double> load_;  // guarded by mu_: greedy_bytes' bytes per position in ps_tasks_
};

}  // namespace

DeviceFunction replica_device_setter(ClusterSpec cluster, std::string worker_device, std::string ps_strategy) {
  if (ps_strategy != "round_robin" && ps_strategy != "greedy_bytes") {
    throw InvalidArgumentError(fmt::format(
        "replica_device_setter: unknown ps_strategy '{}' (expected 'round_robin' or 'greedy_bytes')", ps_strategy));
  }
  auto worker = DeviceSpec::parse(worker_device);
  if (!worker.ok()) {
    throw InvalidArgumentError(
        fmt::format("replica_device_setter: worker_device '{}': {}", worker_device, worker.status().message()));
  }
  std::vector<int> ps_tasks;
  const std::vector<std::string> jobs = cluster.jobs();
  if (std::find(jobs.begin(), jobs.end(), kPsJob) != jobs.end()) ps_tasks = cluster.task_indices(kPsJob);
  auto chooser =
      std::make_shared<Chooser>(std::move(ps_tasks), std::move(worker).value(), ps_strategy == "greedy_bytes");
  return [chooser](const Operation& op) { return chooser->device_for(op); };
}

}  // namespace tessera::train
