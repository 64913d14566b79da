// The neural-network ops (softmax, log_softmax, the two cross entropies, bias_add, l2_loss,
// dropout, truncated_normal, stop_gradient) and the gradient kernels behind them (BiasAddGrad,
// ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad, GatherGrad) through the public API (a Graph, a
// Session), on the CPU and on a simulated accelerator: values against references written here as
// plain loops or TensorFlow's documented values, dtypes, empty tensors, and every error case
// (InvalidArgumentError naming the op). Cases follow TensorFlow's softmax_op_test.py,
// sparse_xent_op_test.py, xent_op_test.py, bias_op_test.py and nn_test.py (L2LossTest). The
// gradient functions registered in core/nn_ops.cc are checked numerically in
// tests/testing/nn_gradient_cases.h (every device type).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/nn_ops.h"
#include "core/node.h"
#include "tests/testing/device_op_test.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using testing::RandomInputs;
using testing::Range;

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

Tensor T(DType dtype, const Dims& dims, const V& v) { return tensor_of(dtype, Shape(dims), v); }
Tensor F32(const Dims& dims, const V& v) { return T(DType::Float32, dims, v); }

// TensorFlow's assertAllClose with rtol = atol = tolerance, for its documented values (4 digits).
void expect_all_close(const Tensor& got, const V& want, double tolerance) {
  const V v = values_of(got);
  ASSERT_EQ(v.size(), want.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(v[i], want[i], tolerance + tolerance * std::abs(want[i])) << "element " << i;
  }
}

// ---- References (plain loops over rows of the last axis, in float64) ----

V softmax_ref(const V& x, int64_t cols, bool log) {
  V out(x.size());
  for (std::size_t r = 0; cols > 0 && r < x.size() / cols; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[r * cols + j]);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) {
      const double shifted = x[r * cols + j] - m;
      out[r * cols + j] = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
    }
  }
  return out;
}

struct Xent {
  V loss;
  V backprop;
};

// Dense labels [rows, cols] against logits [rows, cols].
Xent xent_ref(const V& labels, const V& logits, int64_t cols) {
  Xent x;
  const V log_p = softmax_ref(logits, cols, /*log=*/true);
  for (std::size_t r = 0; cols > 0 && r < logits.size() / cols; ++r) {
    double loss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const std::size_t i = r * cols + j;
      loss -= labels[i] * log_p[i];
      x.backprop.push_back(std::exp(log_p[i]) - labels[i]);
    }
    x.loss.push_back(loss);
  }
  return x;
}

V one_hot_ref(const V& labels, int64_t cols) {
  V out(labels.size() * cols, 0.0);
  for (std::size_t r = 0; r < labels.size(); ++r) out[r * cols + static_cast<int64_t>(labels[r])] = 1;
  return out;
}

// Runs the ops under test on the device the test is instantiated for ("CPU" or "SIM"), fed from
// host placeholders, as tests/select_ops_test.cc does.
class NnOpsTest : public testing::DeviceOpTest {
 protected:
  // A random op built on the test's device in its own graph and session: `runs` steps of it.
  template <class F>
  std::vector<std::vector<Tensor>> run_random(F build, int runs) {
    Graph g;
    Output y;
    {
      auto scope = on_device(g);
      y = build(g);
    }
    Session s(g);
    std::vector<Output> fetches;
    for (int i = 0; i < y.op().num_outputs(); ++i) fetches.push_back(y.op().output(i));
    std::vector<std::vector<Tensor>> out;
    for (int k = 0; k < runs; ++k) out.push_back(s.run(fetches));
    EXPECT_THAT(y.op().assigned_device(), HasSubstr("/device:" + GetParam() + ":0")) << y.name();
    return out;
  }
};

using testing::expect_build_fails;

// ---- softmax, log_softmax (softmax_op_test.py, log_softmax cases) ----

TEST_P(NnOpsTest, SoftmaxAndLogSoftmaxEveryFloatDType) {
  // testSoftmax / testLogSoftmax's features, and a random [3,5] batch.
  const V features = {1, 1, 1, 1, 1, 2, 3, 4};
  RandomInputs rng;
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (const Tensor& x : {T(dtype, {2, 4}, features), rng.tensor(dtype, Shape{3, 5}, Range{-5, 5})}) {
      const V in = values_of(x);
      const int64_t cols = x.shape().dim(-1);
      expect_values(apply({x}, [](auto v) { return ops::softmax(v[0]); }), dtype, x.shape(),
                    softmax_ref(in, cols, false), 1e-12);
      expect_values(apply({x}, [](auto v) { return ops::log_softmax(v[0]); }), dtype, x.shape(),
                    softmax_ref(in, cols, true), 1e-12);
    }
  }
  // TensorFlow's documented values for the second row: 0.032, 0.087, 0.237, 0.644.
  expect_all_close(apply({F32({1, 4}, {1, 2, 3, 4})}, [](auto v) { return ops::softmax(v[0]); }),
                  {0.0321, 0.0871, 0.2369, 0.6439}, 1e-4);
}

TEST_P(NnOpsTest, SoftmaxOverTheLastAxisOfAnyRank) {
  // test1DTensorAsInput and test3DTensorAsInput, the latter fed with an unknown shape.
  const V v1 = {1, 2, 3, 4};
  expect_values(apply({F32({4}, v1)}, [](auto v) { return ops::softmax(v[0]); }), DType::Float32, Shape{4},
                softmax_ref(v1, 4, false));
  RandomInputs rng;
  const Tensor x = rng.tensor(DType::Float64, Shape{3, 2, 4}, Range{-3, 3});
  expect_values(apply({x}, [](auto v) { return ops::log_softmax(v[0]); }, /*unknown_shapes=*/true), DType::Float64,
                Shape{3, 2, 4}, softmax_ref(values_of(x), 4, true));
}

