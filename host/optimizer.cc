// The optimizers of tessera/optimizer.h: what TensorFlow 1's optimizer.py does around the update
// kernels (core/training_ops.h): gradients, slot variables, hyper-parameters as constants of the
// variable's dtype, Adam's beta powers, and the global step.
#include "tessera/optimizer.h"

#include <cmath>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/node.h"
#include "core/training_ops.h"
#include "host/optimizer_rule.h"
#include "tessera/errors.h"
#include "tessera/gradients.h"
#include "tessera/ops.h"

namespace tessera::train {

std::vector<std::pair<Output, Variable>> Optimizer::Rule::compute_gradients(Output loss,
                                                                           std::vector<Variable> var_list) {
  internal::Node* n = internal::checked_node(loss, "compute_gradients (loss)");
  if (var_list.empty()) var_list = trainable_variables(*n->graph->owner);
  if (var_list.empty()) throw InvalidArgumentError(fmt::format("{}: no variables to optimize", name));
  std::vector<Output> values;
  for (const Variable& v : var_list) values.push_back(v.value());
  std::vector<Output> grads = gradients({loss}, values);
  std::vector<std::pair<Output, Variable>> out;
  for (std::size_t i = 0; i < var_list.size(); ++i) out.emplace_back(grads[i], var_list[i]);
  return out;
}

namespace {

// A learning rate: a number, or (when `tensor` is not null) a floating point scalar the graph
// computes each step, such as a schedule of tessera/learning_rate_decay.h.
struct LearningRate {
  float value = 0;
  Output tensor;
};

// The optimizers of TensorFlow 1's optimizer.py: apply_gradients checks the pairs, makes what the
// updates need (prepare), one update op per variable (apply_dense), what runs after them (finish),
// and the global step's increment.
class UpdateRule : public Optimizer::Rule {
 public:
  UpdateRule(std::string n, bool locking, std::vector<std::string> slots)
      : Rule(std::move(n)), use_locking(locking), slot_names(std::move(slots)) {}

