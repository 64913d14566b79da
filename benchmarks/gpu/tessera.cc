// Workload gpu, impl tessera: the CUDA device's copy path (a large host tensor's block pinned and
// copied directly, Note [Pinned host blocks]; smaller ones through pinned staging, pieces pipelined
// with the host-side memcpy) and GPU kernels run as the executor runs them (OpKernelContext, async, done
// through the completion thread; tests/testing/kernel_runner.h, as the GPU suites run them). See
// gpu_bench.h for the workloads.
#include <tessera/tessera.h>

#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/bench_common.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "device/cuda/cuda_device.h"
#include "gpu/gpu_bench.h"
#include "tests/testing/kernel_runner.h"

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

StatusOr<Tensor> to_device(CudaDevice& gpu, const Tensor& host) {
  return tessera::testing::copy_to_device_now(gpu, host);
}

StatusOr<Tensor> to_host(CudaDevice& gpu, const Tensor& on_device) {
  return tessera::testing::copy_to_host_now(gpu, on_device);
}

// One run of a kernel on the GPU, as the executor runs it, waited for; its output 0.
StatusOr<Tensor> run_kernel(OpKernel& kernel, CudaDevice& gpu, const std::vector<Tensor>& inputs) {
  tessera::testing::KernelRun r = tessera::testing::run_kernel_once(kernel, inputs, &gpu);
  if (!r.status.ok()) return r.status;
  return r.outputs.at(0);
}

Tensor filled(int64_t n, float value) {
  Tensor t(DType::Float32, Shape{n});
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return t;
}

// 256 MiB of a pattern on the host and its copy on the GPU, checked by a round trip; false (the
// benchmark skipped) when that fails.
bool copy_pair(benchmark::State& state, CudaDevice& gpu, Tensor* host, Tensor* on_gpu) {
  const auto n = static_cast<int64_t>(gpu_bench::kCopyBytes / sizeof(float));
  *host = Tensor(DType::Float32, Shape{n});
  float* p = host->mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000003);
  auto up = to_device(gpu, *host);
  auto back = up.ok() ? to_host(gpu, up.value()) : up;
  if (!tessera_bench::check(state, back.ok() && back.value().equals(*host), "256 MiB round trip")) return false;
  *on_gpu = std::move(up).value();
  return true;
}

// 256 MiB through the device's copy path, host to device (a feed's copy) or back to the host (a
// fetch's copy: a fresh host tensor).
void copy_256MiB(benchmark::State& state, const char* impl, bool to_gpu) {
  tessera_bench::set_impl(state, impl);
  CudaDevice* gpu = the_gpu();
  if (gpu == nullptr) return state.SkipWithError("no usable GPU");
  Tensor host, on_gpu;
  if (!copy_pair(state, *gpu, &host, &on_gpu)) return;
  for (auto _ : state) {
    auto t = to_gpu ? to_device(*gpu, host) : to_host(*gpu, on_gpu);
    if (!t.ok()) return state.SkipWithError(t.status().to_string().c_str());
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(gpu_bench::kCopyBytes));
}

void BM_gpu_h2d_256MiB(benchmark::State& state, const char* impl) { copy_256MiB(state, impl, true); }
void BM_gpu_d2h_256MiB(benchmark::State& state, const char* impl) { copy_256MiB(state, impl, false); }

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

// The copy path's knobs, swept (not part of the suite's table): 256 MiB host to device (direction
// 0) or back (1) through a device object of this program's own with `staging_threads` helpers and
// pieces of `piece_mib` MiB. Picks CudaDeviceOptions' defaults; tells how far a pageable copy
// gets from the copy engine's pinned peak.
void BM_gpu_copy_sweep(benchmark::State& state) {
  if (!gpu_bench::require_gpu(state)) return;
  const bool to_device_direction = state.range(0) == 0;
  CudaDeviceOptions options;
  options.staging_threads = static_cast<int>(state.range(1));
  options.copy_piece_bytes = static_cast<std::size_t>(state.range(2)) << 20;
  auto created = CudaDevice::create(0, options);
  if (!created.ok()) return state.SkipWithError(created.status().to_string().c_str());
  CudaDevice& gpu = *created.value();
  Tensor host, on_gpu;
  if (!copy_pair(state, gpu, &host, &on_gpu)) return;
  for (auto _ : state) {
    auto t = to_device_direction ? to_device(gpu, host) : to_host(gpu, on_gpu);
    if (!t.ok()) return state.SkipWithError(t.status().to_string().c_str());
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(gpu_bench::kCopyBytes));
  state.SetLabel(to_device_direction ? "h2d" : "d2h");
}

// The process's first GPU (the device factory's, as a program's sessions get it), "" when none.
std::string first_gpu() {
  for (const DeviceInfo& d : list_devices()) {
    if (d.type == "GPU") return d.name;
  }
  return "";
}

