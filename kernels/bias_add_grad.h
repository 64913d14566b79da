// BiasAddGrad's sum on the CPU, shared by its kernel (kernels/nn_ops.cc) and the fused filter and
// bias gradient (_FusedConv2DBackpropFilterWithBias, kernels/conv_ops.cc), which must give its
// bits: dy [rows, cols] summed over the rows in parts of rows fixed by the shape alone, each part
// in row order from zero, the parts then added in order (Note [Sharding the elementwise kernels]).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/wrapping_arith.h"
#include "kernels/elementwise_shards.h"

namespace tessera::internal {

inline constexpr int64_t kBiasGradParts = 8;

// The rows in each part (the last may have fewer).
inline int64_t bias_grad_part_rows(int64_t rows, int64_t cols) {
  return std::max(min_shard_of(cols), (rows + kBiasGradParts - 1) / kBiasGradParts);
}

inline int64_t bias_grad_parts(int64_t rows, int64_t cols) {
  const int64_t part_rows = bias_grad_part_rows(rows, cols);
  return std::max<int64_t>(1, (rows + part_rows - 1) / part_rows);
}

// part[c] += row[c] for rows [r0, r1) of dy, in the computation type.
template <class T>
void add_bias_rows(const T* dy, int64_t cols, int64_t r0, int64_t r1, Accumulate<T>* __restrict part) {
  using A = Accumulate<T>;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c) part[c] = wrapping_add(part[c], static_cast<A>(row[c]));
  }
}

// The parts' sums ([parts, cols]) added in order into the first, written to out ([cols]).
template <class T>
void finish_bias_sums(std::vector<Accumulate<T>>& sums, int64_t parts, int64_t cols, T* out) {
  for (int64_t p = 1; p < parts; ++p) {
    for (int64_t c = 0; c < cols; ++c) sums[c] = wrapping_add(sums[c], sums[p * cols + c]);
  }
  for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(sums[c]);
}

// out [cols] = dy [rows, cols] summed over its rows, the parts sharded over ctx's pool.
template <class T>
void bias_add_grad(const OpKernelContext& ctx, const T* dy, int64_t rows, int64_t cols, T* out) {
  const int64_t part_rows = bias_grad_part_rows(rows, cols);
  const int64_t parts = bias_grad_parts(rows, cols);
  std::vector<Accumulate<T>> sums(static_cast<std::size_t>(parts * cols), Accumulate<T>{0});
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      add_bias_rows(dy, cols, p * part_rows, std::min(rows, (p + 1) * part_rows), sums.data() + p * cols);
    }
  });
  finish_bias_sums(sums, parts, cols, out);
}

}  // namespace tessera::internal
