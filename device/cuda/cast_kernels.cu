// CUDA kernel for Cast between any two of the seven dtypes, converting exactly as
// kernels/cast_op.cc does: to bool is `x != 0` (NaN is true), from bool gives 0 or 1, floating
// point to integer truncates toward zero but saturates at the integer's range (NaN gives 0), and
// integer narrowing wraps (two's complement). float16 and bfloat16 convert through float32: from
// them, the float32 value converts; to them, the value is first made a float32 (float64 and int64
// round there), then rounded once more to 16 bits, as on the CPU.
#include <cstdint>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

template <class T> struct IntLimits;
template <> struct IntLimits<int32_t> {
  static constexpr int32_t kMin = INT32_MIN;
  static constexpr int32_t kMax = INT32_MAX;
};
template <> struct IntLimits<int64_t> {
  static constexpr int64_t kMin = INT64_MIN;
  static constexpr int64_t kMax = INT64_MAX;
};

template <class To, class From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (is_16bit_float<From>) {
    return convert<To>(widen(x));
  } else if constexpr (is_16bit_float<To>) {
    return narrow<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Compared in double, where every bound is exact: 2^31, 2^63, -2^31 - 1 and -2^63 are.
    const double d = static_cast<double>(x);
    constexpr double kTooLarge = 2.0 * static_cast<double>(IntLimits<To>::kMax / 2 + 1);
    if (d != d) return To{0};
    if (d >= kTooLarge) return IntLimits<To>::kMax;
    if (!(d > static_cast<double>(IntLimits<To>::kMin) - 1.0)) return IntLimits<To>::kMin;
    return static_cast<To>(d);
  } else {
    return static_cast<To>(x);
  }
}

template <class To, class From>
__global__ void cast_kernel(const From* __restrict__ in, To* __restrict__ out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = convert<To>(in[i]);
}

}  // namespace

cudaError_t launch_cast(Elem from, Elem to, const void* x, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return visit_elem(from, [&](auto from_type) -> cudaError_t {
    return visit_elem(to, [&](auto to_type) -> cudaError_t {
      using From = decltype(from_type);
      using To = decltype(to_type);
      if constexpr (std::is_same_v<From, To>) {
        return cudaErrorInvalidValue;  // the op shares the buffer instead
      } else {
        cast_kernel<To, From><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const From*>(x),
                                                                                static_cast<To*>(out), n);
        return cudaGetLastError();
      }
    });
  });
}

}  // namespace tessera::internal::gpu
