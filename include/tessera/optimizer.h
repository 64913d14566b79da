// Optimizers, as TensorFlow 1's tf.train optimizers: the same names, arguments, update rules and
// slot variables, each update one fused kernel per variable (ApplyGradientDescent, ApplyAdam, ...)
// on the variable's device.
//
//   auto loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(labels, logits));
//   Variable step = train::get_or_create_global_step(g);
//   Operation train_op = train::AdamOptimizer(1e-3f).minimize(loss, step);
//   Session s(g);
//   s.run(global_variables_initializer(g));   // after minimize: it makes the slot variables
//   for (int i = 0; i < 1000; ++i) s.run(train_op, feeds);
//
// A learning rate is a number or a floating point scalar tensor the graph computes every step (a
// schedule of tessera/learning_rate_decay.h, a placeholder, a variable), cast to each variable's
// dtype as TF1 casts it; a tensor that is null, not floating point or not a scalar is an
// InvalidArgumentError.
//
// minimize = compute_gradients (tessera::gradients of the loss with respect to each variable's
// value) then apply_gradients (an update op per variable with a gradient; global_step, when
// given, is incremented once after all of them). Slot variables (momentum accumulators, Adam's m
// and v) are made by apply_gradients, named "<var>/<Optimizer name><_N>", colocated with their
// variable, not trainable; global_variables_initializer initializes them. Updates are atomic per
// variable whatever use_locking says (TF1's use_locking = false lets updates race per element; a
// tessera update never does). An Optimizer is a copyable handle: copies share slots, and a copy
// made from a derived optimizer keeps its update rule, and its apply_gradients when it overrides
// it (train::SyncReplicasOptimizer, tessera/sync_replicas_optimizer.h): what an optimizer does is
// its shared Rule's (host/optimizer_rule.h), never a virtual member of the handle.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::train {

class Optimizer {
 public:
  struct Rule;  // an update rule (host/optimizer.cc)

  std::vector<std::pair<Output, Variable>> compute_gradients(Output loss, std::vector<Variable> var_list = {}) const;
  // Returns the op named `name` ("" = name(), as TF1), made unique as any op name: the global
  // step's increment when one is given (the updates are "<name>/update"), else the updates' group.
  Operation apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                            std::optional<Variable> global_step = std::nullopt, std::string name = "") const;
  Operation minimize(Output loss, std::optional<Variable> global_step = std::nullopt,
                     std::vector<Variable> var_list = {}) const;

  // "GradientDescent", "Momentum", "Adam", "Adagrad", "RMSProp" ("sync_replicas" for a
  // SyncReplicasOptimizer).
  const std::string& name() const;
  // The slot `slot_name` ("momentum", "accumulator", "m", "v", "rms", ...) of `var`, once
  // apply_gradients made it; nullopt otherwise.
  std::optional<Variable> get_slot(const Variable& var, const std::string& slot_name) const;
  std::vector<std::string> get_slot_names() const;

 protected:
  explicit Optimizer(std::shared_ptr<Rule> rule);
  // The shared state, for derived optimizers that keep more in it.
  Rule& rule() const { return *rule_; }

 private:
  std::shared_ptr<Rule> rule_;
};

class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(float learning_rate, bool use_locking = false);
  explicit GradientDescentOptimizer(Output learning_rate, bool use_locking = false);
};

class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(float learning_rate, float momentum, bool use_locking = false, bool use_nesterov = false);
  MomentumOptimizer(Output learning_rate, float momentum, bool use_locking = false, bool use_nesterov = false);
};

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(float learning_rate = 0.001f, float beta1 = 0.9f, float beta2 = 0.999f,
                         float epsilon = 1e-8f);
  explicit AdamOptimizer(Output learning_rate, float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-8f);
};

class AdagradOptimizer : public Optimizer {
 public:
  explicit AdagradOptimizer(float learning_rate, float initial_accumulator_value = 0.1f);
  explicit AdagradOptimizer(Output learning_rate, float initial_accumulator_value = 0.1f);
};

class RMSPropOptimizer : public Optimizer {
 public:
  explicit RMSPropOptimizer(float learning_rate, float decay = 0.9f, float momentum = 0.0f, float epsilon = 1e-10f);
  explicit RMSPropOptimizer(Output learning_rate, float decay = 0.9f, float momentum = 0.0f, float epsilon = 1e-10f);
};

// The graph's int64 scalar "global_step" variable (not trainable), made on first call.
Variable get_or_create_global_step(Graph& g);

}  // namespace tessera::train
