// The moving averages of tessera/moving_averages.h, as TensorFlow 1's moving_averages.py builds
// them: the update is an AssignSub (an Assign of the debiased value with zero_debias) named after
// its name scope, the shadows are variables made next to what they average.
#include "tessera/moving_averages.h"

#include <cmath>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/gradients.h"  // scalar_constant
#include "core/node.h"
#include "host/graph_collection.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {
namespace moving_average_detail {

// The debias state of a zero-initialized average (TF's _zero_debias): the biased average and the
// number of updates, made next to it. Outside the anonymous namespace: ExponentialMovingAverage's
// State (declared in the header) holds one.
struct DebiasState {
  Variable biased;
  Variable local_step;
};

}  // namespace moving_average_detail

using moving_average_detail::DebiasState;

namespace {

// TF's GraphKeys.MOVING_AVERAGE_VARIABLES; holds shared_ptr<Variable>.
constexpr const char* kMovingAverageVariables = "moving_average_variables";

// The current name scope with a trailing "/" ("" outside any).
std::string scope_prefix(Graph& g) {
  const std::string& scope = g.impl().name_scope_;
  return scope.empty() ? scope : scope + "/";
}

// `base`, or the first of base_1, base_2, ... that no op of `g` has under the current name scope:
// the name an op named `base` would get now (names are never freed, so the first free suffix is
// the graph's next one). Used to give the ops of an update a name scope named after the update op
// itself, as TF's name scopes are made unique and the update takes the scope's name.
std::string unused_name(Graph& g, const std::string& base) {
  const std::string prefix = scope_prefix(g);
  const internal::GraphImpl& impl = g.impl();
  if (impl.find(prefix + base) == nullptr) return base;
  for (int i = 1;; ++i) {
    std::string candidate = fmt::format("{}_{}", base, i);
    if (impl.find(prefix + candidate) == nullptr) return candidate;
  }
}


DebiasState make_debias_state(const Variable& average, const char* fn) {
  const Shape shape = average.shape();
  if (!shape.fully_defined()) {
    throw InvalidArgumentError(fmt::format("{}: '{}' has shape {}: zero_debias needs a fully defined shape", fn,
                                           average.name(), shape.to_string()));
  }
  Graph& g = average.op().graph();
  GraphScope outside = internal::without_control_dependencies(g.impl());
  GraphScope colocate = g.colocate_with(average.op());
  // Variable(g, Tensor, name) makes "<name>_N" when the name is taken, as TF's _maybe_get_unique.
  Variable biased(g, Tensor::zeros(average.dtype(), shape), average.name() + "/biased", /*trainable=*/false);
  Variable local_step(g, Tensor::zeros(average.dtype(), Shape{}), average.name() + "/local_step", /*trainable=*/false);
  return DebiasState{std::move(biased), std::move(local_step)};
}

// `value`, or when it is a variable's value (a VariableV2's output 0), a read of that variable made
// now, under the builder's scopes (Variable::read_value's read): it sees the updates a
// control_dependencies scope names (an averaged variable after the training step), as TF1's reads
// of a ref variable do, where the VariableV2's own output is its value early in the step.
Output read_now(const Output& value) {
  internal::Node* n = value.node();
  if (n->type != "VariableV2" || value.index() != 0) return value;
  return internal::read_variable(n);
}

// `op_type` ("Assign", "AssignSub") of `var` by `value`, named `name` (under the current name
// scope), colocated with var: the op an update returns takes the update's name, as TF's.
Output update_named(const Variable& var, const char* op_type, const Output& value, const std::string& name) {
  Graph& g = var.op().graph();
  GraphScope colocate = g.colocate_with(var.op());
  internal::Node* v = var.op().node();
  internal::NodeSpec spec{op_type, name};
  spec.inputs = {value};
  spec.resource = v;
  return Output(v->graph->add_node(std::move(spec)), 0);
}

// One moving-average update of `average` toward `value`, its ops under the name scope `name` (made
// unique) and the update named after it. one_minus_decay(g) builds 1 - decay in average's dtype
// inside that scope.
template <class OneMinusDecay>
Output moving_average_update(const Variable& average, const Output& value, OneMinusDecay one_minus_decay,
                             const DebiasState* debias, const std::string& name) {
  Graph& g = average.op().graph();
  const DType dtype = average.dtype();
  const std::string scope = unused_name(g, name);
  const char* op_type = "AssignSub";
  Output update;
  {
    GraphScope in_scope = g.name_scope(scope);
    const Output rate = one_minus_decay(g);
    const Output target = read_now(value);
    if (debias == nullptr) {
      update = ops::mul(ops::sub(read_now(average.value()), target), rate);
    } else {
      // TF's _zero_debias: the biased average and the step move first, the average is then their
      // quotient. decay is recovered as 1 - (1 - decay), as TF's `1.0 - decay`.
      const Output biased =
          debias->biased.assign_sub(ops::mul(ops::sub(read_now(debias->biased.value()), target), rate));
      const Output one = internal::scalar_constant(g, dtype, 1.0);
      const Output step = debias->local_step.assign_add(one);
      const Output bias_factor = ops::sub(one, ops::pow(ops::sub(one, rate), step));
      update = ops::div(biased, bias_factor);
      op_type = "Assign";
    }
  }
  return update_named(average, op_type, update, scope);
}

void expect_floating_variable(const Variable& variable, const char* fn) {
  if (!dtype_is_floating(variable.dtype())) {
    throw InvalidArgumentError(fmt::format("{}: variable '{}' is {}, not a floating point type", fn, variable.name(),
                                           dtype_name(variable.dtype())));
  }
}

void expect_value(const Variable& variable, const Output& value, const char* fn) {
  if (value.is_null()) {
    throw InvalidArgumentError(fmt::format("{}: the value for '{}' is a null tensor", fn, variable.name()));
  }
  if (value.dtype() != variable.dtype()) {
    throw InvalidArgumentError(fmt::format("{}: variable '{}' is {}, the value {} is {}", fn, variable.name(),
                                           dtype_name(variable.dtype()), value.name(), dtype_name(value.dtype())));
  }
}

void expect_finite_decay(double decay, const std::string& who) {
  if (!std::isfinite(decay)) throw InvalidArgumentError(fmt::format("{}: decay must be finite, got {}", who, decay));
}

// 1 - decay for a decay tensor, in `dtype` (TF's convert_to_tensor(1.0 - decay) then the cast).
Output one_minus(Graph& g, const Output& decay, DType dtype) {
  const Output rate = ops::sub(internal::scalar_constant(g, decay.dtype(), 1.0), decay);
  return rate.dtype() == dtype ? rate : ops::cast(rate, dtype);
}

void add_moving_average_variable(Graph& g, const Variable& var) {
  internal::add_to_variable_collection(g, kMovingAverageVariables, var, /*once=*/true);
}

}  // namespace

