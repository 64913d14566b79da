// Functions of include/tessera/ops.h that TensorFlow builds in Python from other ops, built here the
// same way from tessera's ops, so that they run on every device those run on and their gradients
// are the gradients of the parts: leaky_relu, squared_difference, reduce_logsumexp, stack, unstack
// (TensorFlow's nn_ops.py, math_ops.py, array_ops.py) and sigmoid_cross_entropy_with_logits,
// moments, batch_normalization (nn_impl.py).
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/gradients.h"  // constant_like, reshape_to_shape_of
#include "core/op_functions.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::ops {
namespace {

using internal::constant_like;
using internal::expect_floating;
using internal::graph_of;
using internal::scope_name;
using internal::shapes_conflict;
using internal::expect_not_null;

}  // namespace

Output leaky_relu(Output x, float alpha, std::string name) {
  expect_not_null(x, "leaky_relu", "x");
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "LeakyRelu"));
  if (x.dtype() == DType::Int32 || x.dtype() == DType::Int64) x = ops::cast(x, DType::Float32);  // as TF's leaky_relu
  expect_floating(x, "leaky_relu");
  // x > 0 picks x, so the gradient is g there and alpha * g elsewhere (0 included), as TF's.
  return ops::where(ops::greater(x, ops::zeros_like(x)), x, ops::mul(x, constant_like(x, alpha)));
}

Output squared_difference(Output x, Output y, std::string name) {
  expect_not_null(x, "squared_difference", "x");
  expect_not_null(y, "squared_difference", "y");
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "SquaredDifference"));
  return ops::square(ops::sub(x, y));
}

Output reduce_logsumexp(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  expect_not_null(x, "reduce_logsumexp", "x");
  expect_floating(x, "reduce_logsumexp");
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "ReduceLogSumExp"));
  const Output raw_max = ops::reduce_max(x, axes, /*keep_dims=*/true);
  // The largest value, or 0 where it is not finite (every element -inf, or an inf or NaN), so
  // that x - max never makes inf - inf; no gradient flows through it (it cancels out).
  const Output finite = ops::less(ops::abs(raw_max), constant_like(raw_max, std::numeric_limits<double>::infinity()));
  const Output shift = ops::stop_gradient(ops::where(finite, raw_max, ops::zeros_like(raw_max)));
  const Output sum = ops::reduce_sum(ops::exp(ops::sub(x, shift)), axes, keep_dims);
  const Output log_sum = ops::log(sum);
  return ops::add(log_sum, keep_dims ? shift : internal::reshape_to_shape_of(shift, log_sum));
}

Output stack(std::vector<Output> values, int axis, std::string name) {
  if (values.empty()) throw InvalidArgumentError("stack: no values to stack");
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].is_null()) throw InvalidArgumentError(fmt::format("stack: value {} is null", i));
    if (values[i].dtype() != values[0].dtype()) {
      throw InvalidArgumentError(fmt::format("stack: value {} ({}) is {}, value 0 ({}) {}", i, values[i].name(),
                                             dtype_name(values[i].dtype()), values[0].name(), dtype_name(values[0].dtype())));
    }
    if (shapes_conflict(values[i].shape(), values[0].shape())) {
      throw InvalidArgumentError(fmt::format("stack: value {} ({}) has shape {}, value 0 ({}) {}", i, values[i].name(),
                                             values[i].shape().to_string(), values[0].name(),
                                             values[0].shape().to_string()));
    }
  }
  const Shape& shape = values[0].shape();
  if (!shape.unknown_rank() && (axis < -shape.rank() - 1 || axis > shape.rank())) {
    throw InvalidArgumentError(fmt::format("stack: axis {} is outside [{}, {}] for values of shape {}", axis,
                                           -shape.rank() - 1, shape.rank(), shape.to_string()));
  }
  if (axis < 0 && shape.unknown_rank()) {
    throw InvalidArgumentError(fmt::format("stack: a negative axis ({}) needs values of known rank", axis));
  }
  const int concat_axis = axis < 0 ? axis + shape.rank() + 1 : axis;
  GraphScope scope = graph_of(values[0]).name_scope(scope_name(name, "stack"));
  std::vector<Output> expanded;
  expanded.reserve(values.size());
  for (const Output& v : values) expanded.push_back(ops::expand_dims(v, concat_axis));
  if (expanded.size() == 1) return ops::identity(expanded[0]);
  return ops::concat(std::move(expanded), concat_axis);
}

