// Every GPU kernel against its CPU kernel (label gpu), in the manner of tests/kernels_test.cc: the
// op is built in a Graph, its "CPU" kernel runs on host inputs and its "GPU" kernel on the same
// inputs copied to the GPU, through OpKernelContext as the executor runs kernels; the outputs must
// agree (dtype and shape exactly, integers and bools exactly, floating point by normalised squared
// error with NaN and infinities in the same places), failures must be the same code and message,
// and the GPU kernel must leave its inputs as they were. Skips without a GPU.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "tests/gpu/gpu_kernel_test.h"
#include "tests/testing/kernel_cases.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {
namespace {

using tessera::testing::for_each_cast_case;
using tessera::testing::for_each_matmul_case;
using tessera::testing::for_each_reduction_case;
using tessera::testing::for_each_unary_case;
using tessera::testing::for_late_reduction_axis;
using tessera::testing::MatMulSize;
using tessera::testing::reduce_max_nan_input;

class CudaKernelsTest : public GpuKernelTest {
 protected:
  // The op of `y`: GPU against CPU, every output within expect_same's tolerance (this suite's
  // check_op: floating point agrees by normalised error here, not bit for bit).
  void check_op(const Output& y, const std::vector<Tensor>& inputs, double f32_tolerance = 1e-10) {
    check_outputs_close(y, inputs, f32_tolerance);
  }
};

// ---- Elementwise ----

using BinaryFn = Output (*)(Output, Output, std::string);
struct BinaryOpCase {
  const char* type;
  BinaryFn build;
  bool nonzero_b;
};
const BinaryOpCase kBinaryOps[] = {{"Add", ops::add, false},         {"Sub", ops::sub, false},
                                   {"Mul", ops::mul, false},         {"Div", ops::div, true},
                                   {"Maximum", ops::maximum, false}, {"Minimum", ops::minimum, false}};

TEST_F(CudaKernelsTest, BinaryOpsWithBroadcasting) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {Shape{}, Shape{}},           {Shape{5}, Shape{5}},           {Shape{1000}, Shape{1000}},
      {Shape{2, 3}, Shape{}},       {Shape{}, Shape{2, 3}},         {Shape{1, 1, 7}, Shape{7}},
      {Shape{1}, Shape{6, 1}},      {Shape{3, 1}, Shape{1, 4}},     {Shape{4, 1, 3}, Shape{5, 1}},
      {Shape{2, 3, 4, 5}, Shape{3, 1, 5}}, {Shape{2, 1, 3, 1}, Shape{1, 4, 1, 5}}, {Shape{129, 33}, Shape{33}},
      {Shape{33, 1}, Shape{33, 17}}, {Shape{0, 3}, Shape{3}},       {Shape{2, 0}, Shape{1}},
      {Shape{1 << 20}, Shape{1 << 20}}, {Shape{(1 << 20) + 3}, Shape{}}, {Shape{}, Shape{1027}},
      {Shape{1000, 1}, Shape{1, 1001}}, {Shape{3, 1, 1}, Shape{1, 1}},
      // A matrix and a vector over its rows or columns (cwise_kernels.cu's matrix_vector_binary),
      // with and without 16-byte vectors, the matrix on either side.
      {Shape{5, 128}, Shape{128}}, {Shape{128}, Shape{5, 128}}, {Shape{64, 100}, Shape{64, 1}},
      {Shape{3, 1}, Shape{3, 67}}, {Shape{2, 70000, 40}, Shape{40}},
  };
  RandomInputs rng;
  for (const auto& op : kBinaryOps) {
    for (DType dtype : kNumericDTypes) {
      const Range range = dtype_is_floating(dtype) ? Range{-2, 2} : Range{-50, 50};
      for (const auto& c : cases) {
        SCOPED_TRACE(std::string(op.type) + " " + describe(dtype, {c.a, c.b}));
        Tensor a = rng.tensor(dtype, c.a, range);
        Tensor b = rng.tensor(dtype, c.b, {range.lo, range.hi, op.nonzero_b});
        Graph g;
        check_op(op.build(feed(g, a), feed(g, b), ""), {a, b});
      }
    }
  }
}