TEST_P(NnOpsTest, SoftmaxLargeDims) {
  // testLargeDims: rows of 129 and 256 ones are uniform.
  for (int64_t dims : {129, 256}) {
    Tensor y = apply({F32({2, dims}, V(2 * dims, 1.0))}, [](auto v) { return ops::softmax(v[0]); });
    expect_values(y, DType::Float32, Shape{2, dims}, V(2 * dims, 1.0 / static_cast<double>(dims)));
  }
}

TEST_P(NnOpsTest, LogSoftmaxDoesNotOverflow) {
  // _testOverflow: the largest finite value beside small ones, float64 and float32.
  for (DType dtype : {DType::Float64, DType::Float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double max = dtype == DType::Float64 ? std::numeric_limits<double>::max()
                                               : static_cast<double>(std::numeric_limits<float>::max());
    Tensor y = apply({T(dtype, {2, 4}, {1, 1, 1, 1, max, 1, 2, 3})}, [](auto v) { return ops::log_softmax(v[0]); });
    const V got = values_of(y);
    const V want = {-1.386294, -1.386294, -1.386294, -1.386294, 0, -max, -max, -max};
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i] / (i >= 5 ? max : 1), want[i] / (i >= 5 ? max : 1), 1e-5) << "element " << i;
    }
    Tensor p = apply({T(dtype, {1, 3}, {max, max / 2, -max})}, [](auto v) { return ops::softmax(v[0]); });
    expect_values(p, dtype, Shape{1, 3}, {1, 0, 0});
  }
}

TEST_P(NnOpsTest, SoftmaxOfEmptyTensors) {
  // testEmptyInput: [0,3]; and rows with no columns.
  EXPECT_EQ(apply({F32({0, 3}, {})}, [](auto v) { return ops::softmax(v[0]); }).shape(), (Shape{0, 3}));
  EXPECT_EQ(apply({F32({2, 0}, {})}, [](auto v) { return ops::log_softmax(v[0]); }).shape(), (Shape{2, 0}));
}

TEST_P(NnOpsTest, SoftmaxOfAScalarFailsWhenItRuns) {
  expect_run_fails({Tensor::scalar(1.0f)}, [](auto v) { return ops::softmax(v[0], "sm"); },
                   "logits must have at least 1 dimension, got shape []");
}

TEST(NnOpsBuildTest, SoftmaxChecksItsInput) {
  Graph g;
  expect_build_fails([&] { ops::softmax(ops::placeholder(g, DType::Float32, Shape{}), "sm"); }, "sm (Softmax): ",
                     "logits must have at least 1 dimension, got shape []");
  expect_build_fails([&] { ops::log_softmax(ops::placeholder(g, DType::Int32, {2, 3}), "ls"); }, "ls (LogSoftmax): ",
                     "logits must be floating point, got int32");
  EXPECT_EQ(ops::softmax(ops::placeholder(g, DType::Float16, {-1, 7})).shape(), (Shape{-1, 7}));
}

// ---- sparse_softmax_cross_entropy_with_logits (sparse_xent_op_test.py) ----

TEST_P(NnOpsTest, SparseXentMatchesTensorFlowsValues) {
  // testNpXent: batch 0 is uniform with target 3, batch 1 is 1, 2, 3, 4 with target 0.
  const Tensor logits = F32({2, 4}, {1, 1, 1, 1, 1, 2, 3, 4});
  for (DType label_dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(label_dtype));
    auto out = apply_all({T(label_dtype, {2}, {3, 0}), logits},
                         [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1]); });
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].shape(), (Shape{2}));
    expect_all_close(out[0], {1.3862, 3.4420}, 1e-3);
    expect_all_close(out[1], {0.25, 0.25, 0.25, -0.75, -0.968, 0.087, 0.237, 0.6439}, 1e-3);
  }
}

TEST_P(NnOpsTest, SparseXentEveryFloatDTypeAgainstTheReference) {
  RandomInputs rng;
  const V labels = {2, 0, 4, 4, 1};
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = rng.tensor(dtype, Shape{5, 5}, Range{-4, 4});
    auto out = apply_all({T(DType::Int64, {5}, labels), logits},
                         [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1]); },
                         /*unknown_shapes=*/dtype == DType::Float64);
    const Xent want = xent_ref(one_hot_ref(labels, 5), values_of(logits), 5);
    expect_values(out[0], dtype, Shape{5}, want.loss, 1e-12);
    expect_values(out[1], dtype, Shape{5, 5}, want.backprop, 1e-12);
  }
}

TEST_P(NnOpsTest, SparseXentSingleClassEmptyBatchAndLargeLogits) {
  // testSingleClass: one class, so every loss and gradient is 0.
  auto single = apply_all({T(DType::Int32, {3}, {0, 0, 0}), F32({3, 1}, {1, -1, 0})},
                          [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1]); });
  expect_values(single[0], DType::Float32, Shape{3}, {0, 0, 0});
  expect_values(single[1], DType::Float32, Shape{3, 1}, {0, 0, 0});
  auto empty = apply_all({T(DType::Int64, {0}, {}), F32({0, 5}, {})},
                         [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1]); });
  EXPECT_EQ(empty[0].shape(), (Shape{0}));
  EXPECT_EQ(empty[1].shape(), (Shape{0, 5}));
  // Logits far apart: exp of the unshifted values would overflow float32.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    auto large = apply_all({T(DType::Int32, {2}, {2, 0}), T(dtype, {2, 3}, {1e4, 0, -1e4, 1e4, 0, -1e4})},
                           [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1]); });
    expect_values(large[0], dtype, Shape{2}, {2e4, 0});
    expect_values(large[1], dtype, Shape{2, 3}, {1, 0, -1, 0, 0, 0});
  }
}

