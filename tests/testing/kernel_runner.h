// Running one kernel the way the executor runs it, outside a Session (tests/kernels_test.cc, the GPU
// suites, benchmarks/gpu): through an OpKernelContext with a private resource and cancellation
// manager and a runner that runs closures inline, waiting (bounded) for its `done`; and blocking
// copies between host memory and a device. Header-only and free of gtest (benchmarks may include
// it).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/op_kernel.h"
#include "core/resource_mgr.h"
#include "tessera/tessera.h"
#include "tests/testing/latch.h"

namespace tessera::testing {

// The result of an asynchronous copy that `start` begins (passing it the callback), waited for up
// to `limit`; DeadlineExceeded after that (the late callback is then harmless).
inline StatusOr<Tensor> wait_copy(const std::function<void(std::function<void(StatusOr<Tensor>)>)>& start,
                                  std::chrono::milliseconds limit = std::chrono::seconds(60)) {
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
  if (!latch->wait(limit)) return errors::deadline_exceeded("the copy did not complete within {} ms", limit.count());
  std::lock_guard<std::mutex> lock(*mu);
  return std::move(**result);
}

// A host tensor copied into `device`'s memory on its host-to-device stream, waited for.
inline StatusOr<Tensor> copy_to_device_now(internal::Device& device, const Tensor& host) {
  return wait_copy([&](auto done) { device.copy_to_device(host, device.host_to_device_stream(), std::move(done)); });
}

// A tensor in `device`'s memory copied to the host on its device-to-host stream, waited for.
inline StatusOr<Tensor> copy_to_host_now(internal::Device& device, const Tensor& on_device) {
  return wait_copy([&](auto done) { device.copy_to_host(on_device, device.device_to_host_stream(), std::move(done)); });
}

struct KernelRun {
  Status status;
  std::vector<Tensor> outputs;  // where the kernel left them (device memory on a device)
  bool finished_inline = false;  // `done` had been called when compute_async returned
};

// Runs `kernel` once on `inputs` (already in the memory the kernel reads) with `device` as the
// executor would (nullptr: the host), waiting up to `limit` for `done`; `resources` may be shared
// between runs (variables), else a private one. A kernel that does not finish in time aborts the
// program: its context is still in use, so there is no returning.
inline KernelRun run_kernel_once(internal::OpKernel& kernel, const std::vector<Tensor>& inputs,
                                 internal::Device* device, internal::ResourceMgr* resources = nullptr,
                                 std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  internal::ResourceMgr own_resources;
  internal::CancellationManager cancellation;
  const std::function<void(std::function<void()>)> runner = [](std::function<void()> fn) { fn(); };
  std::vector<const Tensor*> input_ptrs;
  for (const Tensor& t : inputs) input_ptrs.push_back(&t);
  internal::OpKernelContext::Params params;
  params.node = &kernel.node();
  params.inputs = input_ptrs.data();
  params.num_inputs = static_cast<int>(inputs.size());
  params.resources = resources != nullptr ? resources : &own_resources;
  params.cancellation = &cancellation;
  params.runner = &runner;
  params.device = device;
  internal::OpKernelContext ctx(params);
  Latch done;
  kernel.compute_async(ctx, [&done] { done.open(); });
  KernelRun r;
  r.finished_inline = done.is_open();
  if (!done.wait(limit)) {
    std::fprintf(stderr, "kernel %s did not finish within %lld ms\n", kernel.name().c_str(),
                 static_cast<long long>(limit.count()));
    std::abort();  // ctx is still in use by the kernel: cannot return
  }
  r.status = ctx.status();
  for (int i = 0; i < ctx.num_outputs(); ++i) r.outputs.push_back(ctx.output(i));
  return r;
}

}  // namespace tessera::testing
