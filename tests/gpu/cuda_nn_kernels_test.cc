// The GPU kernels of the neural-network ops against their CPU kernels (label gpu), as
// cuda_select_kernels_test.cc does: each op built in a Graph, its "CPU" kernel run on host inputs
// and its "GPU" kernel on the same inputs copied to the GPU. Elementwise ops without rounding
// differences and the random masks must be equal bit for bit; row reductions and atomics within
// expect_same's tolerance; failures the same code and message. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/nn_ops.h"
#include "tessera/tessera.h"
#include "tests/gpu/gpu_kernel_test.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {
namespace {

class CudaNnKernelsTest : public GpuKernelTest {};

// Row reductions and atomics sum in another order than the CPU: float32 outputs within this
// normalised error of the CPU kernel's (check_outputs_close), a relative error of 1e-5. A float32
// sum of n terms in another order may differ by up to about n * 6e-8: the cross entropy of one
// row of 4097 differed by 1.75e-6 relative (normalised error 3.1e-12) on an H200. Dropping or
// doubling one term of such a row is a normalised error near 6e-8, well past this.
constexpr double kF32Tolerance = 1e-10;

Tensor random(DType dtype, const Shape& shape, Range r = Range{-4, 4}) { return random_tensor(dtype, shape, r, r); }

TEST_F(CudaNnKernelsTest, SoftmaxFamilyEveryFloatDType) {
  for (DType dtype : kFloatDTypes) {
    // Rows shorter than a warp, of one block, and longer than a block; one row of many.
    for (const Shape& shape : {Shape{3, 5}, Shape{7, 256}, Shape{4, 1000}, Shape{1, 4097}, Shape{2, 3, 33}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string());
      const Tensor x = random(dtype, shape);
      Graph g;
      auto px = feed(g, x);
      check_outputs_close(ops::softmax(px), {x}, kF32Tolerance);
      check_outputs_close(ops::log_softmax(px), {x}, kF32Tolerance);
      if (shape.rank() != 2) continue;
      const Tensor labels = random(dtype, shape, Range{0, 1});
      check_outputs_close(ops::softmax_cross_entropy_with_logits(feed(g, labels), px), {labels, x}, kF32Tolerance);
      for (DType label_dtype : {DType::Int32, DType::Int64}) {
        std::vector<double> v;
        for (int64_t i = 0; i < shape.dim(0); ++i) v.push_back(static_cast<double>((i * 7) % shape.dim(1)));
        const Tensor sparse = tensor_of(label_dtype, Shape{shape.dim(0)}, v);
        check_outputs_close(ops::sparse_softmax_cross_entropy_with_logits(feed(g, sparse), px), {sparse, x},
                            kF32Tolerance);
      }
    }
  }
}

TEST_F(CudaNnKernelsTest, LargeLogitsAndEmptyBatches) {
  const Tensor large = tensor_of(DType::Float32, Shape{2, 3}, {1e4, 0, -1e4, 3e38, 1, -3e38});
  const Tensor empty(DType::Float32, Shape{0, 5});
  Graph g;
  auto pl = feed(g, large);
  check_outputs_close(ops::log_softmax(pl), {large}, kF32Tolerance);
  const Tensor labels = tensor_of(DType::Int32, Shape{2}, {2, 0});
  check_outputs_close(ops::sparse_softmax_cross_entropy_with_logits(feed(g, labels), pl), {labels, large},
                      kF32Tolerance);
  check_op(ops::softmax(feed(g, empty)), {empty});
  const Tensor no_labels(DType::Int64, Shape{0});
  check_op(ops::sparse_softmax_cross_entropy_with_logits(feed(g, no_labels), feed(g, empty)), {no_labels, empty});
}

TEST_F(CudaNnKernelsTest, BiasAddAndItsGradient) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 4, 70}, Shape{1000, 2}, Shape{0, 3}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string());
      const Tensor x = random(dtype, shape);
      const Tensor b = random(dtype, Shape{shape.dim(-1)});
      Graph g;
      auto px = feed(g, x);
      check_op(ops::bias_add(px, feed(g, b)), {x, b});
      check_close(bias_add_grad(px), {x});
    }
  }
}

