// The GPU kernels of the comparison, logical and selection ops, AddN and the reductions Min and
// Prod against their CPU kernels (label gpu), as cuda_shape_kernels_test.cc does: each op built in
// a Graph, its "CPU" kernel run on host inputs and its "GPU" kernel on the same inputs copied to the
// GPU; outputs must be equal, failures the same code and message. Skips without a GPU.
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

class CudaSelectKernelsTest : public GpuKernelTest {};

Tensor random(DType dtype, const Shape& shape) { return random_tensor(dtype, shape, Range{-4, 4}, Range{-3, 3}); }

TEST_F(CudaSelectKernelsTest, ComparisonsAndLogicalOpsEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor a = random(dtype, Shape{3, 4, 5});
    const Tensor b = random(dtype, Shape{4, 1});
    Graph g;
    auto pa = feed(g, a);
    auto pb = feed(g, b);
    check_op(ops::equal(pa, pa), {a, a});
    check_op(ops::not_equal(pa, pb), {a, b});
    if (dtype == DType::Bool) {
      check_op(ops::logical_and(pa, pb), {a, b});
      check_op(ops::logical_or(pb, pa), {b, a});
      check_op(ops::logical_not(pa), {a});
      continue;
    }
    check_op(ops::less(pa, pb), {a, b});
    check_op(ops::less_equal(pb, pa), {b, a});
    check_op(ops::greater(pa, pb), {a, b});
    check_op(ops::greater_equal(pa, pa), {a, a});
  }
}

TEST_F(CudaSelectKernelsTest, WhereGatherOneHotArgAddNEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random(dtype, Shape{6, 7});
    const Tensor y = random(dtype, Shape{7});
    const Tensor c = random(DType::Bool, Shape{6, 1});
    Graph g;
    auto px = feed(g, x);
    auto py = feed(g, y);
    auto pc = feed(g, c);
    check_op(ops::where(pc, px, py), {c, x, y});
    for (DType index_dtype : {DType::Int32, DType::Int64}) {
      const Tensor i0 = tensor_of(index_dtype, Shape{2, 3}, {5, 0, 2, 2, 1, 5});
      const Tensor i1 = tensor_of(index_dtype, Shape{4}, {6, 0, 3, 3});
      auto p0 = feed(g, i0);
      auto p1 = feed(g, i1);
      check_op(ops::gather(px, p0), {x, i0});
      check_op(ops::gather(px, p1, 1), {x, i1});
    }
    if (dtype == DType::Bool) continue;
    check_op(ops::argmax(px, 1), {x});
    check_op(ops::argmin(px, 0), {x});
    check_op(ops::add_n({px, px, px}), {x, x, x});
    std::vector<Output> many(40, px);
    check_close(ops::add_n(many), std::vector<Tensor>(40, x));  // 16-bit: rounded once per 32 inputs
    check_op(ops::reduce_min(px, {1}), {x});
    check_close(ops::reduce_prod(px, {0}, true), {x});
  }
  const Tensor idx = tensor_of(DType::Int64, Shape{5}, {0, 3, -1, 9, 2});
  Graph g;
  check_op(ops::one_hot(feed(g, idx), 4, 2.0f, -1.0f), {idx});
}

TEST_F(CudaSelectKernelsTest, LargeAndEmptyReductions) {
  Graph g;
  const auto [big, empty, pb, pe] = LargeAndEmptyInputs(g, random(DType::Float32, Shape{257, 1031}));
  check_op(ops::reduce_min(pb), {big});
  check_op(ops::reduce_min(pb, {0}), {big});
  check_op(ops::reduce_min(pe, {0}), {empty});
  check_close(ops::reduce_prod(pe), {empty});
  check_op(ops::argmax(pb, 1), {big});
}

TEST_F(CudaSelectKernelsTest, ErrorsAreTheCpuKernels) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  auto i = ops::placeholder(g, DType::Int32, Shape::unknown(), "i");
  const Tensor t = Tensor::zeros(DType::Float32, Shape{3, 2});
  check_op_fails(ops::gather(x, i), {t, tensor_of(DType::Int32, Shape{3}, {0, 7, 9})}, "indices[1] = 7 is not in [0, 3)");
  check_op_fails(ops::gather(x, i, 1), {t, tensor_of(DType::Int32, Shape{1}, {-1})}, "indices[0] = -1");
  check_op_fails(ops::less(x, x), {t, Tensor::zeros(DType::Float32, Shape{4})}, "incompatible shapes");
  check_op_fails(ops::argmax(x, 1), {Tensor::zeros(DType::Float32, Shape{3, 0})}, "is empty");
  check_op_fails(ops::add_n({x, x}), {t, Tensor::zeros(DType::Float32, Shape{2})}, "one shape and dtype");
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
