// The checks and geometry of the scans Cumsum and Cumprod, shared by their definitions
// (core/scan_ops.cc, at graph-build time, on partial shapes and a constant axis) and their kernels
// (kernels/scan_ops.cc, device/cuda/gpu_scan_ops.cc, on concrete tensors), so that a check gives
// the same message wherever it is made. Errors are InvalidArgument without the op's name (callers
// prefix it).
//
//   auto axis = scan_axis(axis_tensor, x.shape());           // in a kernel: int32/int64 scalar, in range
//   ScanGeometry g = scan_geometry(x.shape(), axis.value());  // x as [outer, len, inner]
#pragma once

#include <cstdint>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// x: float32, float64, int32 or int64 (the dtypes with scan kernels).
Status check_scan_dtype(DType x);
// The axis input: int32 or int64, a scalar (an unknown rank passes, for the kernel to check).
Status check_scan_axis_input(DType axis, const Shape& shape);
// `axis` resolved against x's rank, as TensorFlow: in [-rank, rank), a negative one counted from
// the end. A scalar x has no axis to scan.
StatusOr<int> resolve_scan_axis(int64_t axis, const Shape& x);
// The axis tensor's value, checked (check_scan_axis_input) and resolved (resolve_scan_axis).
StatusOr<int> scan_axis(const Tensor& axis, const Shape& x);

// x (concrete, row-major) as `outer` blocks of `len` rows of `inner` elements: each of the
// outer * inner lines is scanned along len, its elements `inner` apart.
struct ScanGeometry {
  int64_t outer = 1;
  int64_t len = 1;
  int64_t inner = 1;
};
ScanGeometry scan_geometry(const Shape& x, int axis);

}  // namespace tessera::internal