TEST_F(CudaNnKernelsTest, L2LossAndElementwiseGradients) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random(dtype, Shape{300, 77});
    const Tensor y = random(dtype, Shape{300, 77}, Range{0.25, 0.9});
    Graph g;
    auto px = feed(g, x);
    auto py = feed(g, y);
    check_close(ops::l2_loss(px), {x});
    check_op(relu_grad(py, px), {y, x});
    check_close(tanh_grad(py, px), {y, x});
    check_close(sigmoid_grad(py, px), {y, x});
    check_close(sqrt_grad(py, px), {y, x});
  }
  const Tensor empty(DType::Float32, Shape{0});
  Graph g;
  check_op(ops::l2_loss(feed(g, empty)), {empty});
  const Tensor i = tensor_of(DType::Int32, Shape{4}, {3, -3, 0, 9});
  check_op(relu_grad(feed(g, i), feed(g, i)), {i, i});
}

TEST_F(CudaNnKernelsTest, GatherGradAccumulates) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor params = random(dtype, Shape{6, 5, 3});
    const Tensor idx = tensor_of(DType::Int64, Shape{2, 4}, {0, 4, 4, 1, 4, 0, 2, 2});
    Graph g;
    auto pp = feed(g, params);
    auto pi = feed(g, idx);
    const Tensor dy0 = random(dtype, Shape{2, 4, 5, 3});
    check_close(gather_grad(feed(g, dy0), pi, pp, 0), {dy0, idx, params});
    const Tensor dy1 = random(dtype, Shape{6, 2, 4, 3});
    check_close(gather_grad(feed(g, dy1), pi, pp, 1), {dy1, idx, params});
  }
  const Tensor params(DType::Float32, Shape{3, 2});
  const Tensor none(DType::Int32, Shape{0});
  const Tensor dy(DType::Float32, Shape{0, 2});
  Graph g;
  check_op(gather_grad(feed(g, dy), feed(g, none), feed(g, params), 0), {dy, none, params});
}

TEST_F(CudaNnKernelsTest, DropoutMasksAreTheCpuKernels) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random(dtype, Shape{1001});
    Graph g;
    auto px = feed(g, x);
    check_op(ops::dropout(px, 0.3f, /*seed=*/42), {x});
    check_op(ops::dropout(px, 1.0f, /*seed=*/42), {x});
  }
}

TEST_F(CudaNnKernelsTest, TruncatedNormalIsTheCpuKernels) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    auto t = ops::truncated_normal(g, Shape{100, 101}, dtype, /*seed=*/9);
    check_close(t, {});
    KernelRun got = run_gpu(t, {});
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    for (double v : values_of(got.outputs[0])) ASSERT_LT(std::abs(v), 2.0);
  }
}

TEST_F(CudaNnKernelsTest, ErrorsAreTheCpuKernels) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  auto l = ops::placeholder(g, DType::Int32, Shape::unknown(), "l");
  const Tensor logits = Tensor::zeros(DType::Float32, Shape{4, 3});
  check_op_fails(ops::sparse_softmax_cross_entropy_with_logits(l, x),
                 {tensor_of(DType::Int32, Shape{4}, {0, 3, 1, -1}), logits}, "received a label value of 3 (labels[1])");
  check_op_fails(ops::softmax(x), {Tensor::scalar(1.0f)}, "at least 1 dimension");
  check_op_fails(ops::softmax_cross_entropy_with_logits(x, x), {logits, Tensor::zeros(DType::Float32, Shape{4, 2})},
                 "must have the same shape");
  check_op_fails(ops::bias_add(x, x), {logits, Tensor::zeros(DType::Float32, Shape{4})},
                 "must match the last dimension");
  check_op_fails(gather_grad(x, l, x, 0),
                 {Tensor::zeros(DType::Float32, Shape{2, 3}), tensor_of(DType::Int32, Shape{2}, {1, 9}), logits},
                 "indices[1] = 9 is not in [0, 4)");
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
