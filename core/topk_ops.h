// The shapes of TopKV2 and InTopK (core/topk_ops.cc), checked once for both the graph (as far as
// the shapes are known there) and the CPU kernels (kernels/topk_ops.cc), with the same messages.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// TopKV2's values and indices: `input` (rank >= 1, at least k in its last dim, k >= 0) with the
// last dim k; an unknown rank or dim stays unknown. InvalidArgument otherwise.
StatusOr<Shape> top_k_shape(const Shape& input, int64_t k);
// InTopK's output [batch]: predictions [batch, classes], targets [batch] (one per row), k >= 0;
// -1 where neither knows the batch. InvalidArgument otherwise.
StatusOr<Shape> in_top_k_shape(const Shape& predictions, const Shape& targets, int64_t k);

}  // namespace tessera::internal
