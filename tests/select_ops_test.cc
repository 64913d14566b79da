// The comparison, logical and selection ops (equal ... greater_equal, logical_and/or/not, where,
// gather, one_hot, argmax, argmin), add_n and the reductions reduce_min and reduce_prod through
// the public API (a Graph, a Session), on the CPU and on a simulated accelerator: values,
// broadcasting, negative axes, empty tensors, dtypes, and every error case (InvalidArgumentError
// naming the op). Cases follow TensorFlow's cwise_ops_test.py, where_op_test.py (where_v2),
// gather_op_test.py, one_hot_op_test.py, argmax_op_test.py, reduction_ops_test.py and the AddN tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/node.h"
#include "tests/testing/device_op_test.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using testing::kNumericDTypes;

// The ops under test run on the device the test is instantiated for, fed from host placeholders.
class SelectOpsTest : public testing::DeviceOpTest {};

using testing::expect_build_fails;

Tensor T(DType dtype, const Dims& dims, const V& v) { return tensor_of(dtype, Shape(dims), v); }
Tensor F32(const Dims& dims, const V& v) { return T(DType::Float32, dims, v); }
Tensor B(const Dims& dims, const V& v) { return T(DType::Bool, dims, v); }

using BinaryBuilder = Output (*)(Output, Output, std::string);

struct Comparison {
  const char* name;
  BinaryBuilder op;
  bool (*ref)(double, double);
};

const Comparison kComparisons[] = {
    {"equal", ops::equal, [](double a, double b) { return a == b; }},
    {"not_equal", ops::not_equal, [](double a, double b) { return a != b; }},
    {"less", ops::less, [](double a, double b) { return a < b; }},
    {"less_equal", ops::less_equal, [](double a, double b) { return a <= b; }},
    {"greater", ops::greater, [](double a, double b) { return a > b; }},
    {"greater_equal", ops::greater_equal, [](double a, double b) { return a >= b; }},
};

// ---- Comparisons (cwise_ops_test.py: ComparisonOpTest) ----

TEST_P(SelectOpsTest, ComparisonsEveryNumericDType) {
  const V a = {-3, -1, 0, 1, 2, 5, 5, 7};
  const V b = {-3, 0, 0, 2, 1, 5, 4, 8};
  for (const Comparison& c : kComparisons) {
    for (DType dtype : kNumericDTypes) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)));
      Tensor y = apply({T(dtype, {2, 4}, a), T(dtype, {2, 4}, b)}, [&](auto x) { return c.op(x[0], x[1], ""); });
      V want;
      for (std::size_t i = 0; i < a.size(); ++i) want.push_back(c.ref(a[i], b[i]));
      expect_values(y, DType::Bool, Shape{2, 4}, want);
    }
  }
}

TEST_P(SelectOpsTest, ComparisonsBroadcast) {
  // [2,3] against [3], [2,1] against [1,3], and a scalar, as cwise_ops_test's testBCast cases.
  const Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  for (const Comparison& c : kComparisons) {
    SCOPED_TRACE(c.name);
    Tensor row = apply({x, F32({3}, {2, 5, 3})}, [&](auto in) { return c.op(in[0], in[1], ""); });
    V want;
    const V rv = {2, 5, 3};
    for (int i = 0; i < 6; ++i) want.push_back(c.ref(i + 1, rv[i % 3]));
    expect_values(row, DType::Bool, Shape{2, 3}, want);
    Tensor outer = apply({F32({2, 1}, {1, 4}), F32({1, 3}, {0, 1, 4})}, [&](auto in) { return c.op(in[0], in[1], ""); },
                         /*unknown_shapes=*/true);
    want.clear();
    for (double p : {1.0, 4.0}) {
      for (double q : {0.0, 1.0, 4.0}) want.push_back(c.ref(p, q));
    }
    expect_values(outer, DType::Bool, Shape{2, 3}, want);
    Tensor scalar = apply({Tensor::scalar(3.0f), x}, [&](auto in) { return c.op(in[0], in[1], ""); });
    want.clear();
    for (int i = 1; i <= 6; ++i) want.push_back(c.ref(3, i));
    expect_values(scalar, DType::Bool, Shape{2, 3}, want);
  }
}

TEST_P(SelectOpsTest, ComparisonsWithNaNAndEmptyTensors) {
  const double nan = std::nan("");
  const Tensor a = F32({3}, {nan, 1, nan});
  const Tensor b = F32({3}, {nan, nan, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::equal(x[0], x[1]); }), DType::Bool, Shape{3}, {0, 0, 0});
  expect_values(apply({a, b}, [](auto x) { return ops::not_equal(x[0], x[1]); }), DType::Bool, Shape{3}, {1, 1, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::less_equal(x[0], x[1]); }), DType::Bool, Shape{3}, {0, 0, 0});
  Tensor empty = apply({F32({0, 3}, {}), F32({3}, {1, 2, 3})}, [](auto x) { return ops::greater(x[0], x[1]); });
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
  EXPECT_EQ(empty.dtype(), DType::Bool);
}