std::vector<Output> unstack(Output x, int axis, std::string name) {
  expect_not_null(x, "unstack", "x");
  const Shape& shape = x.shape();
  if (shape.unknown_rank()) throw InvalidArgumentError(fmt::format("unstack: {} has unknown rank", x.name()));
  if (axis < -shape.rank() || axis >= shape.rank()) {
    throw InvalidArgumentError(fmt::format("unstack: axis {} is outside [{}, {}) for {} of shape {}", axis,
                                           -shape.rank(), shape.rank(), x.name(), shape.to_string()));
  }
  const int a = axis < 0 ? axis + shape.rank() : axis;
  const int64_t num = shape.dim(a);
  if (num < 0) {
    throw InvalidArgumentError(fmt::format("unstack: dim {} of {} (shape {}) is unknown: cannot tell how many tensors",
                                           a, x.name(), shape.to_string()));
  }
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "unstack"));
  std::vector<Output> out;
  if (num == 0) return out;
  out.reserve(static_cast<std::size_t>(num));
  for (const Output& piece : ops::split(x, static_cast<int>(num), a)) out.push_back(ops::squeeze(piece, {a}));
  return out;
}

Output sigmoid_cross_entropy_with_logits(Output labels, Output logits, std::string name) {
  constexpr const char* kWhat = "sigmoid_cross_entropy_with_logits";
  expect_not_null(labels, kWhat, "labels");
  expect_not_null(logits, kWhat, "logits");
  expect_floating(logits, kWhat);
  if (labels.dtype() != logits.dtype()) {
    throw InvalidArgumentError(fmt::format("{}: labels ({}) are {} and logits ({}) {}: they must have the same dtype",
                                           kWhat, labels.name(), dtype_name(labels.dtype()), logits.name(),
                                           dtype_name(logits.dtype())));
  }
  if (shapes_conflict(labels.shape(), logits.shape())) {
    throw InvalidArgumentError(fmt::format("{}: logits and labels must have the same shape ({} vs {})", kWhat,
                                           logits.shape().to_string(), labels.shape().to_string()));
  }
  GraphScope scope = graph_of(logits).name_scope(scope_name(name, "logistic_loss"));
  // max(x, 0) - x * z + log(1 + exp(-|x|)), with -|x| from where (as TF builds it, so that the
  // gradient at 0 is defined) and log(1 + exp(.)) as softplus (exp(.) where log1p would matter).
  const Output zeros = ops::zeros_like(logits);
  const Output non_negative = ops::greater_equal(logits, zeros);
  const Output relu_logits = ops::where(non_negative, logits, zeros);
  const Output neg_abs_logits = ops::where(non_negative, ops::neg(logits), logits);
  return ops::add(ops::sub(relu_logits, ops::mul(logits, labels)), ops::softplus(neg_abs_logits));
}

std::pair<Output, Output> moments(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  expect_not_null(x, "moments", "x");
  expect_floating(x, "moments");
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "moments"));
  // 16-bit floats are summed in float32 and the results rounded back, as TensorFlow's moments.
  const bool narrow = x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16;
  const Output y = narrow ? ops::cast(x, DType::Float32) : x;
  Output mean = ops::reduce_mean(y, axes, /*keep_dims=*/true, "mean");
  Output variance = ops::reduce_mean(ops::squared_difference(y, ops::stop_gradient(mean)), axes, /*keep_dims=*/true,
                                     "variance");
  if (!keep_dims) {
    // Every dim is reduced when axes is empty, and squeeze({}) then removes every (size-1) dim.
    mean = ops::squeeze(mean, axes);
    variance = ops::squeeze(variance, axes);
  }
  if (narrow) {
    mean = ops::cast(mean, x.dtype());
    variance = ops::cast(variance, x.dtype());
  }
  return {mean, variance};
}

Output batch_normalization(Output x, Output mean, Output variance, Output offset, Output scale, float variance_epsilon,
                           std::string name) {
  constexpr const char* kWhat = "batch_normalization";
  expect_not_null(x, kWhat, "x");
  expect_not_null(mean, kWhat, "mean");
  expect_not_null(variance, kWhat, "variance");
  expect_floating(x, kWhat);
  for (const Output* t : {&mean, &variance, &offset, &scale}) {
    if (!t->is_null() && t->dtype() != x.dtype()) {
      throw InvalidArgumentError(fmt::format("{}: {} is {}, x ({}) {}: they must have one dtype", kWhat, t->name(),
                                             dtype_name(t->dtype()), x.name(), dtype_name(x.dtype())));
    }
  }
  GraphScope scope = graph_of(x).name_scope(scope_name(name, "batchnorm"));
  Output inv = ops::rsqrt(ops::add(variance, constant_like(variance, variance_epsilon)));
  if (!scale.is_null()) inv = ops::mul(inv, scale);
  const Output mean_inv = ops::mul(mean, inv);
  const Output shift = offset.is_null() ? ops::neg(mean_inv) : ops::sub(offset, mean_inv);
  return ops::add(ops::mul(x, inv), shift);
}

}  // namespace tessera::ops
