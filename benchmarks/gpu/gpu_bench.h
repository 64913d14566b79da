// Helpers of the gpu workload (benchmarks/gpu/): sizes, the GPU (or a skip), the checked inputs.
//
//   BM_gpu_h2d_256MiB/<impl>      256 MiB from host memory into GPU memory, waited for
//   BM_gpu_d2h_256MiB/<impl>      256 MiB from GPU memory back into host memory, waited for
//   BM_gpu_add_256MiB/<impl>      c = a + b over 64 Mi float32 (768 MiB of traffic); the baseline
//                                 is the device's own bandwidth: a cudaMemcpy of 256 MiB within it
//   BM_gpu_matmul_4096/<impl>     4096 x 4096 float32 MatMul (2 * 4096^3 flops)
//   BM_gpu_chain_100/<impl>       100 dependent tiny elementwise ops (x += 1 over 16 float32), fed
//                                 from and fetched to the host: per_op = time per step / 100, what
//                                 an op costs when the math is nothing (a host round trip or not)
//   BM_gpu_mlp_step/<impl>        a three-layer MLP forward step (batch 256, 1024 wide: MatMul,
//                                 bias add, ReLU per layer, then the sum of the output fetched to
//                                 the host): what a small real graph costs per step
//   BM_gpu_reduce_sum_256MiB/<impl>  the sum of 64 Mi float32 already on the GPU, fetched to the
//                                 host; bytes_per_second counts the 256 MiB read (the goal is
//                                 against BM_gpu_add_256MiB/raw_memcpy_d2d's bandwidth)
//
// Counters: bytes_per_second (traffic), or flops (a rate) for MatMul. Every iteration waits for
// the GPU: tessera through its completion path (the kernel's `done`), raw CUDA through
// cudaStreamSynchronize.
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

namespace gpu_bench {

inline constexpr std::size_t kCopyBytes = std::size_t{256} << 20;
inline constexpr int64_t kAddElements = int64_t{64} << 20;  // 256 MiB of float32 per tensor
inline constexpr int kMatMulN = 4096;
inline constexpr int kChainOps = 100;
inline constexpr int kChainWidth = 16;
inline constexpr double kMatMulFlops = 2.0 * kMatMulN * kMatMulN * kMatMulN;

// The MatMul inputs: small integers, so that every product and sum is exact in float32 and any
// summation order gives the same C.
inline float matmul_a(int64_t i, int64_t k) { return static_cast<float>((i + 2 * k) % 3 - 1); }
inline float matmul_b(int64_t k, int64_t j) { return static_cast<float>((3 * k + j) % 5 - 2); }
inline float matmul_c(int64_t i, int64_t j) {
  float sum = 0;
  for (int64_t k = 0; k < kMatMulN; ++k) sum += matmul_a(i, k) * matmul_b(k, j);
  return sum;
}

// The MLP: x (kMlpBatch x kMlpWidth) with entries 0..2, weights with one 1 in every 64 entries of a
// column, biases -2..2: every value along the way is a small integer (exact in float32), so a
// step's result can be checked against mlp_reference_sum().
inline constexpr int64_t kMlpBatch = 256;
inline constexpr int64_t kMlpWidth = 1024;
inline constexpr int kMlpLayers = 3;
inline float mlp_x(int64_t b, int64_t k) { return static_cast<float>((b + 3 * k) % 3); }
inline float mlp_w(int layer, int64_t k, int64_t j) { return (k + j + layer) % 64 == 0 ? 1.0f : 0.0f; }
inline float mlp_bias(int layer, int64_t j) { return static_cast<float>((j + layer) % 5 - 2); }
// The sum of the last layer's output, computed on the host in double (exact).
inline double mlp_reference_sum() {
  std::vector<double> h(static_cast<std::size_t>(kMlpBatch * kMlpWidth));
  for (int64_t b = 0; b < kMlpBatch; ++b) {
    for (int64_t k = 0; k < kMlpWidth; ++k) h[static_cast<std::size_t>(b * kMlpWidth + k)] = mlp_x(b, k);
  }
  for (int layer = 0; layer < kMlpLayers; ++layer) {
    std::vector<double> next(h.size());
    for (int64_t b = 0; b < kMlpBatch; ++b) {
      for (int64_t j = 0; j < kMlpWidth; ++j) {
        double v = mlp_bias(layer, j);
        for (int64_t k = (64 - (j + layer) % 64) % 64; k < kMlpWidth; k += 64) {
          v += h[static_cast<std::size_t>(b * kMlpWidth + k)];  // mlp_w(layer, k, j) == 1 exactly here
        }
        next[static_cast<std::size_t>(b * kMlpWidth + j)] = layer + 1 < kMlpLayers && v < 0 ? 0 : v;
      }
    }
    h.swap(next);
  }
  double sum = 0;
  for (double v : h) sum += v;
  return sum;
}
// True when `got` is `want` within float32 summation error.
inline bool mlp_sum_ok(double got, double want) { return std::abs(got - want) <= 1e-5 * std::abs(want) + 1; }

inline constexpr int64_t kReduceElements = int64_t{64} << 20;  // 256 MiB of float32
inline float reduce_x(int64_t i) { return static_cast<float>(i % 7 - 3); }
// Periods of 7 sum to 0; kReduceElements % 7 == 4 leaves -3 - 2 - 1 + 0. Every partial sum any
// order makes is a small integer, so the result is exact.
inline constexpr float kReduceSum = -6.0f;

// True when a GPU is usable; otherwise skips the benchmark with an error and returns false.
bool require_gpu(benchmark::State& state);

}  // namespace gpu_bench