TEST_P(NnOpsTest, SparseXentLabelOutOfRangeFailsNamingTheLabel) {
  // testInvalidLabel: 4 and -1 are outside [0, 4).
  const Tensor logits = F32({4, 4}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 1, 2, 3, 4});
  auto xent = [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1], "xent"); };
  expect_run_fails({T(DType::Int32, {4}, {4, 3, 0, -1}), logits}, xent,
                   "received a label value of 4 (labels[0]) which is outside the valid range of [0, 4)");
  expect_run_fails({T(DType::Int64, {4}, {0, 3, 0, -1}), logits}, xent,
                   "received a label value of -1 (labels[3]) which is outside the valid range of [0, 4)");
}

TEST_P(NnOpsTest, SparseXentChecksShapesWhenItRuns) {
  auto xent = [](auto v) { return ops::sparse_softmax_cross_entropy_with_logits(v[0], v[1], "xent"); };
  expect_run_fails({T(DType::Int32, {3}, {0, 0, 0}), F32({2, 3}, V(6, 0))}, xent,
                   "logits and labels must have the same first dimension, got logits shape [2,3] and labels shape [3]");
  expect_run_fails({T(DType::Int32, {2}, {0, 0}), F32({2}, {1, 2})}, xent, "logits must be 2-D, got shape [2]");
  expect_run_fails({T(DType::Int32, {2, 1}, {0, 0}), F32({2, 2}, V(4, 0))}, xent,
                   "labels must be 1-D, got shape [2,1]");
  expect_run_fails({T(DType::Int32, {2}, {0, 0}), F32({2, 0}, {})}, xent,
                   "must have at least one class, got logits shape [2,0]");
}

TEST(NnOpsBuildTest, SparseXentChecksItsInputs) {
  Graph g;
  auto logits = ops::placeholder(g, DType::Float32, {2, 3});
  expect_build_fails(
      [&] { ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Int32, {3}), logits, "x"); },
      "x (SparseSoftmaxCrossEntropyWithLogits): ", "same first dimension");
  expect_build_fails(
      [&] { ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Float32, {2}), logits, "x"); },
      "x (SparseSoftmaxCrossEntropyWithLogits): ", "labels must be int32 or int64, got float32");
  expect_build_fails(
      [&] {
        ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Int32, {2, 1}), logits, "x");
      },
      "x (SparseSoftmaxCrossEntropyWithLogits): ", "labels must be 1-D, got shape [2,1]");
  expect_build_fails(
      [&] {
        ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Int32, {2}),
                                                      ops::placeholder(g, DType::Float32, {2}), "x");
      },
      "x (SparseSoftmaxCrossEntropyWithLogits): ", "logits must be 2-D, got shape [2]");
  // The batch is taken from the labels when the logits do not know it.
  auto loss = ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Int64, {4}),
                                                            ops::placeholder(g, DType::Float32, {-1, 3}));
  EXPECT_EQ(loss.shape(), (Shape{4}));
  EXPECT_EQ(loss.op().num_outputs(), 2);
  EXPECT_EQ(loss.op().output(1).shape(), (Shape{4, 3}));
}

// ---- softmax_cross_entropy_with_logits (xent_op_test.py) ----

TEST_P(NnOpsTest, XentMatchesTensorFlowsValues) {
  // testNpXent: soft targets (0, .5, .5, 0) on the second batch.
  auto out = apply_all({F32({2, 4}, {0, 0, 0, 1, 0, .5, .5, 0}), F32({2, 4}, {1, 1, 1, 1, 1, 2, 3, 4})},
                       [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]); });
  expect_all_close(out[0], {1.3862, 1.9401}, 1e-3);
  expect_all_close(out[1], {0.25, 0.25, 0.25, -0.75, 0.0321, -0.4129, -0.2632, 0.6439}, 1e-3);
}

TEST_P(NnOpsTest, XentEveryFloatDTypeAgainstTheReference) {
  RandomInputs rng;
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = rng.tensor(dtype, Shape{4, 6}, Range{-4, 4});
    const Tensor labels = rng.tensor(dtype, Shape{4, 6}, Range{0, 1});
    auto out = apply_all({labels, logits}, [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]); },
                         /*unknown_shapes=*/dtype == DType::Float32);
    const Xent want = xent_ref(values_of(labels), values_of(logits), 6);
    expect_values(out[0], dtype, Shape{4}, want.loss, 1e-12);
    expect_values(out[1], dtype, Shape{4, 6}, want.backprop, 1e-12);
  }
}