namespace {

// What both assign_moving_average overloads do around their 1 - decay: the checks, the debias
// state, the update.
template <class OneMinusDecay>
Output assign_moving_average_with(const Variable& variable, const Output& value, bool zero_debias, std::string name,
                                  OneMinusDecay one_minus_decay) {
  constexpr const char* fn = "assign_moving_average";
  expect_floating_variable(variable, fn);
  expect_value(variable, value, fn);
  std::optional<DebiasState> debias;
  if (zero_debias) debias = make_debias_state(variable, fn);
  return moving_average_update(variable, value, one_minus_decay, debias ? &*debias : nullptr,
                               name.empty() ? std::string("AssignMovingAvg") : std::move(name));
}

}  // namespace

Output assign_moving_average(const Variable& variable, Output value, Output decay, bool zero_debias, std::string name) {
  if (decay.is_null()) throw InvalidArgumentError("assign_moving_average: decay is a null tensor");
  if (!dtype_is_floating(decay.dtype())) {
    throw InvalidArgumentError(fmt::format("assign_moving_average: decay {} is {}, not a floating point tensor",
                                           decay.name(), dtype_name(decay.dtype())));
  }
  const DType dtype = variable.dtype();
  return assign_moving_average_with(variable, value, zero_debias, std::move(name),
                                    [&](Graph& g) { return one_minus(g, decay, dtype); });
}

Output assign_moving_average(const Variable& variable, Output value, double decay, bool zero_debias, std::string name) {
  expect_finite_decay(decay, "assign_moving_average");
  const DType dtype = variable.dtype();
  return assign_moving_average_with(variable, value, zero_debias, std::move(name),
                                    [&](Graph& g) { return internal::scalar_constant(g, dtype, 1.0 - decay, "decay"); });
}

std::vector<Variable> moving_average_variables(Graph& g) {
  return internal::variable_collection(g, kMovingAverageVariables);
}

// ---- ExponentialMovingAverage ----