TEST_F(CudaKernelsTest, BinaryOpsFailAsTheCpuKernelsDo) {
  for (const auto& op : kBinaryOps) {
    SCOPED_TRACE(op.type);
    Graph g;
    Output y = op.build(ops::placeholder(g, DType::Float32), ops::placeholder(g, DType::Float32, Shape{-1}), "late");
    check_op_fails(y, {Tensor::zeros(DType::Float32, Shape{2, 3}), Tensor::zeros(DType::Float32, Shape{4})},
                   "incompatible shapes [2,3] and [4]");
  }
}

TEST_F(CudaKernelsTest, IntegerDivisionRoundsDownWrapsAndRejectsZero) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    const double min = dtype == DType::Int32 ? static_cast<double>(std::numeric_limits<int32_t>::min())
                                             : static_cast<double>(std::numeric_limits<int64_t>::min());
    Tensor a = tensor_of(dtype, Shape{9}, {-7, 7, -7, 7, min, 0, -6, 6, 1});
    Tensor b = tensor_of(dtype, Shape{9}, {2, -2, -2, 3, -1, -5, 3, -3, -3});
    Output y = ops::div(feed(g, a), feed(g, b));
    check_op(y, {a, b});  // the CPU kernel's results: rounded down (TF1's tf.div)
    check_op_fails(y, {a, tensor_of(dtype, Shape{9}, {1, 1, 0, 1, 1, 1, 1, 1, 1})}, "integer division by zero");
    Output by_scalar = ops::div(feed(g, a), ops::placeholder(g, dtype, Shape{}));
    check_op_fails(by_scalar, {a, tensor_of(dtype, Shape{}, {0})}, "integer division by zero");
    // A big broadcast with one zero divisor somewhere.
    Tensor big = tensor_of(dtype, Shape{300, 400}, std::vector<double>(120000, 5));
    std::vector<double> divisors(400, 3);
    divisors[397] = 0;
    Output wide = ops::div(feed(g, big), ops::placeholder(g, dtype, Shape{400}));
    check_op_fails(wide, {big, tensor_of(dtype, Shape{400}, divisors)}, "integer division by zero");
    // Nothing to compute: no division, no failure.
    Output empty = ops::div(ops::placeholder(g, dtype, Shape{0, 3}), ops::placeholder(g, dtype, Shape{3}));
    check_op(empty, {Tensor::zeros(dtype, Shape{0, 3}), Tensor::zeros(dtype, Shape{3})});
  }
}

// Pow (not in kBinaryOps: its integer inputs need exponents >= 0): floating point with positive
// bases, integers wrapping around, a negative integer exponent failing as the CPU kernel fails.
TEST_F(CudaKernelsTest, PowMatchesTheCpuKernel) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {Shape{}, Shape{}}, {Shape{1000}, Shape{1000}}, {Shape{2, 3}, Shape{}}, {Shape{}, Shape{7}},
      {Shape{129, 33}, Shape{33}}, {Shape{3, 1}, Shape{1, 4}}, {Shape{0, 3}, Shape{3}}};
  RandomInputs rng;
  for (DType dtype : kNumericDTypes) {
    const bool floating = dtype_is_floating(dtype);
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(describe(dtype, {sa, sb}));
      Tensor a = rng.tensor(dtype, sa, floating ? Range{0.1, 3} : Range{-5, 5});
      Tensor b = rng.tensor(dtype, sb, floating ? Range{-2, 2} : Range{0, 40});
      Graph g;
      check_op(ops::pow(feed(g, a), feed(g, b)), {a, b});
    }
    if (!floating) {
      Graph g;
      Tensor a = tensor_of(dtype, Shape{4}, {2, 3, 4, 5});
      Output y = ops::pow(feed(g, a), ops::placeholder(g, dtype, Shape{4}));
      check_op_fails(y, {a, tensor_of(dtype, Shape{4}, {1, 2, -1, 3})},
                     "Integers to negative integer powers are not allowed");
    }
  }
}

TEST_F(CudaKernelsTest, IntegerArithmeticWrapsAround) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a;
    Tensor b;
    if (dtype == DType::Int32) {
      a = Tensor::vector<int32_t>({INT32_MAX, INT32_MIN, 1 << 16});
      b = Tensor::vector<int32_t>({1, 1, 1 << 16});
    } else {
      a = Tensor::vector<int64_t>({INT64_MAX, INT64_MIN, int64_t{1} << 32});
      b = Tensor::vector<int64_t>({1, 1, int64_t{1} << 32});
    }
    Graph g;
    check_op(ops::add(feed(g, a), feed(g, b)), {a, b});
    check_op(ops::sub(feed(g, a), feed(g, b)), {a, b});
    check_op(ops::mul(feed(g, a), feed(g, b)), {a, b});
    check_op(ops::neg(feed(g, a)), {a});
    check_op(ops::square(feed(g, a)), {a});
  }
}

