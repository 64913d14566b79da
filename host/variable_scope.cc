// Variable scopes, get_variable and the initializers of tessera/variable_scope.h, as TensorFlow
// 1's variable_scope.py and init_ops.py. Like TF, which keeps its variable store and scope in graph
// collections, the state is one VariableStore per graph, in the graph's collections.
#include "tessera/variable_scope.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "host/graph_collection.h"
#include "host/variable_store.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

struct ScopeFrame {
  std::string name;  // full name, "" at the top
  Reuse reuse = Reuse::inherit;
  Initializer initializer;
  Regularizer regularizer;
};

// TF's _VariableStore and _VariableScopeStore of one graph.
struct VariableStore {
  ScopeFrame current;
  std::map<std::string, int> scope_counts;  // how often each full scope name was opened
  std::map<std::string, Variable> variables;  // made by get_variable, by full name

  // TF's open_variable_scope: counts `name`, for unique_variable_scope.
  void open(const std::string& name) { ++scope_counts[name]; }
  // TF's close_variable_subscopes, when the scope `name` is left: the counts of the scopes inside
  // it start again.
  void close_subscopes(const std::string& name) {
    const std::string prefix = name + "/";
    for (auto it = scope_counts.lower_bound(prefix); it != scope_counts.end();) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      it = scope_counts.erase(it);
    }
  }
};

constexpr const char kVariableStoreKey[] = "__variable_store";

VariableStore& store_of(Graph& g) {
  internal::GraphImpl& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  auto& entries = impl.collections_[kVariableStoreKey];
  if (entries.empty()) entries.push_back(std::make_shared<VariableStore>());
  return *static_cast<VariableStore*>(entries.front().get());
}

// Sets the name scope to `scope` itself, not inside the current one (get_variable's names ignore
// name scopes); restores it at the end.
GraphScope absolute_name_scope(Graph& g, std::string scope) {
  internal::GraphImpl& impl = g.impl();
  std::string previous = std::exchange(impl.name_scope_, std::move(scope));
  return GraphScope([&impl, previous] { impl.name_scope_ = previous; });
}

void check_scope_name(const std::string& name, const char* what) {
  if (name.empty()) throw InvalidArgumentError(fmt::format("{}: the name is empty", what));
  if (name.find(':') != std::string::npos || name.front() == '/' || name.back() == '/') {
    throw InvalidArgumentError(
        fmt::format("{}: '{}' is not a valid name (no ':', no leading or trailing '/')", what, name));
  }
}

// ---- initializers ----

void expect_floating_dtype(DType dtype, const char* initializer) {
  if (!dtype_is_floating(dtype)) {
    throw InvalidArgumentError(
        fmt::format("initializers::{}: {} is not a floating point dtype", initializer, dtype_name(dtype)));
  }
}

void expect_defined(const Shape& shape, const char* initializer) {
  if (!shape.fully_defined()) {
    throw InvalidArgumentError(
        fmt::format("initializers::{}: the shape {} is not fully defined", initializer, shape.to_string()));
  }
}

Output filled(Graph& g, const Shape& shape, DType dtype, double value, const char* initializer) {
  expect_defined(shape, initializer);
  switch (dtype) {
    case DType::Float32: return ops::fill(g, shape, Tensor::scalar(static_cast<float>(value)));
    case DType::Float64: return ops::fill(g, shape, Tensor::scalar(value));
    case DType::Int32: return ops::fill(g, shape, Tensor::scalar(static_cast<int32_t>(value)));
    case DType::Int64: return ops::fill(g, shape, Tensor::scalar(static_cast<int64_t>(value)));
    case DType::Bool: return ops::fill(g, shape, Tensor::scalar(value != 0));
    case DType::Float16:
    case DType::BFloat16: return ops::cast(ops::fill(g, shape, Tensor::scalar(static_cast<float>(value))), dtype);
    default:
      throw InvalidArgumentError(
          fmt::format("initializers::{}: no numeric value for {}", initializer, dtype_name(dtype)));
  }
}

// x * scale + shift, in x's dtype (nothing added where scale is 1 and shift 0).
Output affine(const Output& x, double scale, double shift) {
  Output y = x;
  if (scale != 1) y = ops::mul(y, internal::constant_like(x, scale));
  if (shift != 0) y = ops::add(y, internal::constant_like(x, shift));
  return y;
}

Output uniform(Graph& g, const Shape& shape, DType dtype, double minval, double maxval, uint64_t seed,
               const char* initializer) {
  expect_floating_dtype(dtype, initializer);
  expect_defined(shape, initializer);
  return affine(ops::random_uniform(g, shape, dtype, seed), maxval - minval, minval);
}

Output normal(Graph& g, const Shape& shape, DType dtype, double mean, double stddev, uint64_t seed,
              const char* initializer) {
  expect_floating_dtype(dtype, initializer);
  expect_defined(shape, initializer);
  return affine(ops::random_normal(g, shape, dtype, seed), stddev, mean);
}