struct ExponentialMovingAverage::State {
  double decay = 0;
  std::optional<Output> num_updates;
  bool zero_debias = false;
  std::string name;

  struct Average {
    Variable shadow;
    std::optional<DebiasState> debias;  // a tensor's, with zero_debias
  };
  mutable std::mutex mu;
  std::map<Output, Average> averages;  // guarded by mu: by a variable's value or the tensor

  // "ExponentialMovingAverage 'foo'", for errors.
  std::string who() const { return fmt::format("ExponentialMovingAverage '{}'", name); }
};

ExponentialMovingAverage::ExponentialMovingAverage(double decay, std::optional<Output> num_updates, bool zero_debias,
                                                   std::string name)
    : state_(std::make_shared<State>()) {
  State& st = *state_;
  st.name = std::move(name);
  if (st.name.empty()) throw InvalidArgumentError("ExponentialMovingAverage: name must not be empty");
  expect_finite_decay(decay, st.who());
  if (num_updates) {
    if (num_updates->is_null()) throw InvalidArgumentError(fmt::format("{}: num_updates is a null tensor", st.who()));
    const DType dtype = num_updates->dtype();
    if (dtype == DType::Bool || dtype == DType::String) {
      throw InvalidArgumentError(
          fmt::format("{}: num_updates {} is {}, not a number", st.who(), num_updates->name(), dtype_name(dtype)));
    }
    const Shape shape = num_updates->shape();
    if (!shape.unknown_rank() && shape.rank() != 0) {
      throw InvalidArgumentError(fmt::format("{}: num_updates {} must be a scalar, got shape {}", st.who(),
                                             num_updates->name(), shape.to_string()));
    }
  }
  st.decay = decay;
  st.num_updates = std::move(num_updates);
  st.zero_debias = zero_debias;
}

const std::string& ExponentialMovingAverage::name() const { return state_->name; }

Operation ExponentialMovingAverage::apply(Graph& g) {
  std::vector<Variable> trainable = trainable_variables(g);
  if (trainable.empty()) {
    throw InvalidArgumentError(fmt::format("{}: the graph has no trainable variables to average", state_->who()));
  }
  return apply(std::move(trainable));
}

