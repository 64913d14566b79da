// The scans cumsum and cumprod, and the gradient of reduce_prod built on them, through the public
// API on the CPU and on a simulated accelerator: values against a reference written here in plain
// loops (every axis, negative too, exclusive and reverse, every dtype), the axis as a constant, an
// int64 or a fed tensor, empty tensors, wrapping integers, every error case (InvalidArgumentError
// naming the op and the value, at build time where the axis is a constant, else at run time), and
// the gradients checked numerically against central differences. Cases follow TensorFlow's
// scan_ops_test.py, math_grad_test.py (ProdGradientTest) and reduction_ops_test.py
// (ProdReductionTest: testGradientWithZeros, testEmptyGradients).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tests/testing/device_op_test.h"
#include "tests/testing/gradient_checker.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using testing::expect_build_fails;
using testing::max_gradient_error;

constexpr DType kScanDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};

V arange(double from, double to) {
  V v;
  for (double x = from; x < to; ++x) v.push_back(x);
  return v;
}

// TensorFlow's handle_options over np.cumsum / np.cumprod, as plain loops: each line along `axis`
// folded from the identity in scan order, an exclusive output taken before its own element.
V scan_reference(const V& x, const Dims& dims, int axis, bool exclusive, bool reverse, bool prod) {
  const int rank = static_cast<int>(dims.size());
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (int d = axis + 1; d < rank; ++d) inner *= dims[d];
  const int64_t len = dims[axis];
  V y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double acc = prod ? 1 : 0;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = (o * len + (reverse ? len - 1 - s : s)) * inner + i;
        if (exclusive) y[k] = acc;
        acc = prod ? acc * x[k] : acc + x[k];
        if (!exclusive) y[k] = acc;
      }
    }
  }
  return y;
}

using ScanBuilder = Output (*)(Output, int, bool, bool, std::string);
using ScanBuilderOfTensor = Output (*)(Output, Output, bool, bool, std::string);

struct Scan {
  const char* name;
  ScanBuilder op;
  ScanBuilderOfTensor op_of_tensor;
  bool prod;
};
const Scan kScans[] = {{"cumsum", ops::cumsum, ops::cumsum, false}, {"cumprod", ops::cumprod, ops::cumprod, true}};

class ScanOpsTest : public testing::DeviceOpTest {
 protected:
  // Every axis (negative ones too), exclusive and reverse, every dtype, of `scan` over x = values.
  void check_every_axis(const Scan& scan, const Dims& dims, const V& values) {
    const int rank = static_cast<int>(dims.size());
    for (DType dtype : kScanDTypes) {
      for (int axis = -rank; axis < rank; ++axis) {
        for (bool exclusive : {false, true}) {
          for (bool reverse : {false, true}) {
            SCOPED_TRACE(::testing::Message() << scan.name << " " << dtype_name(dtype) << " axis " << axis
                                              << " exclusive " << exclusive << " reverse " << reverse);
            const Tensor y = apply({tensor_of(dtype, Shape(dims), values)},
                                   [&](auto x) { return scan.op(x[0], axis, exclusive, reverse, ""); });
            expect_values(y, dtype, Shape(dims), scan_reference(values, dims, axis, exclusive, reverse, scan.prod));
          }
        }
      }
    }
  }
};

// ---- Values (scan_ops_test.py: test1D, test2D, test3D, test6D) ----

TEST_P(ScanOpsTest, OneDimension) {
  for (const Scan& scan : kScans) check_every_axis(scan, {5}, arange(1, 6));
}

TEST_P(ScanOpsTest, TwoDimensions) {
  check_every_axis(kScans[0], {2, 5}, arange(0, 10));
  check_every_axis(kScans[1], {2, 5}, arange(1, 11));
}

TEST_P(ScanOpsTest, ThreeDimensions) {
  check_every_axis(kScans[0], {2, 2, 5}, arange(0, 20));
  check_every_axis(kScans[1], {2, 2, 5}, arange(1, 21));
}

TEST_P(ScanOpsTest, SixDimensions) {
  for (const Scan& scan : kScans) check_every_axis(scan, {2, 2, 3, 3, 2, 2}, arange(1, 145));
}

