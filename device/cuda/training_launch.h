// The launcher of the fused optimizer update kernels (training_kernels.cu), for
// gpu_training_ops.cc: plain pointers and the rules' kind, nothing of tessera's Tensor or Status,
// as gpu_launch.h's launchers.
//
//   gpu::launch_apply(training::ApplyKind::kAdam, false, gpu::Elem::kF32, pointers, n, stream);   // async
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/training_rules.h"
#include "device/cuda/gpu_launch.h"

namespace tessera::internal::gpu {

// The device buffers of one update, of the launch's element type. `*_in` are read and `*_out`
// written, element by element (the same buffer when the update is in place). The scalars are
// single elements in device memory, in the op's input order with the gradient left out (read
// by the kernel: stream-ordered, no host sync); unused entries are null.
struct ApplyPointers {
  const void* var_in = nullptr;
  void* var_out = nullptr;
  const void* slot_in[training::kMaxApplySlots] = {};
  void* slot_out[training::kMaxApplySlots] = {};
  const void* grad = nullptr;
  const void* scalars[training::kMaxApplyScalars] = {};
};

// The update of `kind` over n > 0 elements of `elem` (kF32, kF64, kF16 or kBF16; the 16-bit floats
// computed in float32 and rounded once per stored value), as the CPU kernels compute it.
cudaError_t launch_apply(training::ApplyKind kind, bool use_nesterov, Elem elem, const ApplyPointers& p, int64_t n,
                         cudaStream_t stream);

}  // namespace tessera::internal::gpu
