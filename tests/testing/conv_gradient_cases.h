// Numeric gradient checks of the convolution and pooling ops and of their gradient ops (second
// derivatives), as conv_ops_test.py and pooling_ops_test.py check them with gradient_checker, on
// the device of the instantiation. Included by tests/gradient_check_test.cc (CPU, SIM) and
// tests/gpu/cuda_gradient_check_test.cc (GPU).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/conv_ops.h"
#include "tests/testing/gradient_case_test.h"

namespace tessera::testing {

// The op types whose gradient functions these cases check.
inline const std::vector<std::string> kConvGradientOps = {"Conv2D", "MaxPool", "AvgPool", "Conv2DBackpropInput",
                                                          "Conv2DBackpropFilter", "AvgPoolGrad"};

class ConvGradientTest : public GradientCaseTest {};

namespace conv_gradient_cases {

constexpr double kTolerance = 1e-6;

using Dims = std::vector<int64_t>;

// An NHWC input, a kh x kw window with o out channels (a pool ignores o), strides, padding.
struct Case {
  Dims in;
  int64_t kh, kw, o, sh, sw;
  std::string padding;
  std::string describe() const {
    return fmt::format("{} {}x{} stride {}x{} {}", Shape(in).to_string(), kh, kw, sh, sw, padding);
  }
};

// Pointwise, VALID, SAME with strides, rectangular windows, kernel smaller than the stride; 3x3
// stride 1 with 8 channels (Winograd's algorithm on the CPU, kernels/conv_winograd.cc: 4x4 tiles,
// then 2x2 ones), an odd width.
inline const Case kConvCases[] = {
    {{2, 3, 3, 2}, 1, 1, 2, 1, 1, "VALID"},
    {{1, 4, 4, 2}, 2, 2, 3, 1, 1, "VALID"},
    {{1, 5, 4, 2}, 3, 3, 2, 2, 2, "SAME"},
    {{1, 4, 5, 2}, 2, 3, 2, 3, 2, "SAME"},
    {{1, 3, 5, 8}, 3, 3, 8, 1, 1, "SAME"},
    {{1, 2, 5, 8}, 3, 3, 8, 1, 1, "SAME"},
};
// Disjoint windows; overlapping windows with padding; a rectangular window over two images.
inline const Case kPoolCases[] = {
    {{1, 4, 4, 2}, 2, 2, 0, 2, 2, "VALID"},
    {{1, 5, 4, 2}, 3, 3, 0, 2, 2, "SAME"},
    {{2, 3, 4, 1}, 2, 3, 0, 1, 1, "SAME"},
};

inline std::vector<int> nhwc(int64_t h, int64_t w) { return {1, static_cast<int>(h), static_cast<int>(w), 1}; }

// Values 0.05 apart in a shuffled order: no two elements of a window are within the checker's
// step of each other, so each window's maximum stays where it is while the checker moves one.
inline Tensor distinct(const Dims& dims, uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(Shape(dims).num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.05 * (static_cast<double>(i) - static_cast<double>(v.size()) / 2);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return tensor_of(DType::Float64, Shape(dims), v);
}

// The shape of conv2d's output for the case, as shape inference gives it.
inline Shape conv_output_shape(const Case& k) {
  Graph g;
  return ops::conv2d(ops::placeholder(g, DType::Float64, Shape(k.in)),
                     ops::placeholder(g, DType::Float64, Shape{k.kh, k.kw, k.in[3], k.o}), nhwc(k.sh, k.sw), k.padding)
      .shape();
}

}  // namespace conv_gradient_cases

TEST_P(ConvGradientTest, Conv2DBothInputs) {
  using conv_gradient_cases::nhwc;
  for (const auto& k : conv_gradient_cases::kConvCases) {
    SCOPED_TRACE(k.describe());
    const Tensor x = random_f64(Shape(k.in), 1);
    const Tensor f = random_f64(Shape{k.kh, k.kw, k.in[3], k.o}, 2);
    EXPECT_LT(error({x, f}, [&](auto in) { return ops::conv2d(in[0], in[1], nhwc(k.sh, k.sw), k.padding); }),
              conv_gradient_cases::kTolerance);
  }
}

TEST_P(ConvGradientTest, Pools) {
  using conv_gradient_cases::nhwc;
  for (const auto& k : conv_gradient_cases::kPoolCases) {
    for (bool max : {true, false}) {
      SCOPED_TRACE(fmt::format("{} {}", max ? "max" : "avg", k.describe()));
      EXPECT_LT(error({conv_gradient_cases::distinct(k.in, 7)},
                      [&](auto in) {
                        return max ? ops::max_pool(in[0], nhwc(k.kh, k.kw), nhwc(k.sh, k.sw), k.padding)
                                   : ops::avg_pool(in[0], nhwc(k.kh, k.kw), nhwc(k.sh, k.sw), k.padding);
                      }),
                conv_gradient_cases::kTolerance);
    }
  }
}

// The gradient ops' own gradients (of their inputs other than the one read for its shape).
TEST_P(ConvGradientTest, SecondOrder) {
  using conv_gradient_cases::Dims;
  using conv_gradient_cases::kTolerance;
  for (const auto& k : conv_gradient_cases::kConvCases) {
    SCOPED_TRACE(k.describe());
    const Tensor x = random_f64(Shape(k.in), 3);
    const Tensor f = random_f64(Shape{k.kh, k.kw, k.in[3], k.o}, 4);
    const Tensor dy = random_f64(conv_gradient_cases::conv_output_shape(k), 5);
    const Dims strides = {1, k.sh, k.sw, 1};
    EXPECT_LT(error({x, f, dy},
                    [&](auto in) { return internal::conv2d_backprop_input(in[0], in[1], in[2], strides, k.padding); },
                    {1, 2}),
              kTolerance);
    EXPECT_LT(error({x, f, dy},
                    [&](auto in) { return internal::conv2d_backprop_filter(in[0], in[1], in[2], strides, k.padding); },
                    {0, 2}),
              kTolerance);
  }
  EXPECT_LT(error({random_f64({1, 5, 4, 2}, 6), random_f64({1, 3, 2, 2}, 7)},
                  [](auto in) {
                    return internal::avg_pool_grad(in[0], in[1], {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME");
                  },
                  {1}),
            kTolerance);
}

}  // namespace tessera::testing
