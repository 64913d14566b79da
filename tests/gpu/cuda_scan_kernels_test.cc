// The GPU kernels of Cumsum and Cumprod against their CPU kernels (label gpu), as
// cuda_select_kernels_test.cc does: each op built in a Graph, its "CPU" kernel run on host inputs
// and its "GPU" kernel on the same inputs copied to the GPU; outputs must be equal bit for bit
// (both fold each line in scan order), failures the same code and message. Then reduce_prod's
// gradient through a session placed on the GPU against the same graph on the CPU. Skips without a
// GPU.
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

constexpr DType kScanDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};

// Products of long float lines stay finite near 1; integers wrap whatever they are.
Tensor random(DType dtype, const Shape& shape) {
  return random_tensor(dtype, shape, Range{0.5, 1.5}, Range{-3, 3});
}

using ScanBuilder = Output (*)(Output, Output, bool, bool, std::string);
const ScanBuilder kScans[] = {ops::cumsum, ops::cumprod};

// Every axis (negative ones too), exclusive and reverse, of both scans over x, the axis fed.
class CudaScanKernelsTest : public GpuKernelTest {
 protected:
  void check_every_axis(const Tensor& x, DType axis_dtype) {
    Graph g;
    auto px = feed(g, x);
    auto pa = ops::placeholder(g, axis_dtype, Shape{});
    const int rank = x.shape().rank();
    for (ScanBuilder scan : kScans) {
      for (int axis = -rank; axis < rank; ++axis) {
        for (bool exclusive : {false, true}) {
          for (bool reverse : {false, true}) {
            SCOPED_TRACE(::testing::Message() << x.shape().to_string() << " axis " << axis << " exclusive "
                                              << exclusive << " reverse " << reverse);
            const Tensor a = tensor_of(axis_dtype, Shape{}, {static_cast<double>(axis)});
            check_op(scan(px, pa, exclusive, reverse, ""), {x, a});
          }
        }
      }
    }
  }
};

TEST_F(CudaScanKernelsTest, EveryDTypeAxisAndOption) {
  for (DType dtype : kScanDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    check_every_axis(random(dtype, Shape{7}), DType::Int32);
    check_every_axis(random(dtype, Shape{3, 4, 5}), DType::Int64);
    check_every_axis(random(dtype, Shape{2, 1, 3, 1}), DType::Int32);
  }
}

// Long lines, many short lines, and no elements.
TEST_F(CudaScanKernelsTest, LargeAndEmptyTensors) {
  check_every_axis(random(DType::Float32, Shape{3, 5000}), DType::Int32);
  check_every_axis(random(DType::Int64, Shape{300000, 2}), DType::Int32);
  check_every_axis(Tensor(DType::Float64, Shape{0, 3}), DType::Int64);
}

TEST_F(CudaScanKernelsTest, ErrorsAreTheCpuKernels) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  auto a = ops::placeholder(g, DType::Int32, Shape::unknown(), "a");
  auto a64 = ops::placeholder(g, DType::Int64, Shape::unknown(), "a64");
  const Tensor t = random(DType::Float32, Shape{2, 5});
  for (ScanBuilder scan : kScans) {
    check_op_fails(scan(x, a, false, false, ""), {t, Tensor::scalar(int32_t{2})},
                   "axis 2 is out of range [-2, 2) for an input of shape [2,5]");
    check_op_fails(scan(x, a64, true, true, ""), {t, Tensor::scalar(int64_t{-3})}, "axis -3 is out of range [-2, 2)");
    check_op_fails(scan(x, a, false, false, ""), {t, Tensor::vector<int32_t>({0})}, "axis must be a scalar");
    check_op_fails(scan(x, a, false, false, ""), {Tensor::scalar(1.0f), Tensor::scalar(int32_t{0})},
                   "axis 0 is out of range [0, 0)");
    check_op_fails(scan(x, a, false, false, ""), {Tensor(DType::Float32, Shape{0, 3}), Tensor::scalar(int32_t{5})},
                   "axis 5 is out of range");
  }
}

// The scans with constant axes and reduce_prod's gradient (zeros in the input) on the GPU, through
// a session, against the same graph on the CPU.
TEST_F(CudaScanKernelsTest, ProdGradientThroughASessionIsTheCpus) {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(i % 7 == 3 ? 0.0 : 0.5 + i / 20.0);
  const Tensor value = tensor_of(DType::Float64, Shape{2, 3, 4}, v);
  auto build = [&](Graph& g, const std::string& device, Output* x) {
    *x = ops::placeholder(g, DType::Float64, Shape{2, 3, 4});
    auto scope = g.device(device);
    const Output p = ops::reduce_prod(*x, {0, 2});
    std::vector<Output> outs = gradients({p}, {*x});
    outs.push_back(gradients({ops::reduce_prod(*x, {-1}, true)}, {*x})[0]);
    outs.push_back(ops::cumsum(*x, 1, true, false));
    outs.push_back(ops::cumprod(*x, -1, false, true));
    return outs;
  };
  Graph gg, gc;
  Output xg, xc;
  const auto on_gpu = build(gg, gpu_->name(), &xg);
  const auto on_cpu = build(gc, "/cpu:0", &xc);
  Session sg(gg), sc(gc);
  const auto got = sg.run(on_gpu, {{xg, value}});
  const auto want = sc.run(on_cpu, {{xc, value}});
  EXPECT_NE(on_gpu[0].op().assigned_device().find("GPU"), std::string::npos) << on_gpu[0].op().assigned_device();
  for (std::size_t i = 0; i < want.size(); ++i) tessera::testing::expect_same(got[i], want[i]);
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
