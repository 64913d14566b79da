// Workload gpu, the baselines: raw CUDA runtime and cuBLAS calls on one stream, waited for with
// cudaStreamSynchronize. See gpu_bench.h for the workloads.
//
//   BM_gpu_h2d_256MiB/raw_pinned       cudaMemcpyAsync from page-locked memory (the copy engine's peak)
//   BM_gpu_h2d_256MiB/raw_pageable     cudaMemcpyAsync from ordinary memory (what a naive copy gets)
//   BM_gpu_d2h_256MiB/raw_pinned       cudaMemcpyAsync into page-locked memory (the peak back)
//   BM_gpu_add_256MiB/raw_memcpy_d2d   cudaMemcpyAsync of 256 MiB within the GPU: the bandwidth an
//                                      elementwise op can hope for (bytes read plus written)
//   BM_gpu_matmul_4096/raw_cublas      cublasSgemm (default math mode, as tessera's MatMul)
//   BM_gpu_matmul_4096_tf32/raw_cublas cublasSgemm in CUBLAS_TF32_TENSOR_OP_MATH mode
//   BM_gpu_matmul_4096_fp16/raw_cublas cublasGemmEx on float16 (bfloat16 for _bf16) inputs and
//   BM_gpu_matmul_4096_bf16/raw_cublas output, CUBLAS_COMPUTE_32F (as tessera's MatMul of them)
//   BM_gpu_chain_100/raw_cuda          the input up, 100 cublasSaxpy (x += 1 * ones) back to back on
//                                      one stream, the result down, one cudaStreamSynchronize
//   BM_gpu_mlp_step/raw_cuda           per layer cublasSgemm, a hand-written bias add and ReLU
//                                      (the ops tessera runs, unfused), then a hand-written sum,
//                                      4 bytes down, one cudaStreamSynchronize
//   BM_gpu_reduce_sum_256MiB/raw_cuda  a hand-written two-pass sum (float4 loads), 4 bytes down
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common/bench_common.h"
#include "core/half.h"
#include "gpu/gpu_bench.h"
#include "gpu/raw_kernels.h"

namespace gpu_bench {

bool require_gpu(benchmark::State& state) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    state.SkipWithError("no usable GPU");
    return false;
  }
  return cudaSetDevice(0) == cudaSuccess;
}

}  // namespace gpu_bench

namespace {

// Skips the benchmark on a CUDA error; true when `e` is cudaSuccess.
bool ok(benchmark::State& state, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  const std::string message = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  state.SkipWithError(message.c_str());
  return false;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) (void)cudaFree(p);
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~Stream() {
    if (s != nullptr) (void)cudaStreamDestroy(s);
  }
};

void h2d(benchmark::State& state, bool pinned) {
  const std::size_t bytes = gpu_bench::kCopyBytes;
  void* host = nullptr;
  if (pinned) {
    if (!ok(state, cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc")) return;
  } else {
    host = std::aligned_alloc(4096, bytes);
  }
  std::memset(host, 0x5a, bytes);
  {
    DeviceBuffer dev(bytes);
    Stream stream;
    std::vector<unsigned char> check(4096);
    if (dev.p != nullptr && ok(state, cudaMemcpyAsync(dev.p, host, bytes, cudaMemcpyHostToDevice, stream.s), "copy") &&
        ok(state, cudaStreamSynchronize(stream.s), "sync") &&
        ok(state, cudaMemcpy(check.data(), static_cast<char*>(dev.p) + bytes - 4096, 4096, cudaMemcpyDeviceToHost),
           "check") &&
        tessera_bench::check(state, check[0] == 0x5a && check[4095] == 0x5a, "bytes arrived")) {
      for (auto _ : state) {
        (void)cudaMemcpyAsync(dev.p, host, bytes, cudaMemcpyHostToDevice, stream.s);
        if (!ok(state, cudaStreamSynchronize(stream.s), "cudaMemcpyAsync")) break;
      }
      state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
    } else if (dev.p == nullptr) {
      state.SkipWithError("cudaMalloc failed");
    }
  }
  if (pinned) {
    (void)cudaFreeHost(host);
  } else {
    std::free(host);
  }
}

void BM_gpu_h2d_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  h2d(state, std::string(impl) == "raw_pinned");
}

// 256 MiB from GPU memory into page-locked host memory: the copy engine's device-to-host peak.
void BM_gpu_d2h_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  const std::size_t bytes = gpu_bench::kCopyBytes;
  void* host = nullptr;
  if (!ok(state, cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc")) return;
  {
    DeviceBuffer dev(bytes);
    Stream stream;
    if (dev.p == nullptr) {
      state.SkipWithError("cudaMalloc failed");
    } else if (ok(state, cudaMemset(dev.p, 0x5a, bytes), "cudaMemset") &&
               ok(state, cudaMemcpyAsync(host, dev.p, bytes, cudaMemcpyDeviceToHost, stream.s), "copy") &&
               ok(state, cudaStreamSynchronize(stream.s), "sync") &&
               tessera_bench::check(state,
                                    static_cast<unsigned char*>(host)[0] == 0x5a &&
                                        static_cast<unsigned char*>(host)[bytes - 1] == 0x5a,
                                    "bytes arrived")) {
      for (auto _ : state) {
        (void)cudaMemcpyAsync(host, dev.p, bytes, cudaMemcpyDeviceToHost, stream.s);
        if (!ok(state, cudaStreamSynchronize(stream.s), "cudaMemcpyAsync")) break;
      }
      state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
    }
  }
  (void)cudaFreeHost(host);
}

void BM_gpu_add_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  const std::size_t bytes = gpu_bench::kCopyBytes;
  DeviceBuffer src(bytes);
  DeviceBuffer dst(bytes);
  Stream stream;
  if (src.p == nullptr || dst.p == nullptr) return state.SkipWithError("cudaMalloc failed");
  if (!ok(state, cudaMemset(src.p, 0x11, bytes), "cudaMemset")) return;
  if (!ok(state, cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream.s), "copy") ||
      !ok(state, cudaStreamSynchronize(stream.s), "sync")) {
    return;
  }
  unsigned char last = 0;
  if (!ok(state, cudaMemcpy(&last, static_cast<char*>(dst.p) + bytes - 1, 1, cudaMemcpyDeviceToHost), "check")) return;
  if (!tessera_bench::check(state, last == 0x11, "bytes copied")) return;
  for (auto _ : state) {
    (void)cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream.s);
    if (!ok(state, cudaStreamSynchronize(stream.s), "cudaMemcpyAsync")) break;
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));  // read + written
}

