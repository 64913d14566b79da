// A fixture for tests of GPU kernels against their CPU kernels (label gpu): each op built in a
// Graph, its "CPU" kernel run on host inputs and its "GPU" kernel on the same inputs copied to the
// GPU. Skips without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/op_registry.h"
#include "tessera/tessera.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/tensor_expect.h"

namespace tessera::internal::gpu_testing {

class GpuKernelTest : public ::testing::Test {
 protected:
  void SetUp() override { TESSERA_REQUIRE_GPU(gpu_); }

  std::unique_ptr<OpKernel> kernel(const Output& y, const char* device_type) {
    auto k = OpRegistry::global().create_kernel(*y.node(), device_type);
    EXPECT_TRUE(k.ok()) << k.status().to_string();
    return k.ok() ? std::move(k).value() : nullptr;
  }

  // Runs the GPU kernel of `y` on device copies of `inputs`, with its outputs copied back.
  KernelRun run_gpu(const Output& y, const std::vector<Tensor>& inputs, std::vector<Tensor>* device_inputs = nullptr,
                    std::vector<Tensor>* device_outputs = nullptr) {
    auto gpu = kernel(y, "GPU");
    std::vector<Tensor> on_device;
    for (const Tensor& t : inputs) {
      auto d = to_device(*gpu_, t);
      EXPECT_TRUE(d.ok()) << d.status().to_string();
      on_device.push_back(d.ok() ? d.value() : Tensor());
    }
    KernelRun r = run_kernel_on(*gpu, on_device, gpu_);
    if (device_outputs != nullptr) *device_outputs = r.outputs;
    for (Tensor& t : r.outputs) {
      if (t.is_null()) continue;
      EXPECT_EQ(t.device(), gpu_->name()) << "a GPU kernel's output is in GPU memory";
      auto h = to_host(*gpu_, t);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      t = h.ok() ? h.value() : Tensor();
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      auto back = to_host(*gpu_, on_device[i]);
      EXPECT_TRUE(back.ok() && back.value().equals(inputs[i])) << "the GPU kernel changed input " << i;
    }
    if (device_inputs != nullptr) *device_inputs = std::move(on_device);
    return r;
  }

  // The op of `y`: GPU against CPU, every output bit for bit.
  void check_op(const Output& y, const std::vector<Tensor>& inputs) {
    auto cpu = kernel(y, "CPU");
    ASSERT_TRUE(cpu);
    KernelRun want = run_kernel_on(*cpu, inputs, nullptr);
    KernelRun got = run_gpu(y, inputs);
    ASSERT_TRUE(want.status.ok()) << want.status.to_string();
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (std::size_t i = 0; i < want.outputs.size(); ++i) {
      ASSERT_EQ(got.outputs[i].shape(), want.outputs[i].shape()) << "output " << i;
      EXPECT_TRUE(got.outputs[i].equals(want.outputs[i])) << "output " << i;
    }
  }

  // As check_op, floating point outputs within expect_same's tolerance (a reduction's order differs).
  void check_close(const Output& y, const std::vector<Tensor>& inputs) {
    auto cpu = kernel(y, "CPU");
    ASSERT_TRUE(cpu);
    KernelRun want = run_kernel_on(*cpu, inputs, nullptr);
    KernelRun got = run_gpu(y, inputs);
    ASSERT_TRUE(want.status.ok()) << want.status.to_string();
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    tessera::testing::expect_same(got.outputs[0], want.outputs[0]);
  }

  void check_op_fails(const Output& y, const std::vector<Tensor>& inputs, const std::string& substring) {
    auto cpu = kernel(y, "CPU");
    ASSERT_TRUE(cpu);
    KernelRun want = run_kernel_on(*cpu, inputs, nullptr);
    KernelRun got = run_gpu(y, inputs);
    EXPECT_EQ(want.status.code(), ErrorCode::kInvalidArgument) << want.status.to_string();
    EXPECT_EQ(got.status.code(), want.status.code()) << got.status.to_string();
    EXPECT_EQ(got.status.message(), want.status.message());
    EXPECT_NE(got.status.message().find(substring), std::string::npos) << got.status.to_string();
  }

  CudaDevice* gpu_ = nullptr;
};

}  // namespace tessera::internal::gpu_testing
