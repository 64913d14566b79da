// Dispatch on a tensor's dtype for the CPU kernels (and the tests' tensor helpers,
// tests/testing/tensor_values.h): fn is called with a value of the C++ type.
//
//   visit_number(t.dtype(), [&](auto zero) { using T = decltype(zero); ... t.data<T>() ... });
//
// A kernel whose dtype has no C++ type here fails the op with "unsupported dtype": the *_or_fail
// forms do that.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/op_kernel.h"
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

// Calls fn(T{}) with the C++ type of `dtype`, bool included; nothing for string, which has none.
template <class Fn>
void visit_dtype(DType dtype, Fn&& fn) {
  if (dtype == DType::Bool) return fn(bool{});
  visit_number(dtype, fn);
}

// The kernels' failure for a dtype they have no code for.
inline void fail_unsupported_dtype(OpKernelContext& ctx, DType dtype) {
  ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", dtype_name(dtype));
}

// visit_floating, failing the op for any other dtype.
template <class Fn>
void visit_floating_or_fail(OpKernelContext& ctx, DType dtype, Fn&& fn) {
  if (!visit_floating(dtype, fn)) fail_unsupported_dtype(ctx, dtype);
}

// visit_number, failing the op for bool and string.
template <class Fn>
void visit_number_or_fail(OpKernelContext& ctx, DType dtype, Fn&& fn) {
  if (!visit_number(dtype, fn)) fail_unsupported_dtype(ctx, dtype);
}

}  // namespace tessera::internal