// The 4096 x 4096 MatMul in element type T on cuBLAS: float (cublasSgemm in `mode`: the default,
// full float32, or TF32 tensor ops) or a 16-bit float (T: tessera's float16_t or bfloat16_t,
// bit-identical to CUDA's; cublasGemmEx, float32 compute). The inputs are small integers, exact in
// every type; each probed result is the exact float32 sum rounded once to T, checked bit for bit.
template <class T>
void matmul_4096(benchmark::State& state, const char* impl, cublasMath_t mode = CUBLAS_DEFAULT_MATH) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  constexpr bool kFloat = std::is_same_v<T, float>;
  constexpr int kN = gpu_bench::kMatMulN;
  const std::size_t bytes = std::size_t{kN} * kN * sizeof(T);
  std::vector<T> a(std::size_t{kN} * kN);
  std::vector<T> b(std::size_t{kN} * kN);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      a[static_cast<std::size_t>(i * kN + j)] = T(gpu_bench::matmul_a(i, j));
      b[static_cast<std::size_t>(i * kN + j)] = T(gpu_bench::matmul_b(i, j));
    }
  }
  DeviceBuffer da(bytes);
  DeviceBuffer db(bytes);
  DeviceBuffer dc(bytes);
  Stream stream;
  if (da.p == nullptr || db.p == nullptr || dc.p == nullptr) return state.SkipWithError("cudaMalloc failed");
  if (!ok(state, cudaMemcpy(da.p, a.data(), bytes, cudaMemcpyHostToDevice), "upload") ||
      !ok(state, cudaMemcpy(db.p, b.data(), bytes, cudaMemcpyHostToDevice), "upload")) {
    return;
  }
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return state.SkipWithError("cublasCreate failed");
  (void)cublasSetStream(handle, stream.s);
  (void)cublasSetMathMode(handle, mode);
  const float one = 1.0f;
  const float zero = 0.0f;
  // Row-major C = A B as column-major C^T = B^T A^T.
  auto gemm = [&] {
    if constexpr (kFloat) {
      return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, static_cast<const float*>(db.p), kN,
                         static_cast<const float*>(da.p), kN, &zero, static_cast<float*>(dc.p), kN);
    } else {
      constexpr cudaDataType_t type = std::is_same_v<T, tessera::internal::float16_t> ? CUDA_R_16F : CUDA_R_16BF;
      return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, db.p, type, kN, da.p, type, kN, &zero,
                          dc.p, type, kN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
  };
  bool checked = gemm() == CUBLAS_STATUS_SUCCESS && cudaStreamSynchronize(stream.s) == cudaSuccess;
  std::vector<T> c(std::size_t{kN} * kN);
  checked = checked && cudaMemcpy(c.data(), dc.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  for (int64_t probe = 0; checked && probe < 16; ++probe) {
    const int64_t i = (probe * 977) % kN;
    const int64_t j = (probe * 1231 + 5) % kN;
    const T got = c[static_cast<std::size_t>(i * kN + j)];
    const T want = T(gpu_bench::matmul_c(i, j));
    if constexpr (kFloat) {
      checked = got == want;
    } else {
      checked = got.bits == want.bits;
    }
  }
  if (tessera_bench::check(state, checked, kFloat ? "C = A B at 16 probes" : "C = A B rounded once, at 16 probes")) {
    for (auto _ : state) {
      (void)gemm();
      if (!ok(state, cudaStreamSynchronize(stream.s), kFloat ? "cublasSgemm" : "cublasGemmEx")) break;
    }
    state.counters["flops"] =
        benchmark::Counter(gpu_bench::kMatMulFlops, benchmark::Counter::kIsIterationInvariantRate);
  }
  (void)cublasDestroy(handle);
}