Output truncated(Graph& g, const Shape& shape, DType dtype, double mean, double stddev, uint64_t seed,
                 const char* initializer) {
  expect_floating_dtype(dtype, initializer);
  expect_defined(shape, initializer);
  return affine(ops::truncated_normal(g, shape, dtype, seed), stddev, mean);
}

// TF's _compute_fans: a matrix's rows and columns; a filter's channels times its window.
std::pair<double, double> fans(const Shape& shape) {
  const int r = shape.rank();
  if (r < 1) return {1, 1};
  if (r == 1) return {static_cast<double>(shape.dim(0)), static_cast<double>(shape.dim(0))};
  double receptive = 1;
  for (int i = 0; i < r - 2; ++i) receptive *= static_cast<double>(shape.dim(i));
  return {static_cast<double>(shape.dim(r - 2)) * receptive, static_cast<double>(shape.dim(r - 1)) * receptive};
}

// The standard deviation of a unit normal truncated at two standard deviations.
constexpr double kTruncatedStddev = 0.87962566103423978;

}  // namespace

namespace initializers {

Initializer zeros() {
  return [](Graph& g, const Shape& s, DType d) { return filled(g, s, d, 0, "zeros"); };
}
Initializer ones() {
  return [](Graph& g, const Shape& s, DType d) { return filled(g, s, d, 1, "ones"); };
}
Initializer constant(double value) {
  return [value](Graph& g, const Shape& s, DType d) { return filled(g, s, d, value, "constant"); };
}
Initializer random_uniform(double minval, double maxval, uint64_t seed) {
  return [=](Graph& g, const Shape& s, DType d) { return uniform(g, s, d, minval, maxval, seed, "random_uniform"); };
}
Initializer random_normal(double mean, double stddev, uint64_t seed) {
  return [=](Graph& g, const Shape& s, DType d) { return normal(g, s, d, mean, stddev, seed, "random_normal"); };
}
Initializer truncated_normal(double mean, double stddev, uint64_t seed) {
  return [=](Graph& g, const Shape& s, DType d) { return truncated(g, s, d, mean, stddev, seed, "truncated_normal"); };
}

Initializer variance_scaling(double scale, std::string mode, std::string distribution, uint64_t seed) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw InvalidArgumentError(fmt::format("initializers::variance_scaling: scale must be positive, not {}", scale));
  }
  if (mode != "fan_in" && mode != "fan_out" && mode != "fan_avg") {
    throw InvalidArgumentError(fmt::format(
        "initializers::variance_scaling: mode must be \"fan_in\", \"fan_out\" or \"fan_avg\", not \"{}\"", mode));
  }
  if (distribution == "normal") distribution = "truncated_normal";  // TF 1.15's older name for it
  if (distribution != "truncated_normal" && distribution != "untruncated_normal" && distribution != "uniform") {
    throw InvalidArgumentError(fmt::format(
        "initializers::variance_scaling: distribution must be \"truncated_normal\", \"untruncated_normal\" or "
        "\"uniform\", not \"{}\"",
        distribution));
  }
  return [=](Graph& g, const Shape& s, DType d) {
    expect_defined(s, "variance_scaling");
    auto [fan_in, fan_out] = fans(s);
    const double n = mode == "fan_in" ? fan_in : mode == "fan_out" ? fan_out : (fan_in + fan_out) / 2;
    const double variance = scale / std::max(1.0, n);
    if (distribution == "uniform") {
      const double limit = std::sqrt(3 * variance);
      return uniform(g, s, d, -limit, limit, seed, "variance_scaling");
    }
    if (distribution == "untruncated_normal") return normal(g, s, d, 0, std::sqrt(variance), seed, "variance_scaling");
    return truncated(g, s, d, 0, std::sqrt(variance) / kTruncatedStddev, seed, "variance_scaling");
  };
}

Initializer glorot_uniform(uint64_t seed) { return variance_scaling(1, "fan_avg", "uniform", seed); }
Initializer glorot_normal(uint64_t seed) { return variance_scaling(1, "fan_avg", "truncated_normal", seed); }
Initializer he_uniform(uint64_t seed) { return variance_scaling(2, "fan_in", "uniform", seed); }
Initializer he_normal(uint64_t seed) { return variance_scaling(2, "fan_in", "truncated_normal", seed); }
Initializer lecun_uniform(uint64_t seed) { return variance_scaling(1, "fan_in", "uniform", seed); }
Initializer lecun_normal(uint64_t seed) { return variance_scaling(1, "fan_in", "truncated_normal", seed); }

}  // namespace initializers

