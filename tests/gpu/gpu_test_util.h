// Helpers of the GPU suites (label `gpu`, built only with TESSERA_WITH_CUDA): the GPUs of a
// private registry (every test skips itself when there is none), blocking copies, and a kernel
// run the way the executor runs one, on a device, waiting (bounded) for its completion.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/op_kernel.h"
#include "device/cuda/cuda_device.h"

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

// A one-shot latch with a bounded wait, for callbacks that arrive on other threads.
class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return open_; });
  }
  bool is_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// The result of an asynchronous copy, waited for.
inline StatusOr<Tensor> wait_copy(const std::function<void(std::function<void(StatusOr<Tensor>)>)>& start) {
  auto latch = std::make_shared<Latch>();
  auto result = std::make_shared<std::optional<StatusOr<Tensor>>>();
  auto mu = std::make_shared<std::mutex>();
  start([latch, result, mu](StatusOr<Tensor> r) {
    {
      std::lock_guard<std::mutex> lock(*mu);
      result->emplace(std::move(r));
    }
    latch->open();
  });
  if (!latch->wait()) return errors::deadline_exceeded("the copy did not complete within a minute");
  std::lock_guard<std::mutex> lock(*mu);
  return std::move(**result);
}

inline StatusOr<Tensor> to_device(CudaDevice& gpu, const Tensor& host) {
  return wait_copy([&](auto done) { gpu.copy_to_device(host, gpu.host_to_device_stream(), std::move(done)); });
}

inline StatusOr<Tensor> to_host(CudaDevice& gpu, const Tensor& on_device) {
  return wait_copy([&](auto done) { gpu.copy_to_host(on_device, gpu.device_to_host_stream(), std::move(done)); });
}

struct KernelRun {
  Status status;
  std::vector<Tensor> outputs;  // where the kernel left them (device memory on a GPU)
};

// Runs `kernel` once on `inputs` with `device` as the executor would (device nullptr: the host),
// waiting up to a minute for `done`. `resources` may be shared between runs (variables).
inline KernelRun run_kernel_on(OpKernel& kernel, const std::vector<Tensor>& inputs, Device* device,
                               ResourceMgr* resources = nullptr) {
  ResourceMgr own_resources;
  CancellationManager cancellation;
  const std::function<void(std::function<void()>)> runner = [](std::function<void()> fn) { fn(); };
  std::vector<const Tensor*> input_ptrs;
  for (const Tensor& t : inputs) input_ptrs.push_back(&t);
  OpKernelContext::Params params;
  params.node = &kernel.node();
  params.inputs = input_ptrs.data();
  params.num_inputs = static_cast<int>(inputs.size());
  params.resources = resources != nullptr ? resources : &own_resources;
  params.cancellation = &cancellation;
  params.runner = &runner;
  params.device = device;
  OpKernelContext ctx(params);
  Latch done;
  kernel.compute_async(ctx, [&done] { done.open(); });
  if (!done.wait()) {
    ADD_FAILURE() << "kernel " << kernel.name() << " did not finish within a minute";
    std::abort();  // ctx is still in use by the kernel: cannot return
  }
  KernelRun r;
  r.status = ctx.status();
  for (int i = 0; i < ctx.num_outputs(); ++i) r.outputs.push_back(ctx.output(i));
  return r;
}

}  // namespace tessera::internal::gpu_testing
