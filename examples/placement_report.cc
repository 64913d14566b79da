// The demo's placement report: where the sessions put a graph's ops, read back through the public
// API (Operation::assigned_device), written to the demo's own stream. The library's
// SessionOptions::log_device_placement is a diagnostic that goes to the library's log (stderr; for
// a session on a cluster, the master's task's stderr), so the demo does not use it: its output
// would come on another stream, out of order with the rest.
#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

std::string short_device(std::string name) {
  const std::string local = "/job:localhost/replica:0/task:0";
  if (name.compare(0, local.size(), local) == 0) name.erase(0, local.size());
  if (const auto r = name.find("/replica:0"); r != std::string::npos) name.erase(r, std::string("/replica:0").size());
  for (const char* type : {"CPU", "GPU"}) {
    const std::string full = fmt::format("/device:{}:", type);
    if (const auto d = name.find(full); d != std::string::npos) {
      name.replace(d, full.size(), type == std::string("CPU") ? "/cpu:" : "/gpu:");
    }
  }
  return name;
}

void report_placement(std::ostream& out, const Graph& g, bool table) {
  const std::vector<Operation> ops = g.operations();
  std::map<std::string, int> ops_on;  // device -> ops placed there
  int unplaced = 0;
  // One copy per tensor (or control edge) per device it crosses to, as the partitioner joins
  // devices with one _Send/_Recv pair for each (core/graph_partition.h).
  std::set<std::pair<std::string, std::string>> copies;
  std::string lines;  // the table
  std::size_t width = 0;
  for (const Operation& op : ops) width = std::max(width, op.name().size() + op.type().size() + 3);
  for (const Operation& op : ops) {
    const std::string device = op.assigned_device();
    if (device.empty()) {
      ++unplaced;
    } else {
      ++ops_on[short_device(device)];
      auto crossing = [&](const Operation& from, const std::string& what) {
        const std::string from_device = from.assigned_device();
        if (!from_device.empty() && from_device != device) copies.emplace(what, device);
      };
      for (int i = 0; i < op.num_inputs(); ++i) crossing(op.input(i).op(), op.input(i).name());
      // fmt, not "^" + name: GCC 12 at -O3 warns there (-Wrestrict, a false positive).
      for (const Operation& c : op.control_inputs()) crossing(c, fmt::format("^{}", c.name()));
    }
    if (table) {
      lines += fmt::format("  {:<{}} -> {}\n", op.name() + " (" + op.type() + ")", width,
                           device.empty() ? "(not placed: no step ran it)" : short_device(device));
    }
  }
  std::vector<std::string> parts;
  for (const auto& [device, n] : ops_on) {
    parts.push_back(fmt::format("{} {}{}", n, parts.empty() ? (n == 1 ? "op on " : "ops on ") : "on ", device));
  }
  if (parts.empty()) parts.push_back("no op placed yet");
  out << "placement: " << fmt::format("{}", fmt::join(parts, ", "))
      << fmt::format(", {} cop{}", copies.size(), copies.size() == 1 ? "y" : "ies");
  if (unplaced > 0) out << fmt::format(" ({} op{} no step ran)", unplaced, unplaced == 1 ? "" : "s");
  out << "\n" << lines;
}

}  // namespace tessera::examples
