// The losses of tessera/losses.h, built as TensorFlow 1.15's losses_impl.py builds them: each
// loss function makes its per-element losses in float32 under its name scope and hands them to
// the one weighting and reduction (weighted() below, TF's compute_weighted_loss), whose divisions
// are TF's div_no_nan (0 where the denominator is 0, with a finite gradient there too).
#include "tessera/losses.h"

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/op_functions.h"
#include "host/graph_collection.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::losses {
namespace {

using internal::graph_of;
using internal::scalar_constant;
using internal::scope_name;
using internal::shapes_conflict;

// "losses::<fn>", the prefix of every message.
std::string what_of(const char* fn) { return fmt::format("losses::{}", fn); }

void expect_tensor(const Output& t, const char* fn, const char* arg) {
  internal::expect_not_null(t, what_of(fn).c_str(), arg);
}

Output to_float(const Output& x) { return x.dtype() == DType::Float32 ? x : ops::cast(x, DType::Float32); }

// `a` and `b` (named `a_name`, `b_name`) must be able to have one shape (TF's
// assert_is_compatible_with).
void expect_compatible(const Output& a, const Output& b, const char* fn, const char* a_name, const char* b_name) {
  if (shapes_conflict(a.shape(), b.shape())) {
    throw InvalidArgumentError(fmt::format("{}: {} of shape {} and {} of shape {} are not compatible", what_of(fn),
                                           a_name, a.shape().to_string(), b_name, b.shape().to_string()));
  }
}

// num / den where den > 0, else 0 (TF's div_no_nan for a den that is never negative); the division
// never sees a 0, so no NaN reaches the gradient either. `name` names the result.
Output div_no_nan(const Output& num, const Output& den, const std::string& name = "") {
  const Output zeros = ops::zeros_like(den);
  const Output safe_den = ops::where(ops::equal(den, zeros), ops::ones_like(den), den);
  return ops::where(ops::greater(den, zeros), ops::div(num, safe_den), ops::zeros_like(num), name);
}

// The weights as a float32 Output in the graph of `like`.
Output weights_tensor(const Weights& weights, const Output& like, const char* fn) {
  if (!weights.is_tensor()) return scalar_constant(graph_of(like), DType::Float32, weights.number());
  expect_tensor(weights.tensor(), fn, "weights");
  return to_float(weights.tensor());
}

// TF's assert_broadcastable, at build time: weights of rank 0, or of the values' rank with each dim
// 1 or the values' dim. Returns whether the shapes known now prove it (false: the run decides).
bool weights_broadcast_statically(const Shape& w, const Shape& v, const char* fn) {
  if (w.unknown_rank()) return false;
  if (w.rank() == 0) return true;
  if (v.unknown_rank()) return false;
  if (w.rank() != v.rank()) {
    throw InvalidArgumentError(
        fmt::format("{}: weights can not be broadcast to values: values.rank={}, weights.rank={} (values.shape={}, "
                    "weights.shape={}); weights must be a scalar or of the values' rank",
                    what_of(fn), v.rank(), w.rank(), v.to_string(), w.to_string()));
  }
  bool known = true;
  for (int i = 0; i < w.rank(); ++i) {
    if (w.dim(i) < 0 || v.dim(i) < 0) {
      known = known && w.dim(i) == 1;
      continue;
    }
    if (w.dim(i) != 1 && w.dim(i) != v.dim(i)) {
      throw InvalidArgumentError(fmt::format(
          "{}: weights can not be broadcast to values: mismatch at dim {} (values.shape={}, weights.shape={}); "
          "each dim of the weights must be 1 or the values' dim",
          what_of(fn), i, v.to_string(), w.to_string()));
    }
  }
  return known;
}

// x times the weights, of x's shape: when the shapes known now do not prove the weights broadcast,
// the product is reshaped to x's shape as it is when the loss runs, which fails the run when the
// weights would have made it larger.
Output times_weights(const Output& x, const Output& w, bool checked) {
  const Output product = ops::mul(x, w);
  if (checked) return product;
  GraphScope in_scope = graph_of(x).name_scope("assert_broadcastable");
  return internal::reshape_to_shape_of(product, x);
}

// The number (float32) of x's elements whose broadcast weight is nonzero; `per_batch`: for each
// example (dim 0), keeping x's rank.
Output num_present(const Output& x, const Weights& weights, const Output& w, bool checked, bool per_batch) {
  Graph& g = graph_of(x);
  if (!weights.is_tensor() && weights.number() != 0.0 && !per_batch) {
    return ops::cast(ops::size(x), DType::Float32, "num_elements");
  }
  GraphScope in_scope = g.name_scope("num_present");
  const Output present = ops::where(ops::equal(w, ops::zeros_like(w)), ops::zeros_like(w), ops::ones_like(w));
  const Output broadcast = times_weights(ops::ones_like(x), present, checked);
  if (!per_batch) return ops::reduce_sum(broadcast);
  std::vector<int> axes;
  for (int i = 1; i < x.shape().rank(); ++i) axes.push_back(i);
  return axes.empty() ? broadcast : ops::reduce_sum(broadcast, axes, /*keep_dims=*/true);
}

void add_to_losses(const Output& loss, const LossOptions& options) {
  if (options.add_to_collection) add_loss(loss);
}

// TF's compute_weighted_loss, in the current name scope.
Output weighted(const Output& losses, const Weights& weights, const LossOptions& options, const char* fn) {
  const Output w = weights_tensor(weights, losses, fn);
  const bool checked = weights_broadcast_statically(w.shape(), losses.shape(), fn);
  const DType input_dtype = losses.dtype();
  const bool cast_back = input_dtype != DType::Float32;
  const std::string value = cast_back ? "" : "value";
  const Output x = to_float(losses);
  const Output weighted_losses = times_weights(x, w, checked);
  Output loss;
  if (options.reduction == Reduction::none) {
    loss = weighted_losses;
  } else {
    switch (options.reduction) {
      case Reduction::sum:
        loss = ops::reduce_sum(weighted_losses, {}, false, value);
        break;
      case Reduction::mean:
        loss = div_no_nan(ops::reduce_sum(weighted_losses),
                          ops::reduce_sum(times_weights(ops::ones_like(x), w, checked)), value);
        break;
      case Reduction::sum_over_batch_size:
        loss = div_no_nan(ops::reduce_sum(weighted_losses), ops::cast(ops::size(x), DType::Float32, "num_elements"),
                          value);
        break;
      case Reduction::sum_by_nonzero_weights:
        loss = div_no_nan(ops::reduce_sum(weighted_losses), num_present(x, weights, w, checked, false), value);
        break;
      case Reduction::none:
        break;
    }
  }
  if (cast_back) loss = ops::cast(loss, input_dtype, "value");
  add_to_losses(loss, options);
  return loss;
}

// labels and predictions as float32 of compatible shapes (the elementwise losses' preamble).
std::pair<Output, Output> float_pair(const Output& labels, const Output& predictions, const char* fn,
                                     const char* predictions_name = "predictions") {
  expect_tensor(labels, fn, "labels");
  expect_tensor(predictions, fn, predictions_name);
  expect_compatible(predictions, labels, fn, predictions_name, "labels");
  return {to_float(labels), to_float(predictions)};
}

// logits (floating) and the labels cast to their dtype, of compatible shapes.
Output labels_like_logits(const Output& labels, const Output& logits, const char* fn, const char* labels_name) {
  expect_tensor(labels, fn, labels_name);
  expect_tensor(logits, fn, "logits");
  internal::expect_floating(logits, what_of(fn).c_str());
  expect_compatible(logits, labels, fn, "logits", labels_name);
  return labels.dtype() == logits.dtype() ? labels : ops::cast(labels, logits.dtype());
}

void expect_args(const Output& a, const Output& b, const char* fn, const char* a_name, const char* b_name) {
  expect_tensor(a, fn, a_name);
  expect_tensor(b, fn, b_name);
}

}  // namespace

