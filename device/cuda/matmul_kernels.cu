// CUDA kernel for MatMul of integers, which cuBLAS lacks: C = op(A) * op(B), row-major, products
// and sums on the unsigned type so that overflow wraps around as in kernels/matmul_op.cc (the
// floating point MatMul goes to cuBLAS, in gpu_math_ops.cc). A plain shared-memory tiled kernel:
// integer MatMul is rare in the graphs tessera runs, so clarity wins over speed here.
#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

constexpr int kTile = 16;

template <class T>
__global__ void integer_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int64_t m,
                               int64_t k, int64_t n, bool ta, bool tb) {
  using U = std::make_unsigned_t<T>;
  __shared__ U a_tile[kTile][kTile + 1];
  __shared__ U b_tile[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  U acc = 0;
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    const int64_t pa = p0 + tx;  // A(row, pa)
    a_tile[ty][tx] = (row < m && pa < k) ? static_cast<U>(ta ? a[pa * m + row] : a[row * k + pa]) : U{0};
    const int64_t pb = p0 + ty;  // B(pb, col)
    b_tile[ty][tx] = (pb < k && col < n) ? static_cast<U>(tb ? b[col * k + pb] : b[pb * n + col]) : U{0};
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile; ++q) acc += a_tile[ty][q] * b_tile[q][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = static_cast<T>(acc);
}

}  // namespace

cudaError_t launch_integer_matmul(Elem elem, const void* a, const void* b, void* c, int64_t m, int64_t k,
                                  int64_t n, bool transpose_a, bool transpose_b, cudaStream_t stream) {
  const int64_t grid_x = (n + kTile - 1) / kTile;
  const int64_t grid_y = (m + kTile - 1) / kTile;
  if (grid_x > INT32_MAX || grid_y > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned int>(grid_x), static_cast<unsigned int>(grid_y));
  const dim3 block(kTile, kTile);
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      integer_matmul<T><<<grid, block, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                    static_cast<T*>(c), m, k, n, transpose_a, transpose_b);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

}  // namespace tessera::internal::gpu
