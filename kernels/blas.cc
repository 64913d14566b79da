#include "kernels/blas.h"

#include <cblas.h>

#include <algorithm>

// OpenBLAS's thread server (its pthread and OpenMP builds; absent from the serial one, hence weak):
// stops and joins the threads it started. OpenBLAS calls it itself before a fork.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace tessera::internal {
namespace {

// OpenBLAS's own threads off, from the library's load (core/parallel_for.h says why). Its
// constructor has started them already, and each spins, yielding, for about 2^28 cycles before it
// sleeps (0.1-0.2 s of a core in every process that loads tessera, test and server processes
// included): they are stopped at once. A later call with one thread never starts them again.
const bool kBlasSingleThreaded = [] {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
  return true;
}();

void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Rows [r0, r1) of c need rows [r0, r1) of op(a): of a itself, or its columns when transposed.
template <class T>
void sharded_gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  (void)kBlasSingleThreaded;
  if (ctx == nullptr) return blas(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  const int64_t row_work = std::max<int64_t>(1, n * k);
  ctx->parallel_for(m, std::max<int64_t>(1, kGemmShardMultiplyAdds / row_work), [&](int64_t r0, int64_t r1) {
    blas(ta, tb, r1 - r0, n, k, a + (ta ? r0 : r0 * lda), lda, b, ldb, beta, c + r0 * ldc, ldc);
  });
}

}  // namespace

void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sharded_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  sharded_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace tessera::internal