// The documented examples: tf.cumsum([a, b, c]) and its options, and the same for cumprod.
TEST_P(ScanOpsTest, TensorFlowsDocumentedExamples) {
  const Tensor x = tensor_of(DType::Float32, Shape{3}, {2, 3, 5});
  auto run_scan = [&](ScanBuilder op, bool exclusive, bool reverse) {
    return apply({x}, [&](auto in) { return op(in[0], 0, exclusive, reverse, ""); });
  };
  expect_values(run_scan(ops::cumsum, false, false), DType::Float32, Shape{3}, {2, 5, 10});
  expect_values(run_scan(ops::cumsum, true, false), DType::Float32, Shape{3}, {0, 2, 5});
  expect_values(run_scan(ops::cumsum, false, true), DType::Float32, Shape{3}, {10, 8, 5});
  expect_values(run_scan(ops::cumsum, true, true), DType::Float32, Shape{3}, {8, 5, 0});
  expect_values(run_scan(ops::cumprod, false, false), DType::Float32, Shape{3}, {2, 6, 30});
  expect_values(run_scan(ops::cumprod, true, false), DType::Float32, Shape{3}, {1, 2, 6});
  expect_values(run_scan(ops::cumprod, false, true), DType::Float32, Shape{3}, {30, 15, 5});
  expect_values(run_scan(ops::cumprod, true, true), DType::Float32, Shape{3}, {15, 5, 1});
}

// testAxisType: the axis may be int32 or int64, and a tensor fed when the op runs.
TEST_P(ScanOpsTest, TheAxisMayBeInt32OrInt64AndFedAtRunTime) {
  const Dims dims = {2, 3};
  const V values = arange(1, 7);
  for (const Scan& scan : kScans) {
    for (DType axis_dtype : {DType::Int32, DType::Int64}) {
      for (bool fed_shape_known : {false, true}) {
        SCOPED_TRACE(::testing::Message() << scan.name << " " << dtype_name(axis_dtype) << " " << fed_shape_known);
        const Tensor y = apply({tensor_of(DType::Float64, Shape(dims), values), tensor_of(axis_dtype, Shape{}, {-1})},
                               [&](auto x) { return scan.op_of_tensor(x[0], x[1], false, true, ""); },
                               /*unknown_shapes=*/!fed_shape_known);
        expect_values(y, DType::Float64, Shape(dims), scan_reference(values, dims, -1, false, true, scan.prod));
      }
    }
  }
}

// testEmpty: no elements, along the axis or across it.
TEST_P(ScanOpsTest, EmptyTensors) {
  for (const Scan& scan : kScans) {
    for (DType dtype : kScanDTypes) {
      for (const Dims& dims : {Dims{0}, Dims{2, 0, 3}}) {
        for (int axis = 0; axis < static_cast<int>(dims.size()); ++axis) {
          const Tensor y =
              apply({Tensor(dtype, Shape(dims))}, [&](auto x) { return scan.op(x[0], axis, true, true, ""); });
          expect_values(y, dtype, Shape(dims), {});
        }
      }
    }
  }
}

TEST_P(ScanOpsTest, IntegersWrapAround) {
  constexpr double kMax32 = std::numeric_limits<int32_t>::max();
  const Tensor sum = apply({tensor_of(DType::Int32, Shape{2}, {kMax32, 1})}, [](auto x) { return ops::cumsum(x[0]); });
  expect_values(sum, DType::Int32, Shape{2}, {kMax32, std::numeric_limits<int32_t>::min()});
  const Tensor big = Tensor::vector<int64_t>({int64_t{1} << 62, 4});
  const Tensor prod = apply({big}, [](auto x) { return ops::cumprod(x[0]); });
  EXPECT_EQ(prod.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 62, 0}));
}

// ---- Errors (scan_ops_test.py: testInvalidAxis) ----

TEST_P(ScanOpsTest, AConstantAxisOutOfRangeFailsWhenTheGraphIsBuilt) {
  for (const Scan& scan : kScans) {
    Graph g;
    auto x = ops::placeholder(g, DType::Float32, Shape{2, 5});
    auto scope = on_device(g);
    for (int axis : {-3, 2}) {
      expect_build_fails([&] { scan.op(x, axis, false, false, "s"); },
                         std::string("s (") + (scan.prod ? "Cumprod" : "Cumsum"),
                         "axis " + std::to_string(axis) + " is out of range [-2, 2) for an input of shape [2,5]");
    }
    auto scalar = ops::placeholder(g, DType::Float32, Shape{});
    expect_build_fails([&] { scan.op(scalar, 0, false, false, ""); }, scan.prod ? "Cumprod" : "Cumsum",
                       "axis 0 is out of range [0, 0)");
  }
}

