// Hand-written CUDA kernels for the raw baselines (raw_kernels.cu): the "kernels written by hand"
// that gpu_mlp_step and reduce_sum_256MiB compare tessera with. Asynchronous on `stream`; each
// returns the launch error.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace raw_kernels {

// Blocks of the first pass of sum(): `partial` must hold this many floats.
inline constexpr int kSumBlocks = 1024;

// y[r, c] = x[r, c] + bias[c], then max(., 0) when `relu`. x and y are rows x cols, row-major.
cudaError_t bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, bool relu,
                     cudaStream_t stream);
// y = max(x, 0) over n floats.
cudaError_t relu(const float* x, float* y, int64_t n, cudaStream_t stream);
// *out = the sum of x[0, n); x 16-byte aligned.
cudaError_t sum(const float* x, int64_t n, float* partial, float* out, cudaStream_t stream);

}  // namespace raw_kernels
