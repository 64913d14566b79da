// Intra-op parallelism: one kernel's work split over the calling thread and idle threads of the
// session's inter-op pool (TensorFlow runs big kernels' shards on its intra-op pool the same way).
//
//   parallel_for(&runner, rows, min_rows, [&](int64_t begin, int64_t end) { ... rows [begin, end) ... });
//
// Note [Intra-op parallelism from the inter-op pool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The range is cut into at most one shard per hardware thread. The caller schedules one helper
// closure per shard but the first, then takes shards itself from a shared counter, as every helper
// does when it starts; it returns when every shard is done. A helper that starts late finds no
// shard left and returns at once, so the caller never waits for a closure that has not started:
// with every pool thread busy running other ops, the caller does all the shards itself, and no
// pool can deadlock on it. BLAS runs single-threaded under this (kernels/blas.h): OpenBLAS's own
// threads spin between calls and, beside the executor's threads on few cores, cost a step
// milliseconds (the digits MLP's steps were 10-25x slower on a loaded 2-core machine).
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::internal {

using Runner = std::function<void(std::function<void()>)>;

// Calls fn(begin, end) on disjoint shards covering [0, total), each of at least `min_shard`
// elements (the last may be shorter), on the caller and on `runner`'s threads (null: all on the
// caller). Returns when all are done; rethrows the first exception a shard threw.
void parallel_for(const Runner* runner, int64_t total, int64_t min_shard,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tessera::internal