TEST_P(ScanOpsTest, BadInputsFailWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2, 5});
  auto scope = on_device(g);
  expect_build_fails([&] { ops::cumsum(x, ops::constant(g, Tensor::vector<int32_t>({0}))); }, "Cumsum",
                     "axis must be a scalar, got shape [1]");
  expect_build_fails([&] { ops::cumprod(x, ops::constant(g, 0.0f)); }, "Cumprod",
                     "axis must be int32 or int64, got float32");
  auto b = ops::placeholder(g, DType::Bool, Shape{3});
  expect_build_fails([&] { ops::cumsum(b); }, "Cumsum", "x must be float32, float64, int32 or int64, got bool");
  auto h = ops::placeholder(g, DType::Float16, Shape{3});
  expect_build_fails([&] { ops::cumprod(h); }, "Cumprod", "got float16");
  EXPECT_THROW(ops::cumsum(Output()), InvalidArgumentError);
  EXPECT_THROW(ops::cumsum(x, Output()), InvalidArgumentError);
}

TEST_P(ScanOpsTest, AFedAxisIsCheckedWhenTheOpRuns) {
  const Tensor x = tensor_of(DType::Float32, Shape{2, 5}, arange(0, 10));
  for (const Scan& scan : kScans) {
    auto op = [&](auto in) { return scan.op_of_tensor(in[0], in[1], false, false, ""); };
    expect_run_fails({x, Tensor::scalar(int32_t{2})}, op, "axis 2 is out of range [-2, 2) for an input of shape [2,5]");
    expect_run_fails({x, Tensor::scalar(int64_t{-3})}, op, "axis -3 is out of range [-2, 2)");
    expect_run_fails({x, Tensor::vector<int32_t>({0})}, op, "axis must be a scalar, got shape [1]");
    expect_run_fails({Tensor::scalar(1.0f), Tensor::scalar(int32_t{0})}, op, "axis 0 is out of range [0, 0)");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ScanOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- Gradients, checked numerically on each device ----

class ScanGradientTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The largest Jacobian error of `build(x)` at x = values (float64, shaped `dims`, or fed through
  // a placeholder of shape `placeholder` when given), built under the device of the test.
  double error(const Dims& dims, const V& values, const std::function<Output(Output)>& build,
               const std::optional<Shape>& placeholder = std::nullopt) {
    Graph g;
    auto scope = g.device(GetParam() == "CPU" ? "/cpu:0" : "/device:SIM:0");
    auto x = ops::placeholder(g, DType::Float64, placeholder.value_or(Shape(dims)));
    return max_gradient_error(g, {{x, tensor_of(DType::Float64, Shape(dims), values)}}, build(x));
  }
};

// Central differences of the linear scans are exact up to rounding; a wrong gradient errs by 1 or more.
constexpr double kTolerance = 1e-6;

// scan_ops_test.py: CumsumTest.testGradient, testGradient2D.
TEST_P(ScanGradientTest, Cumsum) {
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "exclusive " << exclusive << " reverse " << reverse);
      EXPECT_LT(error({50}, arange(0, 50), [&](Output x) { return ops::cumsum(x, 0, exclusive, reverse); }),
                kTolerance);
      for (int axis : {-1, 0, 1}) {
        EXPECT_LT(error({5, 10}, arange(0, 50), [&](Output x) { return ops::cumsum(x, axis, exclusive, reverse); }),
                  kTolerance)
            << "axis " << axis;
      }
    }
  }
}

// scan_ops_test.py: CumprodTest.testGradient, testGradient2D (values away from zero).
TEST_P(ScanGradientTest, Cumprod) {
  V values;
  for (double v : arange(1, 11)) values.push_back(0.5 + v / 10);
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "exclusive " << exclusive << " reverse " << reverse);
      EXPECT_LT(error({10}, values, [&](Output x) { return ops::cumprod(x, 0, exclusive, reverse); }), kTolerance);
      for (int axis : {-1, 0, 1}) {
        EXPECT_LT(error({2, 5}, values, [&](Output x) { return ops::cumprod(x, axis, exclusive, reverse); }),
                  kTolerance)
            << "axis " << axis;
      }
    }
  }
}

