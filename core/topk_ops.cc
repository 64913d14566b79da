// TopKV2 (ops::top_k) and InTopK (ops::in_top_k), as TensorFlow's: shapes and dtypes inferred when
// the graph is built, the API functions, and top_k's gradient. The CPU kernels are in
// kernels/topk_ops.cc; on other devices these ops run on the host (no kernel of theirs there).
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

// values (input's dtype) and int32 indices, both the input's shape with the last dim k.
Status top_k_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const DType dtype = c.input_dtype(0);
  if (dtype == DType::Bool || dtype == DType::String) {
    return c.invalid("{} tensors are not ordered", dtype_name(dtype));
  }
  const int64_t k = c.attr<int64_t>("k");
  if (k < 0) return c.invalid("k must be non-negative, got {}", k);
  Shape out = c.input_shape(0);
  if (!out.unknown_rank()) {
    if (out.rank() < 1) return c.invalid("input must have rank >= 1, got shape {}", out.to_string());
    const int64_t n = out.dim(out.rank() - 1);
    if (n >= 0 && n < k) return c.invalid("input must have at least k={} columns, got shape {}", k, out.to_string());
    out.set_dim(out.rank() - 1, k);
  }
  c.add_output(dtype, out);
  c.add_output(DType::Int32, out);
  return Status();
}

// bool [batch] from predictions [batch, classes] (float32) and targets [batch] (int32 or int64).
Status in_top_k_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  if (c.input_dtype(0) != DType::Float32) {
    return c.invalid("predictions must be float32, got {}", dtype_name(c.input_dtype(0)));
  }
  const DType t = c.input_dtype(1);
  if (t != DType::Int32 && t != DType::Int64) return c.invalid("targets must be int32 or int64, got {}", dtype_name(t));
  const Shape& p = c.input_shape(0);
  const Shape& targets = c.input_shape(1);
  if (!p.unknown_rank() && p.rank() != 2) return c.invalid("predictions must be a matrix, got shape {}", p.to_string());
  if (!targets.unknown_rank() && targets.rank() != 1) {
    return c.invalid("targets must be a vector, got shape {}", targets.to_string());
  }
  const int64_t batch = p.unknown_rank() ? -1 : p.dim(0);
  const int64_t target_batch = targets.unknown_rank() ? -1 : targets.dim(0);
  if (batch >= 0 && target_batch >= 0 && batch != target_batch) {
    return c.invalid("predictions have {} rows and targets {} elements", batch, target_batch);
  }
  if (c.attr<int64_t>("k") < 0) return c.invalid("k must be non-negative, got {}", c.attr<int64_t>("k"));
  c.add_output(DType::Bool, Shape{batch >= 0 ? batch : target_batch});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"TopKV2", top_k_fn});
TESSERA_REGISTER_OP(OpDef{"InTopK", in_top_k_fn});

// The values' gradient goes back to the positions they came from: one_hot(indices, n) weighted
// by it and summed over the k picks (TensorFlow scatters it the same way). The indices carry none.
TESSERA_REGISTER_GRADIENT("TopKV2", [](const GradContext& c) -> std::vector<Output> {
  const Output x = c.input(0);
  const Shape& shape = x.shape();
  const int64_t n = shape.unknown_rank() || shape.rank() < 1 ? -1 : shape.dim(shape.rank() - 1);
  if (n < 0) {
    throw InvalidArgumentError(fmt::format("the gradient of top_k ({}) needs the last dim of its input known, got {}",
                                           c.node().name, shape.to_string()));
  }
  const Output picked = ops::cast(ops::one_hot(c.output(1), static_cast<int>(n)), x.dtype());  // [..., k, n]
  return {ops::reduce_sum(ops::mul(ops::expand_dims(c.grad(0), -1), picked), {-2})};
});
TESSERA_NOT_DIFFERENTIABLE("InTopK");

}  // namespace
}  // namespace internal

namespace ops {

std::pair<Output, Output> top_k(Output input, int k, std::string name) {
  NodeSpec spec{"TopKV2", std::move(name)};
  spec.attrs["k"] = int64_t{k};
  const Output values = add_op("top_k", std::move(spec), {input});
  return {values, values.op().output(1)};
}

Output in_top_k(Output predictions, Output targets, int k, std::string name) {
  NodeSpec spec{"InTopK", std::move(name)};
  spec.attrs["k"] = int64_t{k};
  return add_op("in_top_k", std::move(spec), {predictions, targets});
}

}  // namespace ops
}  // namespace tessera
