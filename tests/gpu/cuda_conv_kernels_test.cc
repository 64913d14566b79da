// The GPU kernels of the convolutions and pools against their CPU kernels (label gpu), as
// cuda_shape_kernels_test.cc does: each op built in a Graph, its "CPU" kernel run on host inputs and
// its "GPU" kernel on the same inputs copied to the GPU. The convolutions agree to rounding (cuBLAS
// and OpenBLAS sum in different orders); the pools and their gradients bit for bit (the same sums
// in the same order); failures with the same code and message. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/conv_ops.h"
#include "tessera/tessera.h"
#include "tests/gpu/gpu_kernel_test.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {
namespace {

class CudaConvKernelsTest : public GpuKernelTest {};

Tensor random(DType dtype, const Shape& shape) { return random_tensor(dtype, shape, Range{-1, 1}, Range{-1, 1}); }

struct Case {
  Shape in;
  int64_t kh, kw, o, sh, sw;
  const char* padding;
};

// Pointwise, rectangular, strided, kernel smaller than the stride, window larger than the input.
const Case kCases[] = {
    {Shape{2, 5, 5, 3}, 1, 1, 4, 1, 1, "SAME"},  {Shape{1, 6, 7, 2}, 3, 2, 5, 1, 1, "VALID"},
    {Shape{3, 8, 9, 4}, 3, 3, 2, 2, 3, "SAME"},  {Shape{1, 7, 7, 1}, 2, 2, 3, 3, 3, "SAME"},
    {Shape{2, 4, 4, 2}, 1, 1, 3, 2, 2, "SAME"},  {Shape{1, 2, 3, 2}, 4, 5, 2, 1, 1, "SAME"},
    {Shape{2, 9, 6, 3}, 4, 2, 3, 2, 1, "VALID"},
};

TEST_F(CudaConvKernelsTest, ConvolutionsMatchTheCpu) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& k : kCases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + k.in.to_string() + " " + k.padding);
      const Tensor x = random(dtype, k.in);
      const Tensor f = random(dtype, Shape{k.kh, k.kw, k.in.dim(3), k.o});
      Graph g;
      auto px = feed(g, x);
      auto pf = feed(g, f);
      const std::vector<int64_t> strides{1, k.sh, k.sw, 1};
      auto y = ops::conv2d(px, pf, {1, static_cast<int>(k.sh), static_cast<int>(k.sw), 1}, k.padding);
      check_close(y, {x, f});
      const Tensor dy = random(dtype, y.shape());
      auto pdy = feed(g, dy);
      check_close(conv2d_backprop_input(px, pf, pdy, strides, k.padding), {x, f, dy});
      check_close(conv2d_backprop_filter(px, pf, pdy, strides, k.padding), {x, f, dy});
    }
  }
}

// More patches than one chunk (64 MiB): several im2col + GEMM rounds on the stream, and the
// filter's gradient accumulated over them.
TEST_F(CudaConvKernelsTest, LargeConvolutionsSpanSeveralChunks) {
  const Tensor x = random(DType::Float64, Shape{4, 64, 64, 64});  // 16384 rows of 576 doubles: 72 MiB
  const Tensor f = random(DType::Float64, Shape{3, 3, 64, 8});
  const Tensor dy = random(DType::Float64, Shape{4, 64, 64, 8});
  Graph g;
  auto px = feed(g, x);
  auto pf = feed(g, f);
  auto pdy = feed(g, dy);
  check_close(ops::conv2d(px, pf, {1, 1, 1, 1}, "SAME"), {x, f});
  check_close(conv2d_backprop_input(px, pf, pdy, {1, 1, 1, 1}, "SAME"), {x, f, dy});
  check_close(conv2d_backprop_filter(px, pf, pdy, {1, 1, 1, 1}, "SAME"), {x, f, dy});
}