// As TensorFlow's _CumprodGrad (div_no_nan), the gradient at an element that is 0 is 0 (the true
// derivative of sum(cumprod([2, 0, 3])) by its 0 is 2 + 2 * 3 = 8): finite, never NaN.
TEST_P(ScanGradientTest, CumprodGradientIsZeroAtAZeroAsTensorFlows) {
  Graph g;
  auto scope = g.device(GetParam() == "CPU" ? "/cpu:0" : "/device:SIM:0");
  auto x = ops::placeholder(g, DType::Float64, Shape{3});
  const Output dx = gradients({ops::reduce_sum(ops::cumprod(x))}, {x})[0];
  Session s(g);
  EXPECT_EQ(s.run(dx, {{x, Tensor::vector<double>({2, 0, 3})}}).to_vector<double>(), (std::vector<double>{1, 0, 0}));
}

// ---- reduce_prod's gradient ----

// math_grad_test.py: ProdGradientTest (every axis; a negative one), exact values in float32.
TEST_P(ScanGradientTest, ProdGradientHasTheProductOfTheOthers) {
  Graph g;
  auto scope = g.device(GetParam() == "CPU" ? "/cpu:0" : "/device:SIM:0");
  auto x = ops::placeholder(g, DType::Float32, Shape{2, 2});
  const Output all = gradients({ops::reduce_prod(x)}, {x})[0];
  const Output rows = gradients({ops::reduce_prod(x, {-1})}, {x})[0];
  Session s(g);
  const FeedMap feed = {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}};
  EXPECT_EQ(s.run(all, feed).to_vector<float>(), (std::vector<float>{24, 12, 8, 6}));
  EXPECT_EQ(s.run(rows, feed).to_vector<float>(), (std::vector<float>{2, 1, 4, 3}));
  EXPECT_LT(error({2, 2}, {1, 2, 3, 4}, [](Output x) { return ops::reduce_prod(x); }), kTolerance);
  EXPECT_LT(error({2, 2}, {1, 2, 3, 4}, [](Output x) { return ops::reduce_prod(x, {-1}); }), kTolerance);
}

// reduction_ops_test.py: ProdReductionTest.testGradientWithZeros: no zeros; a zero at the
// beginning, the end and the middle of axis 2 (so lines over axes {1, 2} hold three zeros, lines
// over axis 0 two zeros or none); all zeros.
TEST_P(ScanGradientTest, ProdGradientWithZeros) {
  const Dims s = {2, 3, 4, 2};
  V x;
  for (double v : arange(1, 49)) x.push_back(v / 20);
  auto zero_at = [&](int k) {
    V z = x;
    for (std::size_t i = 0; i < z.size(); ++i) {
      if (static_cast<int>(i / 2 % 4) == k) z[i] = 0;
    }
    return z;
  };
  const std::vector<V> inputs = {x, zero_at(0), zero_at(3), zero_at(2), V(x.size(), 0.0)};
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    for (const std::vector<int>& axes : {std::vector<int>{1, 2}, {0, 1, 2, 3}, {0}}) {
      EXPECT_LT(error(s, inputs[k], [&](Output t) { return ops::reduce_prod(t, axes); }), kTolerance)
          << "input " << k << ", axes " << ::testing::PrintToString(axes);
    }
  }
}

