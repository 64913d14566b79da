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

}  // namespace tessera::internal
