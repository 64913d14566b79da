// Dispatch on a tensor's dtype for the CPU kernels that take any floating point or any number
// dtype (kernels/nn_ops.cc, kernels/summary_ops.cc): fn is called with a value of the C++ type.
//
//   visit_number(t.dtype(), [&](auto zero) { using T = decltype(zero); ... t.data<T>() ... });
#pragma once

#include <cstdint>

#include "core/half.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// Calls fn(T{}) with the C++ type of a floating point dtype; false for the others.
template <class Fn>
bool visit_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(float{}); return true;
    case DType::Float64: fn(double{}); return true;
    case DType::Float16: fn(float16_t{}); return true;
    case DType::BFloat16: fn(bfloat16_t{}); return true;
    default: return false;
  }
}

// The same for every number dtype (the integers too); false for bool and string.
template <class Fn>
bool visit_number(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Int32: fn(int32_t{}); return true;
    case DType::Int64: fn(int64_t{}); return true;
    default: return visit_floating(dtype, fn);
  }
}

}  // namespace tessera::internal
