// Workload gpu, impl tessera: the CUDA device's copy path (pinned staging, pieces pipelined with
// the host-side memcpy) and GPU kernels run as the executor runs them (OpKernelContext, async, done
// through the completion thread). See gpu_bench.h for the workloads.
#include <tessera/tessera.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/bench_common.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "device/cuda/cuda_device.h"
#include "gpu/gpu_bench.h"

namespace {

using namespace tessera;
using namespace tessera::internal;

// The first GPU, in a registry of this program's own (leaked: no teardown at static exit).
CudaDevice* the_gpu() {
  static CudaDevice* device = []() -> CudaDevice* {
    auto* registry = new DeviceRegistry();
    auto n = register_cuda_devices(*registry);
    if (!n.ok() || n.value() == 0) return nullptr;
    return static_cast<CudaDevice*>(registry->devices().front());
  }();
  return device;
}

class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

StatusOr<Tensor> to_device(CudaDevice& gpu, const Tensor& host) {
  Latch latch;
  std::optional<StatusOr<Tensor>> result;
  gpu.copy_to_device(host, gpu.host_to_device_stream(), [&](StatusOr<Tensor> r) {
    result.emplace(std::move(r));
    latch.open();
  });
  latch.wait();
  return std::move(*result);
}

StatusOr<Tensor> to_host(CudaDevice& gpu, const Tensor& on_device) {
  Latch latch;
  std::optional<StatusOr<Tensor>> result;
  gpu.copy_to_host(on_device, gpu.device_to_host_stream(), [&](StatusOr<Tensor> r) {
    result.emplace(std::move(r));
    latch.open();
  });
  latch.wait();
  return std::move(*result);
}

// One run of a kernel on the GPU, as the executor runs it, waited for; its output 0.
StatusOr<Tensor> run_kernel(OpKernel& kernel, CudaDevice& gpu, const std::vector<Tensor>& inputs) {
  ResourceMgr resources;
  CancellationManager cancellation;
  static const std::function<void(std::function<void()>)> runner = [](std::function<void()> fn) { fn(); };
  std::vector<const Tensor*> input_ptrs;
  for (const Tensor& t : inputs) input_ptrs.push_back(&t);
  OpKernelContext::Params params;
  params.node = &kernel.node();
  params.inputs = input_ptrs.data();
  params.num_inputs = static_cast<int>(inputs.size());
  params.resources = &resources;
  params.cancellation = &cancellation;
  params.runner = &runner;
  params.device = &gpu;
  OpKernelContext ctx(params);
  Latch done;
  kernel.compute_async(ctx, [&] { done.open(); });
  done.wait();
  if (!ctx.status().ok()) return ctx.status();
  return ctx.output(0);
}

Tensor filled(int64_t n, float value) {
  Tensor t(DType::Float32, Shape{n});
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return t;
}

void BM_gpu_h2d_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  CudaDevice* gpu = the_gpu();
  if (gpu == nullptr) return state.SkipWithError("no usable GPU");
  const auto n = static_cast<int64_t>(gpu_bench::kCopyBytes / sizeof(float));
  Tensor host(DType::Float32, Shape{n});
  float* p = host.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000003);
  auto on_gpu = to_device(*gpu, host);
  auto back = on_gpu.ok() ? to_host(*gpu, on_gpu.value()) : on_gpu;
  if (!tessera_bench::check(state, back.ok() && back.value().equals(host), "256 MiB round trip")) return;
  for (auto _ : state) {
    auto t = to_device(*gpu, host);
    if (!t.ok()) return state.SkipWithError(t.status().to_string().c_str());
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(gpu_bench::kCopyBytes));
}

void BM_gpu_add_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  CudaDevice* gpu = the_gpu();
  if (gpu == nullptr) return state.SkipWithError("no usable GPU");
  const int64_t n = gpu_bench::kAddElements;
  Graph g;
  Output y = ops::add(ops::placeholder(g, DType::Float32, Shape{n}), ops::placeholder(g, DType::Float32, Shape{n}));
  auto kernel = OpRegistry::global().create_kernel(*y.node(), "GPU");
  auto a = to_device(*gpu, filled(n, 1.0f));
  auto b = to_device(*gpu, filled(n, 2.0f));
  if (!kernel.ok() || !a.ok() || !b.ok()) return state.SkipWithError("setting up the add failed");
  const std::vector<Tensor> inputs = {a.value(), b.value()};
  auto c = run_kernel(*kernel.value(), *gpu, inputs);
  auto c_host = c.ok() ? to_host(*gpu, c.value()) : c;
  if (!tessera_bench::check(state, c_host.ok() && c_host.value().equals(filled(n, 3.0f)), "1 + 2 == 3")) return;
  for (auto _ : state) {
    auto out = run_kernel(*kernel.value(), *gpu, inputs);
    if (!out.ok()) return state.SkipWithError(out.status().to_string().c_str());
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}

void BM_gpu_matmul_4096(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  CudaDevice* gpu = the_gpu();
  if (gpu == nullptr) return state.SkipWithError("no usable GPU");
  constexpr int64_t kN = gpu_bench::kMatMulN;
  Tensor a_host(DType::Float32, Shape{kN, kN});
  Tensor b_host(DType::Float32, Shape{kN, kN});
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      a_host.mutable_data<float>()[i * kN + j] = gpu_bench::matmul_a(i, j);
      b_host.mutable_data<float>()[i * kN + j] = gpu_bench::matmul_b(i, j);
    }
  }
  Graph g;
  Output y = ops::matmul(ops::placeholder(g, DType::Float32, Shape{kN, kN}),
                         ops::placeholder(g, DType::Float32, Shape{kN, kN}));
  auto kernel = OpRegistry::global().create_kernel(*y.node(), "GPU");
  auto a = to_device(*gpu, a_host);
  auto b = to_device(*gpu, b_host);
  if (!kernel.ok() || !a.ok() || !b.ok()) return state.SkipWithError("setting up the matmul failed");
  const std::vector<Tensor> inputs = {a.value(), b.value()};
  auto c = run_kernel(*kernel.value(), *gpu, inputs);
  auto c_host = c.ok() ? to_host(*gpu, c.value()) : c;
  bool ok = c_host.ok();
  for (int64_t probe = 0; ok && probe < 16; ++probe) {
    const int64_t i = (probe * 977) % kN;
    const int64_t j = (probe * 1231 + 5) % kN;
    ok = c_host.value().data<float>()[i * kN + j] == gpu_bench::matmul_c(i, j);
  }
  if (!tessera_bench::check(state, ok, "C = A B at 16 probes")) return;
  for (auto _ : state) {
    auto out = run_kernel(*kernel.value(), *gpu, inputs);
    if (!out.ok()) return state.SkipWithError(out.status().to_string().c_str());
  }
  state.counters["flops"] =
      benchmark::Counter(gpu_bench::kMatMulFlops, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_gpu_h2d_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_add_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
