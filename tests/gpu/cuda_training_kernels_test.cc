// The GPU kernels of the fused optimizer updates against their CPU kernels (label gpu): each op
// built in a Graph, its variable and slots assigned the same random values through the Assign
// kernels in a CPU and a GPU resource manager, then a few steps of the "CPU" kernel on host inputs
// and of the "GPU" kernel on the same inputs copied to the GPU; the returned value, the variable and
// the slots must agree, failures have the same code and message, and an update never changes an
// earlier read. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/resource_mgr.h"
#include "core/training_ops.h"
#include "tessera/tessera.h"
#include "tests/gpu/gpu_kernel_test.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {
namespace {

// One op over a variable and its slots, with placeholders for every input.
struct Built {
  Variable var;
  std::vector<Variable> slots;
  std::vector<Output> inputs;  // in the op's input order
  Output apply;
};

// The op `type` (nesterov: ApplyMomentum's Nesterov form) over variables of `shape`.
Built build(Graph& g, const std::string& type, bool nesterov, DType dtype, const Shape& shape) {
  const ApplyOpInfo& info = *find_apply_op(type);
  Built b;
  b.var = Variable(g, Tensor::zeros(dtype, shape), "var");
  for (std::size_t k = 0; k < info.slots.size(); ++k) {
    b.slots.emplace_back(g, Tensor::zeros(dtype, shape), "slot" + std::to_string(k));
  }
  for (std::size_t i = 0; i < info.inputs.size(); ++i) {
    const bool grad = static_cast<int>(i) == info.grad;
    b.inputs.push_back(ops::placeholder(g, dtype, grad ? shape : Shape{}, info.inputs[i]));
  }
  const auto& in = b.inputs;
  const auto& s = b.slots;
  if (type == "ApplyGradientDescent") b.apply = apply_gradient_descent(b.var, in[0], in[1]);
  if (type == "ApplyMomentum") b.apply = apply_momentum(b.var, s[0], in[0], in[1], in[2], false, nesterov);
  if (type == "ApplyAdam") b.apply = apply_adam(b.var, s[0], s[1], in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
  if (type == "ApplyAdagrad") b.apply = apply_adagrad(b.var, s[0], in[0], in[1]);
  if (type == "ApplyRMSProp") b.apply = apply_rms_prop(b.var, s[0], s[1], in[0], in[1], in[2], in[3], in[4]);
  return b;
}

// Hyper-parameters as the optimizers use them, by input name.
double hyper_parameter(const std::string& name) {
  if (name == "beta1_power" || name == "beta1" || name == "rho" || name == "momentum") return 0.9;
  if (name == "beta2_power" || name == "beta2") return 0.999;
  if (name == "epsilon") return 1e-3;
  return 0.01;  // alpha, lr
}

class CudaTrainingKernelsTest : public GpuKernelTest {
 protected:
  // Runs `y`'s kernel on the host ("CPU") or the GPU with `resources`, on host `inputs` (copied to
  // the GPU for the GPU kernel); the outputs come back on the host.
  KernelRun run_on(const char* device_type, const Output& y, const std::vector<Tensor>& inputs,
                   ResourceMgr& resources) {
    auto k = kernel(y, device_type);
    if (std::string(device_type) == "CPU") return run_kernel_on(*k, inputs, nullptr, &resources);
    std::vector<Tensor> on_device;
    for (const Tensor& t : inputs) on_device.push_back(to_device(*gpu_, t).value());
    KernelRun r = run_kernel_on(*k, on_device, gpu_, &resources);
    for (Tensor& t : r.outputs) {
      if (!t.is_null()) t = to_host(*gpu_, t).value();
    }
    return r;
  }

  // The same step on both: both must succeed and agree.
  void expect_agree(const Output& y, const std::vector<Tensor>& inputs) {
    KernelRun want = run_on("CPU", y, inputs, cpu_resources_);
    KernelRun got = run_on("GPU", y, inputs, gpu_resources_);
    ASSERT_TRUE(want.status.ok()) << want.status.to_string();
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    expect_same(got.outputs[0], want.outputs[0]);
  }

  ResourceMgr cpu_resources_;
  ResourceMgr gpu_resources_;
};

TEST_F(CudaTrainingKernelsTest, EveryUpdateAgreesWithTheCpuKernel) {
  struct Op {
    const char* type;
    bool nesterov;
  };
  const Op kOps[] = {{"ApplyGradientDescent", false}, {"ApplyMomentum", false}, {"ApplyMomentum", true},
                     {"ApplyAdam", false},            {"ApplyAdagrad", false},  {"ApplyRMSProp", false}};
  for (DType dtype : kFloatDTypes) {
    for (const Op& op : kOps) {
      SCOPED_TRACE(std::string(op.type) + (op.nesterov ? " (Nesterov) " : " ") + std::string(dtype_name(dtype)));
      cpu_resources_.clear();
      gpu_resources_.clear();
      RandomInputs rng;
      const Shape shape{1031};  // not a multiple of a block
      Graph g;
      Built b = build(g, op.type, op.nesterov, dtype, shape);
      // The same initial values on both; slots positive (Adagrad's and RMSProp's square roots).
      std::vector<Variable> all = {b.var};
      all.insert(all.end(), b.slots.begin(), b.slots.end());
      for (std::size_t k = 0; k < all.size(); ++k) {
        const Tensor initial = rng.tensor(dtype, shape, k == 0 ? Range{-2, 2} : Range{0.5, 2});
        expect_agree(all[k].assign(ops::placeholder(g, dtype, shape)), {initial});
      }
      const ApplyOpInfo& info = *find_apply_op(op.type);
      for (int step = 0; step < 3; ++step) {
        std::vector<Tensor> inputs;
        for (std::size_t i = 0; i < info.inputs.size(); ++i) {
          inputs.push_back(static_cast<int>(i) == info.grad
                               ? rng.tensor(dtype, shape, Range{-1, 1})
                               : tensor_of(dtype, Shape{}, {hyper_parameter(info.inputs[i])}));
        }
        expect_agree(b.apply, inputs);
        for (const Variable& v : all) expect_agree(v.value(), {});
      }
    }
  }
}

TEST_F(CudaTrainingKernelsTest, ErrorsAreTheCpuKernels) {
  Graph g;
  Built b = build(g, "ApplyAdagrad", false, DType::Float32, Shape{4});
  const Tensor values = Tensor::vector<float>({1, 2, 3, 4});
  const Tensor lr = Tensor::scalar(0.5f);
  auto expect_same_failure = [&](const std::vector<Tensor>& inputs, ErrorCode code) {
    KernelRun want = run_on("CPU", b.apply, inputs, cpu_resources_);
    KernelRun got = run_on("GPU", b.apply, inputs, gpu_resources_);
    EXPECT_EQ(want.status.code(), code) << want.status.to_string();
    EXPECT_EQ(got.status.code(), want.status.code()) << got.status.to_string();
    EXPECT_EQ(got.status.message(), want.status.message());
  };
  // The variable initialized, its slot not: no kernel has created the slot.
  const Output init_var = b.var.assign(ops::placeholder(g, DType::Float32, Shape{4}));
  expect_agree(init_var, {values});
  expect_same_failure({lr, values}, ErrorCode::kFailedPrecondition);
  // Initialized; then a scalar that is not one.
  expect_agree(b.slots[0].assign(ops::placeholder(g, DType::Float32, Shape{4})), {values});
  expect_same_failure({Tensor::vector<float>({1, 2}), values}, ErrorCode::kInvalidArgument);
}

TEST_F(CudaTrainingKernelsTest, AnUpdateNeverChangesAnEarlierRead) {
  Graph g;
  const Shape shape{1000};
  Built b = build(g, "ApplyMomentum", false, DType::Float32, shape);
  const Tensor ones = Tensor::from_vector<float>(std::vector<float>(1000, 1.0f), shape);
  expect_agree(b.var.assign(ops::placeholder(g, DType::Float32, shape)), {ones});
  expect_agree(b.slots[0].assign(ops::placeholder(g, DType::Float32, shape)), {ones});
  auto read = kernel(b.slots[0].value(), "GPU");
  KernelRun snapshot = run_kernel_on(*read, {}, gpu_, &gpu_resources_);
  ASSERT_TRUE(snapshot.status.ok());
  // accum = 1 * 1 + 1 = 2; var = 1 - 1 * 2 = -1.
  KernelRun applied = run_on("GPU", b.apply, {Tensor::scalar(1.0f), ones, Tensor::scalar(1.0f)}, gpu_resources_);
  ASSERT_TRUE(applied.status.ok()) << applied.status.to_string();
  EXPECT_TRUE(applied.outputs[0].equals(Tensor::from_vector<float>(std::vector<float>(1000, -1.0f), shape)));
  EXPECT_TRUE(to_host(*gpu_, snapshot.outputs[0]).value().equals(ones)) << "the held read changed";
  KernelRun now = run_kernel_on(*read, {}, gpu_, &gpu_resources_);
  EXPECT_TRUE(to_host(*gpu_, now.outputs[0]).value().equals(
      Tensor::from_vector<float>(std::vector<float>(1000, 2.0f), shape)));
}

}  // namespace
}  // namespace tessera::internal::gpu_testing