TEST_F(CudaKernelsTest, MaximumAndMinimumPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor a = tensor_of(dtype, Shape{3}, {nan, 1, 2});
    Tensor b = tensor_of(dtype, Shape{3}, {1, nan, 3});
    check_op(ops::maximum(feed(g, a), feed(g, b)), {a, b});
    check_op(ops::minimum(feed(g, a), feed(g, b)), {a, b});
  }
}

struct UnaryOpCase {
  const char* type;
  Output (*build)(Output, std::string);
  bool floating_only;
  Range float_range;
};
const UnaryOpCase kUnaryOps[] = {
    {"Neg", ops::neg, false, {-2, 2}},   {"Relu", ops::relu, false, {-2, 2}},     {"Square", ops::square, false, {-2, 2}},
    {"Exp", ops::exp, true, {-3, 3}},    {"Log", ops::log, true, {0.01, 4}},      {"Sqrt", ops::sqrt, true, {0, 4}},
    {"Tanh", ops::tanh, true, {-4, 4}},  {"Sigmoid", ops::sigmoid, true, {-8, 8}},   {"Floor", ops::floor, true, {-4, 4}},
    {"Sin", ops::sin, true, {-4, 4}},    {"Cos", ops::cos, true, {-4, 4}},        {"Abs", ops::abs, false, {-4, 4}},
    {"Sign", ops::sign, false, {-4, 4}}, {"Relu6", ops::relu6, false, {-3, 9}},   {"Rsqrt", ops::rsqrt, true, {0.05, 4}},
    {"Reciprocal", ops::reciprocal, true, {0.1, 4}}, {"Softplus", ops::softplus, true, {-8, 20}},
    {"Elu", ops::elu, true, {-4, 4}},
};

TEST_F(CudaKernelsTest, UnaryOps) {
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{1031}, Shape{(1 << 20) + 1}};
  for_each_unary_case(kUnaryOps, shapes, [this](const UnaryOpCase& op, const Tensor& x) {
    Graph g;
    check_op(op.build(feed(g, x), ""), {x});
  });
}

TEST_F(CudaKernelsTest, UnaryOpsAtTheEdgesOfTheirDomain) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : kFloatDTypes) {
    Graph g;
    Tensor x = tensor_of(dtype, Shape{6}, {-1000, 0, -1, nan, inf, -inf});
    for (const auto& op : kUnaryOps) {
      SCOPED_TRACE(std::string(op.type) + " " + std::string(dtype_name(dtype)));
      check_op(op.build(feed(g, x), ""), {x});
    }
  }
}

TEST_F(CudaKernelsTest, DTypesTheCpuKernelsRejectAreRejected) {
  // Nodes built for float32, fed other dtypes (as a late-typed input would arrive).
  Graph g;
  Output exp = ops::exp(ops::placeholder(g, DType::Float32, Shape{2}));
  check_op_fails(exp, {Tensor::vector<int32_t>({1, 2})}, "unsupported dtype int32");
  Output add = ops::add(ops::placeholder(g, DType::Float32, Shape{2}), ops::placeholder(g, DType::Float32, Shape{2}));
  check_op_fails(add, {Tensor::vector<bool>({true, false}), Tensor::vector<bool>({true, true})},
                 "unsupported dtype bool");
  check_op_fails(add, {Tensor::vector<float>({1, 2}), Tensor::vector<double>({1, 2})}, "same dtype");
}

// ---- MatMul ----

TEST_F(CudaKernelsTest, MatMul) {
  const std::vector<MatMulSize> sizes = {{1, 1, 1}, {3, 4, 5}, {17, 33, 9}, {64, 65, 63},  {5, 300, 600},
                                         {0, 3, 4}, {3, 0, 4}, {4, 3, 0},   {129, 257, 65}};
  for_each_matmul_case(sizes, [this](const Tensor& a, const Tensor& b, bool ta, bool tb, MatMulSize) {
    Graph g;
    check_op(ops::matmul(feed(g, a), feed(g, b), ta, tb), {a, b});
  });
}