TEST_F(CudaConvKernelsTest, PoolsMatchTheCpuBitForBit) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& k : kCases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + k.in.to_string() + " " + k.padding);
      const Tensor x = random(dtype, k.in);
      Graph g;
      auto px = feed(g, x);
      const std::vector<int> ksize{1, static_cast<int>(k.kh), static_cast<int>(k.kw), 1};
      const std::vector<int> strides{1, static_cast<int>(k.sh), static_cast<int>(k.sw), 1};
      auto mp = ops::max_pool(px, ksize, strides, k.padding);
      auto ap = ops::avg_pool(px, ksize, strides, k.padding);
      check_op(mp, {x});
      check_op(ap, {x});
      const Tensor dy = random(dtype, mp.shape());
      const Tensor y = random(dtype, mp.shape());  // MaxPoolGrad reads orig_output's shape only
      auto pdy = feed(g, dy);
      auto py = feed(g, y);
      const std::vector<int64_t> ks{1, k.kh, k.kw, 1};
      const std::vector<int64_t> ss{1, k.sh, k.sw, 1};
      check_op(max_pool_grad(px, py, pdy, ks, ss, k.padding), {x, y, dy});
      check_op(avg_pool_grad(px, pdy, ks, ss, k.padding), {x, dy});
    }
  }
}

// Ties: every window's gradient to its first element, as on the CPU.
TEST_F(CudaConvKernelsTest, MaxPoolGradTiesGoToTheFirstMaximum) {
  const Tensor x = Tensor::zeros(DType::Float32, Shape{2, 6, 6, 3});
  const Tensor dy = random(DType::Float32, Shape{2, 5, 5, 3});
  Graph g;
  auto px = feed(g, x);
  auto pdy = feed(g, dy);
  check_op(max_pool_grad(px, pdy, pdy, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID"), {x, dy, dy});
}

TEST_F(CudaConvKernelsTest, EmptyTensorsAndNoChannels) {
  const Tensor empty(DType::Float32, Shape{0, 4, 4, 3});
  const Tensor f = random(DType::Float32, Shape{2, 2, 3, 5});
  const Tensor no_channels(DType::Float32, Shape{1, 3, 3, 0});
  const Tensor f0(DType::Float32, Shape{2, 2, 0, 2});
  Graph g;
  auto pe = feed(g, empty);
  auto pf = feed(g, f);
  auto pn = feed(g, no_channels);
  auto pf0 = feed(g, f0);
  check_op(ops::conv2d(pe, pf, {1, 1, 1, 1}, "SAME"), {empty, f});
  check_op(ops::max_pool(pe, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME"), {empty});
  check_op(ops::conv2d(pn, pf0, {1, 1, 1, 1}, "VALID"), {no_channels, f0});  // zeros
}

// Shapes unknown when built: the GPU kernels refuse what the CPU kernels refuse, in their words.
TEST_F(CudaConvKernelsTest, ErrorsAreTheCpuKernels) {
  const Tensor x = random(DType::Float32, Shape{1, 4, 4, 3});
  const Tensor f = random(DType::Float32, Shape{2, 2, 2, 1});
  const Tensor dy = random(DType::Float32, Shape{1, 2, 2, 3});
  Graph g;
  auto px = ops::placeholder(g, DType::Float32);
  auto pf = ops::placeholder(g, DType::Float32);
  auto pdy = ops::placeholder(g, DType::Float32);
  check_op_fails(ops::conv2d(px, pf, {1, 1, 1, 1}, "SAME"), {x, f}, "the filter's in channels (2)");
  check_op_fails(ops::max_pool(px, {1, 5, 1, 1}, {1, 1, 1, 1}, "VALID"), {x}, "the window's height 5");
  check_op_fails(avg_pool_grad(px, pdy, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID"), {x, dy},
                 "grad has shape [1,2,2,3], expected [1,3,3,3]");
  check_op_fails(conv2d_backprop_filter(px, pf, pdy, {1, 1, 1, 1}, "VALID"), {x, f, dy},
                 "the filter's in channels (2)");
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
