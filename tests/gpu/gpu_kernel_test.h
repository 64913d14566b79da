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
#include "core/tensor_buffer.h"
#include "tessera/tessera.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"

namespace tessera::internal::gpu_testing {

// The helpers of tests/testing that the GPU kernel suites use: each suite lives in this namespace
// (in an anonymous one inside it), so that they are in scope there.
using tessera::testing::describe;
using tessera::testing::expect_same;
using tessera::testing::feed;
using tessera::testing::kAllDTypes;
using tessera::testing::kNumericDTypes;
using tessera::testing::RandomInputs;
using tessera::testing::Range;
using tessera::testing::tensor_of;
using tessera::testing::values_of;

inline constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// Random values of `dtype` and `shape`, in `floating` for a floating point dtype, else in
// `integers`: from one generator per test program, so a suite's inputs are the same every run.
inline Tensor random_tensor(DType dtype, const Shape& shape, Range floating, Range integers) {
  static RandomInputs rng;
  return rng.tensor(dtype, shape, dtype_is_floating(dtype) ? floating : integers);
}

// The launch-size edge cases of the suites' LargeAndEmpty tests, fed in one graph: `big`, a large
// float32 input (many blocks of every grid), and `empty`, a [0, 7] float32 one (nothing to launch).
struct LargeAndEmptyInputs {
  LargeAndEmptyInputs(Graph& g, Tensor large)
      : big(std::move(large)), empty(DType::Float32, Shape{0, 7}), pb(feed(g, big)), pe(feed(g, empty)) {}

  const Tensor big;
  const Tensor empty;
  const Output pb;  // big's placeholder
  const Output pe;  // empty's placeholder
};

class GpuKernelTest : public ::testing::Test {
 protected:
  void SetUp() override { TESSERA_REQUIRE_GPU(gpu_); }

  std::unique_ptr<OpKernel> kernel(const Output& y, const char* device_type) {
    auto k = OpRegistry::global().create_kernel(*y.node(), device_type);
    EXPECT_TRUE(k.ok()) << k.status().to_string();
    return k.ok() ? std::move(k).value() : nullptr;
  }

  // Device copies of host tensors.
  std::vector<Tensor> on_gpu(const std::vector<Tensor>& host) {
    std::vector<Tensor> out;
    for (const Tensor& t : host) {
      auto d = to_device(*gpu_, t);
      EXPECT_TRUE(d.ok()) << d.status().to_string();
      out.push_back(d.ok() ? d.value() : Tensor());
    }
    return out;
  }

  // `t` copied back to the host (a null or host tensor as it is).
  Tensor back(const Tensor& t) {
    if (t.is_null() || t.device() == kHostDeviceName) return t;
    auto h = to_host(*gpu_, t);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    return h.ok() ? h.value() : Tensor();
  }

  // Runs `gpu_kernel` on device copies of `inputs` (with `resources`, when given), its outputs
  // copied back, and checks that the kernel left the device inputs as they were. The device
  // inputs and outputs go to `device_inputs` and `device_outputs`, when given.
  KernelRun run_gpu(OpKernel& gpu_kernel, const std::vector<Tensor>& inputs, ResourceMgr* resources = nullptr,
                    std::vector<Tensor>* device_inputs = nullptr, std::vector<Tensor>* device_outputs = nullptr) {
    std::vector<Tensor> on_device = on_gpu(inputs);
    KernelRun r = run_kernel_on(gpu_kernel, on_device, gpu_, resources);
    if (device_outputs != nullptr) *device_outputs = r.outputs;
    for (Tensor& t : r.outputs) {
      if (t.is_null()) continue;
      EXPECT_EQ(t.device(), gpu_->name()) << "a GPU kernel's output is in GPU memory";
      t = back(t);
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_TRUE(back(on_device[i]).equals(inputs[i])) << "the GPU kernel changed input " << i;
    }
    if (device_inputs != nullptr) *device_inputs = std::move(on_device);
    return r;
  }

  // As above, with the GPU kernel of `y`.
  KernelRun run_gpu(const Output& y, const std::vector<Tensor>& inputs, std::vector<Tensor>* device_inputs = nullptr,
                    std::vector<Tensor>* device_outputs = nullptr) {
    auto gpu = kernel(y, "GPU");
    return run_gpu(*gpu, inputs, nullptr, device_inputs, device_outputs);
  }

  // Runs the CPU kernel of `y` on `inputs` (`want`) and its GPU kernel on device copies (`got`).
  void run_both(const Output& y, const std::vector<Tensor>& inputs, KernelRun& want, KernelRun& got) {
    auto cpu = kernel(y, "CPU");
    ASSERT_TRUE(cpu);
    want = run_kernel_on(*cpu, inputs, nullptr);
    got = run_gpu(y, inputs);
  }

  // As run_both, where both kernels must succeed.
  void run_both_ok(const Output& y, const std::vector<Tensor>& inputs, KernelRun& want, KernelRun& got) {
    ASSERT_NO_FATAL_FAILURE(run_both(y, inputs, want, got));
    ASSERT_TRUE(want.status.ok()) << want.status.to_string();
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
  }

  // The op of `y`: GPU against CPU, every output bit for bit.
  void check_op(const Output& y, const std::vector<Tensor>& inputs) {
    KernelRun want, got;
    ASSERT_NO_FATAL_FAILURE(run_both_ok(y, inputs, want, got));
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (std::size_t i = 0; i < want.outputs.size(); ++i) {
      ASSERT_EQ(got.outputs[i].shape(), want.outputs[i].shape()) << "output " << i;
      EXPECT_TRUE(got.outputs[i].equals(want.outputs[i])) << "output " << i;
    }
  }

  // As check_op, floating point outputs within expect_same's tolerance (a reduction's order differs).
  void check_close(const Output& y, const std::vector<Tensor>& inputs) {
    KernelRun want, got;
    ASSERT_NO_FATAL_FAILURE(run_both_ok(y, inputs, want, got));
    expect_same(got.outputs[0], want.outputs[0]);
  }

  // Every output of `y`'s op within expect_same's tolerance (`f32_tolerance` for float32) of the
  // CPU kernel's.
  void check_outputs_close(const Output& y, const std::vector<Tensor>& inputs, double f32_tolerance) {
    KernelRun want, got;
    ASSERT_NO_FATAL_FAILURE(run_both_ok(y, inputs, want, got));
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (std::size_t i = 0; i < want.outputs.size(); ++i) {
      SCOPED_TRACE("output " + std::to_string(i));
      expect_same(got.outputs[i], want.outputs[i], f32_tolerance);
    }
  }

  // Both kernels fail alike: same code, same message (which names the op).
  void check_op_fails(const Output& y, const std::vector<Tensor>& inputs, const std::string& substring) {
    KernelRun want, got;
    ASSERT_NO_FATAL_FAILURE(run_both(y, inputs, want, got));
    EXPECT_EQ(want.status.code(), ErrorCode::kInvalidArgument) << want.status.to_string();
    EXPECT_EQ(got.status.code(), want.status.code()) << got.status.to_string();
    EXPECT_EQ(got.status.message(), want.status.message());
    EXPECT_NE(got.status.message().find(substring), std::string::npos) << got.status.to_string();
  }

  CudaDevice* gpu_ = nullptr;
};

}  // namespace tessera::internal::gpu_testing