void BM_gpu_matmul_4096(benchmark::State& state, const char* impl) { matmul_4096<float>(state, impl); }
void BM_gpu_matmul_4096_tf32(benchmark::State& state, const char* impl) {
  matmul_4096<float>(state, impl, CUBLAS_TF32_TENSOR_OP_MATH);
}
void BM_gpu_matmul_4096_fp16(benchmark::State& state, const char* impl) {
  matmul_4096<tessera::internal::float16_t>(state, impl);
}
void BM_gpu_matmul_4096_bf16(benchmark::State& state, const char* impl) {
  matmul_4096<tessera::internal::bfloat16_t>(state, impl);
}

void BM_gpu_chain_100(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  constexpr int kN = gpu_bench::kChainWidth;
  const std::size_t bytes = kN * sizeof(float);
  std::vector<float> in(kN), ones(kN, 1.0f), out(kN);
  for (int i = 0; i < kN; ++i) in[static_cast<std::size_t>(i)] = static_cast<float>(i);
  DeviceBuffer dx(bytes);
  DeviceBuffer done(bytes);
  Stream stream;
  if (dx.p == nullptr || done.p == nullptr) return state.SkipWithError("cudaMalloc failed");
  if (!ok(state, cudaMemcpy(done.p, ones.data(), bytes, cudaMemcpyHostToDevice), "upload")) return;
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return state.SkipWithError("cublasCreate failed");
  (void)cublasSetStream(handle, stream.s);
  const float alpha = 1.0f;
  auto step = [&]() -> bool {
    if (cudaMemcpyAsync(dx.p, in.data(), bytes, cudaMemcpyHostToDevice, stream.s) != cudaSuccess) return false;
    for (int k = 0; k < gpu_bench::kChainOps; ++k) {
      if (cublasSaxpy(handle, kN, &alpha, static_cast<const float*>(done.p), 1, static_cast<float*>(dx.p), 1) !=
          CUBLAS_STATUS_SUCCESS) {
        return false;
      }
    }
    return cudaMemcpyAsync(out.data(), dx.p, bytes, cudaMemcpyDeviceToHost, stream.s) == cudaSuccess &&
           cudaStreamSynchronize(stream.s) == cudaSuccess;
  };
  const bool checked = step() && out[kN - 1] == static_cast<float>(kN - 1 + gpu_bench::kChainOps);
  if (tessera_bench::check(state, checked, "x0 + 100")) {
    for (auto _ : state) {
      if (!step()) {
        state.SkipWithError("the chain failed");
        break;
      }
    }
    tessera_bench::report_per_op(state, gpu_bench::kChainOps);
  }
  (void)cublasDestroy(handle);
}

