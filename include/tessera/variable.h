// Variables: named, mutable state that persists across runs of a session.
//
//   tessera::Variable w(g, tessera::Tensor::zeros(DType::Float32, {3}), "w");
//   auto step = w.assign_add(ops::constant(g, Tensor::vector<float>({1, 1, 1})));
//   Session s(g);
//   s.run(global_variables_initializer(g));
//   s.run(step);                     // returns the new value
//
// Reading an uninitialized variable raises FailedPreconditionError naming it. Updates are atomic
// per variable (each update sees the result of the previous one); a read returns a snapshot that
// later updates never change (copy on write). Variable is a copyable handle: copies refer to the
// same variable. The state lives in the session (in-process) or server task that runs it.
#pragma once

#include <memory>
#include <string>

#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera {

class Variable {
 public:
  Variable() = default;
  // `trainable`: whether optimizers update it by default (trainable_variables); optimizer slots
  // and global_step are not.
  Variable(Graph& g, Tensor initial_value, std::string name = "", bool trainable = true);
  Variable(Output initial_value, std::string name = "", bool trainable = true);

  // A read of the value, the same Output on every call. It is taken when the variable's node runs,
  // early in a step, whatever scope a consumer is built under.
  Output value() const;
  // A new read taken when this read runs (TF1's read_value()): built under control_dependencies,
  // it sees what the ops named there wrote, as in
  //   auto after = g.control_dependencies({train_op});
  //   Output updated = w.read_value();   // w after the step; w.value() would be w before it
  // It is colocated with the variable.
  Output read_value() const;
  operator Output() const { return value(); }  // NOLINT: TensorFlow lets a variable stand for its value
  Output assign(Output value) const;      // each returns the new value
  Output assign_add(Output delta) const;
  Output assign_sub(Output delta) const;
  Operation initializer() const;
  Operation op() const;                   // the variable node
  const std::string& name() const;
  bool trainable() const;
  DType dtype() const;
  Shape shape() const;

  // Internal: the graph's record of the variable (used by global_variables()).
  struct State;
  explicit Variable(std::shared_ptr<const State> state) : state_(std::move(state)) {}

 private:
  Output update(const char* type, Output value) const;
  std::shared_ptr<const State> state_;
};

// A group of the initializers of every variable created so far in `g`.
Operation global_variables_initializer(Graph& g);
// The variables created so far in `g`, in creation order.
std::vector<Variable> global_variables(Graph& g);
// Those of them made with trainable = true.
std::vector<Variable> trainable_variables(Graph& g);
// TF's local variables (the LOCAL_VARIABLES collection): per-worker state that is not part of the
// model. A local variable is not trainable, not in global_variables() (so not in a default Saver,
// global_variables_initializer or report_uninitialized_variables); a MonitoredTrainingSession
// initializes them in every session it makes, chief or not (TF's local_init_op).
Variable local_variable(Graph& g, Tensor initial_value, std::string name = "");
std::vector<Variable> local_variables(Graph& g);
Operation local_variables_initializer(Graph& g);

// TF's tf.is_variable_initialized: a Bool scalar, true once `var` has a value on the task (or in
// the in-process session) that runs it. See Note [Readiness ops] in core/variable_ops.cc.
Output is_variable_initialized(const Variable& var);
// TF's tf.report_uninitialized_variables: a 1-D String tensor of the names of the variables of
// `var_list` (every variable of `g` when empty) not initialized yet, in order; empty when all are.
// What a MonitoredTrainingSession's chief checks and its other workers poll (the "ready op").
Output report_uninitialized_variables(Graph& g, std::vector<Variable> var_list = {});

}  // namespace tessera
