// a + b, a - b and a * b for every number type, integers wrapping around on overflow: the
// arithmetic goes through the unsigned type, where overflow is defined (and compiles to the same
// instructions). Floating-point types as they are. And an integer quotient rounded down. Shared by the CPU kernels and the CUDA kernels
// (device/cuda/gpu_common.cuh) so that both wrap the same way; nvcc compiles this header alone.
#pragma once

#include <type_traits>

#include "core/host_device.h"

namespace tessera::internal {

template <class T>
TESSERA_HOST_DEVICE inline T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
TESSERA_HOST_DEVICE inline T wrapping_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <class T>
TESSERA_HOST_DEVICE inline T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// a / b for integers, rounded toward negative infinity: TF1's tf.div on integers (Python 2's `/`,
// a FloorDiv), so -7 / 2 is -4 where C++ gives -3. MIN / -1 wraps to MIN (C++'s overflows and
// traps on x86). b must not be 0: the kernels check divisors first.
template <class T>
TESSERA_HOST_DEVICE inline T floor_div(T a, T b) {
  static_assert(std::is_integral_v<T>);
  if (b == T(-1)) return wrapping_sub(T{0}, a);
  const T q = a / b;
  if constexpr (std::is_signed_v<T>) {
    if (q * b != a && ((a < 0) != (b < 0))) return q - 1;
  }
  return q;
}

}  // namespace tessera::internal
