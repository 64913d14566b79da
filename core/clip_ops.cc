// The clipping functions of include/tessera/ops.h (TensorFlow's clip_ops.py): compositions of the
// elementwise ops and reductions, so gradients flow through them as through TensorFlow's.
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/gradients.h"  // constant_like
#include "core/op_functions.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::ops {
namespace {

using internal::constant_like;
using internal::expect_floating;
using internal::graph_of;
using internal::scope_name;

// `bound` in t's dtype: cast when it has another one (TensorFlow converts it to t's dtype).
Output as_dtype_of(const Output& t, const Output& bound, const char* what, const char* arg) {
  if (bound.is_null()) throw InvalidArgumentError(fmt::format("{}: {} is null", what, arg));
  return bound.dtype() == t.dtype() ? bound : ops::cast(bound, t.dtype());
}

void expect_tensor(const Output& t, const char* what) { internal::expect_not_null(t, what, "t"); }

}  // namespace

Output clip_by_value(Output t, Output clip_value_min, Output clip_value_max, std::string name) {
  expect_tensor(t, "clip_by_value");
  const Output lo = as_dtype_of(t, clip_value_min, "clip_by_value", "clip_value_min");
  const Output hi = as_dtype_of(t, clip_value_max, "clip_by_value", "clip_value_max");
  GraphScope scope = graph_of(t).name_scope(scope_name(name, "clip_by_value"));
  const Output clipped = ops::maximum(ops::minimum(t, hi), lo);
  const Shape& in = t.shape();
  const Shape& out = clipped.shape();
  if (!in.unknown_rank() && !out.unknown_rank() && (in.rank() != out.rank() || (in.fully_defined() && out.fully_defined() && in != out))) {
    throw InvalidArgumentError(fmt::format("clip_by_value: the bounds broadcast {} to {}: the result may not be larger than t",
                                           in.to_string(), out.to_string()));
  }
  return ops::identity(clipped);
}

Output clip_by_value(Output t, double clip_value_min, double clip_value_max, std::string name) {
  expect_tensor(t, "clip_by_value");
  return clip_by_value(t, constant_like(t, clip_value_min), constant_like(t, clip_value_max), std::move(name));
}

Output clip_by_norm(Output t, Output clip_norm, std::vector<int> axes, std::string name) {
  expect_tensor(t, "clip_by_norm");
  expect_floating(t, "clip_by_norm");
  Output norm_bound = as_dtype_of(t, clip_norm, "clip_by_norm", "clip_norm");
  if (!norm_bound.shape().unknown_rank() && norm_bound.shape().rank() != 0) {
    throw InvalidArgumentError(fmt::format("clip_by_norm: clip_norm must be a scalar, got shape {}", norm_bound.shape().to_string()));
  }
  GraphScope scope = graph_of(t).name_scope(scope_name(name, "clip_by_norm"));
  norm_bound = ops::maximum(norm_bound, ops::zeros_like(norm_bound));
  const Output l2sum = ops::reduce_sum(ops::mul(t, t), std::move(axes), /*keep_dims=*/true);
  // The norm is sqrt(l2sum), with sqrt never taken of 0: its gradient there would be inf.
  const Output positive = ops::greater(l2sum, ops::zeros_like(l2sum));
  const Output l2norm = ops::where(positive, ops::sqrt(ops::where(positive, l2sum, ops::ones_like(l2sum))), l2sum);
  return ops::identity(ops::div(ops::mul(t, norm_bound), ops::maximum(l2norm, norm_bound)));
}

Output clip_by_norm(Output t, double clip_norm, std::vector<int> axes, std::string name) {
  expect_tensor(t, "clip_by_norm");
  return clip_by_norm(t, constant_like(t, clip_norm), std::move(axes), std::move(name));
}

Output global_norm(const std::vector<Output>& t_list, std::string name) {
  std::vector<Output> tensors;
  for (const Output& t : t_list) {
    if (t.is_null()) continue;
    expect_floating(t, "global_norm");
    if (!tensors.empty() && t.dtype() != tensors.front().dtype()) {
      throw InvalidArgumentError(fmt::format("global_norm: the tensors must share one dtype, got {} ({}) and {} ({})",
                                             dtype_name(tensors.front().dtype()), tensors.front().name(),
                                             dtype_name(t.dtype()), t.name()));
    }
    tensors.push_back(t);
  }
  if (tensors.empty()) throw InvalidArgumentError("global_norm: t_list holds no tensor");
  GraphScope scope = graph_of(tensors.front()).name_scope(scope_name(name, "global_norm"));
  std::vector<Output> half_squared;
  for (const Output& t : tensors) {
    GraphScope colocate = graph_of(t).colocate_with(t);
    half_squared.push_back(ops::l2_loss(t));
  }
  const Output sum = half_squared.size() == 1 ? half_squared.front() : ops::add_n(half_squared);
  return ops::sqrt(ops::mul(sum, constant_like(sum, 2.0)), "global_norm");
}

std::pair<std::vector<Output>, Output> clip_by_global_norm(const std::vector<Output>& t_list, Output clip_norm,
                                                           Output use_norm, std::string name) {
  if (use_norm.is_null()) use_norm = global_norm(t_list, name.empty() ? "" : name + "/global_norm");
  expect_floating(use_norm, "clip_by_global_norm");
  const Output bound = as_dtype_of(use_norm, clip_norm, "clip_by_global_norm", "clip_norm");
  GraphScope scope = graph_of(use_norm).name_scope(scope_name(name, "clip_by_global_norm"));
  const Output one = constant_like(use_norm, 1.0);
  const Output scale_for_finite = ops::mul(bound, ops::minimum(ops::div(one, use_norm), ops::div(one, bound)));
  // use_norm - use_norm is 0 for a finite norm and NaN for inf or NaN: the scale then is NaN.
  const Output scale = ops::add(scale_for_finite, ops::sub(use_norm, use_norm));
  std::vector<Output> clipped;
  for (const Output& t : t_list) {
    if (t.is_null()) {
      clipped.push_back(Output());
      continue;
    }
    GraphScope colocate = graph_of(t).colocate_with(t);
    clipped.push_back(ops::identity(ops::mul(t, as_dtype_of(t, scale, "clip_by_global_norm", "scale"))));
  }
  return {std::move(clipped), use_norm};
}

std::pair<std::vector<Output>, Output> clip_by_global_norm(const std::vector<Output>& t_list, double clip_norm,
                                                           Output use_norm, std::string name) {
  if (use_norm.is_null()) use_norm = global_norm(t_list, name.empty() ? "" : name + "/global_norm");
  return clip_by_global_norm(t_list, constant_like(use_norm, clip_norm), use_norm, std::move(name));
}

}  // namespace tessera::ops
