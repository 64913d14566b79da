// Shape functions that ops of several families share, as TensorFlow's common_shape_fns.h.
#pragma once

#include "core/op_registry.h"

namespace tessera::internal {

// One input; one output of the input's dtype and shape (StopGradient, RandomShuffle).
inline Status same_as_input_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

// No input; one output of the "dtype" and the fully defined "shape" attrs (RandomUniform,
// RandomNormal, TruncatedNormal). The dtype is a floating point one: float32 and float64 are the
// Philox streams' dtypes, and float16 and bfloat16 take float32's stream, rounded
// (kernels/random_ops.cc; the GPU's kernels take float32 and float64 only: KernelDTypes).
inline Status random_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 0));
  const DType dtype = c.attr<DType>("dtype");
  const Shape& shape = c.attr<Shape>("shape");
  if (!dtype_is_floating(dtype)) {
    return c.invalid("needs dtype float16, bfloat16, float32 or float64, got {}", dtype_name(dtype));
  }
  if (!shape.fully_defined()) return c.invalid("shape {} must be fully defined", shape.to_string());
  c.add_output(dtype, shape);
  return Status();
}

}  // namespace tessera::internal