// cuBLAS accumulates float16 and bfloat16 products in float32: a row of 4096 ones times its
// transpose is 4096, where a 16-bit accumulator stops growing at 2048 (float16) or 256 (bfloat16).
TEST_F(CudaKernelsTest, SixteenBitMatMulAccumulatesInFloat32) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor row = tensor_of(dtype, Shape{1, 4096}, std::vector<double>(4096, 1.0));
    Graph g;
    auto gpu = kernel(ops::matmul(feed(g, row), feed(g, row), false, true), "GPU");
    ASSERT_TRUE(gpu);
    KernelRun got = run_gpu(*gpu, {row, row});
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    EXPECT_EQ(values_of(got.outputs[0]), std::vector<double>{4096.0});
  }
}

TEST_F(CudaKernelsTest, MatMulIntegersWrapAround) {
  Graph g;
  Tensor a = Tensor::matrix<int32_t>({INT32_MAX, 2, 3, 4}, 2, 2);
  Tensor b = Tensor::matrix<int32_t>({2, 1, INT32_MAX, 1}, 2, 2);
  check_op(ops::matmul(feed(g, a), feed(g, b)), {a, b});
}

TEST_F(CudaKernelsTest, MatMulFailsAsTheCpuKernelDoes) {
  Graph g;
  Output y = ops::matmul(ops::placeholder(g, DType::Float32), ops::placeholder(g, DType::Float32, Shape{-1, -1}),
                         false, false, "late");
  Tensor m23 = Tensor::zeros(DType::Float32, Shape{2, 3});
  check_op_fails(y, {m23, Tensor::zeros(DType::Float32, Shape{4, 5})}, "[2,3] and [4,5]");
  check_op_fails(y, {Tensor::zeros(DType::Float32, Shape{2, 3, 1}), m23}, "[2,3,1]");
}

// ---- Reductions ----

using ReduceFn = Output (*)(Output, std::vector<int>, bool, std::string);
struct ReductionCase {
  const char* type;
  ReduceFn build;
};
const ReductionCase kReductions[] = {{"Sum", ops::reduce_sum}, {"Mean", ops::reduce_mean}, {"Max", ops::reduce_max}};

TEST_F(CudaKernelsTest, ReductionsOverAnyAxes) {
  struct Case {
    Shape in;
    std::vector<int> axes;
  };
  const std::vector<Case> cases = {
      {Shape{}, {}},          {Shape{5}, {}},               {Shape{5}, {0}},           {Shape{1000}, {0}},
      {Shape{3, 4}, {}},      {Shape{3, 4}, {0}},           {Shape{3, 4}, {1}},        {Shape{3, 4}, {-1}},
      {Shape{3, 4}, {0, 1}},  {Shape{37, 70}, {1}},         {Shape{70, 37}, {0}},      {Shape{2, 3, 4}, {1}},
      {Shape{2, 3, 4}, {0, 2}}, {Shape{2, 3, 4}, {-3}},     {Shape{2, 1, 4}, {0}},     {Shape{2, 1, 4}, {1}},
      {Shape{2, 3, 4, 5}, {1, 3}}, {Shape{2, 3, 4, 5}, {0, 2, 3}}, {Shape{4, 0, 3}, {2}},
      // Large enough for slices and for every grouping of Note [GPU reductions].
      {Shape{1 << 20}, {}},   {Shape{1000, 1000}, {0}},     {Shape{1000, 1000}, {1}},  {Shape{100000, 7}, {0}},
      {Shape{7, 100000}, {1}}, {Shape{64, 3, 5000}, {0, 2}}, {Shape{5, 40, 6, 30}, {1, 3}},
      {Shape{3, 300, 2, 400}, {0, 2}}, {Shape{20000, 3}, {1}},
      // Many long contiguous rows: CUB's segmented reduction (rows of a multiple of 4 and not).
      {Shape{300, 2048}, {1}}, {Shape{600, 1101}, {-1}},
  };
  const auto range = [](const ReductionCase&, DType dtype) {
    return dtype_is_floating(dtype) ? Range{-2, 2} : Range{-50, 50};
  };
  const auto check = [&](const ReductionCase& op, const Tensor& x, const Case& c, bool keep_dims) {
    Graph g;
    // Float32 sums of up to a million values, summed in another order than the CPU's.
    check_op(op.build(feed(g, x), c.axes, keep_dims, ""), {x}, 1e-8);
  };
  for_each_reduction_case(kReductions, cases, range, check);
}

