// Helpers of the gpu workload (benchmarks/gpu/): sizes, the GPU (or a skip), the checked inputs.
//
//   BM_gpu_h2d_256MiB/<impl>      256 MiB from host memory into GPU memory, waited for
//   BM_gpu_add_256MiB/<impl>      c = a + b over 64 Mi float32 (768 MiB of traffic); the baseline
//                                 is the device's own bandwidth: a cudaMemcpy of 256 MiB within it
//   BM_gpu_matmul_4096/<impl>     4096 x 4096 float32 MatMul (2 * 4096^3 flops)
//   BM_gpu_chain_100/<impl>       100 dependent tiny elementwise ops (x += 1 over 16 float32), fed
//                                 from and fetched to the host: per_op = time per step / 100, what
//                                 an op costs when the math is nothing (a host round trip or not)
//
// Counters: bytes_per_second (traffic), or flops (a rate) for MatMul. Every iteration waits for
// the GPU: tessera through its completion path (the kernel's `done`), raw CUDA through
// cudaStreamSynchronize.
#pragma once

#include <cstddef>
#include <cstdint>

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

// True when a GPU is usable; otherwise skips the benchmark with an error and returns false.
bool require_gpu(benchmark::State& state);

}  // namespace gpu_bench