// Names the benchmark's implementation `impl` and returns the GPU its session runs on: "" (the
// benchmark skipped, saying why) when there is none.
std::string start_on_gpu(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return "";
  const std::string gpu = first_gpu();
  if (gpu.empty()) state.SkipWithError("no GPU among the process's devices");
  return gpu;
}

// The chain as a session runs it (impl tessera: replayed as a CUDA graph; tessera_eager: every op
// launched on its own): every op placed on the process's first GPU (the device factory's,
// as a program's sessions get it), the input fed from and the output fetched to the host.
void BM_gpu_chain_100(benchmark::State& state, const char* impl) {
  const std::string gpu = start_on_gpu(state, impl);
  if (gpu.empty()) return;
  constexpr int64_t kN = gpu_bench::kChainWidth;
  Graph g;
  auto x0 = ops::placeholder(g, DType::Float32, Shape{kN}, "x0");
  Output x = x0;
  {
    auto scope = g.device(gpu);
    auto one = ops::constant(g, filled(kN, 1.0f), "one");
    for (int i = 0; i < gpu_bench::kChainOps; ++i) x = ops::add(x, one);
  }
  SessionOptions options;
  options.cuda_graphs = std::string(impl) != "tessera_eager";  // tessera: replayed as a CUDA graph
  Session s(g, options);
  Tensor in(DType::Float32, Shape{kN});
  for (int64_t i = 0; i < kN; ++i) in.mutable_data<float>()[i] = static_cast<float>(i);
  const Tensor out = s.run({x}, {{x0, in}}).front();
  if (!tessera_bench::check(state, out.data<float>()[kN - 1] == static_cast<float>(kN - 1 + gpu_bench::kChainOps),
                            "x0 + 100")) {
    return;
  }
  for (auto _ : state) {
    auto t = s.run({x}, {{x0, in}});
    benchmark::DoNotOptimize(t);
  }
  tessera_bench::report_per_op(state, gpu_bench::kChainOps);
}

Tensor matrix_of(int64_t rows, int64_t cols, const std::function<float(int64_t, int64_t)>& f) {
  Tensor t(DType::Float32, Shape{rows, cols});
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = f(i, j);
  }
  return t;
}

// The MLP step as a session runs it: every op on the GPU, the sum fetched to the host.
void BM_gpu_mlp_step(benchmark::State& state, const char* impl) {
  const std::string gpu = start_on_gpu(state, impl);
  if (gpu.empty()) return;
  constexpr int64_t kB = gpu_bench::kMlpBatch;
  constexpr int64_t kW = gpu_bench::kMlpWidth;
  Graph g;
  Output sum;
  {
    auto scope = g.device(gpu);
    Output h = ops::constant(g, matrix_of(kB, kW, gpu_bench::mlp_x), "x");
    for (int layer = 0; layer < gpu_bench::kMlpLayers; ++layer) {
      auto w = ops::constant(g, matrix_of(kW, kW, [layer](int64_t k, int64_t j) { return gpu_bench::mlp_w(layer, k, j); }));
      Tensor bias(DType::Float32, Shape{kW});
      for (int64_t j = 0; j < kW; ++j) bias.mutable_data<float>()[j] = gpu_bench::mlp_bias(layer, j);
      h = ops::add(ops::matmul(h, w), ops::constant(g, bias));
      if (layer + 1 < gpu_bench::kMlpLayers) h = ops::relu(h);
    }
    sum = ops::reduce_sum(h, {}, false, "sum");
  }
  Session s(g);
  const double got = s.run(sum).scalar<float>();
  if (!tessera_bench::check(state, gpu_bench::mlp_sum_ok(got, gpu_bench::mlp_reference_sum()), "the MLP's sum")) {
    return;
  }
  for (auto _ : state) {
    auto t = s.run(sum);
    benchmark::DoNotOptimize(t);
  }
}

// The sum of 256 MiB on the GPU (a constant, copied there once), fetched to the host.
void BM_gpu_reduce_sum_256MiB(benchmark::State& state, const char* impl) {
  const std::string gpu = start_on_gpu(state, impl);
  if (gpu.empty()) return;
  Tensor x(DType::Float32, Shape{gpu_bench::kReduceElements});
  float* p = x.mutable_data<float>();
  for (int64_t i = 0; i < gpu_bench::kReduceElements; ++i) p[i] = gpu_bench::reduce_x(i);
  Graph g;
  Output sum;
  {
    auto scope = g.device(gpu);
    sum = ops::reduce_sum(ops::constant(g, x, "x"), {}, false, "sum");
  }
  Session s(g);
  if (!tessera_bench::check(state, s.run(sum).scalar<float>() == gpu_bench::kReduceSum, "the sum")) return;
  for (auto _ : state) {
    auto t = s.run(sum);
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * gpu_bench::kReduceElements * static_cast<int64_t>(sizeof(float)));
}