  Operation apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                            std::optional<Variable> global_step, std::string op_name) override;
  std::optional<Variable> get_slot(const Variable& var, const std::string& slot_name) const override {
    std::lock_guard<std::mutex> l(mu);
    auto it = slots.find({var.name(), slot_name});
    if (it == slots.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> get_slot_names() const override { return slot_names; }

  // Makes what the updates of `vars` need before any of them is built (slots, Adam's beta powers).
  virtual void prepare(Graph& g, const std::vector<Variable>& vars) { (void)g, (void)vars; }
  // The update of `var` by `grad` (same dtype and shape).
  virtual Output apply_dense(const Output& grad, const Variable& var) = 0;
  // What runs after the updates (Adam: the beta powers' decay); the op apply_gradients returns
  // without a global step.
  virtual Operation finish(Graph& g, const std::vector<Operation>& updates, const std::string& op_name) {
    (void)g;
    return ops::group(updates, op_name);
  }

  // The slot `slot` of `var`, made (once) with every element `init`, colocated with `var`.
  Variable make_slot(const Variable& var, const std::string& slot, double init, const std::string& op_name) {
    std::lock_guard<std::mutex> l(mu);
    auto key = std::make_pair(var.name(), slot);
    if (auto it = slots.find(key); it != slots.end()) return it->second;
    const Shape shape = var.shape();
    if (!shape.fully_defined()) {
      throw InvalidArgumentError(fmt::format("{}: variable '{}' has shape {}: a slot needs a fully defined shape",
                                             name, var.name(), shape.to_string()));
    }
    Graph& g = var.op().graph();
    GraphScope colocate = g.colocate_with(var.op());
    Variable v(ops::fill(g, shape, scalar_of(var.dtype(), init)), var.name() + "/" + op_name, /*trainable=*/false);
    slots.emplace(key, v);
    return v;
  }
  Variable slot(const Variable& var, const std::string& slot_name) const {
    std::lock_guard<std::mutex> l(mu);
    return slots.at({var.name(), slot_name});
  }

  static Tensor scalar_of(DType dtype, double value) {
    if (dtype == DType::Float64) return Tensor::scalar(value);
    return Tensor::scalar(static_cast<float>(value));
  }
  // A hyper-parameter as a constant of var's dtype.
  static Output hyper(const Variable& var, double value) {
    return ops::constant(var.op().graph(), scalar_of(var.dtype(), value));
  }
  // The learning rate in var's dtype: a tensor is cast to it, as TF1's _prepare casts
  // _learning_rate_tensor to each variable's dtype.
  static Output hyper(const Variable& var, const LearningRate& lr) {
    return lr.tensor.is_null() ? hyper(var, lr.value) : in_dtype_of(var, lr.tensor);
  }
  // x, cast to var's dtype when it has another one.
  static Output in_dtype_of(const Variable& var, const Output& x) {
    return x.dtype() == var.dtype() ? x : ops::cast(x, var.dtype());
  }

  const bool use_locking;
  const std::vector<std::string> slot_names;
  mutable std::mutex mu;
  std::map<std::pair<std::string, std::string>, Variable> slots;  // guarded by mu: (var, slot name)
};

using internal::apply_adagrad;
using internal::apply_adam;
using internal::apply_gradient_descent;
using internal::apply_momentum;
using internal::apply_rms_prop;

class GradientDescentRule final : public UpdateRule {
 public:
  GradientDescentRule(LearningRate lr, bool locking) : UpdateRule("GradientDescent", locking, {}), lr_(lr) {}
  Output apply_dense(const Output& grad, const Variable& var) override {
    return apply_gradient_descent(var, hyper(var, lr_), grad, use_locking);
  }

 private:
  const LearningRate lr_;
};

class MomentumRule final : public UpdateRule {
 public:
  MomentumRule(LearningRate lr, float momentum, bool locking, bool nesterov)
      : UpdateRule("Momentum", locking, {"momentum"}), lr_(lr), momentum_(momentum), nesterov_(nesterov) {}
  void prepare(Graph&, const std::vector<Variable>& vars) override {
    for (const Variable& v : vars) make_slot(v, "momentum", 0.0, name);
  }
  Output apply_dense(const Output& grad, const Variable& var) override {
    return apply_momentum(var, slot(var, "momentum"), hyper(var, lr_), grad, hyper(var, momentum_), use_locking,
                          nesterov_);
  }

 private:
  const LearningRate lr_;
  const float momentum_;
  const bool nesterov_;
};

// TF1's Adam: slots m and v per variable, and two non-slot variables beta1_power and beta2_power
// (colocated with the first variable) that every update reads and finish() decays.
class AdamRule final : public UpdateRule {
 public:
  AdamRule(LearningRate lr, float beta1, float beta2, float epsilon)
      : UpdateRule("Adam", false, {"m", "v"}), lr_(lr), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  void prepare(Graph& g, const std::vector<Variable>& vars) override {
    for (const Variable& v : vars) {
      make_slot(v, "m", 0.0, name);
      make_slot(v, "v", 0.0, name + "_1");
    }
    std::lock_guard<std::mutex> l(mu);
    if (!beta1_power_ && !vars.empty()) {
      GraphScope colocate = g.colocate_with(vars.front().op());
      // Of the first variable's dtype, as TF1's: float64 models decay them in float64.
      const DType dtype = vars.front().dtype();
      beta1_power_ = Variable(g, scalar_of(dtype, beta1_), "beta1_power", /*trainable=*/false);
      beta2_power_ = Variable(g, scalar_of(dtype, beta2_), "beta2_power", /*trainable=*/false);
    }
  }
  Output apply_dense(const Output& grad, const Variable& var) override {
    return apply_adam(var, slot(var, "m"), slot(var, "v"), in_dtype_of(var, beta1_power_->value()),
                      in_dtype_of(var, beta2_power_->value()), hyper(var, lr_),
                      hyper(var, beta1_), hyper(var, beta2_), hyper(var, epsilon_), grad, use_locking);
  }
  Operation finish(Graph& g, const std::vector<Operation>& updates, const std::string& op_name) override {
    std::vector<Operation> all = updates;
    {
      GraphScope after = g.control_dependencies(updates);
      GraphScope colocate = g.colocate_with(beta1_power_->op());
      all.push_back(beta1_power_->assign(ops::mul(beta1_power_->value(), hyper(*beta1_power_, beta1_))).op());
      all.push_back(beta2_power_->assign(ops::mul(beta2_power_->value(), hyper(*beta2_power_, beta2_))).op());
    }
    return ops::group(all, op_name);
  }

 private:
  const LearningRate lr_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  std::optional<Variable> beta1_power_;  // guarded by mu while made
  std::optional<Variable> beta2_power_;
};

class AdagradRule final : public UpdateRule {
 public:
  AdagradRule(LearningRate lr, float initial) : UpdateRule("Adagrad", false, {"accumulator"}), lr_(lr), initial_(initial) {}
  void prepare(Graph&, const std::vector<Variable>& vars) override {
    for (const Variable& v : vars) make_slot(v, "accumulator", initial_, name);
  }
  Output apply_dense(const Output& grad, const Variable& var) override {
    return apply_adagrad(var, slot(var, "accumulator"), hyper(var, lr_), grad, use_locking);
  }

 private:
  const LearningRate lr_;
  const float initial_;
};

// TF1's RMSProp (not centered): rms starts at ones, momentum at zeros.
class RMSPropRule final : public UpdateRule {
 public:
  RMSPropRule(LearningRate lr, float decay, float momentum, float epsilon)
      : UpdateRule("RMSProp", false, {"rms", "momentum"}), lr_(lr), decay_(decay), momentum_(momentum), epsilon_(epsilon) {}
  void prepare(Graph&, const std::vector<Variable>& vars) override {
    for (const Variable& v : vars) {
      make_slot(v, "rms", 1.0, name);
      make_slot(v, "momentum", 0.0, name + "_1");
    }
  }
  Output apply_dense(const Output& grad, const Variable& var) override {
    return apply_rms_prop(var, slot(var, "rms"), slot(var, "momentum"), hyper(var, lr_), hyper(var, decay_),
                          hyper(var, momentum_), hyper(var, epsilon_), grad, use_locking);
  }

 private:
  const LearningRate lr_;
  const float decay_;
  const float momentum_;
  const float epsilon_;
};

void check_hyper(const char* optimizer, const char* what, float value, bool positive) {
  if (!std::isfinite(value) || value < 0 || (positive && value == 0)) {
    throw InvalidArgumentError(fmt::format("{}: {} must be {}, got {}", optimizer, what,
                                           positive ? "positive" : "non-negative", value));
  }
}

LearningRate rate(const char* optimizer, float value) {
  check_hyper(optimizer, "learning_rate", value, false);
  return LearningRate{value, Output()};
}

// A learning rate tensor: a floating point scalar (its value is the graph's business, as in TF1).
LearningRate rate(const char* optimizer, const Output& tensor) {
  if (tensor.is_null()) throw InvalidArgumentError(fmt::format("{}: learning_rate is a null tensor", optimizer));
  if (!dtype_is_floating(tensor.dtype())) {
    throw InvalidArgumentError(fmt::format("{}: learning_rate {} is {}, not a floating point tensor", optimizer,
                                           tensor.name(), dtype_name(tensor.dtype())));
  }
  const Shape shape = tensor.shape();
  if (!shape.unknown_rank() && shape.rank() != 0) {
    throw InvalidArgumentError(fmt::format("{}: learning_rate {} must be a scalar, got shape {}", optimizer,
                                           tensor.name(), shape.to_string()));
  }
  return LearningRate{0, tensor};
}

Operation UpdateRule::apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                                      std::optional<Variable> global_step, std::string op_name) {
  if (grads_and_vars.empty()) throw InvalidArgumentError(fmt::format("{}: no variables provided", name));
  std::vector<std::pair<Output, Variable>> todo;
  std::string names;
  for (auto& [grad, var] : grads_and_vars) {
    names += (names.empty() ? "" : ", ") + var.name();
    if (grad.is_null()) continue;
    if (var.dtype() != DType::Float32 && var.dtype() != DType::Float64) {
      throw InvalidArgumentError(fmt::format("{}: variable '{}' is {}: optimizers update float32 and float64 variables",
                                             name, var.name(), dtype_name(var.dtype())));
    }
    if (grad.dtype() != var.dtype()) {
      throw InvalidArgumentError(fmt::format("{}: the gradient of '{}' is {}, the variable is {}", name, var.name(),
                                             dtype_name(grad.dtype()), dtype_name(var.dtype())));
    }
    todo.emplace_back(grad, var);
  }
  if (todo.empty()) {
    throw InvalidArgumentError(fmt::format("{}: no gradients provided for any variable: [{}]", name, names));
  }
  Graph& g = todo.front().second.op().graph();
  if (op_name.empty()) op_name = name;
  std::vector<Variable> vars;
  for (const auto& p : todo) vars.push_back(p.second);
  {
    // Slots and Adam's beta powers are made outside the caller's control scope (TF1's init_scope
    // in apply_gradients): their initializers must not run the ops of a step, as they would under
    // control_dependencies(layers::update_ops(g)).
    GraphScope outside = internal::without_control_dependencies(g.impl());
    prepare(g, vars);
  }
  std::vector<Operation> updates;
  {
    GraphScope scope = g.name_scope(op_name);
    for (const auto& [grad, var] : todo) updates.push_back(apply_dense(grad, var).op());
  }
  if (!global_step) return finish(g, updates, op_name);
  Operation finished = finish(g, updates, op_name + "/update");
  GraphScope after = g.control_dependencies({finished});
  GraphScope colocate = g.colocate_with(global_step->op());
  // The increment is the op returned, so it takes the name, as TF1's assign_add(global_step, 1,
  // name=name) does (Variable::assign_add would name it "global_step/AssignAdd").
  internal::Node* step = global_step->op().node();
  internal::NodeSpec spec{"AssignAdd", op_name};
  spec.inputs = {ops::constant(g, int64_t{1})};
  spec.resource = step;
  return Operation(step->graph->add_node(std::move(spec)));
}

}  // namespace

Optimizer::Optimizer(std::shared_ptr<Rule> rule) : rule_(std::move(rule)) {}

const std::string& Optimizer::name() const { return rule_->name; }

std::vector<std::string> Optimizer::get_slot_names() const { return rule_->get_slot_names(); }

std::optional<Variable> Optimizer::get_slot(const Variable& var, const std::string& slot_name) const {
  return rule_->get_slot(var, slot_name);
}

std::vector<std::pair<Output, Variable>> Optimizer::compute_gradients(Output loss, std::vector<Variable> var_list) const {
  return rule_->compute_gradients(std::move(loss), std::move(var_list));
}

Operation Optimizer::apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                                     std::optional<Variable> global_step, std::string op_name) const {
  return rule_->apply_gradients(std::move(grads_and_vars), std::move(global_step), std::move(op_name));
}