// One zero in a reduced line, two zeros in another, on every axis set, kept dims or not.
TEST_P(ScanGradientTest, ProdGradientWithOneAndTwoZerosInALine) {
  const V x = {1.5, 2, 0, -4, 0, 3, 0, 5, 2, -1, 3, 0.5};  // row 0: one zero, row 1: two; column 2: two
  for (const std::vector<int>& axes : {std::vector<int>{}, {0}, {1}, {-1}, {-2}, {0, 1}, {1, 0}}) {
    for (bool keep : {false, true}) {
      EXPECT_LT(error({3, 4}, x, [&](Output t) { return ops::reduce_prod(t, axes, keep); }), kTolerance)
          << "axes " << ::testing::PrintToString(axes) << " keep_dims " << keep;
    }
  }
  // Several axes not in front (moved there and back), with zeros.
  V y;
  for (double v : arange(0, 24)) y.push_back(static_cast<int>(v) % 7 == 3 ? 0 : 0.8 + v / 30);
  for (const std::vector<int>& axes : {std::vector<int>{0, 2}, {1, 2}, {-1, 0}, {0, 1}}) {
    for (bool keep : {false, true}) {
      EXPECT_LT(error({2, 3, 4}, y, [&](Output t) { return ops::reduce_prod(t, axes, keep); }), kTolerance)
          << "axes " << ::testing::PrintToString(axes) << " keep_dims " << keep;
    }
  }
}

// Shapes known only when the op runs: one axis scans in place, all axes as one line, several with
// either the reduced dims or the others known.
TEST_P(ScanGradientTest, ProdGradientWithAnUnknownBatch) {
  const V x = {1.5, 2, 0, -4, 0, 3, 0, 5, 2, -1, 3, 0.5, 1, 2, 3, 0, 1.25, -2, 1, 2, 0.5, 3, 1, 2};
  auto prod = [](std::vector<int> axes, bool keep) {
    return [=](Output t) { return ops::reduce_prod(t, axes, keep); };
  };
  EXPECT_LT(error({6, 4}, x, prod({1}, false), Shape{-1, 4}), kTolerance);
  EXPECT_LT(error({6, 4}, x, prod({0}, true), Shape{-1, -1}), kTolerance);
  EXPECT_LT(error({6, 4}, x, prod({}, false), Shape::unknown()), kTolerance);
  EXPECT_LT(error({6, 4}, x, prod({0, 1}, false), Shape{-1, 4}), kTolerance);
  EXPECT_LT(error({2, 3, 4}, x, prod({1, 2}, false), Shape{-1, 3, 4}), kTolerance);
  EXPECT_LT(error({2, 3, 4}, x, prod({0, 1}, false), Shape{-1, 3, 4}), kTolerance);
  EXPECT_LT(error({2, 3, 4}, x, prod({0, 2}, true), Shape{-1, 3, 4}), kTolerance);
}

TEST_P(ScanGradientTest, ProdGradientThatNeedsUnknownShapesIsAClearError) {
  Graph g;
  auto both_unknown = ops::placeholder(g, DType::Float64, Shape{-1, -1, 3});
  std::string message = testing::error_of<InvalidArgumentError>(
      [&] { gradients({ops::reduce_prod(both_unknown, {0, 2}, false, "p")}, {both_unknown}); });
  EXPECT_THAT(message, HasSubstr("p (Prod)"));
  EXPECT_THAT(message, HasSubstr("needs the reduced dims or the others known when the graph is built"));
  auto no_rank = ops::placeholder(g, DType::Float64);
  message = testing::error_of<InvalidArgumentError>(
      [&] { gradients({ops::reduce_prod(no_rank, {0, 1}, true, "q")}, {no_rank}); });
  EXPECT_THAT(message, HasSubstr("q (Prod)"));
  EXPECT_THAT(message, HasSubstr("needs its input's rank known"));
}

// reduction_ops_test.py: ProdReductionTest.testEmptyGradients.
TEST_P(ScanGradientTest, ProdGradientOfAnEmptyInputIsEmpty) {
  Graph g;
  auto scope = g.device(GetParam() == "CPU" ? "/cpu:0" : "/device:SIM:0");
  auto x = ops::placeholder(g, DType::Float32, Shape{0, 3});
  auto z = ops::placeholder(g, DType::Float32, Shape{2, 0, 3});
  const auto dx = gradients({ops::reduce_prod(x, {1})}, {x})[0];
  const auto dz = gradients({ops::reduce_prod(z, {0, 2})}, {z})[0];
  Session s(g);
  const auto out =
      s.run({dx, dz}, {{x, Tensor(DType::Float32, Shape{0, 3})}, {z, Tensor(DType::Float32, Shape{2, 0, 3})}});
  EXPECT_EQ(out[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 0, 3}));
}

INSTANTIATE_TEST_SUITE_P(Devices, ScanGradientTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