TEST_P(NnOpsTest, XentSingleClassEmptyBatchAndLargeLogits) {
  // testSingleClass: labels -1, 0, 1 on one class.
  auto single = apply_all({F32({3, 1}, {-1, 0, 1}), F32({3, 1}, {1, -1, 0})},
                          [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]); });
  expect_values(single[0], DType::Float32, Shape{3}, {0, 0, 0});
  expect_values(single[1], DType::Float32, Shape{3, 1}, {2, 1, 0});
  // testZeroDimension's empty batch.
  auto empty = apply_all({F32({0, 4}, {}), F32({0, 4}, {})},
                         [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]); });
  EXPECT_EQ(empty[0].shape(), (Shape{0}));
  EXPECT_EQ(empty[1].shape(), (Shape{0, 4}));
  for (DType dtype : {DType::Float32, DType::Float64}) {
    auto large = apply_all({T(dtype, {1, 3}, {0, .5, .5}), T(dtype, {1, 3}, {1e4, 0, -1e4})},
                           [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]); });
    expect_values(large[0], dtype, Shape{1}, {1.5e4});
    expect_values(large[1], dtype, Shape{1, 3}, {1, -0.5, -0.5});
  }
}

TEST_P(NnOpsTest, XentChecksShapesWhenItRuns) {
  auto xent = [](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1], "xent"); };
  expect_run_fails({F32({2, 3}, V(6, 0)), F32({2, 4}, V(8, 0))}, xent,
                   "logits and labels must have the same shape, got logits [2,4] and labels [2,3]");
  expect_run_fails({F32({4}, V(4, 0)), F32({4}, V(4, 0))}, xent, "logits and labels must be 2-D, got shape [4]");
}

TEST(NnOpsBuildTest, XentChecksItsInputs) {
  Graph g;
  auto logits = ops::placeholder(g, DType::Float32, {2, 3});
  expect_build_fails(
      [&] {
        ops::softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Float32, {2, 4}), logits, "x");
      },
      "x (SoftmaxCrossEntropyWithLogits): ", "must have the same shape, got logits [2,3] and labels [2,4]");
  expect_build_fails(
      [&] {
        ops::softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Float64, {2, 3}), logits, "x");
      },
      "x (SoftmaxCrossEntropyWithLogits): ", "same dtype, got float64 and float32");
  expect_build_fails(
      [&] {
        ops::softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Float32, {2, 3, 1}), logits, "x");
      },
      "x (SoftmaxCrossEntropyWithLogits): ", "must be 2-D, got shape [2,3,1]");
  auto merged = ops::softmax_cross_entropy_with_logits(ops::placeholder(g, DType::Float32, {-1, 3}),
                                                       ops::placeholder(g, DType::Float32, {5, -1}));
  EXPECT_EQ(merged.shape(), (Shape{5}));
  EXPECT_EQ(merged.op().output(1).shape(), (Shape{5, 3}));
}

// ---- bias_add and BiasAddGrad (bias_op_test.py) ----

V bias_add_ref(const V& x, const V& b) {
  V out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + b[i % b.size()];
  return out;
}

TEST_P(NnOpsTest, BiasAddIntTypes) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor y = apply({T(dtype, {2, 3}, {10, 20, 30, 40, 50, 60}), T(dtype, {3}, {1, 2, 3})},
                     [](auto v) { return ops::bias_add(v[0], v[1]); });
    expect_values(y, dtype, Shape{2, 3}, {11, 22, 33, 41, 52, 63});
  }
}

TEST_P(NnOpsTest, BiasAddFloatTypesOfRank2To5) {
  // testFloatTypes, test4DFloatTypes, test5DFloatTypes.
  RandomInputs rng;
  const std::vector<Dims> shapes = {{4, 3}, {2, 3, 4, 2}, {2, 3, 4, 2, 3}};
  for (DType dtype : kFloatDTypes) {
    for (const Dims& dims : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + Shape(dims).to_string());
      const Tensor x = rng.tensor(dtype, Shape(dims), Range{-10, 10});
      const Tensor b = rng.tensor(dtype, Shape{dims.back()}, Range{-10, 10});
      Tensor y = apply({x, b}, [](auto v) { return ops::bias_add(v[0], v[1]); }, /*unknown_shapes=*/dims.size() == 4);
      expect_values(y, dtype, Shape(dims), bias_add_ref(values_of(x), values_of(b)));
    }
  }
}

TEST_P(NnOpsTest, BiasAddEmpty) {
  // testEmpty's shapes.
  for (const Dims& dims : std::vector<Dims>{{2, 0}, {0, 2}, {4, 3, 0, 3}, {4, 3, 3, 0}}) {
    SCOPED_TRACE(Shape(dims).to_string());
    Tensor y =
        apply({F32(dims, {}), F32({dims.back()}, V(dims.back(), 1))}, [](auto v) { return ops::bias_add(v[0], v[1]); });
    EXPECT_EQ(y.shape(), Shape(dims));
  }
}

TEST_P(NnOpsTest, BiasAddChecksShapesWhenItRuns) {
  auto add = [](auto v) { return ops::bias_add(v[0], v[1], "b"); };
  expect_run_fails({F32({2}, {1, 2}), F32({2}, {1, 2})}, add, "value must be at least 2-D, got shape [2]");
  expect_run_fails({F32({2, 2}, V(4, 0)), F32({1, 2}, {1, 2})}, add, "bias must be 1-D, got shape [1,2]");
  expect_run_fails({F32({4, 3}, V(12, 0)), F32({4}, V(4, 0))}, add,
                   "bias of shape [4] must match the last dimension of value of shape [4,3]");
}