Operation ExponentialMovingAverage::apply(std::vector<Variable> var_list, std::vector<Output> tensors) {
  State& st = *state_;
  if (var_list.empty() && tensors.empty()) {
    throw InvalidArgumentError(fmt::format(
        "{}: no variables or tensors to average (apply(graph) averages every trainable variable)", st.who()));
  }
  // What to average: a variable (its value is the key) or a tensor.
  struct Item {
    Output key;
    std::optional<Variable> var;
  };
  for (const Output& t : tensors) {
    if (t.is_null()) throw InvalidArgumentError(fmt::format("{}: a tensor to average is null", st.who()));
  }
  std::vector<Item> items;
  for (const Variable& v : var_list) items.push_back({v.value(), v});  // raises for a default-constructed one
  Graph& g = items.empty() ? tensors.front().op().graph() : items.front().key.op().graph();
  for (const Output& t : tensors) {
    std::optional<Variable> var;
    if (t.op().type() == "VariableV2" && t.index() == 0 && &t.op().graph() == &g) {
      // A variable's value is that variable (TF tells them apart by Python type only).
      for (const auto& vars : {global_variables(g), local_variables(g)}) {
        for (const Variable& v : vars) {
          if (v.op() == t.op()) var = v;
        }
      }
    }
    items.push_back({t, std::move(var)});
  }

  // Everything checked before anything is made.
  std::set<Output> seen;
  for (const Item& item : items) {
    const std::string what =
        item.var ? fmt::format("variable '{}'", item.var->name()) : fmt::format("tensor {}", item.key.name());
    if (&item.key.op().graph() != &g) {
      throw InvalidArgumentError(fmt::format("{}: {} is in another graph", st.who(), what));
    }
    const DType dtype = item.key.dtype();
    if (!dtype_is_floating(dtype)) {
      throw InvalidArgumentError(fmt::format("{}: {} is {}: moving averages need half, bfloat16, float or double",
                                             st.who(), what, dtype_name(dtype)));
    }
    if (!seen.insert(item.key).second) {
      throw InvalidArgumentError(fmt::format("{}: {} is listed twice", st.who(), what));
    }
    const Shape shape = item.key.shape();
    if (!item.var && !shape.fully_defined()) {
      throw InvalidArgumentError(fmt::format("{}: {} has shape {}: its average needs a fully defined shape",
                                             st.who(), what, shape.to_string()));
    }
  }
  if (st.num_updates && &st.num_updates->op().graph() != &g) {
    throw InvalidArgumentError(fmt::format("{}: num_updates {} is in another graph than what it averages", st.who(),
                                           st.num_updates->name()));
  }

  std::lock_guard<std::mutex> l(st.mu);
  // The shadows, made once, under the caller's name scope (not the EMA's: TF makes them in the
  // variable scope, which its name scope does not change).
  for (const Item& item : items) {
    if (st.averages.count(item.key)) continue;
    const std::string shadow_name = item.key.op().name() + "/" + st.name;
    GraphScope outside = internal::without_control_dependencies(g.impl());
    if (item.var) {
      GraphScope colocate = g.colocate_with(item.var->op());
      // The initial value tensor of the variable's initializer: one initializer run computes it
      // once for both (TF's initialized_value()).
      Variable shadow(item.var->initializer().input(0), shadow_name, /*trainable=*/false);
      st.averages.emplace(item.key, State::Average{std::move(shadow), std::nullopt});
      add_moving_average_variable(g, *item.var);
    } else {
      Variable shadow(g, Tensor::zeros(item.key.dtype(), item.key.shape()), shadow_name, /*trainable=*/false);
      std::optional<DebiasState> debias;
      if (st.zero_debias) debias = make_debias_state(shadow, "ExponentialMovingAverage");
      st.averages.emplace(item.key, State::Average{std::move(shadow), std::move(debias)});
    }
  }

  const std::string scope = unused_name(g, st.name);
  std::vector<Operation> updates;
  {
    GraphScope in_scope = g.name_scope(scope);
    Output decay = ops::constant(g, static_cast<float>(st.decay), "decay");
    if (st.num_updates) {
      // A variable (the global step) read when the update runs, after a training step it follows.
      const Output count = read_now(*st.num_updates);
      const Output n = count.dtype() == DType::Float32 ? count : ops::cast(count, DType::Float32, "num_updates");
      decay = ops::minimum(decay, ops::div(ops::add(ops::constant(g, 1.0f), n), ops::add(ops::constant(g, 10.0f), n)));
    }
    for (const Item& item : items) {
      const State::Average& avg = st.averages.at(item.key);
      const DType dtype = avg.shadow.dtype();
      updates.push_back(moving_average_update(
                            avg.shadow, item.key, [&](Graph& graph) { return one_minus(graph, decay, dtype); },
                            avg.debias ? &*avg.debias : nullptr, "AssignMovingAvg")
                            .op());
    }
  }
  return ops::group(updates, scope);
}

std::optional<Variable> ExponentialMovingAverage::average(const Output& var) const {
  const State& st = *state_;
  std::lock_guard<std::mutex> l(st.mu);
  auto it = st.averages.find(var);
  if (it == st.averages.end()) return std::nullopt;
  return it->second.shadow;
}

std::string ExponentialMovingAverage::average_name(const Output& var) const {
  const State& st = *state_;
  Graph& g = var.op().graph();  // InvalidArgumentError for a null one
  {
    std::lock_guard<std::mutex> l(st.mu);
    auto it = st.averages.find(var);
    if (it != st.averages.end()) return it->second.shadow.name();
  }
  return scope_prefix(g) + unused_name(g, var.op().name() + "/" + st.name);
}

std::map<std::string, Variable> ExponentialMovingAverage::variables_to_restore(
    Graph& g, std::vector<Variable> moving_avg_variables) const {
  if (moving_avg_variables.empty()) {
    moving_avg_variables = trainable_variables(g);
    for (Variable& v : moving_average_variables(g)) moving_avg_variables.push_back(std::move(v));
  }
  std::map<std::string, Variable> out;
  std::set<std::string> averaged;
  for (const Variable& v : moving_avg_variables) {
    if (&v.op().graph() != &g) {
      throw InvalidArgumentError(
          fmt::format("{}: variables_to_restore: variable '{}' is in another graph", state_->who(), v.name()));
    }
    if (averaged.insert(v.name()).second) out.emplace(average_name(v), v);
  }
  // The other variables under their own names (a shadow's name is its variable's key already).
  for (const Variable& v : global_variables(g)) {
    if (!averaged.count(v.name()) && !out.count(v.name())) out.emplace(v.name(), v);
  }
  return out;
}

}  // namespace tessera::train
