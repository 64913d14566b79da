// CUDA and cuBLAS failures as tessera Statuses (device/cuda/ sources only: includes CUDA headers).
#pragma once

#include <string_view>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "core/status.h"

namespace tessera::internal {

// "<what>: cudaErrorMemoryAllocation (out of memory)": ResourceExhausted for out of memory,
// Internal otherwise.
inline Status cuda_error(cudaError_t error, std::string_view what) {
  const ErrorCode code = error == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  return Status(code, fmt::format("{}: {} ({})", what, cudaGetErrorName(error), cudaGetErrorString(error)));
}

inline Status cuda_status(cudaError_t error, std::string_view what) {
  return error == cudaSuccess ? Status() : cuda_error(error, what);
}

inline Status cublas_status(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status();
  const ErrorCode code = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  return Status(code, fmt::format("{}: {}", what, cublasGetStatusString(status)));
}

}  // namespace tessera::internal