TEST_P(SelectOpsTest, EqualAndNotEqualOnBool) {
  const Tensor a = B({4}, {0, 0, 1, 1});
  const Tensor b = B({4}, {0, 1, 0, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::equal(x[0], x[1]); }), DType::Bool, Shape{4}, {1, 0, 0, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::not_equal(x[0], x[1]); }), DType::Bool, Shape{4}, {0, 1, 1, 0});
}

TEST_P(SelectOpsTest, ComparisonsCheckBroadcastingWhenTheyRun) {
  expect_run_fails({F32({2, 3}, V(6, 0)), F32({4}, V(4, 0))}, [](auto x) { return ops::less(x[0], x[1], "lt"); },
                   "incompatible shapes [2,3] and [4]");
}

TEST(SelectOpsBuildTest, ComparisonsCheckDTypesAndShapes) {
  Graph g;
  auto f = ops::placeholder(g, DType::Float32, {2, 3});
  auto i = ops::placeholder(g, DType::Int32, {2, 3});
  auto b = ops::placeholder(g, DType::Bool, {2, 3});
  auto v4 = ops::placeholder(g, DType::Float32, {4});
  expect_build_fails([&] { ops::equal(f, i, "eq"); }, "eq (Equal): ", "same dtype, got float32 and int32");
  expect_build_fails([&] { ops::less(b, b, "lt"); }, "lt (Less): ", "bool tensors are not ordered");
  expect_build_fails([&] { ops::greater_equal(f, v4, "ge"); }, "ge (GreaterEqual): ", "incompatible shapes [2,3] and [4]");
  EXPECT_EQ(ops::equal(b, b).dtype(), DType::Bool);
  EXPECT_EQ(ops::greater(f, ops::placeholder(g, DType::Float32, {3})).shape(), (Shape{2, 3}));
}

// ---- Logical ops (cwise_ops_test.py: LogicalOpTest) ----

TEST_P(SelectOpsTest, LogicalOpsTruthTablesAndBroadcasting) {
  const Tensor a = B({4}, {0, 0, 1, 1});
  const Tensor b = B({4}, {0, 1, 0, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::logical_and(x[0], x[1]); }), DType::Bool, Shape{4}, {0, 0, 0, 1});
  expect_values(apply({a, b}, [](auto x) { return ops::logical_or(x[0], x[1]); }), DType::Bool, Shape{4}, {0, 1, 1, 1});
  expect_values(apply({a}, [](auto x) { return ops::logical_not(x[0]); }), DType::Bool, Shape{4}, {1, 1, 0, 0});
  Tensor bc = apply({B({2, 1}, {0, 1}), B({3}, {1, 0, 1})}, [](auto x) { return ops::logical_and(x[0], x[1]); });
  expect_values(bc, DType::Bool, Shape{2, 3}, {0, 0, 0, 1, 0, 1});
  Tensor bo = apply({Tensor::scalar(false), B({2, 2}, {1, 0, 0, 1})}, [](auto x) { return ops::logical_or(x[0], x[1]); });
  expect_values(bo, DType::Bool, Shape{2, 2}, {1, 0, 0, 1});
}

TEST(SelectOpsBuildTest, LogicalOpsNeedBool) {
  Graph g;
  auto f = ops::placeholder(g, DType::Float32, {2});
  auto b = ops::placeholder(g, DType::Bool, {2});
  expect_build_fails([&] { ops::logical_and(b, f, "and"); }, "and (LogicalAnd): ", "input 1 must be bool, got float32");
  expect_build_fails([&] { ops::logical_or(f, b, "or"); }, "or (LogicalOr): ", "input 0 must be bool");
  expect_build_fails([&] { ops::logical_not(f, "not"); }, "not (LogicalNot): ", "input 0 must be bool");
  expect_build_fails([&] { ops::logical_or(b, ops::placeholder(g, DType::Bool, {3}), "or"); }, "or (LogicalOr): ",
                     "incompatible shapes [2] and [3]");
}

// ---- where (where_op_test.py, where_v2 cases) ----

TEST_P(SelectOpsTest, WhereSelectsElementwiseEveryDType) {
  for (DType dtype : testing::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor y = apply({B({2, 3}, {1, 0, 1, 0, 0, 1}), T(dtype, {2, 3}, {1, 0, 1, 0, 1, 1}), T(dtype, {2, 3}, {0, 1, 0, 1, 0, 0})},
                     [](auto x) { return ops::where(x[0], x[1], x[2]); });
    expect_values(y, dtype, Shape{2, 3}, {1, 1, 1, 1, 0, 1});
  }
}

