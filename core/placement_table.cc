// placement_table (core/placement.h): a placement as text, one line per node.
#include <algorithm>
#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "core/placement.h"

namespace tessera::internal {

std::string placement_table(const std::vector<const Node*>& nodes, const std::vector<PlacementDevice>& devices,
                            const Placement& placement) {
  std::vector<const Node*> sorted;
  for (const Node* n : nodes) {
    if (n != nullptr) sorted.push_back(n);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
  std::size_t width = 0;
  for (const Node* n : sorted) width = std::max(width, n->debug_name().size());
  std::string s;
  for (const Node* n : sorted) {
    auto it = placement.device_of.find(n);
    std::string device = "(unplaced)";
    if (it != placement.device_of.end() && it->second >= 0 && it->second < static_cast<int>(devices.size())) {
      device = devices[it->second].name;
    }
    auto est = placement.estimated_seconds.find(n);
    const double us = est == placement.estimated_seconds.end() ? 0.0 : est->second * 1e6;
    s += fmt::format("{:<{}} -> {}   est {:.1f} us\n", n->debug_name(), width, device, us);
  }
  return s;
}

}  // namespace tessera::internal
