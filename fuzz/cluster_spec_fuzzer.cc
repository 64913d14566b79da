// Fuzz target: a cluster description as a user or a launcher writes it. The input text goes to
// ClusterSpec::from_json and, as TF_CONFIG, to resolve_cluster_from_env (the TF_CONFIG resolver:
// Slurm's variables are unset). Properties: a spec that parses writes JSON that reads back to an
// equal spec, and every task it lists has the address it lists; a resolved TF_CONFIG task is a task
// of its cluster.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"

namespace {

using namespace tessera;
using train::ClusterSpec;

void check_spec(const ClusterSpec& spec) {
  const ClusterSpec again = ClusterSpec::from_json(spec.to_json());
  FUZZ_CHECK(again == spec);
  for (const std::string& job : spec.jobs()) {
    const std::vector<int> indices = spec.task_indices(job);
    FUZZ_CHECK(static_cast<int>(indices.size()) == spec.num_tasks(job));
    for (int i : indices) FUZZ_CHECK(!spec.task_address(job, i).empty());
    // job_tasks() is dense up to the largest index (TensorFlow's as_dict): only where that is small.
    if (!indices.empty() && indices.back() < (1 << 16)) {
      const std::vector<std::string> dense = spec.job_tasks(job);
      FUZZ_CHECK(dense.size() == static_cast<std::size_t>(indices.back()) + 1);
      for (int i : indices) FUZZ_CHECK(dense[static_cast<std::size_t>(i)] == spec.task_address(job, i));
    }
  }
}

void check_from_json(const std::string& text) {
  try {
    check_spec(ClusterSpec::from_json(text));
  } catch (const InvalidArgumentError&) {
    // The documented answer to malformed JSON, wrong types, duplicate keys, bad names or addresses.
  }
}

void check_tf_config(const std::string& text) {
  if (text.find('\0') != std::string::npos) return;  // an environment variable cannot hold one
  ::setenv("TF_CONFIG", text.c_str(), 1);
  try {
    const train::ResolvedCluster r = train::resolve_cluster_from_env();
    FUZZ_CHECK(r.source == "TF_CONFIG");
    check_spec(r.cluster);
    if (r.task) FUZZ_CHECK(!r.cluster.task_address(r.task->job, r.task->index).empty());
  } catch (const InvalidArgumentError&) {
    // Malformed TF_CONFIG.
  } catch (const FailedPreconditionError&) {
    FUZZ_CHECK(text.empty());  // an empty TF_CONFIG counts as unset, and there is no Slurm either
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : {"SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
                           "SLURM_STEP_NUM_TASKS", "TESSERA_SLURM_JOBS", "TESSERA_SLURM_PORT_BASE"}) {
    ::unsetenv(name);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_from_json(text);
  check_tf_config(text);
  return 0;
}
