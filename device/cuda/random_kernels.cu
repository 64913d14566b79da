// CUDA kernels for RandomUniform and RandomNormal: the same Philox4x32-10 stream as
// kernels/random_ops.cc (Note [Random streams] there), one thread per Philox block. For the same
// seed and block range the uniform values are bit for bit the CPU kernel's (the conversion is
// exact integer arithmetic and one exact multiplication). The normal values are the same formula
// (Box-Muller, u1 taken in (0, 1]) with contraction into FMA disabled, but CUDA's log, sin and cos
// may differ from the host's libm in the last bit or two, so they agree to a few ulps, not bits.
#include <cstdint>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53;
constexpr uint32_t kMul1 = 0xCD9E8D57;
constexpr uint32_t kWeyl0 = 0x9E3779B9;
constexpr uint32_t kWeyl1 = 0xBB67AE85;

// Block `index` of the stream: Philox4x32-10 of the counter (index, 0) under the key.
__device__ __forceinline__ uint4 philox(uint64_t index, uint32_t k0, uint32_t k1) {
  uint32_t c0 = static_cast<uint32_t>(index);
  uint32_t c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = 0;
  uint32_t c3 = 0;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint32_t lo0 = kMul0 * c0;
    const uint32_t hi0 = __umulhi(kMul0, c0);
    const uint32_t lo1 = kMul1 * c2;
    const uint32_t hi1 = __umulhi(kMul1, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return make_uint4(c0, c1, c2, c3);
}

__device__ __forceinline__ float uniform_float(uint32_t u) { return static_cast<float>(u >> 8) * 0x1p-24f; }
__device__ __forceinline__ double uniform_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1p-53;
}

// Box-Muller as kernels/random_ops.cc: r = sqrt(-2 log(1 - u1)), theta = 2 pi u2.
__device__ __forceinline__ void box_muller(float u1_from_zero, float u2, float& z0, float& z1) {
  const float u1 = __fsub_rn(1.0f, u1_from_zero);
  const float r = sqrtf(__fmul_rn(-2.0f, logf(u1)));
  const float theta = __fmul_rn(__fmul_rn(2.0f, 3.14159265358979323846f), u2);
  z0 = __fmul_rn(r, cosf(theta));
  z1 = __fmul_rn(r, sinf(theta));
}
__device__ __forceinline__ void box_muller(double u1_from_zero, double u2, double& z0, double& z1) {
  const double u1 = __dsub_rn(1.0, u1_from_zero);
  const double r = sqrt(__dmul_rn(-2.0, log(u1)));
  const double theta = __dmul_rn(__dmul_rn(2.0, 3.14159265358979323846), u2);
  z0 = __dmul_rn(r, cos(theta));
  z1 = __dmul_rn(r, sin(theta));
}

// Thread j fills out[j * per_block, (j + 1) * per_block) from block first + j.
template <class T, bool kNormal>
__global__ void random_kernel(T* __restrict__ out, int64_t n, uint32_t k0, uint32_t k1, uint64_t first,
                              T mean, T stddev) {
  constexpr int kPerBlock = sizeof(T) == 4 ? 4 : 2;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  for (int64_t j = global_thread(); j < blocks; j += grid_threads()) {
    const uint4 w = philox(first + static_cast<uint64_t>(j), k0, k1);
    T v[kPerBlock];
    if constexpr (sizeof(T) == 4) {
      if constexpr (kNormal) {
        float z0, z1, z2, z3;
        box_muller(uniform_float(w.x), uniform_float(w.y), z0, z1);
        box_muller(uniform_float(w.z), uniform_float(w.w), z2, z3);
        v[0] = __fadd_rn(mean, __fmul_rn(stddev, z0));
        v[1] = __fadd_rn(mean, __fmul_rn(stddev, z1));
        v[2] = __fadd_rn(mean, __fmul_rn(stddev, z2));
        v[3] = __fadd_rn(mean, __fmul_rn(stddev, z3));
      } else {
        v[0] = uniform_float(w.x);
        v[1] = uniform_float(w.y);
        v[2] = uniform_float(w.z);
        v[3] = uniform_float(w.w);
      }
    } else {
      if constexpr (kNormal) {
        double z0, z1;
        box_muller(uniform_double(w.x, w.y), uniform_double(w.z, w.w), z0, z1);
        v[0] = __dadd_rn(mean, __dmul_rn(stddev, z0));
        v[1] = __dadd_rn(mean, __dmul_rn(stddev, z1));
      } else {
        v[0] = uniform_double(w.x, w.y);
        v[1] = uniform_double(w.z, w.w);
      }
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