TEST(NnOpsBuildTest, BiasAddChecksItsInputs) {
  // testInputDims, testBiasVec, testBiasInputsMatch.
  Graph g;
  auto v2 = ops::placeholder(g, DType::Float32, {2});
  expect_build_fails([&] { ops::bias_add(v2, v2, "b"); }, "b (BiasAdd): ", "value must be at least 2-D, got shape [2]");
  expect_build_fails(
      [&] {
        ops::bias_add(ops::placeholder(g, DType::Float32, {2, 2}), ops::placeholder(g, DType::Float32, {1, 2}), "b");
      },
      "b (BiasAdd): ", "bias must be 1-D, got shape [1,2]");
  expect_build_fails(
      [&] {
        ops::bias_add(ops::placeholder(g, DType::Float32, {4, 3}), ops::placeholder(g, DType::Float32, {4}), "b");
      },
      "b (BiasAdd): ", "bias of shape [4] must match the last dimension of value of shape [4,3]");
  expect_build_fails(
      [&] {
        ops::bias_add(ops::placeholder(g, DType::Float32, {4, 3}), ops::placeholder(g, DType::Int32, {3}), "b");
      },
      "b (BiasAdd): ", "same dtype, got float32 and int32");
  EXPECT_EQ(
      ops::bias_add(ops::placeholder(g, DType::Float32, {2, -1}), ops::placeholder(g, DType::Float32, {5})).shape(),
      (Shape{2, 5}));
}

TEST_P(NnOpsTest, BiasAddGradSumsAllButTheLastAxis) {
  RandomInputs rng;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::Int32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor dy = rng.tensor(dtype, Shape{2, 3, 4}, dtype == DType::Int32 ? Range{-50, 50} : Range{-1, 1});
    const V d = values_of(dy);
    V want(4, 0.0);
    for (std::size_t i = 0; i < d.size(); ++i) want[i % 4] += d[i];
    expect_values(apply({dy}, [](auto v) { return internal::bias_add_grad(v[0]); }), dtype, Shape{4}, want);
  }
  EXPECT_EQ(apply({F32({0, 3}, {})}, [](auto v) { return internal::bias_add_grad(v[0]); }).shape(), (Shape{3}));
  expect_values(apply({F32({0, 3}, {})}, [](auto v) { return internal::bias_add_grad(v[0]); }), DType::Float32,
                Shape{3}, {0, 0, 0});
  expect_run_fails({F32({3}, {1, 2, 3})}, [](auto v) { return internal::bias_add_grad(v[0], "g"); },
                   "dy must be at least 2-D, got shape [3]");
}

// ---- l2_loss (nn_test.py: L2LossTest) ----

TEST_P(NnOpsTest, L2LossEveryFloatDType) {
  RandomInputs rng;
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // testL2Loss: [[1, 0], [3, 2]] gives 7.
    expect_values(apply({T(dtype, {2, 2}, {1, 0, 3, 2})}, [](auto v) { return ops::l2_loss(v[0]); }), dtype, Shape{},
                  {7});
    const Tensor x = rng.tensor(dtype, Shape{3, 4, 5}, Range{-2, 2});
    double want = 0;
    for (double v : values_of(x)) want += v * v / 2;
    expect_values(apply({x}, [](auto v) { return ops::l2_loss(v[0]); }, /*unknown_shapes=*/true), dtype, Shape{},
                  {want});
  }
  expect_values(apply({F32({0, 3}, {})}, [](auto v) { return ops::l2_loss(v[0]); }), DType::Float32, Shape{}, {0});
  Graph g;
  expect_build_fails([&] { ops::l2_loss(ops::placeholder(g, DType::Int32, {2}), "l2"); }, "l2 (L2Loss): ",
                     "x must be floating point, got int32");
}

// ---- dropout ----

TEST_P(NnOpsTest, DropoutWithKeepProbOneIsTheIdentity) {
  RandomInputs rng;
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = rng.tensor(dtype, Shape{7, 9}, Range{-3, 3});
    auto out = run_random([&](Graph& g) { return ops::dropout(ops::constant(g, x), 1.0f); }, 1)[0];
    EXPECT_TRUE(out[0].equals(x));
    expect_values(out[1], dtype, x.shape(), V(63, 1.0));
  }
}

TEST_P(NnOpsTest, DropoutKeepsAboutKeepProbScaledByItsInverse) {
  RandomInputs rng;
  const int64_t n = 20000;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (float keep : {0.3f, 0.8f}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " keep_prob " + std::to_string(keep));
      const Tensor x = rng.tensor(dtype, Shape{n}, Range{0.5, 2});
      auto out = run_random([&](Graph& g) { return ops::dropout(ops::constant(g, x), keep, /*seed=*/11); }, 1)[0];
      const V in = values_of(x);
      const V y = values_of(out[0]);
      const V mask = values_of(out[1]);
      const double scale = values_of(tensor_of(dtype, Shape{}, {1.0 / keep}))[0];  // 1/keep_prob in x's dtype
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (mask[i] == 0) {
          ASSERT_EQ(y[i], 0) << "element " << i;
          continue;
        }
        ASSERT_EQ(mask[i], scale) << "element " << i;
        ASSERT_NEAR(y[i], in[i] * scale, 1e-2 * in[i] * scale) << "element " << i;
        ++kept;
      }
      // The kept fraction's standard deviation is below 0.0033 here: 0.03 is a wide bound.
      EXPECT_NEAR(static_cast<double>(kept) / n, keep, 0.03);
    }
  }
}

