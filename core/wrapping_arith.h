// a + b, a - b and a * b for every number type, integers wrapping around on overflow: the
// arithmetic goes through the unsigned type, where overflow is defined (and compiles to the same
// instructions). Floating-point types as they are. Shared by the CPU kernels and the CUDA kernels
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

}  // namespace tessera::internal
