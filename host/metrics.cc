// The streaming metrics of tessera/metrics.h, built as TensorFlow 1's metrics_impl.py builds them:
// float32 local variables ("total" and "count", or one "count" per condition), assign_adds that
// return the updated value, and a safe division that is 0 while nothing has been counted.
#include "tessera/metrics.h"


#include <fmt/format.h>

#include "core/node.h"
#include "core/op_functions.h"
#include "host/graph_collection.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::metrics {
namespace {

// TF's GraphKeys.METRIC_VARIABLES; holds shared_ptr<Variable>.
constexpr const char* kMetricVariables = "metric_variables";

using internal::graph_of;
using internal::scope_name;
using internal::shapes_conflict;

void expect_tensor(const Output& t, const char* metric, const char* arg) {
  internal::expect_not_null(t, fmt::format("metrics::{}", metric).c_str(), arg);
}

Output to_float(const Output& x) { return x.dtype() == DType::Float32 ? x : ops::cast(x, DType::Float32); }

// A float32 scalar local variable starting at 0, named `name` under the current scope, also in
// metric_variables(g).
Variable metric_variable(Graph& g, const char* name) {
  Variable v = local_variable(g, Tensor::scalar(0.0f), name);
  internal::add_to_variable_collection(g, kMetricVariables, v);
  return v;
}

// num / den, 0 where den is 0 (TF's _safe_div; den counts, so it is never negative).
Output safe_div(const Output& num, const Output& den) {
  const Output zero = ops::zeros_like(den);
  return ops::where(ops::greater(den, zero), ops::div(num, den), zero);
}

// `weights` as float32 of `values`' shape (null: none given); they must broadcast to it.
Output broadcast_weights(const Output& weights, const Output& values, const char* metric) {
  if (weights.is_null()) return weights;
  Output w;
  try {
    w = ops::mul(to_float(weights), ops::ones_like(values));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(fmt::format("metrics::{}: weights of shape {} do not broadcast to the values' shape {} ({})",
                                           metric, weights.shape().to_string(), values.shape().to_string(), e.what()));
  }
  if (shapes_conflict(w.shape(), values.shape())) {
    throw InvalidArgumentError(fmt::format("metrics::{}: weights of shape {} do not broadcast to the values' shape {}",
                                           metric, weights.shape().to_string(), values.shape().to_string()));
  }
  return w;
}

// The sum of the (weighted) float32 values, and the sum of their weights (their number unweighted).
std::pair<Output, Output> weighted_sums(const Output& values, const Output& weights, const char* metric) {
  const Output w = broadcast_weights(weights, values, metric);
  if (w.is_null()) return {ops::reduce_sum(values), ops::cast(ops::size(values), DType::Float32)};
  return {ops::reduce_sum(ops::mul(values, w)), ops::reduce_sum(w)};
}

// labels and predictions of one shape, as TF's _remove_squeezable_dimensions: a trailing dim of 1
// on the one of higher rank (by one) is squeezed away; other mismatches are InvalidArgumentErrors.
std::pair<Output, Output> matched(Output labels, Output predictions, const char* metric) {
  expect_tensor(labels, metric, "labels");
  expect_tensor(predictions, metric, "predictions");
  const Shape& l = labels.shape();
  const Shape& p = predictions.shape();
  if (!l.unknown_rank() && !p.unknown_rank()) {
    if (l.rank() == p.rank() + 1 && l.dim(l.rank() - 1) == 1) labels = ops::squeeze(labels, {-1});
    if (p.rank() == l.rank() + 1 && p.dim(p.rank() - 1) == 1) predictions = ops::squeeze(predictions, {-1});
  }
  if (shapes_conflict(labels.shape(), predictions.shape())) {
    throw InvalidArgumentError(fmt::format("metrics::{}: labels of shape {} and predictions of shape {} do not match",
                                           metric, l.to_string(), p.to_string()));
  }
  return {labels, predictions};
}

// The mean of `values` (float32) under the scope `scope`.
Metric mean_of(const Output& values, const Output& weights, const std::string& scope, const char* metric) {
  Graph& g = graph_of(values);
  GraphScope in_scope = g.name_scope(scope);
  Variable total = metric_variable(g, "total");
  Variable count = metric_variable(g, "count");
  const auto [sum, n] = weighted_sums(values, weights, metric);
  const Output update = safe_div(total.assign_add(sum), count.assign_add(n));
  return {safe_div(total.read_value(), count.read_value()), update};
}

// The weighted number of elements where `condition` (bool) holds, under the scope `scope`.
Metric count_of(const Output& condition, const Output& weights, const std::string& scope, const char* metric) {
  Graph& g = graph_of(condition);
  GraphScope in_scope = g.name_scope(scope);
  Variable count = metric_variable(g, "count");
  const Output values = to_float(condition);
  const Output w = broadcast_weights(weights, values, metric);
  const Output update = count.assign_add(ops::reduce_sum(w.is_null() ? values : ops::mul(values, w)));
  return {count.read_value(), update};
}

// The bool labels and predictions of the counting metrics (numbers are cast: nonzero is true, as TF).
std::pair<Output, Output> as_bools(Output labels, Output predictions, const char* metric) {
  auto [l, p] = matched(std::move(labels), std::move(predictions), metric);
  auto to_bool = [](const Output& x) { return x.dtype() == DType::Bool ? x : ops::cast(x, DType::Bool); };
  return {to_bool(l), to_bool(p)};
}

}  // namespace

