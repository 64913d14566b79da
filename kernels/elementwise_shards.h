// How the CPU kernels that touch each element once or twice (the elementwise ops and their
// gradients, BiasAdd and BiasAddGrad) split a big tensor over the session's pool.
//
// Note [Sharding the elementwise kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training step's activations pass through Relu, BiasAdd, ReluGrad and BiasAddGrad between the
// products, and each of those runs on the step's critical path: the ops after it wait for it. Run
// on one thread they left the other cores idle meanwhile (the digits CNN's step: benchmarks/
// README.md, "The pool's spin"). So an elementwise loop over at least 2 * kElementwiseShard
// elements is cut into shards of at least kElementwiseShard (128 KiB of float32: more than the few
// microseconds a shard costs to hand over), run on this thread and idle pool threads
// (core/parallel_for.h). An element's result never depends on the shards, so the output is the
// same bits whatever the threads. Sums over many elements (BiasAddGrad) are cut into parts by the
// shape alone and added in part order: the same result on every run and machine, as Note [The
// filter's gradient in parts] does.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/op_kernel.h"

namespace tessera::internal {

// The fewest elements a shard of an elementwise loop gets.
inline constexpr int64_t kElementwiseShard = int64_t{1} << 15;

// The fewest indices a shard gets when each index stands for `per_element` elements of work (a
// row of BiasAdd is `cols` elements): kElementwiseShard elements, rounded up to whole indices.
inline int64_t min_shard_of(int64_t per_element) {
  per_element = std::max<int64_t>(per_element, 1);  // a row of no columns is still a row
  return (kElementwiseShard + per_element - 1) / per_element;
}

// Calls fn(begin, end) over shards of [0, n): all at once on this thread below two shards'
// worth (min_shard_of), else sharded over `ctx`'s pool.
template <class F>
void for_each_shard(const OpKernelContext& ctx, int64_t n, F&& fn, int64_t per_element = 1) {
  const int64_t min_shard = min_shard_of(per_element);
  if (n < 2 * min_shard) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  ctx.parallel_for(n, min_shard, fn);
}

// The end of a sum made in parts by the shape alone (Note [The filter's gradient in parts] in
// kernels/conv_ops.cc): `count` more parts of `size` values, one after another at `rest`, added
// into `first` in part order. Each element's sum is the same whatever the shards.
template <class T>
void add_parts_in_order(const OpKernelContext& ctx, T* first, const T* rest, int64_t count, int64_t size) {
  if (count <= 0) return;
  ctx.parallel_for(size, std::max<int64_t>(1024, size / 8), [&](int64_t i0, int64_t i1) {
    T* __restrict d = first;
    for (int64_t p = 0; p < count; ++p) {
      const T* __restrict part = rest + p * size;
      for (int64_t i = i0; i < i1; ++i) d[i] += part[i];
    }
  });
}

}  // namespace tessera::internal
