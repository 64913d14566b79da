// Convolution and pooling through the public API (a Graph, a Session), on the CPU and on a
// simulated accelerator: TensorFlow's cases from conv_ops_test.py and pooling_ops_test.py with
// their documented values, random inputs of many shapes, strides and paddings against the naive
// references below (plain loops over every output and window element), the gradient ops against
// the same references, empty tensors, and every error case, at graph-build time where the shapes
// are known and at run time where they are not (InvalidArgumentError naming the op either way).
#include "core/conv_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/calibration.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/placement.h"
#include "kernels/conv_direct.h"
#include "kernels/cpu_features.h"
#include "kernels/conv_winograd.h"
#include "tests/testing/device_op_test.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using testing::Range;

// ---- References: TF's window arithmetic and the sums written out, independent of the kernels ----

struct Geometry {
  int64_t n, h, w, c;  // input NHWC
  int64_t kh, kw, o;   // window (and, for a convolution, the filter's out channels)
  int64_t sh, sw;      // strides
  int64_t oh, ow;      // output size
  int64_t top, left;   // padding before
};

// TF's output size and padding before for one dim.
std::pair<int64_t, int64_t> out_and_pad(int64_t in, int64_t k, int64_t s, const std::string& padding) {
  if (padding == "VALID") return {(in - k) / s + 1, 0};
  const int64_t out = (in + s - 1) / s;
  return {out, std::max<int64_t>((out - 1) * s + k - in, 0) / 2};
}

Geometry geometry(const Dims& in, int64_t kh, int64_t kw, int64_t o, int64_t sh, int64_t sw,
                  const std::string& padding) {
  Geometry g{in[0], in[1], in[2], in[3], kh, kw, o, sh, sw, 0, 0, 0, 0};
  std::tie(g.oh, g.top) = out_and_pad(g.h, kh, sh, padding);
  std::tie(g.ow, g.left) = out_and_pad(g.w, kw, sw, padding);
  return g;
}

int64_t x_index(const Geometry& g, int64_t n, int64_t h, int64_t w, int64_t c) {
  return ((n * g.h + h) * g.w + w) * g.c + c;
}
int64_t y_index(const Geometry& g, int64_t n, int64_t oh, int64_t ow, int64_t o) {
  return ((n * g.oh + oh) * g.ow + ow) * g.o + o;
}
int64_t f_index(const Geometry& g, int64_t i, int64_t j, int64_t c, int64_t o) {
  return ((i * g.kw + j) * g.c + c) * g.o + o;
}

// Calls fn(n, oh, ow, o, h, w, i, j) for every output element and every window position (i, j) of
// it inside the input (h, w): the seven nested loops every reference below is made of (o runs over
// the filter's out channels; a pool passes its channel as o, with g.o == g.c).
template <class F>
void each_window_element(const Geometry& g, F fn) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t h = oh * g.sh - g.top + i;
              const int64_t w = ow * g.sw - g.left + j;
              if (h >= 0 && h < g.h && w >= 0 && w < g.w) fn(n, oh, ow, o, h, w, i, j);
            }
}

// Calls fn(xi, fi, yi) for every product x[xi] * f[fi] that a convolution adds to y[yi]: the
// convolution and both its gradients are this one sum, each accumulating into another operand.
template <class F>
void each_conv_product(const Geometry& g, F fn) {
  each_window_element(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t h, int64_t w, int64_t i, int64_t j) {
    for (int64_t c = 0; c < g.c; ++c) fn(x_index(g, n, h, w, c), f_index(g, i, j, c, o), y_index(g, n, oh, ow, o));
  });
}

std::vector<double> ref_conv(const Geometry& g, const std::vector<double>& x, const std::vector<double>& f) {
  std::vector<double> y(static_cast<std::size_t>(g.n * g.oh * g.ow * g.o), 0.0);
  each_conv_product(g, [&](int64_t xi, int64_t fi, int64_t yi) { y[yi] += x[xi] * f[fi]; });
  return y;
}

std::vector<double> ref_conv_backprop_input(const Geometry& g, const std::vector<double>& f,
                                            const std::vector<double>& dy) {
  std::vector<double> dx(static_cast<std::size_t>(g.n * g.h * g.w * g.c), 0.0);
  each_conv_product(g, [&](int64_t xi, int64_t fi, int64_t yi) { dx[xi] += dy[yi] * f[fi]; });
  return dx;
}

std::vector<double> ref_conv_backprop_filter(const Geometry& g, const std::vector<double>& x,
                                             const std::vector<double>& dy) {
  std::vector<double> df(static_cast<std::size_t>(g.kh * g.kw * g.c * g.o), 0.0);
  each_conv_product(g, [&](int64_t xi, int64_t fi, int64_t yi) { df[fi] += x[xi] * dy[yi]; });
  return df;
}

// For each pooled element: its window's input indices inside the input, in row-major order.
std::vector<std::vector<int64_t>> pool_windows(const Geometry& g) {
  std::vector<std::vector<int64_t>> windows(static_cast<std::size_t>(g.n * g.oh * g.ow * g.c));
  each_window_element(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t h, int64_t w, int64_t, int64_t) {
    windows[y_index(g, n, oh, ow, c)].push_back(x_index(g, n, h, w, c));
  });
  return windows;
}

