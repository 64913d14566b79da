// Slurm's compressed notations, expanded: host lists ("node[001-003,007],gpu-a[1-2]") and tasks per
// node ("2(x3),1"). Pure functions of their argument, used by the Slurm cluster resolver.
//
//   expand_hostlist("n[1-2],m5,o[08-10]")   // n1 n2 m5 o08 o09 o10
//   expand_tasks_per_node("3(x2),2,1")       // 3 3 2 1
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::internal {

// Hosts in list order, without deduplication (as TensorFlow's expand_hostlist and scontrol show
// hostnames). Commas inside brackets belong to the range; a range keeps the zero padding of its
// lower bound ("[0008-0010]" gives 0008 0009 0010); a host may hold several bracket groups, the
// last varying fastest ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2). InvalidArgument for empty items,
// unbalanced or nested brackets, non-numeric or reversed ranges, more than kMaxHosts hosts, or a
// host name longer than kMaxHostNameLength (which bounds the expansion's memory: without it a
// few kilobytes of list could ask for gigabytes, a long name times a million-host range).
inline constexpr int kMaxHosts = 1 << 20;
inline constexpr std::size_t kMaxHostNameLength = 255;  // DNS: 253 characters for a full name
StatusOr<std::vector<std::string>> expand_hostlist(std::string_view hostlist);

// Slurm's tasks-per-node list: comma-separated counts, each optionally "(xN)" repeated. Counts and
// repetitions must be positive. InvalidArgument otherwise.
StatusOr<std::vector<int>> expand_tasks_per_node(std::string_view tasks_per_node);

}  // namespace tessera::internal
