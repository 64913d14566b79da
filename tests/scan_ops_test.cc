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
#include "tests/testing/sim_device.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using testing::expect_build_fails;
using testing::expect_values;
using testing::max_gradient_error;
using testing::tensor_of;
using ::testing::HasSubstr;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

using Dims = std::vector<int64_t>;
using V = std::vector<double>;

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
          const Tensor y = apply({Tensor(dtype, Shape(dims))}, [&](auto x) { return scan.op(x[0], axis, true, true, ""); });
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
  const Tensor prod = apply({Tensor::vector<int64_t>({int64_t{1} << 62, 4})}, [](auto x) { return ops::cumprod(x[0]); });
  EXPECT_EQ(prod.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 62, 0}));
}

// ---- Errors (scan_ops_test.py: testInvalidAxis) ----

TEST_P(ScanOpsTest, AConstantAxisOutOfRangeFailsWhenTheGraphIsBuilt) {
  for (const Scan& scan : kScans) {
    Graph g;
    auto x = ops::placeholder(g, DType::Float32, Shape{2, 5});
    auto scope = on_device(g);
    for (int axis : {-3, 2}) {
      expect_build_fails([&] { scan.op(x, axis, false, false, "s"); }, std::string("s (") + (scan.prod ? "Cumprod" : "Cumsum"),
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

INSTANTIATE_TEST_SUITE_P(Devices, ScanGradientTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