TEST_P(SelectOpsTest, WhereBroadcastsAmongAllThree) {
  // cond [3,1], x [1,4], y scalar: [3,4] (where_v2's testBroadcast).
  Tensor y = apply({B({3, 1}, {1, 0, 1}), F32({1, 4}, {1, 2, 3, 4}), Tensor::scalar(-1.0f)},
                   [](auto x) { return ops::where(x[0], x[1], x[2]); });
  expect_values(y, DType::Float32, Shape{3, 4}, {1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
  Tensor z = apply({Tensor::scalar(false), F32({2}, {1, 2}), F32({2, 1}, {7, 8})},
                   [](auto x) { return ops::where(x[0], x[1], x[2]); }, /*unknown_shapes=*/true);
  expect_values(z, DType::Float32, Shape{2, 2}, {7, 7, 8, 8});
  Tensor e = apply({B({0, 2}, {}), F32({2}, {1, 2}), F32({2}, {3, 4})}, [](auto x) { return ops::where(x[0], x[1], x[2]); });
  EXPECT_EQ(e.shape(), (Shape{0, 2}));
}

TEST_P(SelectOpsTest, WhereChecksBroadcastingWhenItRuns) {
  expect_run_fails({B({2}, {1, 0}), F32({3}, {1, 2, 3}), F32({3}, {1, 2, 3})},
                   [](auto x) { return ops::where(x[0], x[1], x[2], "w"); }, "incompatible shapes [2], [3] and [3]");
}

TEST(SelectOpsBuildTest, WhereChecksItsInputs) {
  Graph g;
  auto c = ops::placeholder(g, DType::Bool, {2});
  auto f = ops::placeholder(g, DType::Float32, {2});
  auto i = ops::placeholder(g, DType::Int32, {2});
  expect_build_fails([&] { ops::where(f, f, f, "w"); }, "w (SelectV2): ", "cond must be bool, got float32");
  expect_build_fails([&] { ops::where(c, f, i, "w"); }, "w (SelectV2): ", "same dtype, got float32 and int32");
  expect_build_fails([&] { ops::where(ops::placeholder(g, DType::Bool, {3}), f, f, "w"); }, "w (SelectV2): ",
                     "incompatible shapes [3], [2] and [2]");
}

// ---- gather (gather_op_test.py) ----

TEST_P(SelectOpsTest, GatherAlongAxis0And1WithInt32AndInt64Indices) {
  const Tensor params = F32({5, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  for (DType index_dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(index_dtype));
    Tensor rows = apply({params, T(index_dtype, {3}, {1, 3, 2})}, [](auto x) { return ops::gather(x[0], x[1]); });
    expect_values(rows, DType::Float32, Shape{3, 3}, {3, 4, 5, 9, 10, 11, 6, 7, 8});
    Tensor cols = apply({params, T(index_dtype, {2}, {2, 0})}, [](auto x) { return ops::gather(x[0], x[1], 1); });
    expect_values(cols, DType::Float32, Shape{5, 2}, {2, 0, 5, 3, 8, 6, 11, 9, 14, 12});
    Tensor neg = apply({params, T(index_dtype, {2}, {2, 0})}, [](auto x) { return ops::gather(x[0], x[1], -1); });
    EXPECT_TRUE(neg.equals(cols));
    Tensor scalar = apply({params, T(index_dtype, {}, {4})}, [](auto x) { return ops::gather(x[0], x[1]); });
    expect_values(scalar, DType::Float32, Shape{3}, {12, 13, 14});
    Tensor matrix = apply({params, T(index_dtype, {2, 2}, {0, 2, 2, 0})}, [](auto x) { return ops::gather(x[0], x[1], 1); },
                          /*unknown_shapes=*/true);
    EXPECT_EQ(matrix.shape(), (Shape{5, 2, 2}));
    expect_values(matrix, DType::Float32, Shape{5, 2, 2},
                  {0, 2, 2, 0, 3, 5, 5, 3, 6, 8, 8, 6, 9, 11, 11, 9, 12, 14, 14, 12});
  }
}

TEST_P(SelectOpsTest, GatherEveryDTypeAndEmptyIndices) {
  for (DType dtype : testing::kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor y = apply({T(dtype, {4, 2}, {1, 0, 1, 1, 0, 0, 1, 0}), T(DType::Int64, {3}, {3, 0, 3})},
                     [](auto x) { return ops::gather(x[0], x[1]); });
    expect_values(y, dtype, Shape{3, 2}, {1, 0, 1, 0, 1, 0});
  }
  Tensor e = apply({F32({4, 2}, V(8, 1)), T(DType::Int32, {0}, {})}, [](auto x) { return ops::gather(x[0], x[1]); });
  EXPECT_EQ(e.shape(), (Shape{0, 2}));
}

TEST_P(SelectOpsTest, GatherRejectsAnIndexOutOfRangeWhenItRuns) {
  const Tensor params = F32({3, 2}, V(6, 1));
  for (DType index_dtype : {DType::Int32, DType::Int64}) {
    expect_run_fails({params, T(index_dtype, {3}, {0, 7, 1})}, [](auto x) { return ops::gather(x[0], x[1], 0, "g"); },
                     "indices[1] = 7 is not in [0, 3)");
    expect_run_fails({params, T(index_dtype, {2}, {-1, 0})}, [](auto x) { return ops::gather(x[0], x[1], 0, "g"); },
                     "indices[0] = -1 is not in [0, 3)");
    expect_run_fails({params, T(index_dtype, {1}, {2})}, [](auto x) { return ops::gather(x[0], x[1], 1, "g"); },
                     "indices[0] = 2 is not in [0, 2)");
  }
  expect_run_fails({params, T(DType::Int32, {1}, {0})}, [](auto x) { return ops::gather(x[0], x[1], 2, "g"); },
                   "axis 2 is out of range [-2, 2)");
}

TEST(SelectOpsBuildTest, GatherChecksItsArguments) {
  Graph g;
  auto p = ops::placeholder(g, DType::Float32, {5, 3});
  auto idx = ops::placeholder(g, DType::Int32, {2, 4});
  EXPECT_EQ(ops::gather(p, idx).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(ops::gather(p, idx, 1).shape(), (Shape{5, 2, 4}));
  expect_build_fails([&] { ops::gather(p, idx, 2, "g"); }, "g (GatherV2): ", "axis 2 is out of range [-2, 2)");
  expect_build_fails([&] { ops::gather(p, ops::placeholder(g, DType::Float32, {2}), 0, "g"); }, "g (GatherV2): ",
                     "indices must be int32 or int64, got float32");
  expect_build_fails([&] { ops::gather(ops::constant(g, 1.0f), idx, 0, "g"); }, "g (GatherV2): ",
                     "params must be at least a vector");
}

// ---- one_hot (one_hot_op_test.py) ----

TEST_P(SelectOpsTest, OneHotDefaultsOnOffAndOutOfRange) {
  for (DType index_dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(index_dtype));
    // testFloatBasic: indices [4, 0, -1] with depth 3: out-of-range indices give an all-off row.
    Tensor y = apply({T(index_dtype, {4}, {0, 2, -1, 3})}, [](auto x) { return ops::one_hot(x[0], 3); });
    expect_values(y, DType::Float32, Shape{4, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0});
    Tensor z = apply({T(index_dtype, {2, 2}, {0, 1, 1, 0})}, [](auto x) { return ops::one_hot(x[0], 2, 5.0f, -1.0f); });
    expect_values(z, DType::Float32, Shape{2, 2, 2}, {5, -1, -1, 5, -1, 5, 5, -1});
  }
  Tensor s = apply({Tensor::scalar(int32_t{1})}, [](auto x) { return ops::one_hot(x[0], 3); });
  expect_values(s, DType::Float32, Shape{3}, {0, 1, 0});
  Tensor d0 = apply({T(DType::Int32, {2}, {0, 1})}, [](auto x) { return ops::one_hot(x[0], 0); });
  EXPECT_EQ(d0.shape(), (Shape{2, 0}));
}

TEST(SelectOpsBuildTest, OneHotChecksItsArguments) {
  Graph g;
  auto i = ops::placeholder(g, DType::Int64, {3});
  EXPECT_EQ(ops::one_hot(i, 4).shape(), (Shape{3, 4}));
  EXPECT_EQ(ops::one_hot(i, 4).dtype(), DType::Float32);
  expect_build_fails([&] { ops::one_hot(i, -1, 1, 0, "oh"); }, "oh (OneHot): ", "depth must be non-negative, got -1");
  expect_build_fails([&] { ops::one_hot(ops::placeholder(g, DType::Float32, {3}), 2, 1, 0, "oh"); }, "oh (OneHot): ",
                     "indices must be int32 or int64, got float32");
}

// ---- argmax / argmin (argmax_op_test.py) ----

TEST_P(SelectOpsTest, ArgMaxArgMinAlongEachAxisEveryNumericDType) {
  const V x = {1, 5, 3, 9, 2, 9, 0, 4};  // [2,4]
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor t = T(dtype, {2, 4}, x);
    expect_values(apply({t}, [](auto in) { return ops::argmax(in[0], 1); }), DType::Int64, Shape{2}, {3, 1});
    expect_values(apply({t}, [](auto in) { return ops::argmin(in[0], 1); }), DType::Int64, Shape{2}, {0, 2});
    expect_values(apply({t}, [](auto in) { return ops::argmax(in[0], 0); }), DType::Int64, Shape{4}, {1, 1, 0, 0});
    expect_values(apply({t}, [](auto in) { return ops::argmin(in[0], -2); }), DType::Int64, Shape{4}, {0, 0, 1, 1});
  }
}

TEST_P(SelectOpsTest, ArgMaxArgMinTiesPickTheFirst) {
  const Tensor t = F32({6}, {2, 7, 7, 1, 1, 7});
  expect_values(apply({t}, [](auto in) { return ops::argmax(in[0], 0); }), DType::Int64, Shape{}, {1});
  expect_values(apply({t}, [](auto in) { return ops::argmin(in[0], 0); }), DType::Int64, Shape{}, {3});
  const Tensor same = T(DType::Int32, {2, 3}, {4, 4, 4, 4, 4, 4});
  expect_values(apply({same}, [](auto in) { return ops::argmax(in[0], 1); }), DType::Int64, Shape{2}, {0, 0});
  Tensor e = apply({F32({0, 3}, {})}, [](auto in) { return ops::argmax(in[0], 1); });
  EXPECT_EQ(e.shape(), (Shape{0}));
}

TEST_P(SelectOpsTest, ArgMaxChecksItsAxisWhenItRuns) {
  expect_run_fails({F32({2, 0}, {})}, [](auto in) { return ops::argmax(in[0], 1, "am"); },
                   "reduction axis 1 is empty in shape [2,0]");
  expect_run_fails({F32({2}, {1, 2})}, [](auto in) { return ops::argmin(in[0], 1, "am"); },
                   "axis 1 is out of range [-1, 1)");
}

TEST(SelectOpsBuildTest, ArgMaxArgMinCheckTheirArguments) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3});
  EXPECT_EQ(ops::argmax(x, 1).dtype(), DType::Int64);
  EXPECT_EQ(ops::argmin(x, 0).shape(), (Shape{3}));
  expect_build_fails([&] { ops::argmax(x, 2, "am"); }, "am (ArgMax): ", "axis 2 is out of range [-2, 2)");
  expect_build_fails([&] { ops::argmin(ops::placeholder(g, DType::Bool, {2}), 0, "am"); }, "am (ArgMin): ",
                     "bool tensors are not ordered");
  expect_build_fails([&] { ops::argmax(ops::placeholder(g, DType::Float32, {0}), 0, "am"); }, "am (ArgMax): ",
                     "reduction axis 0 is empty in shape [0]");
  expect_build_fails([&] { ops::argmax(ops::constant(g, 1.0f), 0, "am"); }, "am (ArgMax): ", "at least a vector");
}