// The first largest element of each window (TF's CPU rule).
int64_t ref_argmax(const std::vector<int64_t>& window, const std::vector<double>& x) {
  int64_t best = window.front();
  for (int64_t i : window) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

std::vector<double> ref_pool(const Geometry& g, const std::vector<double>& x, bool max) {
  std::vector<double> y;
  for (const auto& window : pool_windows(g)) {
    double sum = 0;
    for (int64_t i : window) sum += x[i];
    y.push_back(max ? x[ref_argmax(window, x)] : sum / static_cast<double>(window.size()));
  }
  return y;
}

std::vector<double> ref_pool_grad(const Geometry& g, const std::vector<double>& x, const std::vector<double>& dy,
                                  bool max) {
  std::vector<double> dx(x.size(), 0.0);
  const auto windows = pool_windows(g);
  for (std::size_t k = 0; k < windows.size(); ++k) {
    if (max) {
      dx[ref_argmax(windows[k], x)] += dy[k];
    } else {
      for (int64_t i : windows[k]) dx[i] += dy[k] / static_cast<double>(windows[k].size());
    }
  }
  return dx;
}

int64_t count(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Values 1, 2, 3, ... (TF's _VerifyValues inputs).
Tensor iota(DType dtype, const Dims& dims) {
  std::vector<double> v(static_cast<std::size_t>(count(dims)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i + 1);
  return tensor_of(dtype, Shape(dims), v);
}

Tensor random(DType dtype, const Dims& dims) {
  static testing::RandomInputs rng;
  return rng.tensor(dtype, Shape(dims), Range{-1, 1});
}

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64};

std::vector<int> window(int64_t h, int64_t w) { return {1, static_cast<int>(h), static_cast<int>(w), 1}; }
std::vector<int64_t> window64(int64_t h, int64_t w) { return {1, h, w, 1}; }

// ---- Running on each device ----

// A convolution on random inputs: its input dims, window, output channels, strides and padding.
struct ConvCase {
  Dims in;
  int64_t kh, kw, o, sh, sw;
  std::string padding;
};

Geometry geometry(const ConvCase& k) { return geometry(k.in, k.kh, k.kw, k.o, k.sh, k.sw, k.padding); }

// The kernels' view of the case (core/conv_ops.h).
internal::Window2D window_of(const ConvCase& k) {
  internal::WindowAttrs attrs;
  attrs.strides = {1, k.sh, k.sw, 1};
  attrs.padding = k.padding;
  return attrs.conv2d(Shape(k.in), Shape{k.kh, k.kw, k.in[3], k.o}).value();
}

// "float32 [2,5,5,3] 3x3 stride 2x1 SAME": a convolution or pooling case, for traces.
template <class Case>
std::string describe_case(DType dtype, const Case& k) {
  return fmt::format("{} {} {}x{} stride {}x{} {}", dtype_name(dtype), Shape(k.in).to_string(), k.kh, k.kw, k.sh, k.sw,
                     k.padding);
}

// A convolution case's random inputs: the input, the filter and a gradient of the output, drawn in
// that order.
struct ConvInputs {
  Geometry g;
  Tensor x, f, dy;
};

ConvInputs random_inputs(DType dtype, const ConvCase& k) {
  const Geometry g = geometry(k);
  Tensor x = random(dtype, k.in);
  Tensor f = random(dtype, {k.kh, k.kw, g.c, k.o});
  Tensor dy = random(dtype, {g.n, g.oh, g.ow, g.o});
  return {g, std::move(x), std::move(f), std::move(dy)};
}

constexpr DType kHalfDTypes[] = {DType::Float16, DType::BFloat16};

// `t`'s values as float32 (exact: every 16-bit value is a float32).
Tensor widened(const Tensor& t) { return tensor_of(DType::Float32, t.shape(), values_of(t)); }
// A float32 result as ops::cast rounds it to `dtype` (to nearest even).
Tensor rounded(const Tensor& t, DType dtype) { return tensor_of(dtype, t.shape(), values_of(t)); }

// Runs each graph's ops on the device the test is instantiated for: "CPU", or "SIM" (placeholders
// stay on the host, so inputs cross to the device and outputs back, as a GPU's would).
class ConvOpsTest : public testing::DeviceOpTest {
 protected:
  // The op `op` makes of 16-bit `inputs` against the same op of their float32 values rounded to
  // the inputs' dtype, within the 16-bit dtype's tolerance; and against `want`, the float64
  // reference of the inputs' values, of shape `shape`.
  template <class F>
  void expect_float32_rounded(const std::vector<Tensor>& inputs, F op, const Shape& shape,
                              const std::vector<double>& want) {
    const DType dtype = inputs[0].dtype();
    std::vector<Tensor> wide;
    for (const Tensor& in : inputs) wide.push_back(widened(in));
    const Tensor got = apply(inputs, op);
    testing::expect_same(got, rounded(apply(wide, op), dtype));
    expect_values(got, dtype, shape, want);
  }

  // Conv2D of `in` (case `k`), against ref_conv.
  void expect_conv(DType dtype, const ConvCase& k, const ConvInputs& in) {
    const Geometry& g = in.g;
    expect_values(apply({in.x, in.f},
                        [&](const std::vector<Output>& t) {
                          return ops::conv2d(t[0], t[1], window(k.sh, k.sw), k.padding);
                        }),
                  dtype, Shape{g.n, g.oh, g.ow, g.o}, ref_conv(g, values_of(in.x), values_of(in.f)));
  }

  // Conv2D's gradient with respect to its input, of `in` (case `k`), against ref_conv_backprop_input.
  void expect_conv_backprop_input(DType dtype, const ConvCase& k, const ConvInputs& in) {
    expect_values(apply({in.x, in.f, in.dy},
                        [&](const std::vector<Output>& t) {
                          return internal::conv2d_backprop_input(t[0], t[1], t[2], window64(k.sh, k.sw), k.padding);
                        }),
                  dtype, in.x.shape(), ref_conv_backprop_input(in.g, values_of(in.f), values_of(in.dy)));
  }

  // Conv2D's gradient with respect to its filter, of `in` (case `k`), against
  // ref_conv_backprop_filter; computed `runs` times, and every run must give the first one's bits.
  void expect_conv_backprop_filter(DType dtype, const ConvCase& k, const ConvInputs& in, int runs = 1) {
    auto filter_grad = [&] {
      return apply({in.x, in.f, in.dy}, [&](const std::vector<Output>& t) {
        return internal::conv2d_backprop_filter(t[0], t[1], t[2], window64(k.sh, k.sw), k.padding);
      });
    };
    const Tensor df = filter_grad();
    expect_values(df, dtype, in.f.shape(), ref_conv_backprop_filter(in.g, values_of(in.x), values_of(in.dy)));
    for (int run = 1; run < runs; ++run) {
      EXPECT_TRUE(filter_grad().equals(df)) << "the filter's gradient differs between runs";
    }
  }

  // Conv2D of `k` on random inputs and both its gradients, against the references; the filter's
  // gradient is computed `filter_runs` times, and every run must give the first one's bits.
  void expect_conv_and_gradients(DType dtype, const ConvCase& k, int filter_runs = 1) {
    SCOPED_TRACE(describe_case(dtype, k));
    const ConvInputs in = random_inputs(dtype, k);
    expect_conv(dtype, k, in);
    expect_conv_backprop_input(dtype, k, in);
    expect_conv_backprop_filter(dtype, k, in, filter_runs);
  }

  // conv2d of `in` and `filter` dims, values 1, 2, ... (TF's _VerifyValues), against TF's values.
  void verify_conv(const Dims& in, const Dims& filter, int sh, int sw, const std::string& padding,
                   const std::vector<double>& expected, const Dims& out) {
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      Tensor y = apply({iota(dtype, in), iota(dtype, filter)}, [&](const std::vector<Output>& x) {
        return ops::conv2d(x[0], x[1], {1, sh, sw, 1}, padding);
      });
      expect_values(y, dtype, Shape(out), expected);
    }
  }

  void verify_pool(bool max, const Dims& in, const std::vector<int>& ksize, const std::vector<int>& strides,
                   const std::string& padding, const std::vector<double>& expected, const Dims& out) {
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      Tensor y = apply({iota(dtype, in)}, [&](const std::vector<Output>& x) {
        return max ? ops::max_pool(x[0], ksize, strides, padding) : ops::avg_pool(x[0], ksize, strides, padding);
      });
      expect_values(y, dtype, Shape(out), expected);
    }
  }
};

using testing::expect_build_fails;

// ---- TensorFlow's conv_ops_test.py ----

TEST_P(ConvOpsTest, Conv2D1x1Filter) {
  verify_conv({1, 2, 3, 3}, {1, 1, 3, 3}, 1, 1, "VALID",
              {30, 36, 42, 66, 81, 96, 102, 126, 150, 138, 171, 204, 174, 216, 258, 210, 261, 312}, {1, 2, 3, 3});
}

TEST_P(ConvOpsTest, Conv2D2x2Filter) {
  verify_conv({1, 2, 3, 3}, {2, 2, 3, 3}, 1, 1, "VALID", {2271, 2367, 2463, 2901, 3033, 3165}, {1, 1, 2, 3});
}

TEST_P(ConvOpsTest, Conv2D1x2Filter) {
  verify_conv({1, 2, 3, 3}, {1, 2, 3, 3}, 1, 1, "VALID", {231, 252, 273, 384, 423, 462, 690, 765, 840, 843, 936, 1029},
              {1, 2, 2, 3});
}

TEST_P(ConvOpsTest, Conv2D2x2FilterStride2) {
  verify_conv({1, 2, 3, 3}, {2, 2, 3, 3}, 2, 2, "VALID", {2271, 2367, 2463}, {1, 1, 1, 3});
}

TEST_P(ConvOpsTest, Conv2D2x2FilterStride2Same) {
  verify_conv({1, 2, 3, 3}, {2, 2, 3, 3}, 2, 2, "SAME", {2271, 2367, 2463, 1230, 1305, 1380}, {1, 1, 2, 3});
}

TEST_P(ConvOpsTest, Conv2DKernelSmallerThanStrideValid) {
  verify_conv({1, 7, 7, 1}, {2, 2, 1, 1}, 3, 3, "VALID", {65, 95, 275, 305}, {1, 2, 2, 1});
}

TEST_P(ConvOpsTest, Conv2DKernelSmallerThanStrideSame) {
  verify_conv({1, 3, 3, 1}, {1, 1, 1, 1}, 2, 2, "SAME", {1, 3, 7, 9}, {1, 2, 2, 1});
  verify_conv({1, 4, 4, 1}, {1, 1, 1, 1}, 2, 2, "SAME", {1, 3, 9, 11}, {1, 2, 2, 1});
  verify_conv({1, 4, 4, 1}, {2, 2, 1, 1}, 3, 3, "SAME", {44, 28, 41, 16}, {1, 2, 2, 1});
}

// ---- TensorFlow's pooling_ops_test.py ----

TEST_P(ConvOpsTest, AvgPoolValidPadding) {
  verify_pool(false, {1, 3, 3, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID", {7, 8, 9}, {1, 1, 1, 3});
}

TEST_P(ConvOpsTest, AvgPoolSamePadding) {
  verify_pool(false, {1, 2, 4, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME", {8.5, 9.5, 10.5, 14.5, 15.5, 16.5},
              {1, 1, 2, 3});
  // testAvgPoolSamePaddingNonSquareWindow, testAvgPoolSamePaddingPacket4: padding is not counted.
  verify_pool(false, {1, 2, 2, 1}, {1, 1, 2, 1}, {1, 1, 1, 1}, "SAME", {1.5, 2, 3.5, 4}, {1, 2, 2, 1});
  verify_pool(false, {1, 4, 4, 4}, {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME",
              {21, 22, 23, 24, 27, 28, 29, 30, 45, 46, 47, 48, 51, 52, 53, 54}, {1, 2, 2, 4});
}

TEST_P(ConvOpsTest, MaxPoolValidPadding) {
  verify_pool(true, {1, 3, 3, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID", {13, 14, 15}, {1, 1, 1, 3});
  // testMaxPoolValidPaddingUnevenStride
  verify_pool(true, {1, 4, 4, 1}, {1, 2, 2, 1}, {1, 1, 2, 1}, "VALID", {6, 8, 10, 12, 14, 16}, {1, 3, 2, 1});
  verify_pool(true, {1, 4, 4, 1}, {1, 2, 2, 1}, {1, 2, 1, 1}, "VALID", {6, 7, 8, 14, 15, 16}, {1, 2, 3, 1});
}

TEST_P(ConvOpsTest, MaxPoolSamePadding) {
  verify_pool(true, {1, 2, 3, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME", {13, 14, 15, 16, 17, 18}, {1, 1, 2, 3});
  // testMaxPoolSamePaddingNonSquareWindow
  verify_pool(true, {1, 2, 2, 1}, {1, 1, 2, 1}, {1, 1, 1, 1}, "SAME", {2, 2, 4, 4}, {1, 2, 2, 1});
}

// ---- Random inputs against the references ----

// Pointwise, rectangular, strided, kernel smaller than the stride, window larger than the input
// (SAME), odd padding, several images.
const ConvCase kConvCases[] = {
    {{2, 5, 5, 3}, 1, 1, 4, 1, 1, "VALID"}, {{2, 5, 5, 3}, 1, 1, 4, 1, 1, "SAME"},
    {{1, 6, 7, 2}, 3, 2, 5, 1, 1, "VALID"}, {{1, 6, 7, 2}, 3, 2, 5, 1, 1, "SAME"},
    {{3, 8, 9, 4}, 3, 3, 2, 2, 3, "SAME"},  {{3, 8, 9, 4}, 3, 3, 2, 2, 3, "VALID"},
    {{1, 7, 7, 1}, 2, 2, 3, 3, 3, "SAME"},  {{2, 4, 4, 2}, 1, 1, 3, 2, 2, "SAME"},
    {{1, 2, 3, 2}, 4, 5, 2, 1, 1, "SAME"},  {{2, 5, 6, 3}, 4, 2, 3, 2, 1, "SAME"},
};

// Calls check(dtype, k, inputs) for each floating point dtype and each of kConvCases, on random
// inputs, traced.
template <class Check>
void for_each_conv_case(Check check) {
  for (DType dtype : kFloatDTypes) {
    for (const ConvCase& k : kConvCases) {
      SCOPED_TRACE(describe_case(dtype, k));
      check(dtype, k, random_inputs(dtype, k));
    }
  }
}

TEST_P(ConvOpsTest, Conv2DMatchesTheReference) {
  for_each_conv_case([&](DType dtype, const ConvCase& k, const ConvInputs& in) { expect_conv(dtype, k, in); });
}

TEST_P(ConvOpsTest, Conv2DBackpropInputMatchesTheReference) {
  for_each_conv_case(
      [&](DType dtype, const ConvCase& k, const ConvInputs& in) { expect_conv_backprop_input(dtype, k, in); });
}

TEST_P(ConvOpsTest, Conv2DBackpropFilterMatchesTheReference) {
  for_each_conv_case(
      [&](DType dtype, const ConvCase& k, const ConvInputs& in) { expect_conv_backprop_filter(dtype, k, in); });
}

// Patches larger than one chunk (256 KiB): the output is made in several BLAS calls, and the
// filter's gradient accumulated over them. (Four out channels: im2col, not Winograd.)
TEST_P(ConvOpsTest, LargeConvolutionsSpanSeveralChunks) {
  // 3200 rows of 576 floats: 7 MiB.
  const ConvCase k{{2, 40, 40, 64}, 3, 3, 4, 1, 1, "SAME"};
  ASSERT_FALSE(internal::winograd_applies(window_of(k)));
  expect_conv_and_gradients(DType::Float32, k);
}

// ---- Winograd's F(2x2, 3x3) and F(4x4, 3x3) (kernels/conv_winograd.cc) against the same references ----

// 3x3 stride-1 windows with 8 channels or more in and out, each with the tile size it takes:
// outputs of even and odd sizes (tiles past the edge), SAME and VALID, one image (its products
// sharded) and several (the images sharded), channels that are not whole vectors.
struct WinogradCase {
  ConvCase conv;
  int tile;
};
const WinogradCase kWinogradCases[] = {
    {{{1, 4, 4, 8}, 3, 3, 8, 1, 1, "SAME"}, 4},   {{{2, 5, 7, 8}, 3, 3, 9, 1, 1, "SAME"}, 4},
    {{{3, 6, 5, 10}, 3, 3, 8, 1, 1, "VALID"}, 4}, {{{1, 9, 8, 16}, 3, 3, 12, 1, 1, "VALID"}, 4},
    {{{4, 4, 4, 32}, 3, 3, 64, 1, 1, "SAME"}, 4}, {{{2, 3, 3, 8}, 3, 3, 8, 1, 1, "SAME"}, 4},
    {{{1, 2, 2, 8}, 3, 3, 8, 1, 1, "SAME"}, 2},   {{{2, 6, 6, 8}, 3, 3, 10, 1, 1, "SAME"}, 2},
    {{{1, 4, 9, 9}, 3, 3, 8, 1, 1, "VALID"}, 2},  {{{3, 2, 7, 16}, 3, 3, 12, 1, 1, "SAME"}, 2},
};

TEST_P(ConvOpsTest, WinogradConvolutionsMatchTheReference) {
  for (const auto& [k, tile] : kWinogradCases) {
    ASSERT_EQ(internal::winograd_tile(window_of(k)), tile) << describe_case(DType::Float32, k);
    for (DType dtype : kFloatDTypes) expect_conv_and_gradients(dtype, k, /*filter_runs=*/3);
  }
}

// The transforms' AVX-512 copy (kernels/conv_winograd.cc) gives the bits of the SSE2 one: the same
// operations per channel, none contracted into an FMA (-ffp-contract=off; without it the two
// differed in the last bits).
TEST_P(ConvOpsTest, WinogradsAvx512TransformsGiveTheBaselineBits) {
  if (!internal::has_avx512f()) GTEST_SKIP() << "no AVX-512F here: only the baseline copy runs";
  for (const auto& [k, tile] : kWinogradCases) {
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(describe_case(dtype, k));
      const ConvInputs in = random_inputs(dtype, k);
      auto all_three = [&] {
        std::vector<Tensor> out;
        out.push_back(apply({in.x, in.f}, [&](const std::vector<Output>& t) {
          return ops::conv2d(t[0], t[1], window(k.sh, k.sw), k.padding);
        }));
        out.push_back(apply({in.x, in.f, in.dy}, [&](const std::vector<Output>& t) {
          return internal::conv2d_backprop_input(t[0], t[1], t[2], window64(k.sh, k.sw), k.padding);
        }));
        out.push_back(apply({in.x, in.f, in.dy}, [&](const std::vector<Output>& t) {
          return internal::conv2d_backprop_filter(t[0], t[1], t[2], window64(k.sh, k.sw), k.padding);
        }));
        return out;
      };
      const std::vector<Tensor> avx512 = all_three();
      internal::avx512_allowed() = false;
      const std::vector<Tensor> baseline = all_three();
      internal::avx512_allowed() = true;
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(avx512[i].equals(baseline[i])) << "output " << i;
    }
  }
}

// 1024 and 1152 tiles: several chunks of tiles per shard of images, and the filter's gradient
// in eight parts (the same bits on every run).
TEST_P(ConvOpsTest, LargeWinogradConvolutionsSpanChunksAndParts) {
  for (const auto& [k, tile] : {WinogradCase{{{16, 32, 32, 16}, 3, 3, 16, 1, 1, "SAME"}, 4},
                                WinogradCase{{{128, 6, 6, 16}, 3, 3, 16, 1, 1, "SAME"}, 2}}) {
    SCOPED_TRACE(describe_case(DType::Float32, k));
    ASSERT_EQ(internal::winograd_tile(window_of(k)), tile);
    expect_conv_and_gradients(DType::Float32, k, /*filter_runs=*/3);
  }
}

// ---- The direct convolution of few-valued windows (kernels/conv_direct.cc), on AVX-512 ----

// One and three input channels, 3x3 and 5x5 windows, strides 1 and 2, SAME and VALID, one to four
// channel blocks (20 and 40: a masked last block), one image and many (the filter's gradient in
// several parts).
const ConvCase kDirectCases[] = {
    {{2, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"},  {{1, 7, 5, 3}, 3, 3, 20, 2, 2, "VALID"},
    {{3, 6, 6, 1}, 5, 5, 16, 1, 1, "SAME"},  {{2, 5, 5, 2}, 3, 3, 64, 1, 1, "SAME"},
    {{1, 9, 7, 3}, 3, 3, 40, 2, 1, "SAME"},  {{64, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"},
};

TEST_P(ConvOpsTest, DirectConvolutionsMatchTheReference) {
  if (!internal::direct_conv_applies(window_of(kDirectCases[0]), DType::Float32)) {
    GTEST_SKIP() << "no AVX-512F here: these shapes take im2col";
  }
  for (const ConvCase& k : kDirectCases) {
    ASSERT_TRUE(internal::direct_conv_applies(window_of(k), DType::Float32)) << describe_case(DType::Float32, k);
    expect_conv_and_gradients(DType::Float32, k, /*filter_runs=*/3);
  }
}

// Only float32 windows of at most 32 values into 16 to 64 channels go direct.
TEST(DirectConvTest, AppliesToSmallFloatWindows) {
  const internal::Window2D first = window_of({{1, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"});
  if (!internal::direct_conv_applies(first, DType::Float32)) GTEST_SKIP() << "no AVX-512F here";
  EXPECT_FALSE(internal::direct_conv_applies(first, DType::Float64));
  EXPECT_FALSE(internal::direct_conv_applies(window_of({{1, 8, 8, 4}, 3, 3, 32, 1, 1, "SAME"}), DType::Float32));
  EXPECT_FALSE(internal::direct_conv_applies(window_of({{1, 8, 8, 1}, 3, 3, 8, 1, 1, "SAME"}), DType::Float32));
  EXPECT_FALSE(internal::direct_conv_applies(window_of({{1, 8, 8, 1}, 3, 3, 65, 1, 1, "SAME"}), DType::Float32));
  EXPECT_TRUE(internal::direct_conv_applies(window_of({{1, 8, 8, 1}, 5, 5, 16, 1, 1, "SAME"}), DType::Float32));
}

// The fused filter and bias gradient (_FusedConv2DBackpropFilterWithBias) sums BiasAddGrad's parts
// inside the direct kernel's only where each of them lies in one of its parts: at the digits CNN's
// batches (one part, or 32-image parts holding 2048-row or 1024-row bias parts), not at batch 100
// (three parts of 34 images, bias parts of 1024 rows).
TEST(DirectConvTest, FilterPartsHoldBiasPartsAtTheDigitsBatches) {
  for (int64_t batch : {1, 16, 64, 256}) {
    EXPECT_TRUE(internal::direct_filter_parts_hold_bias_parts(window_of({{batch, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"})))
        << batch;
  }
  EXPECT_FALSE(internal::direct_filter_parts_hold_bias_parts(window_of({{100, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"})));
}

// What takes im2col instead: few channels, another window or stride, an output under 2x2, channels
// past BLAS's int. And which tiles: the 4x4 ones where they make fewer products.
TEST(WinogradTest, AppliesTo3x3Stride1WithEnoughChannels) {
  EXPECT_TRUE(internal::winograd_applies(window_of({{1, 4, 4, 8}, 3, 3, 8, 1, 1, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 8, 8, 32}, 3, 3, 4, 1, 1, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 8, 8, 8}, 3, 3, 8, 2, 2, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 8, 8, 8}, 5, 5, 8, 1, 1, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 8, 8, 8}, 3, 2, 8, 1, 1, "SAME"})));
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 3, 8, 8}, 3, 3, 8, 1, 1, "VALID"})));
  EXPECT_EQ(internal::winograd_tile(window_of({{1, 3, 8, 8}, 3, 3, 8, 1, 1, "VALID"})), 0);
  // 36 x 100 million channels, its products' row stride, is past BLAS's int (9 x, im2col's, is not).
  EXPECT_FALSE(internal::winograd_applies(window_of({{1, 4, 4, 100'000'000}, 3, 3, 8, 1, 1, "SAME"})));
  // 8x8 outputs: 4 tiles of 36 positions against 16 of 16; 6x6: 4 x 36 against 9 x 16 (a tie
  // takes the smaller tiles); 2x10: 3 x 36 against 5 x 16.
  EXPECT_EQ(internal::winograd_tile(window_of({{1, 8, 8, 8}, 3, 3, 8, 1, 1, "SAME"})), 4);
  EXPECT_EQ(internal::winograd_tile(window_of({{1, 6, 6, 8}, 3, 3, 8, 1, 1, "SAME"})), 2);
  EXPECT_EQ(internal::winograd_tile(window_of({{1, 2, 10, 8}, 3, 3, 8, 1, 1, "SAME"})), 2);
}

struct PoolCase {
  Dims in;
  int64_t kh, kw, sh, sw;
  std::string padding;
};

const PoolCase kPoolCases[] = {
    {{2, 5, 5, 3}, 2, 2, 2, 2, "VALID"}, {{2, 5, 5, 3}, 2, 2, 2, 2, "SAME"}, {{1, 6, 7, 2}, 3, 3, 1, 1, "SAME"},
    {{1, 6, 7, 2}, 3, 2, 2, 1, "VALID"}, {{3, 7, 7, 1}, 2, 2, 3, 3, "SAME"}, {{1, 2, 3, 4}, 4, 5, 1, 2, "SAME"},
    {{2, 4, 4, 2}, 1, 1, 1, 1, "VALID"},
};

Geometry geometry(const PoolCase& k) { return geometry(k.in, k.kh, k.kw, k.in[3], k.sh, k.sw, k.padding); }

TEST_P(ConvOpsTest, PoolsMatchTheReference) {
  for (DType dtype : kFloatDTypes) {
    for (const PoolCase& k : kPoolCases) {
      for (bool max : {true, false}) {
        SCOPED_TRACE(fmt::format("{} {}", max ? "max" : "avg", describe_case(dtype, k)));
        const Geometry g = geometry(k);
        const Tensor x = random(dtype, k.in);
        const Tensor dy = random(dtype, {g.n, g.oh, g.ow, g.c});
        const auto ksize = window(k.kh, k.kw);
        const auto strides = window(k.sh, k.sw);
        Tensor y = apply({x}, [&](const std::vector<Output>& in) {
          return max ? ops::max_pool(in[0], ksize, strides, k.padding)
                     : ops::avg_pool(in[0], ksize, strides, k.padding);
        });
        const std::vector<double> want = ref_pool(g, values_of(x), max);
        expect_values(y, dtype, Shape{g.n, g.oh, g.ow, g.c}, want);
        Tensor dx = apply({x, tensor_of(dtype, y.shape(), want), dy}, [&](const std::vector<Output>& in) {
          const auto ks = window64(k.kh, k.kw);
          const auto ss = window64(k.sh, k.sw);
          return max ? internal::max_pool_grad(in[0], in[1], in[2], ks, ss, k.padding)
                     : internal::avg_pool_grad(in[0], in[2], ks, ss, k.padding);
        });
        expect_values(dx, dtype, x.shape(), ref_pool_grad(g, values_of(x), values_of(dy), max));
      }
    }
  }
}

// Equal values: each window's gradient goes to its first element (row-major), summed where
// windows overlap.
TEST_P(ConvOpsTest, MaxPoolGradGoesToTheFirstMaximum) {
  const Tensor x = tensor_of(DType::Float32, Shape{1, 3, 3, 1}, std::vector<double>(9, 5.0));
  const Tensor y = tensor_of(DType::Float32, Shape{1, 2, 2, 1}, std::vector<double>(4, 5.0));
  const Tensor dy = tensor_of(DType::Float32, Shape{1, 2, 2, 1}, {1, 10, 100, 1000});
  Tensor dx = apply({x, y, dy}, [](const std::vector<Output>& in) {
    return internal::max_pool_grad(in[0], in[1], in[2], window64(2, 2), window64(1, 1), "VALID");
  });
  // Windows start at (0,0), (0,1), (1,0), (1,1): each one's own first element.
  expect_values(dx, DType::Float32, x.shape(), {1, 10, 0, 100, 1000, 0, 0, 0, 0});
}

// Ties, NaN and signed zeros in MaxPoolGrad, channel by channel: each of ten cases fills every
// tenth channel of 23 (so each lands in a vectorized run of channels and in the tail), the four
// values of one 2x2 window in row-major order. The gradient goes to the first largest element; a
// NaN wins only as the first; -0.0 and +0.0 are equal.
TEST_P(ConvOpsTest, MaxPoolGradTiesNaNAndSignedZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<double> window;
    int winner;  // the element the window's gradient goes to
  };
  const Case cases[] = {
      {{nan, 1, 2, 3}, 0},   {{1, nan, 3, 2}, 2},       {{-0.0, 0.0, -1, -2}, 0}, {{0.0, -0.0, -1, -2}, 0},
      {{-1, -0.0, 0.0, -3}, 1}, {{2, 5, 5, 5}, 1},      {{nan, nan, nan, nan}, 0}, {{-inf, -inf, -inf, -inf}, 0},
      {{1, 2, inf, inf}, 2},  {{7, 7, 7, 7}, 0},
  };
  constexpr int64_t kChannels = 23;
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<double> x(4 * kChannels), dy(kChannels), want(4 * kChannels, 0.0);
    for (int64_t c = 0; c < kChannels; ++c) {
      const Case& k = cases[c % 10];
      for (int e = 0; e < 4; ++e) x[e * kChannels + c] = k.window[static_cast<std::size_t>(e)];
      dy[c] = static_cast<double>(c + 1);
      want[k.winner * kChannels + c] = dy[c];
    }
    const Tensor xt = tensor_of(dtype, Shape{1, 2, 2, kChannels}, x);
    // Disjoint windows (one 2x2 window, stride 2): each element written once.
    const Geometry one = geometry({1, 2, 2, kChannels}, 2, 2, kChannels, 2, 2, "VALID");
    const Tensor y = tensor_of(dtype, Shape{1, 1, 1, kChannels}, ref_pool(one, x, true));
    Tensor dx = apply({xt, y, tensor_of(dtype, Shape{1, 1, 1, kChannels}, dy)}, [](const std::vector<Output>& in) {
      return internal::max_pool_grad(in[0], in[1], in[2], window64(2, 2), window64(2, 2), "VALID");
    });
    EXPECT_EQ(values_of(dx), want);
    EXPECT_EQ(ref_pool_grad(one, x, dy, true), want);  // the reference agrees
    // Overlapping windows (2x2, stride 1, SAME: four windows, each starting at one element).
    const Geometry four = geometry({1, 2, 2, kChannels}, 2, 2, kChannels, 1, 1, "SAME");
    std::vector<double> dy4(4 * kChannels);
    for (std::size_t i = 0; i < dy4.size(); ++i) dy4[i] = static_cast<double>(i % 97 + 1);
    Tensor dx4 = apply({xt, tensor_of(dtype, Shape{1, 2, 2, kChannels}, ref_pool(four, x, true)),
                        tensor_of(dtype, Shape{1, 2, 2, kChannels}, dy4)},
                       [](const std::vector<Output>& in) {
                         return internal::max_pool_grad(in[0], in[1], in[2], window64(2, 2), window64(1, 1), "SAME");
                       });
    EXPECT_EQ(values_of(dx4), ref_pool_grad(four, x, dy4, true));
    // The first case's window alone, its values checked by hand: (0,0)'s NaN takes its own window's
    // gradient; (0,1) holds 1 and 3: 3; (1,0) holds 2 and 3: 3; (1,1) is 3 alone.
    const std::vector<double> got4 = values_of(dx4);
    EXPECT_EQ(got4[0], dy4[0]);
    EXPECT_EQ(got4[kChannels], 0.0);
    EXPECT_EQ(got4[2 * kChannels], 0.0);
    EXPECT_EQ(got4[3 * kChannels], dy4[kChannels] + dy4[2 * kChannels] + dy4[3 * kChannels]);
  }
}

// A -0.0 gradient lands as +0.0, as a sum into zeros gives it, whether windows overlap or not.
TEST_P(ConvOpsTest, MaxPoolGradOfNegativeZeroIsPositiveZero) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t stride : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} stride {}", dtype_name(dtype), stride));
      const Tensor x = random(dtype, {1, 4, 4, 5});
      const Geometry g = geometry({1, 4, 4, 5}, 2, 2, 5, stride, stride, "VALID");
      const std::vector<double> y = ref_pool(g, values_of(x), true);
      const Tensor dy = tensor_of(dtype, Shape{1, g.oh, g.ow, 5}, std::vector<double>(y.size(), -0.0));
      Tensor dx = apply({x, tensor_of(dtype, dy.shape(), y), dy}, [&](const std::vector<Output>& in) {
        return internal::max_pool_grad(in[0], in[1], in[2], window64(2, 2), window64(stride, stride), "VALID");
      });
      for (double v : values_of(dx)) {
        EXPECT_EQ(v, 0.0);
        EXPECT_FALSE(std::signbit(v));
      }
    }
  }
}

// Many ties and some NaNs, windows that overlap or not (stride below, equal to or above the
// window; covering the input or leaving rows and columns out), SAME edge windows, one image or
// several, channels in and out of whole vectors: MaxPool and MaxPoolGrad against the references.
TEST_P(ConvOpsTest, MaxPoolsWithTiesAgainstTheReference) {
  const PoolCase cases[] = {
      {{2, 8, 8, 32}, 2, 2, 2, 2, "SAME"},  // the digits CNN's pools: disjoint, covering
      {{3, 7, 5, 5}, 2, 2, 2, 2, "VALID"},  // disjoint, the last row and column in no window
      {{2, 7, 7, 3}, 2, 2, 3, 3, "SAME"},   // stride above the window: gaps
      {{1, 4, 4, 9}, 3, 3, 3, 3, "SAME"},   // padding before: the first window starts at -1
      {{2, 5, 6, 17}, 3, 3, 1, 1, "SAME"},  // overlapping
      {{1, 6, 6, 4}, 3, 2, 2, 1, "VALID"},  // overlapping in both dims
      {{1, 6, 6, 4}, 2, 2, 1, 2, "VALID"},  // overlapping in height only
      {{1, 5, 5, 1}, 2, 2, 2, 2, "SAME"},   // one image, one channel, edge windows of one row
      {{4, 3, 3, 2}, 5, 5, 2, 2, "SAME"},   // windows larger than the input
  };
  std::mt19937 gen(7);
  const double values[] = {-1, -0.0, 0.0, 1, 2, std::numeric_limits<double>::quiet_NaN()};
  std::discrete_distribution<int> pick({20, 10, 10, 20, 20, 3});
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const PoolCase& k : cases) {
      SCOPED_TRACE(describe_case(dtype, k));
      const Geometry g = geometry(k);
      std::vector<double> xv(static_cast<std::size_t>(count(k.in)));
      for (double& v : xv) v = values[pick(gen)];
      const Tensor x = tensor_of(dtype, Shape(k.in), xv);
      const Tensor dy = random(dtype, {g.n, g.oh, g.ow, g.c});
      const std::vector<double> want = ref_pool(g, xv, true);
      Tensor y = apply({x}, [&](const std::vector<Output>& in) {
        return ops::max_pool(in[0], window(k.kh, k.kw), window(k.sh, k.sw), k.padding);
      });
      expect_values(y, dtype, Shape{g.n, g.oh, g.ow, g.c}, want);
      Tensor dx = apply({x, tensor_of(dtype, y.shape(), want), dy}, [&](const std::vector<Output>& in) {
        return internal::max_pool_grad(in[0], in[1], in[2], window64(k.kh, k.kw), window64(k.sh, k.sw), k.padding);
      });
      expect_values(dx, dtype, x.shape(), ref_pool_grad(g, xv, values_of(dy), true));
    }
  }
}

// im2col copies each window row as one run of k_w * in_c values, zeros where it is padding: every
// channel count from one up past two whole vectors, with padding on each side.
TEST_P(ConvOpsTest, ConvolutionsOfEveryChannelCount) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t c = 1; c <= 17; ++c) {
      for (const ConvCase& k : {ConvCase{{2, 6, 5, c}, 3, 3, 3, 1, 1, "SAME"}, ConvCase{{1, 5, 7, c}, 2, 3, 2, 2, 2, "SAME"},
                                ConvCase{{1, 3, 4, c}, 3, 5, 2, 1, 1, "SAME"}}) {
        expect_conv_and_gradients(dtype, k);
      }
    }
  }
}

// Chunks (256 KiB of patches) that end inside an image and hold the first rows of others (the
// input's gradient zeroes each image's part once, before its first chunk adds to it), one image's
// chunks run here, and the filter's gradient summed in two, three, four and eight parts of several
// chunks or fewer (Note [The filter's gradient in parts]): the same on every run.
TEST_P(ConvOpsTest, ChunksAndPartsAgainstTheReference) {
  const ConvCase cases[] = {
      {{5, 20, 15, 16}, 3, 3, 8, 1, 1, "SAME"},   // 1500 rows of 144 values; two parts
      {{1, 40, 40, 16}, 3, 3, 16, 1, 1, "SAME"},  // one image, 1600 rows; three parts of two chunks
      {{8, 16, 16, 16}, 3, 3, 32, 1, 1, "SAME"},  // four parts of 512 rows
      {{5, 13, 11, 7}, 3, 3, 40, 2, 1, "VALID"},  // strided, 7 channels
      // Windows of few values (K of 9 and 18): the digits CNN's first convolution at batch 64 (two
      // parts) and 256 (eight), and a strided one of one part.
      {{64, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"},
      {{256, 8, 8, 1}, 3, 3, 32, 1, 1, "SAME"},
      {{40, 9, 10, 3}, 2, 3, 24, 2, 2, "SAME"},
  };
  for (DType dtype : kFloatDTypes) {
    for (const ConvCase& k : cases) expect_conv_and_gradients(dtype, k, /*filter_runs=*/2);
  }
}

// The shapes unknown when the graph is built: the kernels find the same arithmetic.
TEST_P(ConvOpsTest, ShapesKnownOnlyAtRunTime) {
  const Tensor x = random(DType::Float64, {2, 6, 5, 3});
  const Tensor f = random(DType::Float64, {3, 2, 3, 4});
  const Geometry g = geometry({2, 6, 5, 3}, 3, 2, 4, 2, 2, "SAME");
  Tensor y = apply(
      {x, f}, [](const std::vector<Output>& in) { return ops::conv2d(in[0], in[1], window(2, 2), "SAME"); }, true);
  expect_values(y, DType::Float64, Shape{2, 3, 3, 4}, ref_conv(g, values_of(x), values_of(f)));
  Tensor p = apply(
      {x}, [](const std::vector<Output>& in) { return ops::max_pool(in[0], window(3, 2), window(2, 2), "SAME"); },
      true);
  expect_values(p, DType::Float64, Shape{2, 3, 3, 3},
                ref_pool(geometry({2, 6, 5, 3}, 3, 2, 3, 2, 2, "SAME"), values_of(x), true));
}

TEST_P(ConvOpsTest, EmptyTensors) {
  for (const Dims& in : {Dims{0, 4, 4, 3}, Dims{2, 0, 4, 3}}) {
    SCOPED_TRACE(Shape(in).to_string());
    const Tensor x(DType::Float32, Shape(in));
    const Tensor f = random(DType::Float32, {2, 2, 3, 5});
    Tensor y =
        apply({x, f}, [](const std::vector<Output>& i) { return ops::conv2d(i[0], i[1], window(1, 1), "SAME"); });
    EXPECT_EQ(y.shape(), Shape({in[0], in[1], 4, 5}));
    Tensor p = apply(
        {x}, [](const std::vector<Output>& i) { return ops::avg_pool(i[0], window(2, 2), window(1, 1), "SAME"); });
    EXPECT_EQ(p.shape(), Shape(in));
  }
  // No input channels: every sum is empty.
  const Tensor x(DType::Float32, Shape{1, 3, 3, 0});
  const Tensor f(DType::Float32, Shape{2, 2, 0, 2});
  Tensor y = apply({x, f}, [](const std::vector<Output>& i) { return ops::conv2d(i[0], i[1], window(1, 1), "VALID"); });
  expect_values(y, DType::Float32, Shape{1, 2, 2, 2}, std::vector<double>(8, 0.0));
  // No output channels: the input's gradient is zeros.
  const Tensor x2 = random(DType::Float32, {1, 3, 3, 2});
  const Tensor f2(DType::Float32, Shape{2, 2, 2, 0});
  const Tensor dy2(DType::Float32, Shape{1, 2, 2, 0});
  Tensor dx = apply({x2, f2, dy2}, [](const std::vector<Output>& i) {
    return internal::conv2d_backprop_input(i[0], i[1], i[2], window64(1, 1), "VALID");
  });
  expect_values(dx, DType::Float32, x2.shape(), std::vector<double>(18, 0.0));
}

// ---- float16 and bfloat16: the float32 kernels on the widened values, each result rounded once ----

TEST_P(ConvOpsTest, HalfConvolutionsAndTheirGradientsAreFloat32sRounded) {
  std::vector<ConvCase> cases(std::begin(kConvCases), std::end(kConvCases));
  cases.push_back({{2, 8, 8, 8}, 3, 3, 8, 1, 1, "SAME"});  // Winograd's (Note [Winograd convolution])
  for (DType dtype : kHalfDTypes) {
    for (const ConvCase& k : cases) {
      SCOPED_TRACE(describe_case(dtype, k));
      const ConvInputs in = random_inputs(dtype, k);
      const Geometry& g = in.g;
      const auto strides = window(k.sh, k.sw);
      const auto strides64 = window64(k.sh, k.sw);
      expect_float32_rounded(
          {in.x, in.f}, [&](const std::vector<Output>& t) { return ops::conv2d(t[0], t[1], strides, k.padding); },
          Shape{g.n, g.oh, g.ow, g.o}, ref_conv(g, values_of(in.x), values_of(in.f)));
      expect_float32_rounded(
          {in.x, in.f, in.dy},
          [&](const std::vector<Output>& t) {
            return internal::conv2d_backprop_input(t[0], t[1], t[2], strides64, k.padding);
          },
          in.x.shape(), ref_conv_backprop_input(g, values_of(in.f), values_of(in.dy)));
      expect_float32_rounded(
          {in.x, in.f, in.dy},
          [&](const std::vector<Output>& t) {
            return internal::conv2d_backprop_filter(t[0], t[1], t[2], strides64, k.padding);
          },
          in.f.shape(), ref_conv_backprop_filter(g, values_of(in.x), values_of(in.dy)));
    }
  }
}

TEST_P(ConvOpsTest, HalfPoolsAndTheirGradientsAreFloat32sRounded) {
  for (DType dtype : kHalfDTypes) {
    for (const PoolCase& k : kPoolCases) {
      for (bool max : {true, false}) {
        SCOPED_TRACE(fmt::format("{} {}", max ? "max" : "avg", describe_case(dtype, k)));
        const Geometry g = geometry(k);
        const Tensor x = random(dtype, k.in);
        const Tensor dy = random(dtype, {g.n, g.oh, g.ow, g.c});
        const std::vector<double> y = ref_pool(g, values_of(x), max);
        expect_float32_rounded(
            {x},
            [&](const std::vector<Output>& in) {
              return max ? ops::max_pool(in[0], window(k.kh, k.kw), window(k.sh, k.sw), k.padding)
                         : ops::avg_pool(in[0], window(k.kh, k.kw), window(k.sh, k.sw), k.padding);
            },
            Shape{g.n, g.oh, g.ow, g.c}, y);
        // MaxPool's output is exact in any dtype, so the gradient's orig_output is too.
        const Tensor orig_output = tensor_of(dtype, Shape{g.n, g.oh, g.ow, g.c}, y);
        expect_float32_rounded(
            {x, orig_output, dy},
            [&](const std::vector<Output>& in) {
              const auto ks = window64(k.kh, k.kw);
              const auto ss = window64(k.sh, k.sw);
              return max ? internal::max_pool_grad(in[0], in[1], in[2], ks, ss, k.padding)
                         : internal::avg_pool_grad(in[0], in[2], ks, ss, k.padding);
            },
            x.shape(), ref_pool_grad(g, values_of(x), values_of(dy), max));
      }
    }
  }
}

// tessera::gradients of 16-bit convolutions and pools: the gradient ops of the same dtype, as the
// float32 graph's gradients rounded. The pools' inputs are distinct integers, exact in both
// 16-bit dtypes, so that rounding makes no new ties for MaxPool.
TEST_P(ConvOpsTest, GradientsOfHalfConvolutionsAndPools) {
  const ConvCase k{{2, 6, 5, 3}, 3, 2, 4, 2, 1, "SAME"};
  std::vector<double> distinct(2 * 4 * 4 * 3);
  for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = static_cast<double>((i * 37) % distinct.size());
  for (DType dtype : kHalfDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const ConvInputs in = random_inputs(dtype, k);
    for (int wrt : {0, 1}) {
      SCOPED_TRACE(wrt == 0 ? "d input" : "d filter");
      const auto grad = [&](const std::vector<Output>& t) {
        return gradients({ops::conv2d(t[0], t[1], window(k.sh, k.sw), k.padding)}, {t[0], t[1]})[wrt];
      };
      const Tensor got = apply({in.x, in.f}, grad);
      EXPECT_EQ(got.dtype(), dtype);
      testing::expect_same(got, rounded(apply({widened(in.x), widened(in.f)}, grad), dtype));
    }
    const Tensor x = tensor_of(dtype, Shape{2, 4, 4, 3}, distinct);
    for (bool max : {true, false}) {
      SCOPED_TRACE(max ? "max_pool" : "avg_pool");
      const auto grad = [&](const std::vector<Output>& t) {
        Output y = max ? ops::max_pool(t[0], window(3, 2), window(2, 1), "SAME")
                       : ops::avg_pool(t[0], window(3, 2), window(2, 1), "SAME");
        return gradients({y}, {t[0]})[0];
      };
      const Tensor got = apply({x}, grad);
      EXPECT_EQ(got.dtype(), dtype);
      testing::expect_same(got, rounded(apply({widened(x)}, grad), dtype));
    }
  }
}

// A 16-bit convolution in a session with no device requested, the simulated accelerator present:
// each policy finds a kernel (SIM runs the CPU kernels: Note [Stream-ordered memory] in
// device/sim_kernels.cc), gpu_first the accelerator's.
TEST(ConvOpsPlacementTest, HalfConv2DRunsWithASimDevicePresent) {
  ASSERT_NE(testing::sim_device(), nullptr);
  for (DType dtype : kHalfDTypes) {
    for (PlacementPolicy policy : {PlacementPolicy::cost, PlacementPolicy::gpu_first}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), policy == PlacementPolicy::cost ? "cost" : "gpu_first"));
      const Tensor xv = random(dtype, {2, 9, 9, 3});
      const Tensor fv = random(dtype, {3, 3, 3, 4});
      Graph g;
      auto x = ops::placeholder(g, dtype, xv.shape());
      auto f = ops::placeholder(g, dtype, fv.shape());
      auto y = ops::conv2d(x, f, {1, 1, 1, 1}, "SAME", "conv");
      SessionOptions options;
      options.placement_policy = policy;
      Session s(g, options);
      const Tensor got = s.run(y, {{x, xv}, {f, fv}});
      if (policy == PlacementPolicy::gpu_first) {
        EXPECT_THAT(y.op().assigned_device(), HasSubstr("/device:SIM:0"));
      }
      const Geometry geo = geometry({2, 9, 9, 3}, 3, 3, 4, 1, 1, "SAME");
      expect_values(got, dtype, Shape{2, 9, 9, 4}, ref_conv(geo, values_of(xv), values_of(fv)));
    }
  }
}

// ---- MaxPool of integers (TensorFlow's takes the real number types; exact) ----

TEST_P(ConvOpsTest, MaxPoolOfIntegers) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // TensorFlow's testMaxPoolValidPadding and testMaxPoolSamePadding, on integers.
    const auto pool = [&](const Dims& in, std::vector<int> ksize, std::vector<int> strides, std::string padding) {
      return apply({iota(dtype, in)},
                   [&](const std::vector<Output>& x) { return ops::max_pool(x[0], ksize, strides, padding); });
    };
    expect_values(pool({1, 3, 3, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"), dtype, Shape{1, 1, 1, 3}, {13, 14, 15});
    expect_values(pool({1, 2, 3, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME"), dtype, Shape{1, 1, 2, 3},
                  {13, 14, 15, 16, 17, 18});
    // Random values, negative ones too (SAME's padding is never a candidate), against the reference.
    static testing::RandomInputs rng(11);
    for (const PoolCase& k : kPoolCases) {
      SCOPED_TRACE(describe_case(dtype, k));
      const Geometry g = geometry(k);
      const Tensor x = rng.tensor(dtype, Shape(k.in), Range{-1000, 1000});
      Tensor y = apply({x}, [&](const std::vector<Output>& in) {
        return ops::max_pool(in[0], window(k.kh, k.kw), window(k.sh, k.sw), k.padding);
      });
      expect_values(y, dtype, Shape{g.n, g.oh, g.ow, g.c}, ref_pool(g, values_of(x), true));
    }
  }
  // int64 beyond float64's 2^53, and int32's extremes: compared as integers.
  constexpr int64_t kBig = int64_t{1} << 60;
  const Tensor x64 = Tensor::from_vector<int64_t>({kBig + 1, kBig + 3, kBig + 2, -kBig}, Shape{1, 2, 2, 1});
  const auto max_2x1 = [](const std::vector<Output>& in) {
    return ops::max_pool(in[0], {1, 2, 1, 1}, {1, 1, 1, 1}, "SAME");
  };
  EXPECT_EQ(apply({x64}, max_2x1).to_vector<int64_t>(), (std::vector<int64_t>{kBig + 2, kBig + 3, kBig + 2, -kBig}));
  const int32_t lo = std::numeric_limits<int32_t>::min();
  const int32_t hi = std::numeric_limits<int32_t>::max();
  const Tensor x32 = Tensor::from_vector<int32_t>({lo, hi, lo, lo + 1}, Shape{1, 2, 2, 1});
  EXPECT_EQ(apply({x32}, max_2x1).to_vector<int32_t>(), (std::vector<int32_t>{lo, hi, lo, lo + 1}));
}

// ---- Kernels registered for some dtypes (KernelDTypes in core/op_registry.h) ----

// A kernel that must never run: placement only asks whether it exists.
class NeverRunKernel final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(internal::OpKernelContext& ctx) override { ctx.fail(errors::internal("NeverRunKernel ran")); }
};
// Conv2D on a device type of this test only, float32 and float64, as the GPU's.
TESSERA_REGISTER_TYPED_KERNEL("Conv2D", "TYPEDTEST", NeverRunKernel, DType::Float32, DType::Float64);

TEST(ConvOpsPlacementTest, KernelsRegisteredForSomeDTypesTakeOnlyThose) {
  Graph g;
  auto x32 = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 3});
  auto f32 = ops::placeholder(g, DType::Float32, Shape{2, 2, 3, 2});
  auto y32 = ops::conv2d(x32, f32, {1, 1, 1, 1}, "SAME", "conv32");
  auto y16 = ops::conv2d(ops::cast(x32, DType::Float16), ops::cast(f32, DType::Float16), {1, 1, 1, 1}, "SAME",
                         "conv16");
  const auto& registry = internal::OpRegistry::global();
  EXPECT_TRUE(registry.has_kernel("Conv2D", "TYPEDTEST"));
  EXPECT_TRUE(registry.has_kernel(*y32.node(), "TYPEDTEST"));
  EXPECT_FALSE(registry.has_kernel(*y16.node(), "TYPEDTEST"));
  EXPECT_TRUE(registry.has_kernel(*y16.node(), "CPU"));
  EXPECT_TRUE(registry.has_kernel(*y16.node(), "SIM")) << "the CPU kernel, adapted";
  auto refused = registry.create_kernel(*y16.node(), "TYPEDTEST");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("conv16 (Conv2D)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("of dtype float16 (it takes float32, float64)"));

  // gpu_first puts every op an accelerator has a kernel for there: float32's convolution, not float16's.
  const std::string prefix = "/job:localhost/replica:0/task:0/device:";
  const std::vector<internal::PlacementDevice> devices = {
      {prefix + "CPU:0", "CPU", internal::kCpuCostProfile},
      {prefix + "TYPEDTEST:0", "TYPEDTEST", internal::kCpuCostProfile}};
  std::vector<const internal::Node*> nodes;
  for (const internal::Node* n : g.impl().nodes()) nodes.push_back(n);
  internal::PlacementOptions options;
  options.policy = internal::PlacementPolicy::kGpuFirst;
  auto placed = internal::place_nodes(nodes, devices, options);
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed.value().device_of.at(y32.node()), 1);
  EXPECT_EQ(placed.value().device_of.at(y16.node()), 0);

  // Requested there without soft placement: an error naming the op and the missing kernel.
  Graph h;
  auto x16 = ops::placeholder(h, DType::Float16, Shape{1, 4, 4, 3});
  auto f16 = ops::placeholder(h, DType::Float16, Shape{2, 2, 3, 2});
  {
    auto scope = h.device("/device:TYPEDTEST:0");
    ops::conv2d(x16, f16, {1, 1, 1, 1}, "SAME", "conv16");
  }
  std::vector<const internal::Node*> h_nodes;
  for (const internal::Node* n : h.impl().nodes()) h_nodes.push_back(n);
  options.allow_soft_placement = false;
  auto refused_placement = internal::place_nodes(h_nodes, devices, options);
  ASSERT_FALSE(refused_placement.ok());
  EXPECT_THAT(refused_placement.status().message(), HasSubstr("no TYPEDTEST kernel for conv16 (Conv2D)"));
}

// TF's MaxPoolGradGrad is not here: asking for it names the op.
TEST(ConvOpsBuildTest, MaxPoolGradHasNoGradient) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float64, Shape{1, 4, 4, 1});
  auto y = ops::max_pool(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto dx = gradients({y}, {x})[0];
  const std::string message = error_of<InvalidArgumentError>([&] { gradients({dx}, {x}); });
  EXPECT_THAT(message, HasSubstr("(MaxPoolGrad)"));
  EXPECT_THAT(message, HasSubstr("no gradient"));
}

// ---- Errors at run time (shapes unknown when built) ----

TEST_P(ConvOpsTest, RunTimeErrorsNameTheOp) {
  const Tensor x = random(DType::Float32, {1, 4, 4, 3});
  const Tensor f = random(DType::Float32, {2, 2, 2, 1});
  expect_run_fails(
      {x, f}, [](const std::vector<Output>& i) { return ops::conv2d(i[0], i[1], window(1, 1), "SAME"); },
      "the filter's in channels (2) must equal the input's (3)");
  expect_run_fails(
      {random(DType::Float32, {4, 4, 3}), f},
      [](const std::vector<Output>& i) { return ops::conv2d(i[0], i[1], window(1, 1), "SAME"); },
      "the input (NHWC) must be 4-D, got shape [4,4,3]");
  expect_run_fails(
      {x, random(DType::Float32, {5, 2, 3, 1})},
      [](const std::vector<Output>& i) { return ops::conv2d(i[0], i[1], window(1, 1), "VALID"); },
      "the window's height 5 is larger than the input's 4 (VALID padding)");
  expect_run_fails(
      {x}, [](const std::vector<Output>& i) { return ops::max_pool(i[0], window(2, 5), window(1, 1), "VALID"); },
      "the window's width 5 is larger than the input's 4 (VALID padding)");
  const Tensor f3 = random(DType::Float32, {2, 2, 3, 1});
  expect_run_fails(
      {x, f3, random(DType::Float32, {1, 3, 3, 2})},
      [](const std::vector<Output>& i) {
        return internal::conv2d_backprop_filter(i[0], i[1], i[2], window64(1, 1), "VALID");
      },
      "out_backprop has shape [1,3,3,2], expected [1,3,3,1]");
  expect_run_fails(
      {x, random(DType::Float32, {1, 2, 2, 3})},
      [](const std::vector<Output>& i) {
        return internal::avg_pool_grad(i[0], i[1], window64(2, 2), window64(1, 1), "VALID");
      },
      "grad has shape [1,2,2,3], expected [1,3,3,3]");
}

// ---- Errors when the graph is built (TF's testShapeFunctionEdgeCases, testOpEdgeCases) ----

TEST(ConvOpsBuildTest, ShapeInference) {
  Graph g;
  auto unknown = ops::placeholder(g, DType::Float32);
  // All shapes unknown: four unknown dims.
  EXPECT_EQ(ops::conv2d(unknown, unknown, {1, 1, 1, 1}, "SAME").shape().to_string(), "[?,?,?,?]");
  EXPECT_EQ(ops::max_pool(unknown, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME").shape().to_string(), "[?,?,?,?]");
  // What is known carries through.
  auto x = ops::placeholder(g, DType::Float32, Shape{-1, 20, -1, 3});
  auto f = ops::placeholder(g, DType::Float32, Shape{3, 3, 3, 8});
  EXPECT_EQ(ops::conv2d(x, f, {1, 2, 2, 1}, "SAME").shape().to_string(), "[?,10,?,8]");
  EXPECT_EQ(ops::conv2d(x, f, {1, 2, 2, 1}, "VALID").shape().to_string(), "[?,9,?,8]");
  EXPECT_EQ(ops::conv2d(x, unknown, {1, 2, 2, 1}, "SAME").shape().to_string(), "[?,10,?,?]");
  EXPECT_EQ(ops::avg_pool(x, {1, 3, 3, 1}, {1, 3, 1, 1}, "VALID").shape().to_string(), "[?,6,?,3]");
  // SAME allows a window larger than the input.
  auto small = ops::placeholder(g, DType::Float64, Shape{1, 2, 2, 1});
  EXPECT_EQ(ops::max_pool(small, {1, 3, 3, 1}, {1, 1, 1, 1}, "SAME").shape(), Shape({1, 2, 2, 1}));
  EXPECT_EQ(ops::max_pool(small, {1, 3, 3, 1}, {1, 1, 1, 1}, "SAME").dtype(), DType::Float64);
  // The gradient ops have their reference input's shape.
  auto y = ops::conv2d(x, f, {1, 1, 1, 1}, "SAME");
  EXPECT_EQ(internal::conv2d_backprop_input(x, f, y, {1, 1, 1, 1}, "SAME").shape().to_string(), "[?,20,?,3]");
  EXPECT_EQ(internal::conv2d_backprop_filter(x, f, y, {1, 1, 1, 1}, "SAME").shape(), Shape({3, 3, 3, 8}));
}

TEST(ConvOpsBuildTest, Conv2DErrors) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{32, 20, 20, 3});
  auto unknown = ops::placeholder(g, DType::Float32);
  const auto conv = [&](Output in, Shape filter, std::vector<int> strides, std::string padding) {
    auto f = ops::placeholder(g, DType::Float32, std::move(filter));
    return [=] { ops::conv2d(in, f, strides, padding, "conv"); };
  };
  // Incorrect input and filter shapes.
  expect_build_fails(conv(ops::placeholder(g, DType::Float32, Shape{1, 3}), Shape::unknown(), {1, 1, 1, 1}, "SAME"),
                     "conv (Conv2D): ", "the input (NHWC) must be 4-D, got shape [1,3]");
  expect_build_fails(conv(unknown, Shape{1, 3}, {1, 1, 1, 1}, "SAME"), "conv (Conv2D): ",
                     "the filter (height, width, in channels, out channels) must be 4-D, got shape [1,3]");
  // Depth mismatch.
  expect_build_fails(conv(x, Shape{4, 4, 2, 2}, {1, 1, 1, 1}, "SAME"), "conv (Conv2D): ",
                     "the filter's in channels (2) must equal the input's (3): filter shape [4,4,2,2], input shape "
                     "[32,20,20,3]");
  // Illegal strides.
  expect_build_fails(conv(x, Shape{1, 1, 3, 1}, {2, 1, 1, 1}, "SAME"),
                     "conv (Conv2D): ", "strides in the batch and depth dimensions must be 1, got [2,1,1,1]");
  expect_build_fails(conv(x, Shape{1, 1, 3, 1}, {1, 1, 1, 2}, "SAME"),
                     "conv (Conv2D): ", "strides in the batch and depth dimensions must be 1, got [1,1,1,2]");
  expect_build_fails(conv(x, Shape{1, 1, 3, 1}, {1, 1}, "SAME"),
                     "conv (Conv2D): ", "strides must have 4 elements [1, height, width, 1], got [1,1]");
  expect_build_fails(conv(x, Shape{1, 1, 3, 1}, {1, 0, 1, 1}, "SAME"),
                     "conv (Conv2D): ", "strides must be positive, got [1,0,1,1]");
  // Filter larger than input.
  expect_build_fails(conv(x, Shape{20, 21, 3, 2}, {1, 1, 1, 1}, "VALID"),
                     "conv (Conv2D): ", "the window's width 21 is larger than the input's 20 (VALID padding)");
  expect_build_fails(conv(x, Shape{21, 20, 3, 2}, {1, 1, 1, 1}, "VALID"),
                     "conv (Conv2D): ", "the window's height 21 is larger than the input's 20 (VALID padding)");
  expect_build_fails(conv(x, Shape{0, 2, 3, 2}, {1, 1, 1, 1}, "SAME"),
                     "conv (Conv2D): ", "the filter's height and width must be positive, got shape [0,2,3,2]");
  // Unknown padding, even with unknown shapes.
  expect_build_fails(conv(unknown, Shape::unknown(), {1, 1, 1, 1}, "FULL"),
                     "conv (Conv2D): ", "padding must be \"SAME\" or \"VALID\", got \"FULL\"");
  // Dtypes.
  auto xi = ops::placeholder(g, DType::Int32, Shape{1, 2, 2, 1});
  expect_build_fails(
      [&] {
        ops::conv2d(xi, xi, {1, 1, 1, 1}, "SAME", "conv");
      },
      "conv (Conv2D): ", "input 0 must be float16, bfloat16, float32 or float64, got int32");
  expect_build_fails(
      [&] {
        internal::conv2d_backprop_input(xi, xi, xi, {1, 1, 1, 1}, "SAME", "grad");
      },
      "grad (Conv2DBackpropInput): ", "input 0 must be float16, bfloat16, float32 or float64, got int32");
  auto xh = ops::placeholder(g, DType::Float16, Shape{1, 2, 2, 3});
  expect_build_fails(
      [&] {
        ops::conv2d(xh, ops::placeholder(g, DType::BFloat16), {1, 1, 1, 1}, "SAME", "conv");
      },
      "conv (Conv2D): ", "inputs must have one dtype: input 0 is float16, input 1 is bfloat16");
  auto xd = ops::placeholder(g, DType::Float64, Shape{1, 2, 2, 3});
  expect_build_fails(
      [&] {
        ops::conv2d(xd, ops::placeholder(g, DType::Float32), {1, 1, 1, 1}, "SAME", "conv");
      },
      "conv (Conv2D): ", "inputs must have one dtype: input 0 is float64, input 1 is float32");
}

// A window, strides and padding that a pool of a [32,20,20,3] input refuses, and what it says.
struct BadPool {
  std::vector<int> ksize, strides;
  std::string padding;
  std::string detail;
};
const BadPool kBadPools[] = {
    {{1, 1, 1, 1}, {2, 1, 1, 1}, "SAME", "strides in the batch and depth dimensions must be 1, got [2,1,1,1]"},
    {{2, 1, 1, 1}, {1, 1, 1, 1}, "SAME", "ksize in the batch and depth dimensions must be 1, got [2,1,1,1]"},
    {{1, 1, 1, 3}, {1, 1, 1, 1}, "SAME", "ksize in the batch and depth dimensions must be 1, got [1,1,1,3]"},
    {{1, 2, 2}, {1, 1, 1, 1}, "SAME", "ksize must have 4 elements [1, height, width, 1], got [1,2,2]"},
    {{1, 0, 2, 1}, {1, 1, 1, 1}, "SAME", "ksize must be positive, got [1,0,2,1]"},
    {{1, 20, 21, 1}, {1, 1, 1, 1}, "VALID", "the window's width 21 is larger than the input's 20 (VALID padding)"},
    {{1, 21, 20, 1}, {1, 1, 1, 1}, "VALID", "the window's height 21 is larger than the input's 20 (VALID padding)"},
    {{1, 2, 2, 1}, {1, 1, 1, 1}, "same", "padding must be \"SAME\" or \"VALID\", got \"same\""},
};

TEST(ConvOpsBuildTest, PoolErrors) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{32, 20, 20, 3});
  for (bool max : {true, false}) {
    const std::string type = max ? "pool (MaxPool): " : "pool (AvgPool): ";
    const auto pool = [&](Output in, std::vector<int> ksize, std::vector<int> strides, std::string padding) {
      return [=] {
        max ? ops::max_pool(in, ksize, strides, padding, "pool") : ops::avg_pool(in, ksize, strides, padding, "pool");
      };
    };
    expect_build_fails(pool(ops::placeholder(g, DType::Float32, Shape{1, 3}), {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"), type,
                       "the input (NHWC) must be 4-D, got shape [1,3]");
    for (const BadPool& c : kBadPools) {
      SCOPED_TRACE(::testing::PrintToString(c.ksize) + " " + ::testing::PrintToString(c.strides) + " " + c.padding);
      expect_build_fails(pool(x, c.ksize, c.strides, c.padding), type, c.detail);
    }
    // MaxPool takes the integers too (TensorFlow's real number types), AvgPool does not.
    auto xi = ops::placeholder(g, DType::Int64, Shape{1, 2, 2, 1});
    if (max) {
      EXPECT_EQ(ops::max_pool(xi, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME").dtype(), DType::Int64);
    } else {
      expect_build_fails(pool(xi, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"), type,
                         "input 0 must be float16, bfloat16, float32 or float64, got int64");
    }
    auto xb = ops::placeholder(g, DType::Bool, Shape{1, 2, 2, 1});
    expect_build_fails(pool(xb, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"), type,
                       max ? "input 0 must be float16, bfloat16, float32, float64, int32 or int64, got bool"
                           : "input 0 must be float16, bfloat16, float32 or float64, got bool");
  }
  // The gradient ops take the floating point dtypes only.
  auto xi = ops::placeholder(g, DType::Int32, Shape{1, 2, 2, 1});
  expect_build_fails([&] { internal::max_pool_grad(xi, xi, xi, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME", "grad"); },
                     "grad (MaxPoolGrad): ", "input 0 must be float16, bfloat16, float32 or float64, got int32");
}

TEST(ConvOpsBuildTest, GradientOpErrors) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 3});
  auto f = ops::placeholder(g, DType::Float32, Shape{2, 2, 3, 5});
  auto dy = ops::placeholder(g, DType::Float32, Shape{1, 3, 3, 4});
  expect_build_fails(
      [&] {
        internal::conv2d_backprop_input(x, f, dy, {1, 1, 1, 1}, "VALID", "grad");
      },
      "grad (Conv2DBackpropInput): ", "out_backprop has shape [1,3,3,4], expected [1,3,3,5]");
  expect_build_fails(
      [&] {
        internal::conv2d_backprop_filter(x, f, dy, {1, 1, 1, 1}, "VALID", "grad");
      },
      "grad (Conv2DBackpropFilter): ", "out_backprop has shape [1,3,3,4], expected [1,3,3,5]");
  expect_build_fails(
      [&] {
        internal::max_pool_grad(x, dy, dy, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID", "grad");
      },
      "grad (MaxPoolGrad): ", "orig_output has shape [1,3,3,4], expected [1,3,3,3]");
  auto y = ops::max_pool(x, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID");
  expect_build_fails(
      [&] {
        internal::max_pool_grad(x, y, dy, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID", "grad");
      },
      "grad (MaxPoolGrad): ", "grad has shape [1,3,3,4], expected [1,3,3,3]");
  expect_build_fails(
      [&] {
        internal::avg_pool_grad(x, dy, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID", "grad");
      },
      "grad (AvgPoolGrad): ", "grad has shape [1,3,3,4], expected [1,3,3,3]");
}

// Each op keeps its arguments as attributes, for gradient functions to read.
TEST(ConvOpsBuildTest, OpsKeepTheirArgumentsAsAttributes) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 3});
  auto f = ops::placeholder(g, DType::Float32, Shape{2, 2, 3, 5});
  auto c = ops::conv2d(x, f, {1, 2, 1, 1}, "SAME");
  EXPECT_EQ(c.op().type(), "Conv2D");
  EXPECT_EQ(c.node()->attr<Dims>("strides"), (Dims{1, 2, 1, 1}));
  EXPECT_EQ(c.node()->attr<std::string>("padding"), "SAME");
  auto p = ops::avg_pool(x, {1, 3, 2, 1}, {1, 1, 2, 1}, "VALID");
  EXPECT_EQ(p.op().type(), "AvgPool");
  EXPECT_EQ(p.node()->attr<Dims>("ksize"), (Dims{1, 3, 2, 1}));
  EXPECT_EQ(p.node()->attr<Dims>("strides"), (Dims{1, 1, 2, 1}));
  EXPECT_EQ(p.node()->attr<std::string>("padding"), "VALID");
  EXPECT_EQ(ops::max_pool(x, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME").op().type(), "MaxPool");
}

// Through a server: every op and its attrs cross the wire to the task that runs them.
TEST(ConvOpsClusterTest, EveryOpRunsOnAServer) {
  train::Server server = train::Server::create_local_server();
  Graph g;
  const Tensor xv = iota(DType::Float32, {1, 2, 3, 3});
  const Tensor fv = iota(DType::Float32, {2, 2, 3, 3});
  auto x = ops::placeholder(g, DType::Float32, xv.shape());
  auto f = ops::placeholder(g, DType::Float32, fv.shape());
  auto y = ops::conv2d(x, f, {1, 2, 2, 1}, "SAME");                // testConv2D2x2FilterStride2Same
  auto mp = ops::max_pool(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");  // testMaxPoolSamePadding
  auto ap = ops::avg_pool(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto dx = internal::conv2d_backprop_input(x, f, y, {1, 2, 2, 1}, "SAME");
  auto df = internal::conv2d_backprop_filter(x, f, y, {1, 2, 2, 1}, "SAME");
  auto dmp = internal::max_pool_grad(x, mp, mp, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  auto dap = internal::avg_pool_grad(x, ap, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  Session s(g, server.target());
  auto out = s.run({y, mp, ap, dx, df, dmp, dap}, {{x, xv}, {f, fv}});
  expect_values(out[0], DType::Float32, Shape{1, 1, 2, 3}, {2271, 2367, 2463, 1230, 1305, 1380});
  expect_values(out[1], DType::Float32, Shape{1, 1, 2, 3}, {13, 14, 15, 16, 17, 18});
  const Geometry conv = geometry({1, 2, 3, 3}, 2, 2, 3, 2, 2, "SAME");
  const Geometry avg = geometry({1, 2, 3, 3}, 2, 2, 3, 2, 2, "VALID");
  const Geometry max = geometry({1, 2, 3, 3}, 2, 2, 3, 2, 2, "SAME");
  expect_values(out[2], DType::Float32, Shape{1, 1, 1, 3}, ref_pool(avg, values_of(xv), false));
  expect_values(out[3], DType::Float32, xv.shape(), ref_conv_backprop_input(conv, values_of(fv), values_of(out[0])));
  expect_values(out[4], DType::Float32, fv.shape(), ref_conv_backprop_filter(conv, values_of(xv), values_of(out[0])));
  expect_values(out[5], DType::Float32, xv.shape(), ref_pool_grad(max, values_of(xv), values_of(out[1]), true));
  expect_values(out[6], DType::Float32, xv.shape(), ref_pool_grad(avg, values_of(xv), values_of(out[2]), false));
}

INSTANTIATE_TEST_SUITE_P(Devices, ConvOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
