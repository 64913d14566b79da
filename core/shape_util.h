// Small shape helpers shared by op definitions and kernels.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// "[2,3]": how shape errors write a list of dims or sizes.
inline std::string dims_list(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

// "[[2,3], [?]]": how queue errors write a list of component shapes.
inline std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string out = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) out += (i ? ", " : "") + shapes[i].to_string();
  return out + "]";
}

// [d] + s: the shape of a batch of `d` elements of shape `s` (unknown rank stays unknown).
inline Shape prepend_dim(int64_t d, const Shape& s) {
  if (s.unknown_rank()) return Shape::unknown();
  std::vector<int64_t> dims{d};
  for (int64_t x : s.dims()) dims.push_back(x);
  return Shape(dims);
}

// InvalidArgument (for the kernel to prefix with the op's name) unless a and b have one dtype: the
// run-time check of the binary kernels whose inputs share a dtype.
inline Status check_same_dtype(const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return Status();
  return errors::invalid_argument("inputs must have the same dtype, got {} and {}", dtype_name(a.dtype()),
                                  dtype_name(b.dtype()));
}

// The sizes of out[m, n] = op(a)[m, k] * op(b)[k, n], op transposing when asked. InvalidArgument
// (for the kernel to prefix with the op's name) unless a and b are matrices of one dtype whose
// inner dimensions agree: every device's MatMul checks its run-time inputs with this.
struct MatMulDims {
  int64_t m = 0, k = 0, n = 0;
};
inline StatusOr<MatMulDims> matmul_dims(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  if (a.shape().rank() != 2 || b.shape().rank() != 2) {
    return errors::invalid_argument("inputs must be matrices, got shapes {} and {}", a.shape().to_string(),
                                    b.shape().to_string());
  }
  TESSERA_RETURN_IF_ERROR(check_same_dtype(a, b));
  MatMulDims d;
  d.m = a.shape().dim(transpose_a ? 1 : 0);
  d.k = a.shape().dim(transpose_a ? 0 : 1);
  d.n = b.shape().dim(transpose_b ? 0 : 1);
  if (b.shape().dim(transpose_b ? 1 : 0) != d.k) {
    return errors::invalid_argument(
        "inner dimensions differ: incompatible shapes {} and {} (transpose_a={}, transpose_b={})",
        a.shape().to_string(), b.shape().to_string(), transpose_a, transpose_b);
  }
  return d;
}

}  // namespace tessera::internal