// ---- reduce_min / reduce_prod (reduction_ops_test.py) ----

TEST_P(SelectOpsTest, ReduceMinAndProdEveryNumericDType) {
  const V x = {3, -2, 1, 4, 2, -1};  // [2,3]
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor t = T(dtype, {2, 3}, x);
    expect_values(apply({t}, [](auto in) { return ops::reduce_min(in[0]); }), dtype, Shape{}, {-2});
    expect_values(apply({t}, [](auto in) { return ops::reduce_prod(in[0]); }), dtype, Shape{}, {48});
    expect_values(apply({t}, [](auto in) { return ops::reduce_min(in[0], {1}); }), dtype, Shape{2}, {-2, -1});
    expect_values(apply({t}, [](auto in) { return ops::reduce_prod(in[0], {0}, true); }), dtype, Shape{1, 3}, {12, -4, -1});
    expect_values(apply({t}, [](auto in) { return ops::reduce_min(in[0], {-2}, true); }), dtype, Shape{1, 3}, {3, -2, -1});
  }
}

TEST_P(SelectOpsTest, ReduceMinAndProdOfEmptySets) {
  const Tensor e = F32({0, 2}, {});
  Tensor mn = apply({e}, [](auto in) { return ops::reduce_min(in[0], {0}); });
  ASSERT_EQ(mn.shape(), (Shape{2}));
  EXPECT_EQ(mn.to_vector<float>(), (std::vector<float>{INFINITY, INFINITY}));
  expect_values(apply({e}, [](auto in) { return ops::reduce_prod(in[0]); }), DType::Float32, Shape{}, {1});
  Tensor mi = apply({T(DType::Int32, {0}, {})}, [](auto in) { return ops::reduce_min(in[0]); });
  EXPECT_EQ(mi.scalar<int32_t>(), std::numeric_limits<int32_t>::max());
  expect_values(apply({T(DType::Int64, {3, 0}, {})}, [](auto in) { return ops::reduce_prod(in[0], {1}); }),
                DType::Int64, Shape{3}, {1, 1, 1});
}