Output compute_weighted_loss(Output losses, Weights weights, const LossOptions& options) {
  expect_tensor(losses, "compute_weighted_loss", "losses");
  GraphScope in_scope = graph_of(losses).name_scope(scope_name(options.scope, "weighted_loss"));
  return weighted(losses, weights, options, "compute_weighted_loss");
}

Output absolute_difference(Output labels, Output predictions, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "absolute_difference";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  GraphScope in_scope = graph_of(labels).name_scope(scope_name(options.scope, kFn));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  return weighted(ops::abs(ops::sub(p, l)), weights, options, kFn);
}

Output mean_squared_error(Output labels, Output predictions, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "mean_squared_error";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  GraphScope in_scope = graph_of(labels).name_scope(scope_name(options.scope, kFn));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  return weighted(ops::squared_difference(p, l), weights, options, kFn);
}

Output huber_loss(Output labels, Output predictions, Weights weights, double delta, const LossOptions& options) {
  constexpr const char* kFn = "huber_loss";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  Graph& g = graph_of(labels);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, kFn));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  const Output abs_error = ops::abs(ops::sub(p, l));
  const Output d = scalar_constant(g, DType::Float32, delta);
  const Output quadratic = ops::minimum(abs_error, d);
  // abs_error - quadratic is max(abs_error - delta, 0) in value, but its gradient at
  // abs_error == delta is 0 (maximum's would be 1, doubling the quadratic term's there), as TF's.
  const Output linear = ops::sub(abs_error, quadratic);
  const Output losses = ops::add(ops::mul(scalar_constant(g, DType::Float32, 0.5), ops::mul(quadratic, quadratic)),
                                 ops::mul(d, linear));
  return weighted(losses, weights, options, kFn);
}

