// Device-side helpers shared by the .cu files of device/cuda/ (nvcc only).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/wrapping_arith.h"
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

// Integer arithmetic wraps as the CPU kernels' does: wrapping_add, wrapping_sub and wrapping_mul
// of core/wrapping_arith.h (tessera::internal, visible here).

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

// widen as a function object, for the shared rules that take one (core/arg_extreme.h).
struct Widen {
  template <class T>
  __host__ __device__ auto operator()(T x) const {
    return widen(x);
  }
};

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

// The loop of a kernel that gathers (or scatters) along an axis: for each element e of [outer, m,
// inner] (grid-strided), with i its position along m and v = indices[i], in_range(e, the element
// (o, v, j) of [outer, limit, inner]) when 0 <= v < limit, else out_of_range(e) and the smallest
// such i recorded at `bad` (atomicMin).
template <class I, class InRange, class OutOfRange>
__device__ __forceinline__ void for_each_indexed(const I* indices, int64_t outer, int64_t limit, int64_t m,
                                                 int64_t inner, unsigned long long* bad, InRange in_range,
                                                 OutOfRange out_of_range) {
  const int64_t total = outer * m * inner;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t j = e % inner;
    const int64_t i = (e / inner) % m;
    const int64_t o = e / (inner * m);
    const auto v = static_cast<int64_t>(indices[i]);
    if (v < 0 || v >= limit) {
      out_of_range(e);
      atomicMin(bad, static_cast<unsigned long long>(i));
    } else {
      in_range(e, (o * limit + v) * inner + j);
    }
  }
}

// bad[1] = indices[bad[0]] when an indexed kernel recorded a position bad[0] in [0, m): the value of
// the first index out of range, for the error message.
template <class I>
__global__ void bad_value_kernel(const I* indices, int64_t m, int64_t* bad) {
  if (bad[0] >= 0 && bad[0] < m) bad[1] = static_cast<int64_t>(indices[bad[0]]);
}

// An indexed kernel and its check, in stream order (host code): launch(idx, flag) with the m
// `indices` typed as visit_indices does, whose kernel records the first position of an index out
// of range at `flag` (bad[0], by atomicMin), then bad_value_kernel.
template <class Fn>
cudaError_t launch_with_index_check(bool int64, const void* indices, int64_t m, int64_t* bad, cudaStream_t stream,
                                    Fn&& launch) {
  auto* flag = reinterpret_cast<unsigned long long*>(bad);
  visit_indices(int64, indices, [&](const auto* idx) {
    launch(idx, flag);
    bad_value_kernel<<<1, 1, 0, stream>>>(idx, m, bad);
  });
  return cudaGetLastError();
}

// A vector of N values of T for 16-byte loads and stores.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

}  // namespace tessera::internal::gpu
