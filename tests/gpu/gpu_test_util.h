// Helpers of the GPU suites (label `gpu`, built only with TESSERA_WITH_CUDA): the GPUs of a
// private registry (every test skips itself when there is none), blocking copies, and a kernel
// run the way the executor runs one, on a device, waiting (bounded) for its completion.
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/op_kernel.h"
#include "device/cuda/cuda_device.h"
#include "tests/testing/kernel_runner.h"

namespace tessera::internal::gpu_testing {

// The GPUs, registered once per test program in a registry of its own (never destroyed: device
// teardown at static exit would race the CUDA runtime's own).
inline DeviceRegistry& gpu_registry() {
  static DeviceRegistry* registry = [] {
    auto* r = new DeviceRegistry();
    auto n = register_cuda_devices(*r);
    if (!n.ok()) ADD_FAILURE() << "register_cuda_devices: " << n.status().to_string();
    return r;
  }();
  return *registry;
}

inline CudaDevice* first_gpu() {
  auto found = gpu_registry().find_all("/device:GPU:*");
  if (!found.ok() || found.value().empty()) return nullptr;
  return static_cast<CudaDevice*>(found.value().front());
}

// Use in SetUp() (or at the top of a test): skips the test when no GPU is registered.
#define TESSERA_REQUIRE_GPU(gpu_var)                                        \
  gpu_var = ::tessera::internal::gpu_testing::first_gpu();                  \
  if (gpu_var == nullptr) GTEST_SKIP() << "no usable GPU: nothing to test"

// The latch, blocking copies and kernel runs of tests/testing/kernel_runner.h, for the GPU.
using tessera::testing::KernelRun;
using tessera::testing::Latch;
using tessera::testing::wait_copy;

inline StatusOr<Tensor> to_device(CudaDevice& gpu, const Tensor& host) {
  return tessera::testing::copy_to_device_now(gpu, host);
}

inline StatusOr<Tensor> to_host(CudaDevice& gpu, const Tensor& on_device) {
  return tessera::testing::copy_to_host_now(gpu, on_device);
}

// Runs `kernel` once on `inputs` with `device` as the executor would (device nullptr: the host),
// waiting up to a minute for `done`. `resources` may be shared between runs (variables).
inline KernelRun run_kernel_on(OpKernel& kernel, const std::vector<Tensor>& inputs, Device* device,
                               ResourceMgr* resources = nullptr) {
  return tessera::testing::run_kernel_once(kernel, inputs, device, resources);
}

}  // namespace tessera::internal::gpu_testing
