// What the host CPU can do beyond the x86-64 baseline the library is compiled for, asked once.
// Kernels compile their hot loops a second time for AVX-512 (__attribute__((target("avx512f"))))
// and take that copy where this says so. Valgrind hides AVX-512: under it the baseline copies run.
#pragma once

#include <atomic>

namespace tessera::internal {

// Tests turn the AVX-512 copies off (and back on) to compare them with the baseline ones.
inline std::atomic<bool>& avx512_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

inline bool has_avx512f() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && avx512_allowed().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// The vector extensions a library with its own kernels per CPU may choose by (OpenBLAS's cores:
// Note [OpenBLAS on CPUs it does not know] in blas.cc), as libgcc reports them: the CPU's flags
// and the OS's support for the registers. Not affected by avx512_allowed().
struct CpuVectorFeatures {
  bool avx = false, avx2 = false, fma = false, avx512 = false;  // avx512: F, CD, BW, DQ and VL
};

inline CpuVectorFeatures cpu_vector_features() {
  CpuVectorFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // may run before libgcc's own constructor (tessera's load-time BLAS setup)
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

}  // namespace tessera::internal
