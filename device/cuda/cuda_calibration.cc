// CudaDevice::measure_cost_profile: calibration of a GPU's cost profile by measurement.
#include "device/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device/cuda/gpu_launch.h"

namespace tessera::internal {

DeviceCostProfile CudaDevice::measure_cost_profile() {
  DeviceCostProfile p = cost_profile_;
  if (!make_current().ok()) return p;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    return p;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  (void)cudaEventCreate(&start);
  (void)cudaEventCreate(&stop);
  // The best of `reps` timed runs of `issue` (after one warm-up) on `stream`, in seconds; 0 on error.
  auto best_of = [&](int reps, const std::function<bool()>& issue) {
    double best = 0;
    for (int rep = 0; rep <= reps; ++rep) {
      if (cudaEventRecord(start, stream) != cudaSuccess || !issue() || cudaEventRecord(stop, stream) != cudaSuccess ||
          cudaEventSynchronize(stop) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;
      }
      float ms = 0;
      (void)cudaEventElapsedTime(&ms, start, stop);
      if (rep > 0 && (best == 0 || ms < best)) best = ms;
    }
    return best / 1e3;
  };
  auto usable = [](double v) { return std::isfinite(v) && v > 0; };

  // Arithmetic: 2048^3 float32 through cuBLAS (default math mode, as the MatMul kernel).
  {
    constexpr int n = 2048;
    const std::size_t bytes = std::size_t{n} * n * sizeof(float);
    void* a = nullptr;
    void* c = nullptr;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&c, bytes) == cudaSuccess &&
        cudaMemsetAsync(a, 0x3c, bytes, stream) == cudaSuccess) {  // every float 0.0115
      const double t = best_of(3, [&] {
        return with_cublas(stream, [&](cublasContext* h) -> Status {
                 (void)cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // full float32, as a session's default
                 const float one = 1, zero = 0;
                 const auto* m = static_cast<const float*>(a);
                 const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, m, n, m, n, &zero,
                                                       static_cast<float*>(c), n);
                 return st == CUBLAS_STATUS_SUCCESS ? Status() : errors::internal("cublasSgemm failed");
               }).ok();
      });
      if (usable(t)) p.flops_per_second = 2.0 * n * n * static_cast<double>(n) / t;
    }
    (void)cudaGetLastError();
    if (a != nullptr) (void)cudaFree(a);
    if (c != nullptr) (void)cudaFree(c);
  }
  // Memory: a 64 MiB copy within the GPU, bytes read plus written (as op_bytes counts them).
  {
    const std::size_t bytes = std::size_t{64} << 20;
    void* src = nullptr;
    void* dst = nullptr;
    if (cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&dst, bytes) == cudaSuccess) {
      const double t = best_of(3, [&] {
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
      });
      if (usable(t)) p.memory_bandwidth = 2.0 * static_cast<double>(bytes) / t;
    }
    (void)cudaGetLastError();
    if (src != nullptr) (void)cudaFree(src);
    if (dst != nullptr) (void)cudaFree(dst);
  }
  // Launch overhead: kernels are stream-ordered (Note [Stream-ordered kernels] in
  // core/executor.cc), so an op costs the pace of tiny launches back to back (the host's issue rate
  // or the GPU's per-kernel time, whichever is slower), not a round trip: 2000 launches of a
  // 16-element kernel, issued and then waited for once, by the host's clock.
  {
    void* buffer = nullptr;
    if (cudaMalloc(&buffer, 32 * sizeof(float)) == cudaSuccess) {
      constexpr int kLaunches = 2000;
      double best = 0;
      for (int rep = 0; rep <= 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        bool ok = true;
        for (int i = 0; i < kLaunches && ok; ++i) {
          ok = gpu::launch_unary(gpu::UnaryKind::kNeg, gpu::Elem::kF32, buffer, static_cast<float*>(buffer) + 16, 16,
                                 stream) == cudaSuccess;
        }
        ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kLaunches;
        if (!ok) {
          best = 0;
          break;
        }
        if (rep > 0 && (best == 0 || t < best)) best = t;
      }
      if (usable(best)) p.kernel_overhead_seconds = best;
    }
    (void)cudaGetLastError();
    if (buffer != nullptr) (void)cudaFree(buffer);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaStreamDestroy(stream);

  // Transfers, through the copy path the executor uses: the time of one copy_to_device, waited for.
  auto copy_seconds = [&](const Tensor& host) -> double {
    std::promise<bool> ok;
    auto done = ok.get_future();
    const auto t0 = std::chrono::steady_clock::now();
    copy_to_device(host, host_to_device_stream(), [&ok](StatusOr<Tensor> r) { ok.set_value(r.ok()); });
    const bool copied = done.get();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return copied ? t : 0.0;
  };
  try {
    Tensor big(DType::Float32, Shape{int64_t{8} << 20});  // 32 MiB
    std::memset(big.raw_mutable_data(), 1, big.bytes());
    double best = 0;
    for (int rep = 0; rep < 4; ++rep) {
      const double t = copy_seconds(big);
      if (t <= 0) {
        best = 0;
        break;
      }
      if (rep > 0 && (best == 0 || t < best)) best = t;
    }
    Tensor one(DType::Float32, Shape{1});
    std::vector<double> small;
    for (int rep = 0; rep < 22; ++rep) {
      const double t = copy_seconds(one);
      if (t <= 0) break;
      if (rep >= 2) small.push_back(t);
    }
    if (small.size() == 20) {
      std::sort(small.begin(), small.end());
      p.transfer_latency_seconds = small[small.size() / 2];
    }
    // The bandwidth net of that latency.
    if (usable(best - p.transfer_latency_seconds)) {
      p.transfer_bandwidth = static_cast<double>(big.bytes()) / (best - p.transfer_latency_seconds);
    }
  } catch (...) {
    // Out of host memory: keep the defaults.
  }
  return p;
}

}  // namespace tessera::internal
