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
#include "core/topk_ops.h"
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
  const StatusOr<Shape> out = top_k_shape(c.input_shape(0), c.attr<int64_t>("k"));
  TESSERA_RETURN_IF_ERROR(add_shaped(c, dtype, out));
  c.add_output(DType::Int32, out.value());
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
  return add_shaped(c, DType::Bool, in_top_k_shape(c.input_shape(0), c.input_shape(1), c.attr<int64_t>("k")));
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

StatusOr<Shape> top_k_shape(const Shape& input, int64_t k) {
  if (k < 0) return errors::invalid_argument("k must be non-negative, got {}", k);
  if (input.unknown_rank()) return input;
  if (input.rank() < 1) return errors::invalid_argument("input must have rank >= 1, got shape {}", input.to_string());
  const int64_t n = input.dim(input.rank() - 1);
  if (n >= 0 && n < k) {
    return errors::invalid_argument("input must have at least k={} columns, got shape {}", k, input.to_string());
  }
  Shape out = input;
  out.set_dim(input.rank() - 1, k);
  return out;
}

StatusOr<Shape> in_top_k_shape(const Shape& predictions, const Shape& targets, int64_t k) {
  if (!predictions.unknown_rank() && predictions.rank() != 2) {
    return errors::invalid_argument("predictions must be a matrix, got shape {}", predictions.to_string());
  }
  if (!targets.unknown_rank() && targets.rank() != 1) {
    return errors::invalid_argument("targets must be a vector, got shape {}", targets.to_string());
  }
  const int64_t batch = predictions.unknown_rank() ? -1 : predictions.dim(0);
  const int64_t target_batch = targets.unknown_rank() ? -1 : targets.dim(0);
  if (batch >= 0 && target_batch >= 0 && batch != target_batch) {
    return errors::invalid_argument("predictions have {} rows and targets {} elements: one per row", batch,
                                    target_batch);
  }
  if (k < 0) return errors::invalid_argument("k must be non-negative, got {}", k);
  return Shape{batch >= 0 ? batch : target_batch};
}

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
