// CUDA kernels for RandomUniform and RandomNormal: the same Philox4x32-10 stream as
// kernels/random_ops.cc (Note [Random streams] there; philox.cuh), one thread per Philox block. For
// the same seed and block range the uniform values are bit for bit the CPU kernel's (the
// conversion is exact integer arithmetic and one exact multiplication). The normal values are the
// same formula (Box-Muller, u1 taken in (0, 1]) with contraction into FMA disabled, but CUDA's log,
// sin and cos may differ from the host's libm in the last bit or two, so they agree to a few ulps,
// not bits.
#include <cstdint>

#include "device/cuda/philox.cuh"

namespace tessera::internal::gpu {
namespace {

// Thread j fills out[j * per_block, (j + 1) * per_block) from block first + j.
template <class T, bool kNormal>
__global__ void random_kernel(T* __restrict__ out, int64_t n, uint32_t k0, uint32_t k1, uint64_t first,
                              T mean, T stddev) {
  constexpr int kPerBlock = sizeof(T) == 4 ? 4 : 2;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  for (int64_t j = global_thread(); j < blocks; j += grid_threads()) {
    const uint4 w = philox(first + static_cast<uint64_t>(j), k0, k1);
    T v[kPerBlock];
    if constexpr (kNormal) {
      T z[kPerBlock];
      block_normals(w, z);
#pragma unroll
      for (int t = 0; t < kPerBlock; ++t) {
        if constexpr (sizeof(T) == 4) {
          v[t] = __fadd_rn(mean, __fmul_rn(stddev, z[t]));
        } else {
          v[t] = __dadd_rn(mean, __dmul_rn(stddev, z[t]));
        }
      }
    } else if constexpr (sizeof(T) == 4) {
      v[0] = uniform_float(w.x);
      v[1] = uniform_float(w.y);
      v[2] = uniform_float(w.z);
      v[3] = uniform_float(w.w);
    } else {
      v[0] = uniform_double(w.x, w.y);
      v[1] = uniform_double(w.z, w.w);
    }
    const int64_t base = j * kPerBlock;
#pragma unroll
    for (int t = 0; t < kPerBlock; ++t) {
      if (base + t < n) out[base + t] = v[t];
    }
  }
}

template <bool kNormal>
cudaError_t random(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first, double mean, double stddev,
                   cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const auto k0 = static_cast<uint32_t>(key);
  const auto k1 = static_cast<uint32_t>(key >> 32);
  if (elem == Elem::kF32) {
    random_kernel<float, kNormal><<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(
        static_cast<float*>(out), n, k0, k1, first, static_cast<float>(mean), static_cast<float>(stddev));
  } else if (elem == Elem::kF64) {
    random_kernel<double, kNormal><<<blocks_for((n + 1) / 2, kThreads), kThreads, 0, stream>>>(
        static_cast<double*>(out), n, k0, k1, first, mean, stddev);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_random_uniform(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                  cudaStream_t stream) {
  return random<false>(elem, out, n, key, first_block, 0.0, 1.0, stream);
}

cudaError_t launch_random_normal(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                 double mean, double stddev, cudaStream_t stream) {
  return random<true>(elem, out, n, key, first_block, mean, stddev, stream);
}

}  // namespace tessera::internal::gpu
