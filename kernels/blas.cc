#include "kernels/blas.h"

#include <cblas.h>

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "kernels/cpu_features.h"

// OpenBLAS's thread server (its pthread and OpenMP builds; absent from the serial one, hence weak):
// stops and joins the threads it started. OpenBLAS calls it itself before a fork.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
// A DYNAMIC_ARCH OpenBLAS's choice of kernels (Note [OpenBLAS on CPUs it does not know]): quit
// forgets it, init makes it again, from OPENBLAS_CORETYPE when that is set. Weak: a build for one
// CPU has neither.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace tessera::internal {

// Note [OpenBLAS on CPUs it does not know]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Debian's OpenBLAS (a DYNAMIC_ARCH build) picks its kernels by the CPU's family and model
// number when it loads. A model newer than its release is not in its tables, and it falls back to
// its "Prescott" kernels (SSE3): OpenBLAS 0.3.21 does so on the Xeons of model 207 (Emerald
// Rapids) that have AVX-512, where its sgemm ran 3-4x slower than with its SkylakeX kernels (the
// digits CNN's training step at batch 256: 86-115 against 325-362 steps/s). So when OpenBLAS has
// chosen a core without AVX kernels and the CPU has AVX2 or AVX-512 (as libgcc reports them: the
// CPU's flags and the OS's support for the registers), tessera makes OpenBLAS choose again,
// naming the core through OPENBLAS_CORETYPE, OpenBLAS's own override: the same choice as starting
// the process with that variable set. It happens as the library loads, after OpenBLAS's threads
// are stopped and before any product, and the variable is removed again. A user's own
// OPENBLAS_CORETYPE is left alone, as is any core OpenBLAS knew. (setenv is not safe against
// other threads reading the environment: a program that dlopens tessera while its threads call
// getenv should set OPENBLAS_CORETYPE itself. blas_core() says what was done.)
const char* blas_core_for(const CpuVectorFeatures& cpu) {
  if (cpu.avx512 && cpu.avx2 && cpu.fma) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  if (cpu.avx) return "Sandybridge";
  return "";
}

const char* blas_core_override(const char* chosen, const CpuVectorFeatures& cpu) {
  // OpenBLAS's x86 cores with no AVX kernels (its fallbacks for an unknown Intel or AMD model
  // among them).
  static constexpr const char* kNoAvx[] = {"Prescott", "Core2",   "Penryn",     "Dunnington", "Nehalem",
                                           "Katmai",   "Coppermine", "Northwood", "Banias",  "Atom",
                                           "Nano",     "Athlon",  "Opteron",    "Opteron_SSE3", "Barcelona",
                                           "Bobcat"};
  if (chosen == nullptr) return nullptr;
  const bool no_avx = std::any_of(std::begin(kNoAvx), std::end(kNoAvx),
                                  [&](const char* c) { return ::strcasecmp(c, chosen) == 0; });
  const char* best = blas_core_for(cpu);
  if (!no_avx || *best == '\0') return nullptr;
  return best;
}

namespace {

// OpenBLAS's own threads off, from the library's load (core/parallel_for.h says why). Its
// constructor has started them already, and each spins, yielding, for about 2^28 cycles before it
// sleeps (0.1-0.2 s of a core in every process that loads tessera, test and server processes
// included): they are stopped at once. A later call with one thread never starts them again.
// Then its kernels, where it did not know the CPU (Note [OpenBLAS on CPUs it does not know]).
BlasCore start_blas() {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
  BlasCore core;
  core.detected = openblas_get_corename();
  core.in_use = core.detected;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || gotoblas_dynamic_init == nullptr ||
      gotoblas_dynamic_quit == nullptr) {
    return core;
  }
  const char* better = blas_core_override(core.detected, cpu_vector_features());
  if (better == nullptr) return core;
  // detected points into OpenBLAS's table of names, which outlives the switch.
  ::setenv("OPENBLAS_CORETYPE", better, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  ::unsetenv("OPENBLAS_CORETYPE");
  core.in_use = openblas_get_corename();
  core.overridden = true;
  return core;
}

const BlasCore kBlasCore = start_blas();

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
  (void)kBlasCore;
  if (ctx == nullptr) return blas(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  const int64_t row_work = std::max<int64_t>(1, n * k);
  ctx->parallel_for(m, std::max<int64_t>(1, kGemmShardMultiplyAdds / row_work), [&](int64_t r0, int64_t r1) {
    blas(ta, tb, r1 - r0, n, k, a + (ta ? r0 : r0 * lda), lda, b, ldb, beta, c + r0 * ldc, ldc);
  });
}

}  // namespace

const BlasCore& blas_core() { return kBlasCore; }

void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sharded_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
void gemm(const OpKernelContext* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  sharded_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace tessera::internal