TEST_F(CudaKernelsTest, ReductionsOverEmptySets) {
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor x = Tensor::zeros(dtype, Shape{4, 0, 3});
    check_op(ops::reduce_sum(feed(g, x), {1}), {x});
    check_op_fails(ops::reduce_max(feed(g, x), {1}), {x}, "empty");
    if (dtype_is_floating(dtype)) {
      check_op(ops::reduce_mean(feed(g, x), {1}), {x});  // NaN
    } else {
      check_op_fails(ops::reduce_mean(feed(g, x), {1}), {x}, "empty");
    }
    check_op(ops::reduce_max(feed(g, x), {0}), {x});
  }
}

TEST_F(CudaKernelsTest, ReductionsCheckAxesLeftUnknownAtRunTime) {
  for_late_reduction_axis([&](const Output& y, const std::vector<Tensor>& inputs, const char* what) {
    check_op_fails(y, inputs, what);
  });
}

TEST_F(CudaKernelsTest, ReduceMaxPropagatesNaN) {
  Graph g;
  const Tensor x = reduce_max_nan_input(DType::Float32);
  check_op(ops::reduce_max(feed(g, x), {1}), {x});
  check_op(ops::reduce_max(feed(g, x), {0}), {x});
  Tensor big = tensor_of(DType::Float64, Shape{1 << 20}, std::vector<double>(1 << 20, -3.0));
  big.mutable_data<double>()[777777] = std::numeric_limits<double>::quiet_NaN();
  check_op(ops::reduce_max(feed(g, big)), {big});
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor h = reduce_max_nan_input(dtype);
    check_op(ops::reduce_max(feed(g, h), {1}), {h});
    check_op(ops::reduce_max(feed(g, h), {0}), {h});
    check_op(ops::reduce_max(feed(g, h)), {h});
  }
}

// float16 and bfloat16 accumulate in float32: 4096 ones sum to 4096 (and their mean is 1), where a
// 16-bit accumulator stops growing at 2048 (float16) or 256 (bfloat16). The shapes take each path
// of Note [GPU reductions]: CUB's whole reduction, a block per row, columns in slices, and CUB's
// segmented reduction.
TEST_F(CudaKernelsTest, SixteenBitReductionsAccumulateInFloat32) {
  struct Case {
    Shape in;
    std::vector<int> axes;
  };
  const std::vector<Case> cases = {
      {Shape{4096}, {}}, {Shape{3, 4096}, {1}}, {Shape{4096, 5}, {0}}, {Shape{600, 4096}, {1}}};
  struct Expected {
    ReductionCase op;
    double value;
  };
  const Expected expected[] = {{{"Sum", ops::reduce_sum}, 4096}, {{"Mean", ops::reduce_mean}, 1}};
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    for (const auto& c : cases) {
      Tensor ones = tensor_of(dtype, c.in, std::vector<double>(static_cast<std::size_t>(c.in.num_elements()), 1.0));
      for (const auto& [op, want] : expected) {
        SCOPED_TRACE(std::string(op.type) + " " + describe(dtype, {c.in}));
        Graph g;
        auto gpu = kernel(op.build(feed(g, ones), c.axes, false, ""), "GPU");
        ASSERT_TRUE(gpu);
        KernelRun got = run_gpu(*gpu, {ones});
        ASSERT_TRUE(got.status.ok()) << got.status.to_string();
        for (double v : values_of(got.outputs[0])) ASSERT_EQ(v, want);
      }
    }
  }
}

// ---- Cast ----

TEST_F(CudaKernelsTest, CastBetweenAllDTypes) {
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{9}, Shape{3, 40}, Shape{100003}};
  for_each_cast_case(shapes, [this](const Tensor& x, DType to) {
    Graph g;
    check_op(ops::cast(feed(g, x), to), {x});
  });
}

TEST_F(CudaKernelsTest, CastFromFloatingPointSaturates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType from : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(from));
    Graph g;
    // In float16, 1e10, -1e30 and the int32 bounds are already infinities; in bfloat16 the bounds
    // round to +-2^31.
    Tensor x = tensor_of(from, Shape{8}, {1e10, -1e10, nan, -3.9, inf, -1e30, 2147483647.0, -2147483649.0});
    for (DType to : {DType::Int32, DType::Int64, DType::Bool}) check_op(ops::cast(feed(g, x), to), {x});
  }
}

