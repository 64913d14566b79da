// gtest checks of kernel outputs as float64 values (tests/testing/tensor_values.h): integers and
// bools exactly, floating point by normalised squared error with NaN and infinities in the same
// places.
#pragma once

#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "tests/testing/tensor_values.h"

namespace tessera::testing {

// Floating point values: NaN and infinities of `want` exactly (the first five mismatches named),
// the rest within `tolerance` by normalised squared error.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  const ValueDifference d = difference(got, want);
  for (std::size_t k = 0; k < d.mismatched_specials.size() && k < 5; ++k) {
    const std::size_t i = d.mismatched_specials[k];
    ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  if (d.mismatched_specials.size() > 5) {
    ADD_FAILURE() << d.mismatched_specials.size() - 5 << " more elements where NaN or infinity differ";
  }
  EXPECT_LE(d.nmse, tolerance);
}

// Checks dtype and shape exactly, then the values: integers and bools exactly, floating point by
// expect_close with nmse_tolerance(dtype, f32_tolerance).
inline void expect_values(const Tensor& got, DType dtype, const Shape& shape, const std::vector<double>& want,
                          double f32_tolerance = 1e-10) {
  ASSERT_FALSE(got.is_null());
  ASSERT_EQ(got.dtype(), dtype);
  ASSERT_EQ(got.shape(), shape);
  ASSERT_EQ(static_cast<std::size_t>(got.num_elements()), want.size());
  const std::vector<double> v = values_of(got);
  if (!dtype_is_floating(dtype)) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], want[i]) << "element " << i;
    }
    return;
  }
  expect_close(v, want, nmse_tolerance(dtype, f32_tolerance));
}

// `got` against another kernel's output `want`: dtype and shape exactly, integers and bools exactly
// (as themselves, so int64 beyond 2^53 too), floating point as expect_values does.
inline void expect_same(const Tensor& got, const Tensor& want, double f32_tolerance = 1e-10) {
  ASSERT_FALSE(got.is_null());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  if (!dtype_is_floating(want.dtype())) {
    EXPECT_TRUE(got.equals(want)) << "integer or bool values differ";
    return;
  }
  expect_close(values_of(got), values_of(want), nmse_tolerance(want.dtype(), f32_tolerance));
}

}  // namespace tessera::testing