Output log_loss(Output labels, Output predictions, Weights weights, double epsilon, const LossOptions& options) {
  constexpr const char* kFn = "log_loss";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  Graph& g = graph_of(labels);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, kFn));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  const Output eps = scalar_constant(g, DType::Float32, epsilon);
  const Output one = scalar_constant(g, DType::Float32, 1.0);
  const Output losses = ops::sub(ops::neg(ops::mul(l, ops::log(ops::add(p, eps)))),
                                 ops::mul(ops::sub(one, l), ops::log(ops::add(ops::sub(one, p), eps))));
  return weighted(losses, weights, options, kFn);
}

Output hinge_loss(Output labels, Output logits, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "hinge_loss";
  expect_args(labels, logits, kFn, "labels", "logits");
  Graph& g = graph_of(labels);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, kFn));
  const auto [l, x] = float_pair(labels, logits, kFn, "logits");
  // Labels 0/1 become -1/1.
  const Output all_ones = ops::ones_like(l);
  const Output signs = ops::sub(ops::mul(scalar_constant(g, DType::Float32, 2.0), l), all_ones);
  return weighted(ops::relu(ops::sub(all_ones, ops::mul(signs, x))), weights, options, kFn);
}

Output sigmoid_cross_entropy(Output multi_class_labels, Output logits, Weights weights, double label_smoothing,
                             const LossOptions& options) {
  constexpr const char* kFn = "sigmoid_cross_entropy";
  expect_args(multi_class_labels, logits, kFn, "multi_class_labels", "logits");
  Graph& g = graph_of(logits);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, "sigmoid_cross_entropy_loss"));
  Output labels = labels_like_logits(multi_class_labels, logits, kFn, "multi_class_labels");
  if (label_smoothing > 0) {
    labels = ops::add(ops::mul(labels, internal::constant_like(logits, 1 - label_smoothing)),
                      internal::constant_like(logits, 0.5 * label_smoothing));
  }
  return weighted(ops::sigmoid_cross_entropy_with_logits(labels, logits, "xentropy"), weights, options, kFn);
}