TEST_P(SelectOpsTest, ReduceMinPropagatesNaNAndIntegerProductsWrap) {
  Tensor mn = apply({F32({3}, {1, std::nan(""), -5})}, [](auto in) { return ops::reduce_min(in[0]); });
  EXPECT_TRUE(std::isnan(mn.scalar<float>()));
  Tensor p = apply({Tensor::from_vector<int32_t>({65536, 65536, 3}, Shape{3})}, [](auto in) { return ops::reduce_prod(in[0]); });
  EXPECT_EQ(p.scalar<int32_t>(), 0);  // 2^32 * 3 wraps to 0
  Tensor big = apply({F32({2, 3, 4}, V(24, 1.5))}, [](auto in) { return ops::reduce_prod(in[0], {0, 2}); });
  expect_values(big, DType::Float32, Shape{3}, V(3, std::pow(1.5, 8)), 1e-10);
}

TEST_P(SelectOpsTest, ReduceMinChecksItsAxesWhenItRuns) {
  expect_run_fails({F32({2}, {1, 2})}, [](auto in) { return ops::reduce_min(in[0], {1}, false, "m"); }, "out of range");
}

TEST(SelectOpsBuildTest, ReduceMinAndProdCheckTheirAxes) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3});
  EXPECT_EQ(ops::reduce_prod(x, {1}, true).shape(), (Shape{2, 1}));
  expect_build_fails([&] { ops::reduce_min(x, {2}, false, "m"); }, "m (Min): ", "out of range");
  expect_build_fails([&] { ops::reduce_prod(x, {0, 0}, false, "p"); }, "p (Prod): ", "");
  expect_build_fails([&] { ops::reduce_min(ops::placeholder(g, DType::Bool, {2}), {}, false, "m"); }, "m (Min): ",
                     "bool tensors are not supported");
}

// ---- add_n ----