// Uploads rows x cols of f(i, j) into a new device buffer.
bool upload(benchmark::State& state, DeviceBuffer& dst, int64_t rows, int64_t cols,
            const std::function<float(int64_t, int64_t)>& f) {
  std::vector<float> host(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) host[static_cast<std::size_t>(i * cols + j)] = f(i, j);
  }
  if (dst.p == nullptr) {
    state.SkipWithError("cudaMalloc failed");
    return false;
  }
  return ok(state, cudaMemcpy(dst.p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
}

void BM_gpu_mlp_step(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  constexpr int64_t kB = gpu_bench::kMlpBatch;
  constexpr int64_t kW = gpu_bench::kMlpWidth;
  constexpr int kL = gpu_bench::kMlpLayers;
  const std::size_t act_bytes = kB * kW * sizeof(float);
  DeviceBuffer x(act_bytes), pre(act_bytes), h0(act_bytes), h1(act_bytes);
  DeviceBuffer partial(raw_kernels::kSumBlocks * sizeof(float)), out(sizeof(float));
  std::vector<std::unique_ptr<DeviceBuffer>> w, b;
  if (!upload(state, x, kB, kW, gpu_bench::mlp_x)) return;
  for (int l = 0; l < kL; ++l) {
    w.push_back(std::make_unique<DeviceBuffer>(kW * kW * sizeof(float)));
    b.push_back(std::make_unique<DeviceBuffer>(kW * sizeof(float)));
    if (!upload(state, *w.back(), kW, kW, [l](int64_t k, int64_t j) { return gpu_bench::mlp_w(l, k, j); }) ||
        !upload(state, *b.back(), 1, kW, [l](int64_t, int64_t j) { return gpu_bench::mlp_bias(l, j); })) {
      return;
    }
  }
  if (pre.p == nullptr || h0.p == nullptr || h1.p == nullptr || partial.p == nullptr || out.p == nullptr) {
    return state.SkipWithError("cudaMalloc failed");
  }
  Stream stream;
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return state.SkipWithError("cublasCreate failed");
  (void)cublasSetStream(handle, stream.s);
  float result = 0;
  auto step = [&]() -> bool {
    const float one = 1.0f, zero = 0.0f;
    const float* in = static_cast<const float*>(x.p);
    float* hs[2] = {static_cast<float*>(h0.p), static_cast<float*>(h1.p)};
    for (int l = 0; l < kL; ++l) {
      // Row-major pre = in (kB x kW) * w (kW x kW): column-major pre^T = w^T in^T.
      if (cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kW, kB, kW, &one, static_cast<const float*>(w[l]->p), kW, in,
                      kW, &zero, static_cast<float*>(pre.p), kW) != CUBLAS_STATUS_SUCCESS) {
        return false;
      }
      float* h = hs[l % 2];
      if (raw_kernels::bias_add(static_cast<const float*>(pre.p), static_cast<const float*>(b[l]->p), h, kB, kW,
                                /*relu=*/false, stream.s) != cudaSuccess) {
        return false;
      }
      if (l + 1 < kL && raw_kernels::relu(h, h, kB * kW, stream.s) != cudaSuccess) return false;
      in = h;
    }
    return raw_kernels::sum(in, kB * kW, static_cast<float*>(partial.p), static_cast<float*>(out.p), stream.s) ==
               cudaSuccess &&
           cudaMemcpyAsync(&result, out.p, sizeof(float), cudaMemcpyDeviceToHost, stream.s) == cudaSuccess &&
           cudaStreamSynchronize(stream.s) == cudaSuccess;
  };
  if (tessera_bench::check(state, step() && gpu_bench::mlp_sum_ok(result, gpu_bench::mlp_reference_sum()),
                           "the MLP's sum")) {
    for (auto _ : state) {
      if (!step()) {
        state.SkipWithError("the step failed");
        break;
      }
    }
  }
  (void)cublasDestroy(handle);
}

void BM_gpu_reduce_sum_256MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (!gpu_bench::require_gpu(state)) return;
  constexpr int64_t kN = gpu_bench::kReduceElements;
  DeviceBuffer x(kN * sizeof(float)), partial(raw_kernels::kSumBlocks * sizeof(float)), out(sizeof(float));
  if (!upload(state, x, 1, kN, [](int64_t, int64_t i) { return gpu_bench::reduce_x(i); })) return;
  if (partial.p == nullptr || out.p == nullptr) return state.SkipWithError("cudaMalloc failed");
  Stream stream;
  float result = 0;
  auto step = [&]() -> bool {
    return raw_kernels::sum(static_cast<const float*>(x.p), kN, static_cast<float*>(partial.p),
                            static_cast<float*>(out.p), stream.s) == cudaSuccess &&
           cudaMemcpyAsync(&result, out.p, sizeof(float), cudaMemcpyDeviceToHost, stream.s) == cudaSuccess &&
           cudaStreamSynchronize(stream.s) == cudaSuccess;
  };
  if (!tessera_bench::check(state, step() && result == gpu_bench::kReduceSum, "the sum")) return;
  for (auto _ : state) {
    if (!step()) {
      state.SkipWithError("the sum failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * kN * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

BENCHMARK_CAPTURE(BM_gpu_mlp_step, raw_cuda, "raw_cuda")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gpu_reduce_sum_256MiB, raw_cuda, "raw_cuda")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_chain_100, raw_cuda, "raw_cuda")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gpu_h2d_256MiB, raw_pinned, "raw_pinned")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_h2d_256MiB, raw_pageable, "raw_pageable")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_d2h_256MiB, raw_pinned, "raw_pinned")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_add_256MiB, raw_memcpy_d2d, "raw_memcpy_d2d")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_tf32, raw_cublas, "raw_cublas")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_fp16, raw_cublas, "raw_cublas")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096_bf16, raw_cublas, "raw_cublas")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_gpu_matmul_4096, raw_cublas, "raw_cublas")->UseRealTime()->Unit(benchmark::kMillisecond);
