// CUDA kernels of the scans Cumsum and Cumprod, with the semantics of kernels/scan_ops.cc bit for
// bit: one thread per line along the axis, folding from the identity in scan order (acc = op(acc,
// x)), integers wrapping. The axis is read on the device (launch_scan in gpu_launch.h); the lines
// are grid-stride, so the grid need only be sized by a bound on their count.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

template <ScanKind kOp, class T>
__device__ __forceinline__ T combine(T acc, T x) {
  if constexpr (kOp == ScanKind::kSum) {
    return wrapping_add(acc, x);
  } else {
    return wrapping_mul(acc, x);
  }
}

template <ScanKind kOp, class T>
__global__ void scan_kernel(ScanShape shape, const void* axis_ptr, bool int64_axis, bool exclusive, bool reverse,
                            const T* x, T* y, int64_t n, int64_t* bad) {
  const int64_t axis =
      int64_axis ? *static_cast<const int64_t*>(axis_ptr) : int64_t{*static_cast<const int32_t*>(axis_ptr)};
  if (axis < -shape.rank || axis >= shape.rank) {
    if (global_thread() == 0) {
      bad[0] = 1;
      bad[1] = axis;
    }
    return;
  }
  const int a = static_cast<int>(axis < 0 ? axis + shape.rank : axis);
  const int64_t len = shape.dims[a];
  int64_t inner = 1;
  for (int d = a + 1; d < shape.rank; ++d) inner *= shape.dims[d];
  const int64_t lines = len == 0 ? 0 : n / len;
  const T identity = kOp == ScanKind::kSum ? T(0) : T(1);
  for (int64_t l = global_thread(); l < lines; l += grid_threads()) {
    const int64_t start = (l / inner) * len * inner + l % inner;
    const T* xl = x + start;
    T* yl = y + start;
    T acc = identity;
    for (int64_t s = 0; s < len; ++s) {
      const int64_t k = (reverse ? len - 1 - s : s) * inner;
      if (exclusive) yl[k] = acc;
      acc = combine<kOp>(acc, xl[k]);
      if (!exclusive) yl[k] = acc;
    }
  }
}

}  // namespace

cudaError_t launch_scan(ScanKind op, Elem elem, const ScanShape& shape, const void* axis, bool int64_axis,
                        bool exclusive, bool reverse, const void* x, void* out, int64_t n, int64_t* bad,
                        cudaStream_t stream) {
  if (shape.rank < 0 || shape.rank > kMaxDims || n < 0) return cudaErrorInvalidValue;
  // At most n / (the smallest dim) lines, whichever axis it is; one block still checks the axis
  // when there are none.
  int64_t smallest = 1;
  for (int d = 0; d < shape.rank; ++d) smallest = d == 0 ? shape.dims[d] : std::min(smallest, shape.dims[d]);
  const unsigned blocks = blocks_for(smallest > 0 ? n / smallest : 0, kThreads);
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double> && !std::is_same_v<T, int32_t> &&
                  !std::is_same_v<T, int64_t>) {
      return cudaErrorInvalidValue;
    } else {
      const auto* px = static_cast<const T*>(x);
      auto* py = static_cast<T*>(out);
      if (op == ScanKind::kSum) {
        scan_kernel<ScanKind::kSum><<<blocks, kThreads, 0, stream>>>(shape, axis, int64_axis, exclusive, reverse,
                                                                      px, py, n, bad);
      } else {
        scan_kernel<ScanKind::kProd><<<blocks, kThreads, 0, stream>>>(shape, axis, int64_axis, exclusive, reverse,
                                                                       px, py, n, bad);
      }
      return cudaGetLastError();
    }
  });
}

}  // namespace tessera::internal::gpu