TEST_P(SelectOpsTest, AddNSumsEveryNumericDType) {
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor y = apply({T(dtype, {2, 2}, {1, 2, 3, 4}), T(dtype, {2, 2}, {10, 20, 30, 40}), T(dtype, {2, 2}, {-1, -1, 0, 2})},
                     [](auto x) { return ops::add_n(x); });
    expect_values(y, dtype, Shape{2, 2}, {10, 21, 33, 46});
    Tensor one = apply({T(dtype, {3}, {1, 2, 3})}, [](auto x) { return ops::add_n(x); });
    expect_values(one, dtype, Shape{3}, {1, 2, 3});
  }
  Tensor e = apply({F32({0, 4}, {}), F32({0, 4}, {})}, [](auto x) { return ops::add_n(x); });
  EXPECT_EQ(e.shape(), (Shape{0, 4}));
}

TEST_P(SelectOpsTest, AddNChecksShapesWhenItRuns) {
  expect_run_fails({F32({2}, {1, 2}), F32({3}, {1, 2, 3})}, [](auto x) { return ops::add_n(x, "n"); },
                   "input 0 is float32 [2], input 1 is float32 [3]");
}

TEST(SelectOpsBuildTest, AddNChecksItsInputs) {
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, {2, 3});
  auto partial = ops::placeholder(g, DType::Float32, {-1, 3});
  EXPECT_EQ(ops::add_n({partial, a}).shape(), (Shape{2, 3}));
  expect_build_fails([&] { ops::add_n({}, "n"); }, "add_n", "needs at least one input");
  expect_build_fails([&] { ops::add_n({a, ops::placeholder(g, DType::Float32, {3, 2})}, "n"); }, "n (AddN): ",
                     "input 0 has shape [2,3], input 1 has shape [3,2]");
  expect_build_fails([&] { ops::add_n({a, ops::placeholder(g, DType::Int32, {2, 3})}, "n"); }, "n (AddN): ",
                     "input 0 is float32, input 1 is int32");
  expect_build_fails([&] { ops::add_n({ops::placeholder(g, DType::Bool, {2})}, "n"); }, "n (AddN): ",
                     "bool tensors are not supported");
}

// The attrs a gradient function will read.
TEST(SelectOpsBuildTest, OpsKeepTheirArgumentsAsAttrs) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {4, 3});
  auto i = ops::placeholder(g, DType::Int32, {2});
  EXPECT_EQ(ops::gather(x, i, 1).node()->attr<int64_t>("axis"), 1);
  EXPECT_EQ(ops::argmax(x, -1).node()->attr<int64_t>("axis"), -1);
  EXPECT_EQ(ops::argmin(x, 0).node()->attr<int64_t>("axis"), 0);
  auto oh = ops::one_hot(i, 5, 2.0f, -1.0f);
  EXPECT_EQ(oh.node()->attr<int64_t>("depth"), 5);
  EXPECT_EQ(oh.node()->attr<double>("on_value"), 2.0);
  EXPECT_EQ(oh.node()->attr<double>("off_value"), -1.0);
  EXPECT_EQ(oh.node()->attr<int64_t>("axis"), -1);
  auto m = ops::reduce_min(x, {1}, true);
  EXPECT_EQ(m.node()->attr<std::vector<int64_t>>("axes"), (Dims{1}));
  EXPECT_TRUE(m.node()->attr<bool>("keep_dims"));
  EXPECT_EQ(ops::reduce_prod(x).op().type(), "Prod");
  EXPECT_EQ(ops::where(ops::placeholder(g, DType::Bool, {4, 3}), x, x).op().type(), "SelectV2");
}

// ---- Strings: equal, not_equal and where (TF's Equal, NotEqual and SelectV2 take DT_STRING) ----

using Strings = std::vector<std::string>;

// String ops requested on the device under test: strings live in host memory, so they run on the
// CPU whatever the request (on SIM too), fed from host placeholders.
class StringSelectOpsTest : public testing::DeviceOpTest {
 protected:
  // `op` over placeholders fed `inputs` (of their own shapes, or unknown ones), run twice (the
  // second step replays a captured partition on SIM): the op ran on the CPU and the steps agree.
  template <class F>
  Tensor apply_on_host(const std::vector<Tensor>& inputs, F op, bool unknown_shapes = false) {
    Graph g;
    FeedMap feeds;
    std::vector<Output> xs;
    for (const Tensor& t : inputs) {
      xs.push_back(ops::placeholder(g, t.dtype(), unknown_shapes ? Shape::unknown() : t.shape()));
      feeds[xs.back()] = t;
    }
    Output y;
    {
      auto scope = on_device(g);
      y = op(xs);
    }
    Session s(g);
    const Tensor first = s.run(y, feeds);
    const Tensor second = s.run(y, feeds);
    EXPECT_TRUE(first.equals(second)) << y.name() << ": the second step differs";
    EXPECT_THAT(y.op().assigned_device(), ::testing::HasSubstr("/device:CPU:0")) << y.name();
    return first;
  }
  Tensor equal(const Tensor& a, const Tensor& b, bool unknown_shapes = false) {
    return apply_on_host({a, b}, [](auto x) { return ops::equal(x[0], x[1]); }, unknown_shapes);
  }
  Tensor not_equal(const Tensor& a, const Tensor& b, bool unknown_shapes = false) {
    return apply_on_host({a, b}, [](auto x) { return ops::not_equal(x[0], x[1]); }, unknown_shapes);
  }
};