Metric mean(Output values, Output weights, std::string name) {
  expect_tensor(values, "mean", "values");
  return mean_of(to_float(values), weights, scope_name(name, "mean"), "mean");
}

Metric accuracy(Output labels, Output predictions, Output weights, std::string name) {
  expect_tensor(labels, "accuracy", "labels");
  expect_tensor(predictions, "accuracy", "predictions");
  if (predictions.dtype() != labels.dtype()) predictions = ops::cast(predictions, labels.dtype());
  auto [l, p] = matched(labels, predictions, "accuracy");
  return mean_of(to_float(ops::equal(p, l)), weights, scope_name(name, "accuracy"), "accuracy");
}

Metric mean_squared_error(Output labels, Output predictions, Output weights, std::string name) {
  auto [l, p] = matched(std::move(labels), std::move(predictions), "mean_squared_error");
  return mean_of(ops::squared_difference(to_float(l), to_float(p)), weights, scope_name(name, "mean_squared_error"),
                 "mean_squared_error");
}

Metric mean_absolute_error(Output labels, Output predictions, Output weights, std::string name) {
  auto [l, p] = matched(std::move(labels), std::move(predictions), "mean_absolute_error");
  return mean_of(ops::abs(ops::sub(to_float(l), to_float(p))), weights, scope_name(name, "mean_absolute_error"),
                 "mean_absolute_error");
}

Metric root_mean_squared_error(Output labels, Output predictions, Output weights, std::string name) {
  const std::string scope = scope_name(name, "root_mean_squared_error");
  GraphScope in_scope = graph_of(predictions.is_null() ? labels : predictions).name_scope(scope);
  auto [mse, update] = mean_squared_error(std::move(labels), std::move(predictions), std::move(weights));
  return {ops::sqrt(mse), ops::sqrt(update)};
}

Metric true_positives(Output labels, Output predictions, Output weights, std::string name) {
  auto [l, p] = as_bools(std::move(labels), std::move(predictions), "true_positives");
  return count_of(ops::logical_and(l, p), weights, scope_name(name, "true_positives"), "true_positives");
}

Metric false_positives(Output labels, Output predictions, Output weights, std::string name) {
  auto [l, p] = as_bools(std::move(labels), std::move(predictions), "false_positives");
  return count_of(ops::logical_and(ops::logical_not(l), p), weights, scope_name(name, "false_positives"),
                  "false_positives");
}

Metric false_negatives(Output labels, Output predictions, Output weights, std::string name) {
  auto [l, p] = as_bools(std::move(labels), std::move(predictions), "false_negatives");
  return count_of(ops::logical_and(l, ops::logical_not(p)), weights, scope_name(name, "false_negatives"),
                  "false_negatives");
}

namespace {

// tp / (tp + other), where other counts the false positives (precision) or negatives (recall).
template <class Other>
Metric ratio_of_true_positives(Output labels, Output predictions, Output weights, const std::string& scope,
                               Other other) {
  expect_tensor(labels, scope.c_str(), "labels");
  GraphScope in_scope = graph_of(labels).name_scope(scope);
  auto [tp, tp_update] = true_positives(labels, predictions, weights);
  auto [o, o_update] = other(labels, predictions, weights, "");
  return {safe_div(tp, ops::add(tp, o)), safe_div(tp_update, ops::add(tp_update, o_update))};
}

}  // namespace

Metric precision(Output labels, Output predictions, Output weights, std::string name) {
  return ratio_of_true_positives(std::move(labels), std::move(predictions), std::move(weights),
                                 scope_name(name, "precision"), &false_positives);
}

Metric recall(Output labels, Output predictions, Output weights, std::string name) {
  return ratio_of_true_positives(std::move(labels), std::move(predictions), std::move(weights),
                                 scope_name(name, "recall"), &false_negatives);
}

std::vector<Variable> metric_variables(Graph& g) { return internal::variable_collection(g, kMetricVariables); }

}  // namespace tessera::metrics
