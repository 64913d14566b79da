// The case grids the kernel suites share (tests/kernels_test.cc, against references;
// tests/gpu/cuda_kernels_test.cc, against the CPU kernels): the unary ops, Cast, MatMul and the
// reductions over dtypes and shapes, random inputs from one seeded generator per grid, and the
// reductions' edge cases. Each calls the suite's check under a SCOPED_TRACE naming the case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/tensor_values.h"

namespace tessera::testing {

// Calls fn(op, x) for each op of `unary_ops` (with .type, .floating_only and .float_range), every
// numeric dtype it takes and each shape: x random, in the op's range (integers in [-50, 50]).
template <class Op, std::size_t kOps, class Fn>
void for_each_unary_case(const Op (&unary_ops)[kOps], const std::vector<Shape>& shapes, Fn&& fn) {
  RandomInputs rng;
  for (const Op& op : unary_ops) {
    for (DType dtype : kNumericDTypes) {
      if (op.floating_only && !dtype_is_floating(dtype)) continue;
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(std::string(op.type) + " " + describe(dtype, {shape}));
        const Tensor x = rng.tensor(dtype, shape, dtype_is_floating(dtype) ? op.float_range : Range{-50, 50});
        fn(op, x);
      }
    }
  }
}

// Calls fn(x, to) for every pair of dtypes and each shape: x random in [-100, 100], with an exact
// zero at element 1 (where a conversion to bool turns).
template <class Fn>
void for_each_cast_case(const std::vector<Shape>& shapes, Fn&& fn) {
  RandomInputs rng;
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(describe(from, {shape}) + " to " + std::string(dtype_name(to)));
        Tensor x = rng.tensor(from, shape, Range{-100, 100});
        if (x.num_elements() > 1) {
          std::vector<double> v = values_of(x);
          v[1] = 0;
          x = tensor_of(from, shape, v);
        }
        fn(x, to);
      }
    }
  }
}

// out[m, n] = a[m, k] * b[k, n], before transposition.
struct MatMulSize {
  int64_t m, k, n;
};

// Calls fn(a, b, transpose_a, transpose_b, size) for every case of the grid over `sizes`, under a
// SCOPED_TRACE naming it.
template <class Fn>
void for_each_matmul_case(const std::vector<MatMulSize>& sizes, Fn&& fn) {
  RandomInputs rng;
  for (DType dtype : kNumericDTypes) {
    const Range range = dtype_is_floating(dtype) ? Range{-1, 1} : Range{-5, 5};
    for (const MatMulSize& size : sizes) {
      const auto [m, k, n] = size;
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Shape a_shape = ta ? Shape{k, m} : Shape{m, k};
          const Shape b_shape = tb ? Shape{n, k} : Shape{k, n};
          SCOPED_TRACE(describe(dtype, {a_shape, b_shape}) + (ta ? " ta" : "") + (tb ? " tb" : ""));
          const Tensor a = rng.tensor(dtype, a_shape, range);
          const Tensor b = rng.tensor(dtype, b_shape, range);
          fn(a, b, ta, tb, size);
        }
      }
    }
  }
}

// Calls fn(op, x, c, keep_dims) for each op of `reductions` (with .type and .build), every numeric
// dtype, each case c of `cases` (with .in, the input shape, and .axes) and keep_dims false and true:
// x random of shape c.in, in range(op, dtype).
template <class Op, std::size_t kOps, class Case, class RangeFn, class Fn>
void for_each_reduction_case(const Op (&reductions)[kOps], const std::vector<Case>& cases, RangeFn&& range, Fn&& fn) {
  RandomInputs rng;
  for (const Op& op : reductions) {
    for (DType dtype : kNumericDTypes) {
      for (const Case& c : cases) {
        for (bool keep_dims : {false, true}) {
          SCOPED_TRACE(std::string(op.type) + " " + describe(dtype, {c.in}) + " axes " +
                       ::testing::PrintToString(c.axes) + (keep_dims ? " keep_dims" : ""));
          const Tensor x = rng.tensor(dtype, c.in, range(op, dtype));
          fn(op, x, c, keep_dims);
        }
      }
    }
  }
}

// A reduction axis only the kernel can check: ReduceSum over axis 2 of a placeholder of unknown
// shape, fed a [2, 3] input. Calls check_fails(y, inputs, what the error must say).
template <class Fn>
void for_late_reduction_axis(Fn&& check_fails) {
  Graph g;
  const Output y = ops::reduce_sum(ops::placeholder(g, DType::Float32), {2}, false, "late");
  check_fails(y, std::vector<Tensor>{Tensor::zeros(DType::Float32, Shape{2, 3})}, "axis 2 is out of range");
}

// ReduceMax's NaN input: [2, 40] ones of `dtype` but a NaN at element 3, so that row 0 and column 3
// reduce to NaN and the rest to 1.
inline Tensor reduce_max_nan_input(DType dtype) {
  std::vector<double> values(80, 1.0);
  values[3] = std::numeric_limits<double>::quiet_NaN();
  return tensor_of(dtype, Shape{2, 40}, values);
}

}  // namespace tessera::testing