TEST_P(StringSelectOpsTest, EqualAndNotEqualOnScalarsAndVectors) {
  expect_values(equal(Tensor::scalar("abc"), Tensor::scalar("abc")), DType::Bool, Shape{}, {1});
  expect_values(equal(Tensor::scalar("abc"), Tensor::scalar("abd")), DType::Bool, Shape{}, {0});
  expect_values(not_equal(Tensor::scalar("abc"), Tensor::scalar("ab")), DType::Bool, Shape{}, {1});
  const Tensor a = Tensor::vector(Strings{"a", "b", "longer than a small-string buffer", "x"});
  const Tensor b = Tensor::vector(Strings{"a", "c", "longer than a small-string buffer", "X"});
  expect_values(equal(a, b), DType::Bool, Shape{4}, {1, 0, 1, 0});
  expect_values(not_equal(a, b), DType::Bool, Shape{4}, {0, 1, 0, 1});
  // The same with the shapes left to the kernel.
  expect_values(equal(a, b, /*unknown_shapes=*/true), DType::Bool, Shape{4}, {1, 0, 1, 0});
}

TEST_P(StringSelectOpsTest, EqualAndNotEqualBroadcast) {
  const Tensor v = Tensor::vector(Strings{"x", "y", "x"});
  expect_values(equal(Tensor::scalar("x"), v), DType::Bool, Shape{3}, {1, 0, 1});
  expect_values(not_equal(v, Tensor::scalar("x")), DType::Bool, Shape{3}, {0, 1, 0});
  // [2,1] against [3]: [2,3].
  const Tensor col = Tensor::from_vector<std::string>({"x", "y"}, Shape{2, 1});
  expect_values(equal(col, v, /*unknown_shapes=*/true), DType::Bool, Shape{2, 3}, {1, 0, 1, 0, 1, 0});
  Tensor empty = equal(Tensor::from_vector<std::string>({}, Shape{0, 3}), v);
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
  EXPECT_EQ(empty.dtype(), DType::Bool);
}

TEST_P(StringSelectOpsTest, EqualComparesEmptyStringsAndEmbeddedNulBytes) {
  // Byte-wise: "a\0b" differs from "a\0c" and from "a" (not C strings), "" equals only "".
  const std::string nul_b("a\0b", 3), nul_c("a\0c", 3);
  const Tensor a = Tensor::vector(Strings{"", "", nul_b, nul_b, nul_b, std::string(1, '\0')});
  const Tensor b = Tensor::vector(Strings{"", "a", nul_b, nul_c, "a", ""});
  expect_values(equal(a, b), DType::Bool, Shape{6}, {1, 0, 1, 0, 0, 0});
  expect_values(not_equal(a, b), DType::Bool, Shape{6}, {0, 1, 0, 1, 1, 1});
  expect_values(equal(Tensor::scalar(""), a), DType::Bool, Shape{6}, {1, 1, 0, 0, 0, 0});
}

TEST_P(StringSelectOpsTest, EqualChecksBroadcastingWhenItRuns) {
  const Tensor v2 = Tensor::vector(Strings{"a", "b"});
  const Tensor v3 = Tensor::vector(Strings{"a", "b", "c"});
  expect_run_fails({v2, v3}, [](auto x) { return ops::equal(x[0], x[1], "eq"); }, "incompatible shapes [2] and [3]");
  expect_run_fails({v2, v3}, [](auto x) { return ops::not_equal(x[0], x[1], "ne"); }, "incompatible shapes [2] and [3]");
}

TEST_P(StringSelectOpsTest, WhereSelectsStrings) {
  const Tensor x = Tensor::vector(Strings{"x0", "x1", "", std::string("x\0", 2)});
  const Tensor y = Tensor::vector(Strings{"y0", "", "y2", "y3"});
  Tensor got = apply_on_host({B({4}, {1, 0, 1, 1}), x, y}, [](auto in) { return ops::where(in[0], in[1], in[2]); });
  EXPECT_EQ(got.dtype(), DType::String);
  EXPECT_EQ(got.to_vector<std::string>(), (Strings{"x0", "", "", std::string("x\0", 2)}));
}

