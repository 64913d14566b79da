// Fuzz target: Slurm's compressed notations (transport/hostlist.h) and the Slurm resolver. The whole
// input goes to expand_hostlist and to expand_tasks_per_node; an input of several lines also sets
// the resolver's variables, one per line in this order (missing lines leave the rest unset):
//   SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_PROCID, SLURM_STEP_NUM_TASKS,
//   TESSERA_SLURM_JOBS, TESSERA_SLURM_PORT_BASE
// and runs resolve_cluster_from_env. Properties: expanded host names are non-empty and free of
// ',', '[', ']' and whitespace, at most kMaxHosts of them, at most kMaxHostNameLength long, and
// their comma-joined list expands to itself (for up to 4096 hosts); task counts are positive; a
// resolved cluster's task is the one of SLURM_PROCID.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "transport/hostlist.h"

namespace {

using namespace tessera;

constexpr const char* kSlurmVariables[] = {"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_PROCID",        "SLURM_STEP_NUM_TASKS",
                                           "TESSERA_SLURM_JOBS",  "TESSERA_SLURM_PORT_BASE"};

void check_hostlist(std::string_view text) {
  auto hosts = internal::expand_hostlist(text);
  if (!hosts.ok()) return;
  FUZZ_CHECK(hosts.value().size() <= static_cast<std::size_t>(internal::kMaxHosts));
  for (const std::string& h : hosts.value()) {
    FUZZ_CHECK(!h.empty() && h.size() <= internal::kMaxHostNameLength);
    FUZZ_CHECK(h.find_first_of(",[] \t\r\n") == std::string::npos);
  }
  // The round trip costs a second expansion: only for lists of a few thousand hosts, so that the
  // million-host lists the limits allow cost one.
  if (hosts.value().size() > 4096) return;
  std::string joined;
  for (const std::string& h : hosts.value()) {
    if (!joined.empty()) joined += ',';
    joined += h;
  }
  auto again = internal::expand_hostlist(joined);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again.value() == hosts.value());
}

void check_tasks_per_node(std::string_view text) {
  auto counts = internal::expand_tasks_per_node(text);
  if (!counts.ok()) return;
  FUZZ_CHECK(!counts.value().empty());
  FUZZ_CHECK(counts.value().size() <= static_cast<std::size_t>(internal::kMaxHosts));
  for (int c : counts.value()) FUZZ_CHECK(c >= 1);
}

void check_resolver(const std::string& text) {
  if (text.find('\n') == std::string::npos || text.find('\0') != std::string::npos) return;
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (lines.size() < std::size(kSlurmVariables)) {
    const std::size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  for (std::size_t i = 0; i < std::size(kSlurmVariables); ++i) {
    if (i < lines.size()) {
      ::setenv(kSlurmVariables[i], lines[i].c_str(), 1);
    } else {
      ::unsetenv(kSlurmVariables[i]);
    }
  }
  try {
    const train::ResolvedCluster r = train::resolve_cluster_from_env();
    FUZZ_CHECK(r.source == "SLURM");
    FUZZ_CHECK(r.task.has_value());
    FUZZ_CHECK(!r.cluster.task_address(r.task->job, r.task->index).empty());
  } catch (const InvalidArgumentError&) {
    // A malformed value, named in the message.
  } catch (const FailedPreconditionError&) {
    // A variable the resolver needs is unset or empty.
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::unsetenv("TF_CONFIG");  // it would win over Slurm
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_hostlist(text);
  check_tasks_per_node(text);
  check_resolver(text);
  return 0;
}
