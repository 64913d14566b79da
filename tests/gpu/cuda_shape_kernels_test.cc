// The GPU kernels of the shape ops against their CPU kernels (label gpu), in the manner of
// cuda_kernels_test.cc: each op built in a Graph, its "CPU" kernel run on host inputs and its
// "GPU" kernel on the same inputs copied to the GPU; outputs must be equal (every dtype moves
// bit for bit), failures the same code and message, inputs left as they were, and the relabelling
// ops must share the input's device buffer. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "tests/gpu/gpu_kernel_test.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {
namespace {

class CudaShapeKernelsTest : public GpuKernelTest {};

Tensor random(DType dtype, const Shape& shape) {
  return random_tensor(dtype, shape, Range{-4, 4}, Range{-1000, 1000});
}

TEST_F(CudaShapeKernelsTest, DataMovingOpsEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random(dtype, Shape{3, 4, 5});
    const Tensor y = random(dtype, Shape{3, 2, 5});
    Graph g;
    auto px = feed(g, x);
    auto py = feed(g, y);
    for (const std::vector<int>& perm : {std::vector<int>{}, {0, 2, 1}, {2, 0, 1}, {1, 0, 2}})
      check_op(ops::transpose(px, perm), {x});
    check_op(ops::concat({px, py, px}, 1), {x, y, x});
    check_op(ops::concat({px, px}, -1), {x, x});
    check_op(ops::concat({px, px}, 0), {x, x});
    for (int axis : {0, 1, 2}) {
      const int num = axis == 0 ? 3 : (axis == 1 ? 2 : 5);
      auto pieces = ops::split(px, num, axis);
      check_op(pieces[0], {x});
    }
    check_op(ops::slice(px, {1, 0, 2}, {-1, 3, 2}), {x});
    check_op(ops::slice(px, {0, 0, 0}, {-1, -1, -1}), {x});
    check_op(ops::tile(px, {2, 1, 3}), {x});
    check_op(ops::tile(px, {1, 1, 1}), {x});
    check_op(ops::pad(px, {{1, 0}, {0, 2}, {3, 1}}), {x});
    check_op(ops::zeros_like(px), {x});
    check_op(ops::ones_like(px), {x});
    check_op(ops::shape(px), {x});
    check_op(ops::size(px), {x});
  }
}

TEST_F(CudaShapeKernelsTest, LargeAndEmptyTensors) {
  Graph g;
  const auto [big, empty, pb, pe] = LargeAndEmptyInputs(g, random(DType::Float32, Shape{513, 1031}));
  check_op(ops::transpose(pb), {big});
  check_op(ops::tile(pb, {3, 2}), {big});
  check_op(ops::pad(pb, {{7, 9}, {0, 33}}), {big});
  check_op(ops::slice(pb, {100, 3}, {400, 1000}), {big});
  check_op(ops::transpose(pe), {empty});
  check_op(ops::pad(pe, {{1, 1}, {0, 0}}), {empty});
  check_op(ops::concat({pe, pe}, 0), {empty, empty});
  check_op(ops::zeros_like(pe), {empty});
  check_op(ops::shape(pe), {empty});
}

TEST_F(CudaShapeKernelsTest, FillEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    check_op(ops::fill(g, {3, 67}, tessera::testing::tensor_of(dtype, Shape{}, {1})), {});
  }
}

TEST_F(CudaShapeKernelsTest, RelabellingSharesTheDeviceBuffer) {
  const Tensor x = random(DType::Float64, Shape{2, 6});
  Graph g;
  auto px = feed(g, x);
  for (const Output& y : {ops::reshape(px, {3, -1}), ops::expand_dims(px, 1), ops::squeeze(ops::expand_dims(px, 0))}) {
    SCOPED_TRACE(y.op().type());
    std::vector<Tensor> inputs, outputs;
    KernelRun r = run_gpu(y, {x}, &inputs, &outputs);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(outputs[0].raw_data(), inputs[0].raw_data());
    EXPECT_TRUE(r.finished_inline) << "nothing to launch";
  }
  check_op(ops::reshape(px, {4, -1}), {x});
}

TEST_F(CudaShapeKernelsTest, ErrorsAreTheCpuKernels) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  const Tensor t = Tensor::zeros(DType::Float32, Shape{2, 3});
  check_op_fails(ops::reshape(x, {4}), {t}, "cannot reshape");
  check_op_fails(ops::transpose(x, {0, 1, 2}), {t}, "has 3 entries");
  check_op_fails(ops::concat({x, x}, 2), {t, t}, "out of range");
  check_op_fails(ops::split(x, 2, 1)[0], {t}, "does not split evenly");
  check_op_fails(ops::slice(x, {1, 1}, {2, 1}), {t}, "out of range");
  check_op_fails(ops::squeeze(x, {0}), {t}, "cannot squeeze");
  check_op_fails(ops::tile(x, {2}), {t}, "multiples");
  check_op_fails(ops::pad(x, {{1, 1}}), {t}, "paddings");
  check_op_fails(ops::shape(x), {Tensor(DType::Float32, Shape{0, 3000000000})}, "does not fit the int32 output");
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