// The 4096 x 4096 MatMul in element type T as a session runs it: the inputs constants on the GPU
// (copied there once), the MatMul run as a target (the step waits for the GPU, nothing fetched).
// float with allow_tf32 (TF32 tensor cores), or a 16-bit float (T: float16_t or bfloat16_t, float32
// accumulation). The inputs are small integers, exact in every type; each probed result is the
// exact sum rounded once to T, bit for bit.
template <class T>
void session_matmul_4096(benchmark::State& state, const char* impl) {
  const std::string gpu = start_on_gpu(state, impl);
  if (gpu.empty()) return;
  constexpr bool kFloat = std::is_same_v<T, float>;
  constexpr int64_t kN = gpu_bench::kMatMulN;
  auto matrix = [](const std::function<float(int64_t, int64_t)>& f) {
    Tensor t(dtype_of<T>, Shape{kN, kN});
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < kN; ++i) {
      for (int64_t j = 0; j < kN; ++j) p[i * kN + j] = T(f(i, j));
    }
    return t;
  };
  Graph g;
  Output c;
  {
    auto scope = g.device(gpu);
    c = ops::matmul(ops::constant(g, matrix(gpu_bench::matmul_a)), ops::constant(g, matrix(gpu_bench::matmul_b)),
                    false, false, "c");
  }
  SessionOptions options;
  options.allow_tf32 = kFloat;
  Session s(g, options);
  const Tensor out = s.run(c);
  bool ok = out.dtype() == dtype_of<T>;
  for (int64_t probe = 0; ok && probe < 16; ++probe) {
    const int64_t i = (probe * 977) % kN;
    const int64_t j = (probe * 1231 + 5) % kN;
    const T got = out.data<T>()[i * kN + j];
    const T want = T(gpu_bench::matmul_c(i, j));
    if constexpr (kFloat) {
      ok = got == want;
    } else {
      ok = got.bits == want.bits;
    }
  }
  if (!tessera_bench::check(state, ok, kFloat ? "C = A B at 16 probes" : "C = A B rounded once, at 16 probes")) return;
  for (auto _ : state) s.run(c.op());
  state.counters["flops"] =
      benchmark::Counter(gpu_bench::kMatMulFlops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_gpu_matmul_4096_tf32(benchmark::State& state, const char* impl) { session_matmul_4096<float>(state, impl); }
void BM_gpu_matmul_4096_fp16(benchmark::State& state, const char* impl) {
  session_matmul_4096<internal::float16_t>(state, impl);
}
void BM_gpu_matmul_4096_bf16(benchmark::State& state, const char* impl) {
  session_matmul_4096<internal::bfloat16_t>(state, impl);
}

// Data parallelism in one process, as TF1 users wrote it: a forward step of two towers (three
// 2048-wide MatMul + ReLU layers over half of a 4096-row batch each, the halves constants on their
// GPU), the towers' sums added on the first GPU and fetched. impl tessera: tower i on GPU i;
// one_gpu: both towers on GPU 0. Skipped with fewer than two GPUs.
void BM_gpu_two_tower(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  std::vector<std::string> gpus;
  for (const DeviceInfo& d : list_devices()) {
    if (d.type == "GPU") gpus.push_back(d.name);
  }
  if (gpus.size() < 2) return state.SkipWithError("fewer than two GPUs");
  const bool spread = std::string(impl) == "tessera";
  constexpr int64_t kRows = 2048, kWidth = 2048;
  auto small = [](int64_t i, int64_t j) { return static_cast<float>((i * 7 + j * 3) % 5 - 2) / 64.0f; };
  Graph g;
  std::vector<Output> sums;
  for (int tower = 0; tower < 2; ++tower) {
    auto scope = g.device(gpus[spread ? static_cast<std::size_t>(tower) : 0]);
    Output h = ops::constant(g, matrix_of(kRows, kWidth, small));
    for (int layer = 0; layer < 3; ++layer) {
      h = ops::relu(ops::matmul(h, ops::constant(g, matrix_of(kWidth, kWidth, small))));
    }
    sums.push_back(ops::reduce_sum(h));
  }
  Output total;
  {
    auto scope = g.device(gpus[0]);
    total = ops::add(sums[0], sums[1]);
  }
  Session s(g);
  const float first = s.run(total).scalar<float>();
  if (!tessera_bench::check(state, std::isfinite(first) && s.run(total).scalar<float>() == first,
                            "the same finite sum on every step")) {
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(s.run(total));
}

}  // namespace

BENCHMARK_CAPTURE(BM_gpu_two_tower, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_two_tower, one_gpu, "one_gpu")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_fp16, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_bf16, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_tf32, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_mlp_step, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gpu_reduce_sum_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gpu_copy_sweep)
    ->ArgNames({"d2h", "threads", "piece_mib"})
    ->ArgsProduct({{0}, {0, 4, 8, 12}, {1, 2, 4}})
    ->ArgsProduct({{1}, {0, 4, 8}, {2, 8}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_chain_100, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gpu_chain_100, tessera_eager, "tessera_eager")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gpu_d2h_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_h2d_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_add_256MiB, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096, tessera, "tessera")->UseRealTime()->Unit(benchmark::kMillisecond);
