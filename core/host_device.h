// TESSERA_HOST_DEVICE marks a function of a header that both the CPU kernels and the CUDA kernels
// compile (core/training_rules.h, core/wrapping_arith.h): __host__ __device__ under nvcc, nothing
// under the host compiler.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif
