// Hand-written CUDA kernels for the raw baselines of benchmarks/gpu/raw_cuda.cc: what a careful
// programmer writes without a framework (no div/mod per element, grid-stride loops, float4 loads
// where the data allows). Launchers return the launch error.
#include "gpu/raw_kernels.h"

namespace raw_kernels {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 8 ? b : 65535 * 8);
}

// y[r, c] = max(x[r, c] + bias[c], 0) when relu, else x[r, c] + bias[c]; `cols` divides the index
// only once per row of the grid-stride loop.
__global__ void bias_add_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                                int64_t rows, int64_t cols, bool relu) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float v = x[r * cols + c] + bias[c];
      y[r * cols + c] = relu ? fmaxf(v, 0.0f) : v;
    }
  }
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = fmaxf(x[i], 0.0f);
  }
}

// One partial sum per block (float4 loads), then one block adds the partials: two launches, no
// atomics, a deterministic order.
__global__ void partial_sums(const float4* __restrict__ x4, int64_t n4, const float* __restrict__ tail, int tail_n,
                             float* __restrict__ partial) {
  __shared__ float shared[kThreads];
  float sum = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = x4[i];
    sum += (v.x + v.y) + (v.z + v.w);
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_n) sum += tail[threadIdx.x];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void final_sum(const float* __restrict__ partial, int n, float* __restrict__ out) {
  __shared__ float shared[kThreads];
  float sum = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) sum += partial[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
}

}  // namespace

cudaError_t bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, bool relu,
                     cudaStream_t stream) {
  const int bx = static_cast<int>((cols + kThreads - 1) / kThreads);
  const int by = static_cast<int>(rows < 65535 ? rows : 65535);
  bias_add_kernel<<<dim3(bx, by), kThreads, 0, stream>>>(x, bias, y, rows, cols, relu);
  return cudaGetLastError();
}

cudaError_t relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  relu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t sum(const float* x, int64_t n, float* partial, float* out, cudaStream_t stream) {
  const int64_t n4 = n / 4;
  const int tail_n = static_cast<int>(n - n4 * 4);
  partial_sums<<<kSumBlocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), n4, x + n4 * 4, tail_n,
                                                    partial);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  final_sum<<<1, kThreads, 0, stream>>>(partial, kSumBlocks, out);
  return cudaGetLastError();
}

}  // namespace raw_kernels