Operation Optimizer::minimize(Output loss, std::optional<Variable> global_step, std::vector<Variable> var_list) const {
  return apply_gradients(compute_gradients(loss, std::move(var_list)), std::move(global_step));
}

GradientDescentOptimizer::GradientDescentOptimizer(float learning_rate, bool use_locking)
    : Optimizer(std::make_shared<GradientDescentRule>(rate("GradientDescentOptimizer", learning_rate), use_locking)) {}
GradientDescentOptimizer::GradientDescentOptimizer(Output learning_rate, bool use_locking)
    : Optimizer(std::make_shared<GradientDescentRule>(rate("GradientDescentOptimizer", learning_rate), use_locking)) {}

namespace {
std::shared_ptr<Optimizer::Rule> momentum_rule(LearningRate lr, float momentum, bool use_locking, bool use_nesterov) {
  check_hyper("MomentumOptimizer", "momentum", momentum, false);
  return std::make_shared<MomentumRule>(std::move(lr), momentum, use_locking, use_nesterov);
}
std::shared_ptr<Optimizer::Rule> adam_rule(LearningRate lr, float beta1, float beta2, float epsilon) {
  check_hyper("AdamOptimizer", "beta1", beta1, false);
  check_hyper("AdamOptimizer", "beta2", beta2, false);
  check_hyper("AdamOptimizer", "epsilon", epsilon, false);
  return std::make_shared<AdamRule>(std::move(lr), beta1, beta2, epsilon);
}
std::shared_ptr<Optimizer::Rule> adagrad_rule(LearningRate lr, float initial_accumulator_value) {
  check_hyper("AdagradOptimizer", "initial_accumulator_value", initial_accumulator_value, true);
  return std::make_shared<AdagradRule>(std::move(lr), initial_accumulator_value);
}
std::shared_ptr<Optimizer::Rule> rms_prop_rule(LearningRate lr, float decay, float momentum, float epsilon) {
  check_hyper("RMSPropOptimizer", "decay", decay, false);
  check_hyper("RMSPropOptimizer", "momentum", momentum, false);
  check_hyper("RMSPropOptimizer", "epsilon", epsilon, false);
  return std::make_shared<RMSPropRule>(std::move(lr), decay, momentum, epsilon);
}
}  // namespace

