// CUDA kernels of the shape ops (gpu_shape_ops.cc): one strided copy for Transpose, ConcatV2,
// Split, Slice, Tile and Pad (the plans of core/shape_ops.h, the same the CPU kernels walk), a
// fill for Fill, ZerosLike's and OnesLike's values and Size, and a small write for Shape's dims.
// Elements move by their size alone (1, 2, 4 or 8 bytes), so one kernel serves every dtype.
//
// The copy is a grid-stride loop over the destination's elements in loop order: each thread turns
// its index into the loop indices and both offsets, in 32-bit arithmetic when every index and
// offset fits (the common case: integer division is much cheaper there). Plans are simplified
// first, so a contiguous run is one innermost loop, whose consecutive threads read and write
// consecutive elements.
#include <cstdint>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

template <class T, class Index>
__global__ void strided_copy_kernel(CopyGeometry g, const T* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    Index s;
    Index d;
    strided_offsets(static_cast<Index>(i), g.rank, g.dims, g.src_strides, g.dst_strides, s, d);
    dst[d] = src[s];
  }
}

template <class T>
__global__ void fill_kernel(T value, T* __restrict__ out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = value;
}

__global__ void write_int32_kernel(Int32Values values, int n, int32_t* __restrict__ out) {
  if (static_cast<int>(threadIdx.x) < n) out[threadIdx.x] = values.v[threadIdx.x];
}

// Whether every loop index and offset of `g` over n elements fits 32 bits.
bool fits_32_bits(const CopyGeometry& g, int64_t n) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  int64_t src_end = 0;
  int64_t dst_end = 0;
  for (int k = 0; k < g.rank; ++k) {
    src_end += (g.dims[k] - 1) * g.src_strides[k];
    dst_end += (g.dims[k] - 1) * g.dst_strides[k];
  }
  return n < kLimit && src_end < kLimit && dst_end < kLimit;
}

}  // namespace

cudaError_t launch_strided_copy(int elem_bytes, const CopyGeometry& geometry, const void* src, void* dst, int64_t n,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool narrow_index = fits_32_bits(geometry, n);
  return visit_size(elem_bytes, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    const auto* s = static_cast<const T*>(src);
    auto* d = static_cast<T*>(dst);
    if (narrow_index) {
      strided_copy_kernel<T, uint32_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(geometry, s, d, n);
    } else {
      strided_copy_kernel<T, int64_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(geometry, s, d, n);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_fill(int elem_bytes, uint64_t bits, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return visit_size(elem_bytes, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    fill_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T>(bits), static_cast<T*>(out), n);
    return cudaGetLastError();
  });
}

cudaError_t launch_write_int32(const Int32Values& values, int n, void* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > kMaxDims) return cudaErrorInvalidValue;
  write_int32_kernel<<<1, kMaxDims, 0, stream>>>(values, n, static_cast<int32_t*>(out));
  return cudaGetLastError();
}

}  // namespace tessera::internal::gpu
