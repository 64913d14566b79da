// ArgMax's and ArgMin's rule, shared by the CPU kernel (kernels/select_ops.cc) and the CUDA kernel
// (device/cuda/select_kernels.cu) so that both pick the same position: among n values `stride`
// apart, the first position of the largest (kMax) or the smallest, where a NaN counts as the
// extreme and the first NaN ends the search, as in TensorFlow. `widen` makes a stored value
// comparable (a 16-bit float to float; others as they are). nvcc compiles this header alone.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tessera::internal {

template <bool kMax, class T, class Widen>
TESSERA_HOST_DEVICE inline int64_t arg_extreme(const T* values, int64_t n, int64_t stride, Widen widen) {
  auto best = widen(values[0]);
  int64_t at = 0;
  for (int64_t k = 1; k < n && best == best; ++k) {
    const auto v = widen(values[k * stride]);
    if (v != v || (kMax ? v > best : v < best)) {
      best = v;
      at = k;
    }
  }
  return at;
}

}  // namespace tessera::internal