TEST_P(NnOpsTest, DropoutSeedsGiveReproducibleMasks) {
  const Tensor x = Tensor::from_vector<float>(std::vector<float>(1000, 1.0f), Shape{1000});
  auto build = [&](uint64_t seed) {
    return [&x, seed](Graph& g) { return ops::dropout(ops::constant(g, x), 0.5f, seed); };
  };
  auto a = run_random(build(7), 2);
  auto b = run_random(build(7), 2);
  EXPECT_TRUE(a[0][1].equals(b[0][1])) << "the same seed, the same first mask";
  EXPECT_TRUE(a[1][1].equals(b[1][1])) << "and the same second mask";
  EXPECT_FALSE(a[0][1].equals(a[1][1])) << "each run draws a new mask";
  EXPECT_FALSE(a[0][1].equals(run_random(build(8), 1)[0][1])) << "another seed, another mask";
  EXPECT_FALSE(run_random(build(0), 1)[0][1].equals(run_random(build(0), 1)[0][1])) << "seed 0 is random";
}

TEST(NnOpsBuildTest, DropoutChecksKeepProb) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {4});
  for (float bad : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    SCOPED_TRACE(bad);
    expect_build_fails([&] { ops::dropout(x, bad, 0, "d"); }, "d (Dropout): ", "keep_prob must be in (0, 1], got ");
  }
  expect_build_fails([&] { ops::dropout(x, 1.5f, 0, "d"); }, "d (Dropout): ", "got 1.5");
  expect_build_fails([&] { ops::dropout(ops::placeholder(g, DType::Int32, {4}), 0.5f, 0, "d"); }, "d (Dropout): ",
                     "x must be floating point, got int32");
  auto y = ops::dropout(x, 0.5f, 3);
  EXPECT_EQ(y.op().num_outputs(), 2);
  EXPECT_EQ(y.op().output(1).dtype(), DType::Float32);
  EXPECT_EQ(y.node()->attr<double>("keep_prob"), 0.5);
  EXPECT_EQ(y.node()->attr<int64_t>("seed"), 3);
}

// ---- truncated_normal ----

TEST_P(NnOpsTest, TruncatedNormalStaysWithinTwoStddevs) {
  const int64_t n = 100000;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto out = run_random([&](Graph& g) { return ops::truncated_normal(g, Shape{n / 100, 100}, dtype); }, 1)[0][0];
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_EQ(out.shape(), (Shape{n / 100, 100}));
    double sum = 0;
    double sum_sq = 0;
    for (double v : values_of(out)) {
      ASSERT_LT(std::abs(v), 2.0);
      sum += v;
      sum_sq += v * v;
    }
    // A standard normal cut at 2: mean 0, stddev 0.8796; the sample mean's stddev is 0.0028 here.
    const double mean = sum / n;
    EXPECT_NEAR(mean, 0.0, 0.03);
    EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 0.8796, 0.03);
  }
}

TEST_P(NnOpsTest, TruncatedNormalSeedsAreReproducible) {
  auto build = [](uint64_t seed) {
    return [seed](Graph& g) { return ops::truncated_normal(g, Shape{33}, DType::Float32, seed); };
  };
  auto a = run_random(build(5), 2);
  auto b = run_random(build(5), 2);
  EXPECT_TRUE(a[0][0].equals(b[0][0]));
  EXPECT_TRUE(a[1][0].equals(b[1][0]));
  EXPECT_FALSE(a[0][0].equals(a[1][0]));
  EXPECT_FALSE(run_random(build(0), 1)[0][0].equals(run_random(build(0), 1)[0][0]));
  EXPECT_EQ(run_random([](Graph& g) { return ops::truncated_normal(g, Shape{0, 3}, DType::Float64); }, 1)[0][0].shape(),
            (Shape{0, 3}));
}

TEST(NnOpsBuildTest, TruncatedNormalChecksDTypeAndShape) {
  Graph g;
  expect_build_fails([&] { ops::truncated_normal(g, Shape{2}, DType::Int32, 0, "t"); }, "t (TruncatedNormal): ",
                     "needs dtype float16, bfloat16, float32 or float64, got int32");
  expect_build_fails([&] { ops::truncated_normal(g, Shape{-1, 2}, DType::Float32, 0, "t"); }, "t (TruncatedNormal): ",
                     "shape [?,2] must be fully defined");
}

// ---- random ops of float16 and bfloat16 ----

