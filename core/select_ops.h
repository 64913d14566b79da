// The shape arithmetic of the selection ops (SelectV2, GatherV2, OneHot, ArgMax/ArgMin) and the
// three-way broadcast the comparisons and SelectV2 walk, shared by their definitions
// (core/select_ops.cc, at graph-build time, on partial shapes) and their kernels
// (kernels/select_ops.cc, device/cuda/gpu_select_ops.cc, on concrete shapes), so that a check gives
// the same message wherever it is made. Errors are InvalidArgument without the op's name (callers
// prefix it); an unknown dim or rank is left for the kernel to check.
//
//   gather_shape(Shape{5, 3}, Shape{2, 4}, 0);       // [2,4,3]
//   auto b = Broadcast3::make(cond, x, y);            // in a kernel: out[i] from in[k][offset(k, i)]
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// Element i of an index tensor (GatherV2's indices, OneHot's, the sparse labels) as int64,
// whatever its dtype (Int32 or Int64).
inline int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Int32 ? int64_t{t.data<int32_t>()[i]} : t.data<int64_t>()[i];
}

// InvalidArgument "indices[i] = v is not in [0, limit)": GatherV2's and GatherGrad's error for the
// first index out of range, on every device.
Status index_out_of_range(int64_t i, int64_t v, int64_t limit);
// index_out_of_range of the first of the `m` indices outside [0, limit); OK when there is none.
Status check_indices(const Tensor& indices, int64_t m, int64_t limit);

// GatherV2: params.shape[:axis] + indices.shape + params.shape[axis + 1:]; params of rank >= 1.
StatusOr<Shape> gather_shape(const Shape& params, const Shape& indices, int64_t axis);
// A GatherV2 kernel's view of its inputs: out[outer, m, inner] = params[outer, indices[m], inner],
// every index to be in [0, limit). Checks the indices' dtype (Int32 or Int64) and the shapes
// (gather_shape), for the CPU and GPU kernels alike.
struct GatherGeometry {
  Shape out;
  int64_t outer = 1;
  int64_t limit = 0;
  int64_t m = 0;  // the number of indices
  int64_t inner = 1;
};
StatusOr<GatherGeometry> gather_geometry(const Tensor& params, const Tensor& indices, int64_t axis);
// ArgMax/ArgMin: `in` without `axis`, whose size must not be 0.
StatusOr<Shape> arg_reduce_shape(const Shape& in, int64_t axis);
// An ArgMax/ArgMin kernel's view of its input: out[outer, inner] is a position among the `n`
// elements of in[outer, :, inner] (arg_reduce_shape's checks).
struct ArgReduceGeometry {
  Shape out;
  int64_t outer = 1;
  int64_t n = 0;
  int64_t inner = 1;
};
StatusOr<ArgReduceGeometry> arg_reduce_geometry(const Shape& in, int64_t axis);
// OneHot (axis -1): indices.shape + [depth], depth >= 0.
StatusOr<Shape> one_hot_shape(const Shape& indices, int64_t depth);
// A OneHot kernel's output shape: one_hot_shape of `indices`, whose dtype must be Int32 or Int64.
StatusOr<Shape> one_hot_output_shape(const Tensor& indices, int64_t depth);
// An AddN kernel's check of its input k: input 0's shape and dtype.
Status add_n_input_check(const Tensor& first, const Tensor& input, int k);

// NumPy broadcasting of up to three concrete shapes (a comparison passes Shape{} as the third):
// the output shape, and each input's element stride along every output dim (0 where broadcast),
// size-1 output dims dropped. InvalidArgument "incompatible shapes ..." when they do not broadcast.
// Thread safety: an immutable value once made.
struct Broadcast3 {
  Shape out;
  int rank = 0;  // of the merged dims below (0: one element, or none)
  std::array<int64_t, Shape::kMaxRank> dims{};
  std::array<std::array<int64_t, Shape::kMaxRank>, 3> strides{};

  static StatusOr<Broadcast3> make(const Shape& a, const Shape& b, const Shape& c);
  // A comparison kernel's inputs (a comparison `ordering` numbers only, or a `logical` op, bools
  // only): one dtype that the op takes, broadcast against each other.
  static StatusOr<Broadcast3> compare(const Tensor& a, const Tensor& b, bool ordering, bool logical);
  // A SelectV2 kernel's inputs: a bool cond, x and y of one dtype, broadcast among the three.
  static StatusOr<Broadcast3> select(const Tensor& cond, const Tensor& x, const Tensor& y);
  // The offset of output element i in input k.
  int64_t offset(int k, int64_t i) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % dims[d]) * strides[k][d];
      i /= dims[d];
    }
    return off;
  }
};

}  // namespace tessera::internal