TEST_F(CudaKernelsTest, CastToTheSameDTypeSharesTheBuffer) {
  Graph g;
  Tensor x = Tensor::vector<float>({1, 2, 3});
  auto gpu = kernel(ops::cast(feed(g, x), DType::Float32), "GPU");
  Tensor on = to_device(*gpu_, x).value();
  KernelRun r = run_kernel_on(*gpu, {on}, gpu_);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outputs[0].raw_data(), on.raw_data());
}

// ---- Random ----

TEST_F(CudaKernelsTest, RandomUniformIsTheCpuStreamBitForBit) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 7, 64, 1001, 1 << 20}) {
      for (uint64_t seed : {uint64_t{42}, uint64_t{0x0123456789abcdefull}}) {
        SCOPED_TRACE(describe(dtype, {Shape{n}}) + " seed " + std::to_string(seed));
        Graph g;
        Output y = ops::random_uniform(g, Shape{n}, dtype, seed);
        auto cpu = kernel(y, "CPU");
        auto gpu = kernel(y, "GPU");
        for (int run = 0; run < 3; ++run) {  // each run takes the blocks after the previous one
          KernelRun want = run_kernel_on(*cpu, {}, nullptr);
          KernelRun got = run_gpu(*gpu, {});
          ASSERT_TRUE(want.status.ok() && got.status.ok()) << got.status.to_string();
          EXPECT_TRUE(got.outputs[0].equals(want.outputs[0])) << "run " << run;
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, RandomNormalIsTheCpuStreamToAFewUlps) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 7, 1001, 1 << 20}) {
      SCOPED_TRACE(describe(dtype, {Shape{n}}));
      Graph g;
      Output y = ops::random_normal(g, Shape{n}, dtype, 5, 3.0f, 2.0f);
      auto cpu = kernel(y, "CPU");
      auto gpu = kernel(y, "GPU");
      for (int run = 0; run < 2; ++run) {
        KernelRun want = run_kernel_on(*cpu, {}, nullptr);
        KernelRun got = run_gpu(*gpu, {});
        ASSERT_TRUE(want.status.ok() && got.status.ok()) << got.status.to_string();
        expect_same(got.outputs[0], want.outputs[0], 1e-12);
      }
    }
  }
}

// ---- Identity, Const, variables ----

TEST_F(CudaKernelsTest, IdentityPassesTheBufferThrough) {
  Graph g;
  Tensor x = Tensor::vector<double>({1, 2});
  auto gpu = kernel(ops::identity(feed(g, x)), "GPU");
  Tensor on = to_device(*gpu_, x).value();
  KernelRun r = run_kernel_on(*gpu, {on}, gpu_);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outputs[0].raw_data(), on.raw_data());
}

TEST_F(CudaKernelsTest, ConstIsCopiedToTheGpuOnce) {
  Graph g;
  Tensor value = Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3);
  auto gpu = kernel(ops::constant(g, value), "GPU");
  KernelRun first = run_kernel_on(*gpu, {}, gpu_);
  KernelRun second = run_kernel_on(*gpu, {}, gpu_);
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  EXPECT_EQ(first.outputs[0].device(), gpu_->name());
  EXPECT_EQ(first.outputs[0].raw_data(), second.outputs[0].raw_data());
  EXPECT_TRUE(back(first.outputs[0]).equals(value));
}

TEST_F(CudaKernelsTest, VariablesAreUpdatedOnTheGpuAsOnTheCpu) {
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    RandomInputs rng;
    const Shape shape{257, 3};
    Tensor initial = rng.tensor(dtype, shape, Range{-10, 10});
    Tensor d1 = rng.tensor(dtype, shape, Range{-10, 10});
    Tensor d2 = rng.tensor(dtype, shape, Range{-10, 10});
    Graph g;
    Variable v(g, Tensor::zeros(dtype, shape), "v");
    Output assign = v.assign(ops::placeholder(g, dtype, shape));
    Output add = v.assign_add(ops::placeholder(g, dtype, shape));
    Output sub = v.assign_sub(ops::placeholder(g, dtype, shape));
    Output read = v.value();
    ResourceMgr cpu_resources;
    ResourceMgr gpu_resources;
    struct Step {
      Output op;
      Tensor input;
    };
    const std::vector<Step> steps = {{assign, initial}, {add, d1}, {sub, d2}, {add, d2}, {read, Tensor()}};
    for (const Step& step : steps) {
      SCOPED_TRACE(step.op.op().type());
      auto cpu = kernel(step.op, "CPU");
      auto gpu = kernel(step.op, "GPU");
      std::vector<Tensor> inputs;
      if (!step.input.is_null()) inputs.push_back(step.input);
      KernelRun want = run_kernel_on(*cpu, inputs, nullptr, &cpu_resources);
      KernelRun got = run_gpu(*gpu, inputs, &gpu_resources);
      ASSERT_TRUE(want.status.ok()) << want.status.to_string();
      ASSERT_TRUE(got.status.ok()) << got.status.to_string();
      expect_same(got.outputs[0], want.outputs[0], 1e-10);
    }
  }
}

