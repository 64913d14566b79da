// Tensors as float64 values, for the suites that check kernels against references or against each
// other (tests/kernels_test.cc, tests/gpu/cuda_kernels_test.cc) and for benchmarks: the dtype
// visitor, values in and out of a tensor, seeded random inputs, and the normalised squared error
// of floating point outputs. Header-only and free of gtest (benchmarks may include it); the gtest
// checks built on it are in tests/testing/tensor_expect.h.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/dtype_visit.h"
#include "tessera/tessera.h"

namespace tessera::testing {

inline constexpr DType kNumericDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64,
                                           DType::Float16, DType::BFloat16};
inline constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool,
                                       DType::Float16, DType::BFloat16};

// Calls fn(T{}) with the C++ type of `dtype` (the kernels' visitor); nothing for string, which is
// not a number: compared with to_vector<std::string>.
using internal::visit_dtype;

// The elements of a host tensor as doubles (int64 beyond 2^53 rounds: compare those as int64).
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.num_elements()));
  visit_dtype(t.dtype(), [&](auto type) {
    const auto* p = t.data<decltype(type)>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i]);
  });
  return out;
}

// A host tensor of `dtype` and `shape` holding `values` (converted with static_cast).
inline Tensor tensor_of(DType dtype, const Shape& shape, const std::vector<double>& values) {
  Tensor t(dtype, shape);
  visit_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    T* p = t.mutable_data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}

// Where random inputs are drawn: uniform reals in [lo, hi] for floating point dtypes, uniform
// integers there for integer dtypes, fair coins for bool; `nonzero` keeps away from 0 (divisors).
struct Range {
  double lo;
  double hi;
  bool nonzero = false;
};

// Random input tensors from one seeded generator (the same seed, the same inputs).
class RandomInputs {
 public:
  explicit RandomInputs(uint64_t seed = 20240601) : gen_(seed) {}

  Tensor tensor(DType dtype, const Shape& shape, Range r) {
    std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
    for (double& x : v) {
      do {
        if (dtype == DType::Bool) {
          x = std::bernoulli_distribution(0.5)(gen_);
        } else if (dtype_is_floating(dtype)) {
          x = std::uniform_real_distribution<double>(r.lo, r.hi)(gen_);
        } else {
          x = static_cast<double>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(r.lo),
                                                                         static_cast<int64_t>(r.hi))(gen_));
        }
      } while (r.nonzero && std::abs(x) < 0.25);
    }
    return tensor_of(dtype, shape, v);
  }

 private:
  std::mt19937_64 gen_;
};

// A placeholder in `g` with the dtype and shape of `t` (the tensor that will be fed to it).
inline Output feed(Graph& g, const Tensor& t) { return ops::placeholder(g, t.dtype(), t.shape()); }

// "float32 [2,3] [3]": a dtype and shapes, for traces.
inline std::string describe(DType dtype, const std::vector<Shape>& shapes) {
  std::string s(dtype_name(dtype));
  for (const Shape& shape : shapes) {
    s += ' ';  // appended in two steps: GCC 12 warns (-Wrestrict, falsely) about " " + string
    s += shape.to_string();
  }
  return s;
}

// The normalised squared error a floating point output may have: `f32` for float32, 1e-24 for
// float64; for the 16-bit floats, whose results are rounded once from float32, a few times their
// unit roundoff squared (2^-22 for float16, 2^-16 for bfloat16), or `f32` where that is larger.
inline double nmse_tolerance(DType dtype, double f32 = 1e-10) {
  switch (dtype) {
    case DType::Float64: return 1e-24;
    case DType::Float16: return f32 > 1e-6 ? f32 : 1e-6;
    case DType::BFloat16: return f32 > 6e-5 ? f32 : 6e-5;
    default: return f32;
  }
}

// How far `got` is from `want`, element by element: the normalised squared error over the finite
// elements of `want` (the squared error itself where they are all zero), and the elements where
// `want` is NaN or an infinity and `got` is not the same.
struct ValueDifference {
  double nmse = 0;
  std::vector<std::size_t> mismatched_specials;
};

inline ValueDifference difference(const std::vector<double>& got, const std::vector<double>& want) {
  ValueDifference d;
  double err = 0;
  double norm = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      if (!same) d.mismatched_specials.push_back(i);
      continue;
    }
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  d.nmse = norm > 0 ? err / norm : err;
  return d;
}

}  // namespace tessera::testing
