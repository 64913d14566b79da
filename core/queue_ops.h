// What the queue ops (core/queue_ops.cc) share with their kernels (kernels/queue_ops.cc).
#pragma once

#include <string_view>

namespace tessera::internal {

// The node types that describe a queue, which every other queue op acts on (its
// NodeSpec::resource): "FIFOQueue" and "RandomShuffleQueueV2".
inline bool is_queue_type(std::string_view type) {
  return type == "FIFOQueue" || type == "RandomShuffleQueueV2";
}

}  // namespace tessera::internal
