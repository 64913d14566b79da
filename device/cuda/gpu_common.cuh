// Device-side helpers shared by the .cu files of device/cuda/ (nvcc only).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "device/cuda/gpu_launch.h"

namespace tessera::internal::gpu {

inline constexpr int kThreads = 256;
// Grid-stride loops need no more blocks than this to fill any current GPU several times over.
inline constexpr int64_t kMaxBlocks = 65536;

inline unsigned int blocks_for(int64_t n, int64_t per_block) {
  int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned int>(blocks);
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// The offsets into two strided operands of element i of a row-major loop over dims[0, rank)
// (outermost first): i split into loop indices from the innermost dim out, each times the
// operands' strides. I: the index type (32 bits where everything fits: integer division is much
// cheaper there). The general broadcast and the strided copy walk their geometries with it.
template <class I, int kN>
__device__ __forceinline__ void strided_offsets(I i, int rank, const int64_t (&dims)[kN],
                                                const int64_t (&a_strides)[kN], const int64_t (&b_strides)[kN], I& a,
                                                I& b) {
  I rest = i;
  a = 0;
  b = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const I dim = static_cast<I>(dims[d]);
    const I index = rest % dim;
    rest /= dim;
    a += index * static_cast<I>(a_strides[d]);
    b += index * static_cast<I>(b_strides[d]);
  }
}

// Integer arithmetic through the unsigned type, where overflow wraps (as the CPU kernels do).
template <class T>
__device__ __forceinline__ T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
__device__ __forceinline__ T wrapping_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <class T>
__device__ __forceinline__ T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// ---- The 16-bit floats: stored as __half / __nv_bfloat16, computed in float32 ----

template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool is_floating = std::is_floating_point_v<T> || is_16bit_float<T>;

// The type a kernel computes and accumulates T in: float for the 16-bit floats, else T.
template <class T>
using Accumulate = std::conditional_t<is_16bit_float<T>, float, T>;

// x as its computation type (exact).
template <class T>
__host__ __device__ __forceinline__ Accumulate<T> widen(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}

// A computed value stored as T: the one rounding (to nearest even) of a 16-bit float's result.
template <class T>
__host__ __device__ __forceinline__ T narrow(Accumulate<T> x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

// Calls fn(T{}) with the C++ type of `elem` (host code: picks the kernel to launch).
template <class Fn>
cudaError_t visit_elem(Elem elem, Fn&& fn) {
  switch (elem) {
    case Elem::kF32: return fn(float{});
    case Elem::kF64: return fn(double{});
    case Elem::kI32: return fn(int32_t{});
    case Elem::kI64: return fn(int64_t{});
    case Elem::kBool: return fn(bool{});
    case Elem::kF16: return fn(__half{});
    case Elem::kBF16: return fn(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// Calls fn(T{}) with the unsigned integer type of `bytes` bytes (host code: kernels that move
// elements by their size alone).
template <class Fn>
cudaError_t visit_size(int bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
  }
  return cudaErrorInvalidValue;
}

// Calls fn(p) with `indices` as what it points to: int64 (`int64`) or int32 values (host code:
// kernels over an index input of either dtype).
template <class Fn>
void visit_indices(bool int64, const void* indices, Fn&& fn) {
  if (int64) {
    fn(static_cast<const int64_t*>(indices));
  } else {
    fn(static_cast<const int32_t*>(indices));
  }
}

// A vector of N values of T for 16-byte loads and stores.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

}  // namespace tessera::internal::gpu