Output softmax_cross_entropy(Output onehot_labels, Output logits, Weights weights, double label_smoothing,
                             const LossOptions& options) {
  constexpr const char* kFn = "softmax_cross_entropy";
  expect_args(onehot_labels, logits, kFn, "onehot_labels", "logits");
  Graph& g = graph_of(logits);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, "softmax_cross_entropy_loss"));
  Output labels = labels_like_logits(onehot_labels, logits, kFn, "onehot_labels");
  if (label_smoothing > 0) {
    const Shape& s = labels.shape();
    Output num_classes;
    if (!s.unknown_rank() && s.rank() > 0 && s.dim(-1) >= 0) {
      num_classes = internal::constant_like(logits, static_cast<double>(s.dim(-1)));
    } else {
      const Output dims = ops::shape(labels);
      num_classes = ops::cast(ops::gather(dims, ops::sub(ops::size(dims), ops::constant(g, int32_t{1}))),
                              logits.dtype(), "num_classes");
    }
    labels = ops::add(ops::mul(labels, internal::constant_like(logits, 1 - label_smoothing)),
                      ops::div(internal::constant_like(logits, label_smoothing), num_classes));
  }
  labels = ops::stop_gradient(labels, "labels_stop_gradient");
  return weighted(ops::softmax_cross_entropy_with_logits(labels, logits, "xentropy"), weights, options, kFn);
}

Output sparse_softmax_cross_entropy(Output labels, Output logits, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "sparse_softmax_cross_entropy";
  expect_args(labels, logits, kFn, "labels", "logits");
  Graph& g = graph_of(logits);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, "sparse_softmax_cross_entropy_loss"));
  // TF's _remove_squeezable_dimensions with expected_rank_diff 1 (logits have the classes dim).
  const Shape ls = labels.shape();
  const Shape xs = logits.shape();
  if (!ls.unknown_rank() && !xs.unknown_rank()) {
    const int diff = xs.rank() - ls.rank();
    if (diff == 0 && ls.rank() > 0 && (ls.dim(-1) == 1 || ls.dim(-1) < 0)) labels = ops::squeeze(labels, {-1});
    if (diff == 2 && xs.dim(-1) == 1) logits = ops::squeeze(logits, {-1});
  }
  Output w = weights.is_tensor() ? weights.tensor() : Output();
  if (weights.is_tensor()) {
    expect_tensor(w, kFn, "weights");
    const Shape ws = w.shape();
    const Shape& nl = labels.shape();
    if (!ws.unknown_rank() && !nl.unknown_rank() && ws.rank() == nl.rank() + 1) {
      if (ws.dim(-1) > 1) {
        throw InvalidArgumentError(fmt::format(
            "{}: weights of shape {} have one dim more than the labels ({}) and cannot lose it: it is not 1",
            what_of(kFn), ws.to_string(), nl.to_string()));
      }
      w = ops::squeeze(w, {-1});
    }
  }
  // The op takes labels [batch] and logits [batch, classes]; other ranks are flattened to those.
  const Shape& nl = labels.shape();
  const Shape& nx = logits.shape();
  if (!nl.unknown_rank() && !nx.unknown_rank()) {
    if (nx.rank() != nl.rank() + 1 || shapes_conflict(nl, nx.sub_shape(0, nx.rank() - 1))) {
      throw InvalidArgumentError(fmt::format(
          "{}: labels of shape {} and logits of shape {} do not match: logits must be the labels' shape with one "
          "dimension more (the classes)",
          what_of(kFn), ls.to_string(), xs.to_string()));
    }
  }
  Output losses;
  if (!nl.unknown_rank() && nl.rank() != 1 && nx.dim(-1) >= 0) {
    const Output flat = ops::sparse_softmax_cross_entropy_with_logits(
        ops::reshape(labels, {-1}), ops::reshape(logits, {-1, nx.dim(-1)}), "xentropy");
    losses = internal::reshape_to_shape_of(flat, labels);
  } else {
    losses = ops::sparse_softmax_cross_entropy_with_logits(labels, logits, "xentropy");
  }
  return weighted(losses, w.is_null() ? weights : Weights(w), options, kFn);
}

Output cosine_distance(Output labels, Output predictions, int axis, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "cosine_distance";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  Graph& g = graph_of(labels);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, "cosine_distance_loss"));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  const Shape& s = l.shape();
  if (!s.unknown_rank() && (axis < -s.rank() || axis >= s.rank())) {
    throw InvalidArgumentError(fmt::format("{}: axis {} is outside [-{}, {}) for labels of shape {}", what_of(kFn),
                                           axis, s.rank(), s.rank(), s.to_string()));
  }
  const Output losses =
      ops::sub(scalar_constant(g, DType::Float32, 1.0), ops::reduce_sum(ops::mul(p, l), {axis}, /*keep_dims=*/true));
  return weighted(losses, weights, options, kFn);
}