TEST_F(CudaKernelsTest, AnUpdateNeverChangesAnEarlierRead) {
  Graph g;
  const Shape shape{1000};
  Variable v(g, Tensor::zeros(DType::Float32, shape), "v");
  Output assign = v.assign(ops::placeholder(g, DType::Float32, shape));
  Output add = v.assign_add(ops::placeholder(g, DType::Float32, shape));
  ResourceMgr resources;
  auto assign_kernel = kernel(assign, "GPU");
  auto add_kernel = kernel(add, "GPU");
  auto read_kernel = kernel(v.value(), "GPU");
  Tensor ones = Tensor::from_vector<float>(std::vector<float>(1000, 1.0f), shape);
  ASSERT_TRUE(run_kernel_on(*assign_kernel, on_gpu({ones}), gpu_, &resources).status.ok());
  KernelRun snapshot = run_kernel_on(*read_kernel, {}, gpu_, &resources);
  ASSERT_TRUE(snapshot.status.ok());
  ASSERT_TRUE(run_kernel_on(*add_kernel, on_gpu({ones}), gpu_, &resources).status.ok());
  EXPECT_TRUE(back(snapshot.outputs[0]).equals(ones)) << "the held read changed";
  KernelRun now = run_kernel_on(*read_kernel, {}, gpu_, &resources);
  EXPECT_TRUE(back(now.outputs[0]).equals(Tensor::from_vector<float>(std::vector<float>(1000, 2.0f), shape)));
}

TEST_F(CudaKernelsTest, VariableErrorsAreTheCpuKernels) {
  Graph g;
  Variable v(g, Tensor::zeros(DType::Float32, Shape{3}), "v");
  Output add = v.assign_add(ops::placeholder(g, DType::Float32, Shape{3}));
  ResourceMgr cpu_resources;
  ResourceMgr gpu_resources;
  auto cpu = kernel(add, "CPU");
  auto gpu = kernel(add, "GPU");
  Tensor delta = Tensor::vector<float>({1, 2, 3});
  KernelRun want = run_kernel_on(*cpu, {delta}, nullptr, &cpu_resources);
  KernelRun got = run_gpu(*gpu, {delta}, &gpu_resources);
  EXPECT_EQ(want.status.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(got.status.code(), want.status.code());
  EXPECT_EQ(got.status.message(), want.status.message());
}

// ---- The contract with the executor ----

TEST_F(CudaKernelsTest, AnInputInHostMemoryIsAMissingTransfer) {
  Graph g;
  Tensor x = Tensor::vector<float>({1, 2});
  auto gpu = kernel(ops::neg(feed(g, x)), "GPU");
  KernelRun r = run_kernel_on(*gpu, {x}, gpu_);
  EXPECT_EQ(r.status.code(), ErrorCode::kInternal);
  EXPECT_NE(r.status.message().find("missing transfer"), std::string::npos) << r.status.to_string();
}

TEST_F(CudaKernelsTest, GpuKernelsAreAsynchronousAndFinishOnTheCompletionThread) {
  Graph g;
  Tensor x = Tensor::zeros(DType::Float32, Shape{1 << 20});
  auto gpu = kernel(ops::exp(feed(g, x)), "GPU");
  EXPECT_TRUE(gpu->is_async());
  EXPECT_FALSE(gpu->is_expensive());
  std::vector<Tensor> inputs = on_gpu({x});
  KernelRun r = run_kernel_on(*gpu, inputs, gpu_);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(back(r.outputs[0]).equals(Tensor::from_vector<float>(std::vector<float>(1 << 20, 1.0f), x.shape())));
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
