// The Philox4x32-10 stream on the GPU (nvcc only): the CPU's kernels/random_stream.h, word for word
// (Note [Random streams] in kernels/random_ops.cc), shared by random_kernels.cu and nn_kernels.cu.
// Uniform values are bit for bit the CPU's; normals are the same formula with contraction into
// FMA disabled, but CUDA's log, sin and cos may differ from the host's libm in the last bit or two.
#pragma once

#include <cstdint>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {

inline constexpr uint32_t kPhiloxMul0 = 0xD2511F53;
inline constexpr uint32_t kPhiloxMul1 = 0xCD9E8D57;
inline constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9;
inline constexpr uint32_t kPhiloxWeyl1 = 0xBB67AE85;

// Block `index` of the stream: Philox4x32-10 of the counter (index, redraw) under the key (k0,
// k1); redraw > 0 only for kernels that reject values (TruncatedNormal).
__device__ __forceinline__ uint4 philox(uint64_t index, uint32_t k0, uint32_t k1, uint32_t redraw = 0) {
  uint32_t c0 = static_cast<uint32_t>(index);
  uint32_t c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = redraw;
  uint32_t c3 = 0;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxWeyl0;
      k1 += kPhiloxWeyl1;
    }
    const uint32_t lo0 = kPhiloxMul0 * c0;
    const uint32_t hi0 = __umulhi(kPhiloxMul0, c0);
    const uint32_t lo1 = kPhiloxMul1 * c2;
    const uint32_t hi1 = __umulhi(kPhiloxMul1, c2);
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

// Box-Muller as kernels/random_stream.h: r = sqrt(-2 log(1 - u1)), theta = 2 pi u2.
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

// The standard normals of one block: four floats or two doubles (kernels/random_stream.h's
// block_normals).
__device__ __forceinline__ void block_normals(uint4 w, float (&z)[4]) {
  box_muller(uniform_float(w.x), uniform_float(w.y), z[0], z[1]);
  box_muller(uniform_float(w.z), uniform_float(w.w), z[2], z[3]);
}
__device__ __forceinline__ void block_normals(uint4 w, double (&z)[2]) {
  box_muller(uniform_double(w.x, w.y), uniform_double(w.z, w.w), z[0], z[1]);
}

}  // namespace tessera::internal::gpu