Output mean_pairwise_squared_error(Output labels, Output predictions, Weights weights, const LossOptions& options) {
  constexpr const char* kFn = "mean_pairwise_squared_error";
  expect_args(labels, predictions, kFn, "labels", "predictions");
  if (options.reduction != Reduction::sum_by_nonzero_weights) {
    throw InvalidArgumentError(fmt::format(
        "{}: has no reduction (as TF 1.15's): it sums the weighted per-example losses over the batch; leave "
        "LossOptions::reduction at its default",
        what_of(kFn)));
  }
  Graph& g = graph_of(labels);
  GraphScope in_scope = g.name_scope(scope_name(options.scope, kFn));
  const auto [l, p] = float_pair(labels, predictions, kFn);
  const Output w = weights_tensor(weights, l, kFn);
  const bool checked = weights_broadcast_statically(w.shape(), l.shape(), kFn);
  const Output diffs = ops::sub(p, l);
  const int rank = diffs.shape().rank();
  if (rank < 1) {
    throw InvalidArgumentError(
        fmt::format("{}: labels and predictions need a known rank of at least 1 (dim 0 is the batch), not shape {}",
                    what_of(kFn), diffs.shape().to_string()));
  }
  std::vector<int> axes;
  for (int i = 1; i < rank; ++i) axes.push_back(i);
  auto per_example_sum = [&](const Output& x) { return axes.empty() ? x : ops::reduce_sum(x, axes, true); };
  const Output sum_squares = per_example_sum(ops::square(diffs));
  const Output n = num_present(diffs, weights, w, checked, /*per_batch=*/true);
  const Output one = scalar_constant(g, DType::Float32, 1.0);
  const Output zero = scalar_constant(g, DType::Float32, 0.0);
  const Output two = scalar_constant(g, DType::Float32, 2.0);
  const Output n_minus_1 = ops::sub(n, one);
  const Output term1 = ops::mul(two, div_no_nan(sum_squares, ops::maximum(n_minus_1, zero)));
  const Output sum_diff = per_example_sum(diffs);
  const Output term2 = ops::mul(two, div_no_nan(ops::square(sum_diff), ops::maximum(ops::mul(n, n_minus_1), zero)));
  const Output loss = ops::reduce_sum(ops::mul(ops::sub(term1, term2), w));
  const Output mean_loss = ops::where(ops::greater(ops::reduce_sum(n), zero), loss, ops::zeros_like(loss), "value");
  add_to_losses(mean_loss, options);
  return mean_loss;
}

void add_loss(Output loss) {
  expect_tensor(loss, "add_loss", "loss");
  internal::add_to_collection<Output>(graph_of(loss), internal::kLossesCollection, loss);
}

std::vector<Output> get_losses(Graph& g) { return internal::collection<Output>(g, internal::kLossesCollection); }

std::vector<Output> get_regularization_losses(Graph& g) {
  return internal::collection<Output>(g, internal::kRegularizationLossesCollection);
}

Output get_regularization_loss(Graph& g, std::string name) {
  std::vector<Output> penalties = get_regularization_losses(g);
  if (penalties.empty()) return ops::constant(g, 0.0f, std::move(name));
  try {
    return ops::add_n(std::move(penalties), std::move(name));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(
        fmt::format("{}: the regularization losses cannot be added: {}", what_of("get_regularization_loss"), e.what()));
  }
}

Output get_total_loss(Graph& g, bool add_regularization_losses, std::string name) {
  std::vector<Output> all = get_losses(g);
  if (add_regularization_losses) {
    for (const Output& r : get_regularization_losses(g)) all.push_back(r);
  }
  if (all.empty()) {
    throw InvalidArgumentError(
        fmt::format("{}: no losses are found in the graph's LOSSES collection{}", what_of("get_total_loss"),
                    add_regularization_losses ? " nor in its REGULARIZATION_LOSSES collection" : ""));
  }
  try {
    return ops::add_n(std::move(all), std::move(name));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(fmt::format("{}: the losses cannot be added: {}", what_of("get_total_loss"), e.what()));
  }
}

}  // namespace tessera::losses
