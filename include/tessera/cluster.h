// The processes of a distributed computation: jobs of tasks, each task a "host:port" (tessera::train).
//
//   train::ClusterSpec cluster({{"ps", {"ps0:2222"}},
//                               {"worker", {"w0:2222", "w1:2222"}}});
//   cluster.task_address("worker", 1);            // "w1:2222"
//   auto same = train::ClusterSpec::from_json(cluster.to_json());
//
//   // Launched by a scheduler: TF_CONFIG, or Slurm's SLURM_* variables.
//   auto [spec, task, source] = train::resolve_cluster_from_env();
//   if (task) start_server(spec, task->job, task->index);
//
// As in TensorFlow, a job may be sparse: it lists only some task indices, so a task can be
// configured without knowing every other worker. A ClusterSpec is an immutable value: copies are
// independent and any number of threads may read one concurrently.
#pragma once

#include <concepts>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera::train {

class ClusterSpec {
 public:
  using DenseJobs = std::map<std::string, std::vector<std::string>>;
  using SparseJobs = std::map<std::string, std::map<int, std::string>>;

  // Each job's addresses, task i at position i (the dense form). Throws InvalidArgumentError for a
  // job name not matching [a-z][a-z0-9_]* or an address that is not host:port (port 0..65535; an
  // IPv6 host in brackets, "[::1]:2222"), or two tasks with one address. Port 0 is valid: that
  // task's server binds a free port (Server::target() reports it), and only it knows the port, so
  // other tasks cannot reach it through this spec.
  ClusterSpec(DenseJobs jobs);  // NOLINT(google-explicit-constructor): TensorFlow's dict literal
  // The same, from a braced list of jobs; a job named twice raises InvalidArgumentError. This is
  // what a braced argument selects, also where a ClusterSpec is copy-initialized (a function
  // parameter). Without it a one-address job, ClusterSpec({{"job", {"a:1"}}}), would be ambiguous:
  // {"job", {"a:1"}} also fits std::map's iterator-pair constructor, via the copy constructor.
  ClusterSpec(std::initializer_list<std::pair<const std::string, std::vector<std::string>>> jobs);  // NOLINT
  // Each job's tasks by index (indices >= 0, any gaps). Takes exactly SparseJobs, so a braced list
  // (which cannot deduce T) never lands here: spell the map type. Same validation as above.
  template <class T>
    requires std::same_as<std::remove_cvref_t<T>, SparseJobs>
  ClusterSpec(T&& sparse_jobs)  // NOLINT(google-explicit-constructor)
      : ClusterSpec(SparseTag{}, SparseJobs(std::forward<T>(sparse_jobs))) {}

  // TensorFlow's cluster JSON: {"worker": ["h:p", ...], "ps": [...]}, a job either a list of
  // addresses or a sparse object {"0": "h:p", "3": "h:q"}. Malformed JSON, wrong types, duplicate
  // keys or invalid names/addresses raise InvalidArgumentError.
  static ClusterSpec from_json(std::string_view json);
  // from_json of the file at `path`: a regular file of at most 16 MiB, opened without blocking (a
  // FIFO or a device is InvalidArgumentError, not waited on or read to exhaustion); a missing file
  // is NotFoundError.
  static ClusterSpec from_file(const std::string& path);
  // The cluster of resolve_cluster_from_env(), without this process's task.
  static ClusterSpec from_env();

  // Job names, sorted.
  std::vector<std::string> jobs() const;
  // Unknown job (or task) raises InvalidArgumentError naming it and listing what exists.
  int num_tasks(std::string_view job) const;
  std::vector<int> task_indices(std::string_view job) const;  // sorted
  std::string task_address(std::string_view job, int task) const;
  // Addresses by task index, 0 to the largest index; as TensorFlow (which puts None there), a
  // sparse job has "" at indices it does not define, so size() may exceed num_tasks(job).
  std::vector<std::string> job_tasks(std::string_view job) const;
  // Compact JSON that from_json reads back to an equal spec: a job whose indices are 0..n-1 is a
  // list, any other an object keyed by index (as TensorFlow's as_dict()).
  std::string to_json() const;

  // Same jobs with the same tasks at the same indices (dense or sparse spelling does not matter).
  bool operator==(const ClusterSpec& other) const = default;

 private:
  struct SparseTag {};
  ClusterSpec(SparseTag, SparseJobs jobs);

  SparseJobs jobs_;
};

// One task of a cluster: the job it belongs to and its index there.
struct TaskSpec {
  std::string job;
  int index = 0;
  bool operator==(const TaskSpec&) const = default;
};

// What the environment says about the cluster and this process's place in it.
struct ResolvedCluster {
  ClusterSpec cluster;
  std::optional<TaskSpec> task;  // empty when the source names no task (TF_CONFIG without "task")
  std::string source;            // "TF_CONFIG" or "SLURM"
};

// Resolves the cluster from the environment, TensorFlow's resolvers in order:
//  1. TF_CONFIG (TFConfigClusterResolver): {"cluster": {...}, "task": {"type": "worker", "index": 1}};
//     the task, when given, must exist in the cluster.
//  2. Slurm (SlurmClusterResolver), when SLURM_PROCID is set: SLURM_STEP_NODELIST (compressed host
//     list), SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), SLURM_STEP_NUM_TASKS (checked if set). Task r of
//     the step runs on the node holding rank r (block distribution, nodes in list order) at port
//     base + its rank on that node; base 8888 or TESSERA_SLURM_PORT_BASE. All tasks form job "worker", or
//     TESSERA_SLURM_JOBS="ps:1,worker:3" splits the ranks into jobs in that order. This process is
//     the task of SLURM_PROCID. See Note [Slurm task layout] in transport/cluster_spec.cc.
// An empty variable counts as unset. Neither source: FailedPreconditionError saying what to set.
// A malformed value: InvalidArgumentError naming the variable.
ResolvedCluster resolve_cluster_from_env();

}  // namespace tessera::train