GraphScope variable_scope(Graph& g, const std::string& name, VariableScopeOptions options) {
  check_scope_name(name, "variable_scope");
  VariableStore& store = store_of(g);
  ScopeFrame previous = store.current;
  ScopeFrame next = previous;
  next.name = previous.name.empty() ? name : previous.name + "/" + name;
  if (options.reuse != Reuse::inherit) next.reuse = options.reuse;
  if (options.initializer) next.initializer = std::move(options.initializer);
  if (options.regularizer) next.regularizer = std::move(options.regularizer);
  auto names = std::make_shared<GraphScope>(g.name_scope(name));
  std::string full = next.name;
  store.open(full);
  store.current = std::move(next);
  return GraphScope([&store, previous, names, full]() mutable {
    store.close_subscopes(full);
    store.current = previous;
    names.reset();  // the name scope closes with the variable scope
  });
}

GraphScope variable_scope(Graph& g, const std::string& name, Reuse reuse) {
  return variable_scope(g, name, VariableScopeOptions{reuse, {}, {}});
}

std::string variable_scope_name(Graph& g) { return store_of(g).current.name; }

Variable get_variable(Graph& g, const std::string& name, const Shape& shape, DType dtype, Initializer initializer,
                      Regularizer regularizer, bool trainable) {
  check_scope_name(name, "get_variable");
  VariableStore& store = store_of(g);
  const ScopeFrame& scope = store.current;
  const std::string full = scope.name.empty() ? name : scope.name + "/" + name;

  if (auto it = store.variables.find(full); it != store.variables.end()) {
    if (scope.reuse == Reuse::inherit) {
      throw InvalidArgumentError(fmt::format(
          "get_variable: variable '{}' already exists, disallowed. Did you mean to set reuse=Reuse::reuse or "
          "Reuse::auto_reuse in its variable_scope?",
          full));
    }
    const Variable& found = it->second;
    if (!shape.compatible_with(found.shape())) {
      throw InvalidArgumentError(fmt::format("get_variable: trying to share variable '{}', but the shape {} was asked "
                                             "for and it has {}",
                                             full, shape.to_string(), found.shape().to_string()));
    }
    if (dtype != found.dtype()) {
      throw InvalidArgumentError(fmt::format("get_variable: trying to share variable '{}', but the dtype {} was asked "
                                             "for and it has {}",
                                             full, dtype_name(dtype), dtype_name(found.dtype())));
    }
    return found;
  }
  if (scope.reuse == Reuse::reuse) {
    throw InvalidArgumentError(fmt::format(
        "get_variable: variable '{}' does not exist, or was not made by get_variable. Did you mean to set "
        "reuse=Reuse::auto_reuse in its variable_scope?",
        full));
  }
  if (!shape.fully_defined()) {
    throw InvalidArgumentError(fmt::format("get_variable: the shape of the new variable '{}' must be fully defined, "
                                           "not {}",
                                           full, shape.to_string()));
  }
  if (!initializer) initializer = scope.initializer;
  if (!initializer) {
    if (dtype_is_floating(dtype)) {
      initializer = initializers::glorot_uniform();
    } else if (dtype == DType::Int32 || dtype == DType::Int64 || dtype == DType::Bool) {
      initializer = initializers::zeros();
    } else {
      throw InvalidArgumentError(
          fmt::format("get_variable: variable '{}' of {} needs an initializer", full, dtype_name(dtype)));
    }
  }
  if (!regularizer) regularizer = scope.regularizer;

  Variable var;
  {
    GraphScope outside = internal::without_control_dependencies(g.impl());
    Output initial;
    {
      GraphScope names = absolute_name_scope(g, full + "/Initializer");
      initial = initializer(g, shape, dtype);
    }
    if (initial.is_null() || initial.dtype() != dtype || !initial.shape().compatible_with(shape)) {
      throw InvalidArgumentError(fmt::format(
          "get_variable: the initializer of '{}' made {}, not a {} tensor of shape {}", full,
          initial.is_null() ? std::string("a null Output")
                            : fmt::format("a {} tensor of shape {}", dtype_name(initial.dtype()),
                                          initial.shape().to_string()),
          dtype_name(dtype), shape.to_string()));
    }
    GraphScope names = absolute_name_scope(g, "");
    var = Variable(initial, full, trainable);
  }
  store.variables.emplace(full, var);

  if (regularizer) {
    GraphScope colocate = g.colocate_with(var.op());
    GraphScope names = absolute_name_scope(g, var.name() + "/Regularizer");
    Output penalty = regularizer(var.value());
    if (!penalty.is_null()) internal::add_to_collection(g, internal::kRegularizationLossesCollection, penalty);
  }
  return var;
}

namespace internal {

std::string unique_variable_scope(Graph& g, const std::string& prefix) {
  VariableStore& store = store_of(g);
  const std::string base = store.current.name.empty() ? prefix : store.current.name + "/" + prefix;
  auto count = [&store](const std::string& n) {
    auto it = store.scope_counts.find(n);
    return it == store.scope_counts.end() ? 0 : it->second;
  };
  if (count(base) == 0) return prefix;
  int i = 1;
  while (count(fmt::format("{}_{}", base, i)) > 0) ++i;
  return fmt::format("{}_{}", prefix, i);
}

}  // namespace internal
}  // namespace tessera