TEST_P(StringSelectOpsTest, WhereBroadcastsCondAndStrings) {
  // cond [3,1], x [1,2], y scalar: [3,2] (where_v2's testBroadcast).
  const Tensor x = Tensor::from_vector<std::string>({"a", "b"}, Shape{1, 2});
  Tensor got = apply_on_host({B({3, 1}, {1, 0, 1}), x, Tensor::scalar("-")},
                             [](auto in) { return ops::where(in[0], in[1], in[2]); }, /*unknown_shapes=*/true);
  EXPECT_EQ(got.shape(), (Shape{3, 2}));
  EXPECT_EQ(got.to_vector<std::string>(), (Strings{"a", "b", "-", "-", "a", "b"}));
  // A scalar cond picks all of one side.
  Tensor all_y = apply_on_host({Tensor::scalar(false), Tensor::vector(Strings{"p", "q"}), Tensor::vector(Strings{"r", "s"})},
                               [](auto in) { return ops::where(in[0], in[1], in[2]); });
  EXPECT_EQ(all_y.to_vector<std::string>(), (Strings{"r", "s"}));
  Tensor empty = apply_on_host({B({0, 2}, {}), Tensor::vector(Strings{"p", "q"}), Tensor::scalar("r")},
                               [](auto in) { return ops::where(in[0], in[1], in[2]); });
  EXPECT_EQ(empty.shape(), (Shape{0, 2}));
  EXPECT_EQ(empty.dtype(), DType::String);
  expect_run_fails({B({2}, {1, 0}), Tensor::vector(Strings{"a", "b", "c"}), Tensor::scalar("d")},
                   [](auto in) { return ops::where(in[0], in[1], in[2], "w"); }, "incompatible shapes [2], [3] and []");
}

TEST(SelectOpsBuildTest, StringComparisonsCheckDTypesAndShapes) {
  Graph g;
  auto s2 = ops::placeholder(g, DType::String, {2});
  auto s3 = ops::placeholder(g, DType::String, {3});
  auto i2 = ops::placeholder(g, DType::Int32, {2});
  auto c = ops::placeholder(g, DType::Bool, {2});
  EXPECT_EQ(ops::equal(s2, ops::placeholder(g, DType::String, {})).dtype(), DType::Bool);
  EXPECT_EQ(ops::not_equal(s2, s2).shape(), (Shape{2}));
  EXPECT_EQ(ops::where(c, s2, s2).dtype(), DType::String);
  expect_build_fails([&] { ops::equal(s2, s3, "eq"); }, "eq (Equal): ", "incompatible shapes [2] and [3]");
  expect_build_fails([&] { ops::not_equal(s2, s3, "ne"); }, "ne (NotEqual): ", "incompatible shapes [2] and [3]");
  expect_build_fails([&] { ops::equal(s2, i2, "eq"); }, "eq (Equal): ", "same dtype, got string and int32");
  expect_build_fails([&] { ops::not_equal(i2, s2, "ne"); }, "ne (NotEqual): ", "same dtype, got int32 and string");
  expect_build_fails([&] { ops::where(c, s2, i2, "w"); }, "w (SelectV2): ", "same dtype, got string and int32");
  expect_build_fails([&] { ops::where(s2, s2, s2, "w"); }, "w (SelectV2): ", "cond must be bool, got string");
  expect_build_fails([&] { ops::where(c, s3, s3, "w"); }, "w (SelectV2): ", "incompatible shapes [2], [3] and [3]");
  // Strings have no order, as in TensorFlow.
  expect_build_fails([&] { ops::less(s2, s2, "lt"); }, "lt (Less): ", "string tensors are not supported");
}

// The string ops of a graph whose other ops run on SIM: they run on the CPU (strings live in host
// memory), the bools they make cross to SIM and back, and float where's gradient is untouched.
TEST(StringSelectOpsPlacementTest, StringOpsRequestedOnSimRunOnTheCpu) {
  Graph g;
  Output names, eq, ne, flipped, picked, fx, fy, fw;
  {
    auto scope = g.device("/device:SIM:0");
    names = ops::placeholder(g, DType::String, Shape{3});
    eq = ops::equal(names, ops::constant(g, "b"));
    ne = ops::not_equal(names, ops::constant(g, Tensor::vector(Strings{"a", "x", "c"})));
    flipped = ops::logical_not(eq);  // bools: on SIM
    picked = ops::where(flipped, names, ops::constant(g, "<b>"));
    fx = ops::constant(g, Tensor::vector<float>({1, 2, 3}));
    fy = ops::constant(g, Tensor::vector<float>({4, 5, 6}));
    fw = ops::where(flipped, fx, fy);
  }
  auto grads = gradients({ops::reduce_sum(fw)}, {fx, fy});
  Session s(g);
  const FeedMap feeds{{names, Tensor::vector(Strings{"a", "b", "c"})}};
  auto got = s.run({eq, ne, picked, fw, grads[0], grads[1]}, feeds);
  expect_values(got[0], DType::Bool, Shape{3}, {0, 1, 0});
  expect_values(got[1], DType::Bool, Shape{3}, {0, 1, 0});
  EXPECT_EQ(got[2].to_vector<std::string>(), (Strings{"a", "<b>", "c"}));
  expect_values(got[3], DType::Float32, Shape{3}, {1, 5, 3});
  expect_values(got[4], DType::Float32, Shape{3}, {1, 0, 1});
  expect_values(got[5], DType::Float32, Shape{3}, {0, 1, 0});
  for (const Output& o : {names, eq, ne, picked}) {
    EXPECT_THAT(o.op().assigned_device(), ::testing::HasSubstr("/device:CPU:0")) << o.name();
  }
  for (const Output& o : {flipped, fw}) {
    EXPECT_THAT(o.op().assigned_device(), ::testing::HasSubstr("/device:SIM:0")) << o.name();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, SelectOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Devices, StringSelectOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
