// Matrix products on the CPU: OpenBLAS, single-threaded, its work sharded by rows of the product
// over the session's pool when it is big enough (Note [Intra-op parallelism from the inter-op
// pool] in core/parallel_for.h). Every CPU kernel that multiplies matrices goes through here.
#pragma once

#include <cstdint>

#include "core/op_kernel.h"
#include "kernels/cpu_features.h"

namespace tessera::internal {

// The fewest multiply-adds a shard gets: below this a product runs on one thread (splitting a
// smaller one costs more in scheduling than it saves).
inline constexpr int64_t kGemmShardMultiplyAdds = int64_t{1} << 17;

// Row-major c[m, n] = op(a)[m, k] * op(b)[k, n] + beta * c, op = transpose when ta / tb; lda, ldb
// and ldc are the row strides of a, b and c as stored. Every dimension must fit BLAS's int (the
// caller checks). float and double. Sharded over `ctx`'s pool (OpKernelContext::parallel_for); a
// null `ctx` runs it all on this thread (a caller that shards its own work).
void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Note [OpenBLAS on CPUs it does not know] (blas.cc). The CPU's best vector extension OpenBLAS has
// kernels for, as OpenBLAS names the core: "SkylakeX" (AVX-512 F, CD, BW, DQ and VL), "Haswell"
// (AVX2 and FMA), "Sandybridge" (AVX), or "" (none of them).
const char* blas_core_for(const CpuVectorFeatures& cpu);
// The core OpenBLAS should be told to use instead of `chosen`, the one it picked itself: the
// CPU's best (blas_core_for) when `chosen` is a core with no AVX kernels, which is what OpenBLAS
// falls back to on a CPU model newer than its release; nullptr to keep `chosen`.
const char* blas_core_override(const char* chosen, const CpuVectorFeatures& cpu);

// What happened at load: OpenBLAS's own choice, the core in use now, and whether tessera changed it.
struct BlasCore {
  const char* detected = "";  // what OpenBLAS picked at its load
  const char* in_use = "";    // what it uses now
  bool overridden = false;
};
const BlasCore& blas_core();

}  // namespace tessera::internal
