// What the host CPU can do beyond the x86-64 baseline the library is compiled for, asked once.
// Kernels compile their hot loops a second time for AVX-512 (__attribute__((target("avx512f"))))
// and take that copy where this says so. Valgrind hides AVX-512: under it the baseline copies run.
#pragma once

namespace tessera::internal {

inline bool has_avx512f() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

}  // namespace tessera::internal