// random_uniform, random_normal and truncated_normal of the 16-bit dtypes on the test's device:
// float32's stream of the same seed, rounded, so each equals ops::cast of the float32 op (run by
// run: each run draws the next values), except that a uniform value that rounds to 1 takes the
// largest value below 1, keeping [0, 1). The values' moments as the dtype's rounding allows.
TEST_P(NnOpsTest, HalfRandomOpsAreTheFloat32StreamRounded) {
  const Shape shape{40, 250};
  const int64_t n = shape.num_elements();
  enum class Op { kUniform, kNormal, kTruncated };
  const auto make = [&](Graph& g, Op op, DType dtype) {
    switch (op) {
      case Op::kUniform: return ops::random_uniform(g, shape, dtype, 7);
      case Op::kNormal: return ops::random_normal(g, shape, dtype, 7, 3.0f, 2.0f);
      case Op::kTruncated: break;
    }
    return ops::truncated_normal(g, shape, dtype, 7);
  };
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    // The largest value below 1: 1 - 2^-11 and 1 - 2^-8.
    const double below_one = dtype == DType::Float16 ? 1 - 0x1p-11 : 1 - 0x1p-8;
    for (Op op : {Op::kUniform, Op::kNormal, Op::kTruncated}) {
      SCOPED_TRACE(fmt::format("{} op {}", dtype_name(dtype), static_cast<int>(op)));
      Graph g;
      Output half;
      Output cast;
      {
        auto scope = on_device(g);
        half = make(g, op, dtype);
        cast = ops::cast(make(g, op, DType::Float32), dtype);
      }
      Session s(g);
      int rounded_to_one = 0;
      for (int run = 0; run < 2; ++run) {
        const std::vector<Tensor> out = s.run({half, cast});
        ASSERT_EQ(out[0].dtype(), dtype);
        ASSERT_EQ(out[0].shape(), shape);
        const V got = values_of(out[0]);
        const V want = values_of(out[1]);
        double sum = 0;
        double sum_sq = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (op == Op::kUniform && want[i] == 1.0) {
            ++rounded_to_one;
            ASSERT_EQ(got[i], below_one) << "element " << i;
          } else {
            ASSERT_EQ(got[i], want[i]) << "element " << i;
          }
          if (op == Op::kUniform) {
            ASSERT_TRUE(got[i] >= 0 && got[i] < 1) << got[i];
          } else if (op == Op::kTruncated) {
            ASSERT_LE(std::abs(got[i]), 2.0);  // |z| < 2 may round to 2
          }
          sum += got[i];
          sum_sq += got[i] * got[i];
        }
        const double mean = sum / static_cast<double>(n);
        const double stddev = std::sqrt(sum_sq / static_cast<double>(n) - mean * mean);
        const double want_mean = op == Op::kUniform ? 0.5 : op == Op::kNormal ? 3.0 : 0.0;
        const double want_stddev = op == Op::kUniform ? std::sqrt(1.0 / 12) : op == Op::kNormal ? 2.0 : 0.8796;
        EXPECT_NEAR(mean, want_mean, 0.05 * (op == Op::kNormal ? 2 : 1));
        EXPECT_NEAR(stddev, want_stddev, 0.05 * (op == Op::kNormal ? 2 : 1));
      }
      EXPECT_THAT(half.op().assigned_device(), HasSubstr("/device:" + GetParam() + ":0"));
      // 1 - 2^-9 and up round to 1 in bfloat16: about 2 in 1000 uniforms.
      if (op == Op::kUniform && dtype == DType::BFloat16) {
        EXPECT_GT(rounded_to_one, 0);
      }
    }
  }
}

TEST(NnOpsBuildTest, RandomOpsTakeTheFloatingPointDTypes) {
  Graph g;
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    EXPECT_EQ(ops::random_uniform(g, Shape{2, 3}, dtype).dtype(), dtype);
    EXPECT_EQ(ops::random_normal(g, Shape{2, 3}, dtype).dtype(), dtype);
    EXPECT_EQ(ops::truncated_normal(g, Shape{2, 3}, dtype).dtype(), dtype);
  }
  expect_build_fails([&] { ops::random_uniform(g, Shape{2}, DType::Int64, 0, "u"); }, "u (RandomUniform): ",
                     "needs dtype float16, bfloat16, float32 or float64, got int64");
  expect_build_fails([&] { ops::random_normal(g, Shape{2}, DType::Bool, 0, 0.0f, 1.0f, "n"); }, "n (RandomNormal): ",
                     "needs dtype float16, bfloat16, float32 or float64, got bool");
}

// ---- stop_gradient ----

TEST_P(NnOpsTest, StopGradientPassesItsInputThrough) {
  for (DType dtype : testing::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = T(dtype, {2, 3}, {1, 0, 1, 1, 0, 0});
    EXPECT_TRUE(apply({x}, [](auto v) { return ops::stop_gradient(v[0]); }).equals(x));
  }
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {3}, "x");
  Output y;
  {
    auto scope = on_device(g);
    y = ops::stop_gradient(ops::square(x));
  }
  const Tensor fed = F32({3}, {1, 2, 3});
  expect_values(run_all(y, {{x, fed}})[0], DType::Float32, Shape{3}, {1, 4, 9});
  if (GetParam() == "CPU") {  // no copy: the fed tensor itself
    Graph g2;
    auto p = ops::placeholder(g2, DType::Float32, {3});
    EXPECT_EQ(Session(g2).run(ops::stop_gradient(p), {{p, fed}}).raw_data(), fed.raw_data());
  }
}

// ---- The gradient kernels: ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad, GatherGrad ----

struct ElementwiseGrad {
  const char* name;
  Output (*op)(Output, Output, std::string);
  double (*ref)(double, double);
  Range first;  // where input 0 is drawn
};

const ElementwiseGrad kElementwiseGrads[] = {
    {"relu_grad", internal::relu_grad, [](double dy, double x) { return x > 0 ? dy : 0.0; }, {-2, 2}},
    {"tanh_grad", internal::tanh_grad, [](double y, double dy) { return dy * (1 - y * y); }, {-1, 1}},
    {"sigmoid_grad", internal::sigmoid_grad, [](double y, double dy) { return dy * y * (1 - y); }, {0, 1}},
    {"sqrt_grad", internal::sqrt_grad, [](double y, double dy) { return dy * 0.5 / y; }, {0.5, 3}},
};

TEST_P(NnOpsTest, ElementwiseGradientKernelsEveryFloatDType) {
  RandomInputs rng;
  for (const ElementwiseGrad& k : kElementwiseGrads) {
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(std::string(k.name) + " " + std::string(dtype_name(dtype)));
      const Tensor a = rng.tensor(dtype, Shape{3, 7}, k.first);
      const Tensor b = rng.tensor(dtype, Shape{3, 7}, Range{-2, 2});
      const V va = values_of(a);
      const V vb = values_of(b);
      V want;
      for (std::size_t i = 0; i < va.size(); ++i) want.push_back(k.ref(va[i], vb[i]));
      expect_values(apply({a, b}, [&](auto v) { return k.op(v[0], v[1], ""); }), dtype, Shape{3, 7}, want, 1e-12);
    }
  }
  // ReluGrad takes integers too.
  expect_values(apply({T(DType::Int32, {4}, {5, 6, 7, 8}), T(DType::Int32, {4}, {-1, 0, 1, 2})},
                      [](auto v) { return internal::relu_grad(v[0], v[1]); }),
                DType::Int32, Shape{4}, {0, 0, 7, 8});
}

