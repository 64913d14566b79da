// What the accumulator ops (core/accumulator_ops.cc) share with their kernels
// (kernels/accumulator_ops.cc) and with SyncReplicasOptimizer (host/sync_replicas_optimizer.cc).
#pragma once

#include <string>
#include <string_view>

#include "tessera/accumulator.h"

namespace tessera::internal {

// The node type that describes an accumulator, which every other accumulator op acts on (its
// NodeSpec::resource).
inline bool is_accumulator_type(std::string_view type) { return type == "ConditionalAccumulator"; }

// An op that fails the takes waiting on `acc` with CancelledError ("_AccumulatorCancelTakes",
// not TensorFlow's): how SyncReplicasOptimizer's hook ends the chief's sync thread, whose take
// would otherwise wait for gradients that no longer come.
Operation accumulator_cancel_takes(const ConditionalAccumulator& acc, std::string name = "");

}  // namespace tessera::internal