MomentumOptimizer::MomentumOptimizer(float learning_rate, float momentum, bool use_locking, bool use_nesterov)
    : Optimizer(momentum_rule(rate("MomentumOptimizer", learning_rate), momentum, use_locking, use_nesterov)) {}
MomentumOptimizer::MomentumOptimizer(Output learning_rate, float momentum, bool use_locking, bool use_nesterov)
    : Optimizer(momentum_rule(rate("MomentumOptimizer", learning_rate), momentum, use_locking, use_nesterov)) {}

AdamOptimizer::AdamOptimizer(float learning_rate, float beta1, float beta2, float epsilon)
    : Optimizer(adam_rule(rate("AdamOptimizer", learning_rate), beta1, beta2, epsilon)) {}
AdamOptimizer::AdamOptimizer(Output learning_rate, float beta1, float beta2, float epsilon)
    : Optimizer(adam_rule(rate("AdamOptimizer", learning_rate), beta1, beta2, epsilon)) {}

AdagradOptimizer::AdagradOptimizer(float learning_rate, float initial_accumulator_value)
    : Optimizer(adagrad_rule(rate("AdagradOptimizer", learning_rate), initial_accumulator_value)) {}
AdagradOptimizer::AdagradOptimizer(Output learning_rate, float initial_accumulator_value)
    : Optimizer(adagrad_rule(rate("AdagradOptimizer", learning_rate), initial_accumulator_value)) {}

RMSPropOptimizer::RMSPropOptimizer(float learning_rate, float decay, float momentum, float epsilon)
    : Optimizer(rms_prop_rule(rate("RMSPropOptimizer", learning_rate), decay, momentum, epsilon)) {}
RMSPropOptimizer::RMSPropOptimizer(Output learning_rate, float decay, float momentum, float epsilon)
    : Optimizer(rms_prop_rule(rate("RMSPropOptimizer", learning_rate), decay, momentum, epsilon)) {}

Variable get_or_create_global_step(Graph& g) {
  for (Variable& v : global_variables(g)) {
    if (v.name() == "global_step") {
      if (v.dtype() != DType::Int64 || v.shape() != Shape{}) {
        throw InvalidArgumentError(fmt::format("global_step: the graph's variable 'global_step' is {} {}, not an int64 scalar",
                                               dtype_name(v.dtype()), v.shape().to_string()));
      }
      return v;
    }
  }
  return Variable(g, Tensor::scalar(int64_t{0}), "global_step", /*trainable=*/false);
}

}  // namespace tessera::train