TEST_P(NnOpsTest, ElementwiseGradientKernelsCheckShapes) {
  expect_run_fails({F32({2}, {1, 2}), F32({3}, {1, 2, 3})}, [](auto v) { return internal::tanh_grad(v[0], v[1], "g"); },
                   "inputs must have one shape, got [2] and [3]");
  Graph g;
  expect_build_fails(
      [&] {
        internal::sigmoid_grad(ops::placeholder(g, DType::Float32, {2}), ops::placeholder(g, DType::Float32, {3}), "g");
      },
      "g (SigmoidGrad): ", "inputs must have one shape, got [2] and [3]");
  expect_build_fails(
      [&] { internal::sqrt_grad(ops::placeholder(g, DType::Int32, {2}), ops::placeholder(g, DType::Int32, {2}), "g"); },
      "g (SqrtGrad): ", "must be floating point, got int32");
}

// dy's slices added into zeros of params' shape at indices along axis: the reference.
V gather_grad_ref(const V& dy, const V& indices, const Dims& params, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= params[d];
  for (std::size_t d = axis + 1; d < params.size(); ++d) inner *= params[d];
  const int64_t limit = params[axis];
  const auto m = static_cast<int64_t>(indices.size());
  V out(outer * limit * inner, 0.0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < inner; ++j) {
        out[(o * limit + static_cast<int64_t>(indices[i])) * inner + j] += dy[(o * m + i) * inner + j];
      }
    }
  }
  return out;
}

TEST_P(NnOpsTest, GatherGradAccumulatesRepeatedIndices) {
  RandomInputs rng;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::Int64}) {
    for (DType index_dtype : {DType::Int32, DType::Int64}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(dtype_name(index_dtype)));
      // axis 0: params [5,3], indices [0,2,0,4]; axis 1: params [2,4,3], indices [[3,3],[0,1]].
      const Tensor params0 = rng.tensor(dtype, Shape{5, 3}, Range{-1, 1});
      const V i0 = {0, 2, 0, 4};
      const Tensor dy0 = rng.tensor(dtype, Shape{4, 3}, Range{-4, 4});
      expect_values(apply({dy0, T(index_dtype, {4}, i0), params0},
                          [](auto v) { return internal::gather_grad(v[0], v[1], v[2], 0); }),
                    dtype, Shape{5, 3}, gather_grad_ref(values_of(dy0), i0, {5, 3}, 0));
      const Tensor params1 = rng.tensor(dtype, Shape{2, 4, 3}, Range{-1, 1});
      const V i1 = {3, 3, 0, 1};
      const Tensor dy1 = rng.tensor(dtype, Shape{2, 2, 2, 3}, Range{-4, 4});
      expect_values(apply({dy1, T(index_dtype, {2, 2}, i1), params1},
                          [](auto v) { return internal::gather_grad(v[0], v[1], v[2], -2); }, /*unknown_shapes=*/true),
                    dtype, Shape{2, 4, 3}, gather_grad_ref(values_of(dy1), i1, {2, 4, 3}, 1));
    }
  }
}

TEST_P(NnOpsTest, GatherGradChecksIndicesAndShapesWhenItRuns) {
  auto grad = [](auto v) { return internal::gather_grad(v[0], v[1], v[2], 0, "gg"); };
  expect_run_fails({F32({2, 3}, V(6, 1)), T(DType::Int32, {2}, {1, 7}), F32({5, 3}, V(15, 0))}, grad,
                   "indices[1] = 7 is not in [0, 5)");
  expect_run_fails({F32({2, 3}, V(6, 1)), T(DType::Int64, {2}, {-1, 0}), F32({5, 3}, V(15, 0))}, grad,
                   "indices[0] = -1 is not in [0, 5)");
  expect_run_fails({F32({3, 3}, V(9, 1)), T(DType::Int32, {2}, {0, 1}), F32({5, 3}, V(15, 0))}, grad,
                   "dy of shape [3,3] is not the shape [2,3] of a gather from params of shape [5,3]");
}

TEST(NnOpsBuildTest, GatherGradHasParamsShape) {
  Graph g;
  auto params = ops::placeholder(g, DType::Float32, {5, 3});
  auto indices = ops::placeholder(g, DType::Int32, {4});
  auto dx = internal::gather_grad(ops::placeholder(g, DType::Float32, {4, 3}), indices, params, 0);
  EXPECT_EQ(dx.shape(), (Shape{5, 3}));
  EXPECT_EQ(dx.node()->attr<int64_t>("axis"), 0);
  expect_build_fails(
      [&] {
        internal::gather_grad(ops::placeholder(g, DType::Float32, {4, 2}), indices, params, 0, "gg");
      },
      "gg (GatherGrad): ", "dy of shape [4,2] is not the shape [4,3]");
  expect_build_fails([&] { internal::gather_grad(params, ops::placeholder(g, DType::Float32, {4}), params, 0, "gg"); },
                     "gg (GatherGrad): ", "indices must be int32 or int64, got float32");
}

INSTANTIATE_TEST_SUITE_P(Devices, NnOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
