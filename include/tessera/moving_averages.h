// Moving averages, as TensorFlow 1's tf.train.ExponentialMovingAverage and
// moving_averages.assign_moving_average.
//
//   Operation train_op = train::GradientDescentOptimizer(0.1f).minimize(loss, step);
//   train::ExponentialMovingAverage ema(0.999, /*num_updates=*/step);
//   Operation averages_op;
//   {
//     auto after = g.control_dependencies({train_op});
//     averages_op = ema.apply({w, b});             // shadows "w/ExponentialMovingAverage", ...
//   }
//   ... run averages_op each step, save with a train::Saver(g) ...
//   // To evaluate with the averages: restore each shadow's value into its variable.
//   train::Saver(g, ema.variables_to_restore(g)).restore(session, checkpoint);
//
// Where tessera differs from TF 1.15, and why:
//  - apply() takes the variables and the other tensors to average as two lists (TF takes one list
//    and tells a tf.Variable from a tensor by its Python type; a C++ Variable converts to Output
//    silently, so one list could not tell them apart). A tensor that is a variable's value is that
//    variable. TF's apply(None) (every trainable variable) is apply(g); an empty apply, or apply(g)
//    on a graph without trainable variables, is an InvalidArgumentError (TF returns a no-op) as
//    Optimizer and Saver refuse an empty list.
//  - variables_to_restore takes the graph whose global variables it maps (TF reads the default
//    graph) and Variables only: a tensor's shadow is an ordinary global variable, restored under
//    its own name as TF restores it when the tensor is not in the list.
//  - Applying a variable that this EMA already averages reuses its shadow, as TF's later 1.x
//    releases do (earlier ones raised "Moving average already computed"); a tensor's debias state
//    is reused too, where TF makes a fresh pair whose count restarts at 0 under a shadow that has
//    moved. Listing one twice in one apply() is an InvalidArgumentError (its shadow would be
//    updated twice per run).
//  - A number `decay` of assign_moving_average becomes a constant of the variable's dtype (TF makes
//    a float32 constant and casts it: float64 variables get float32's rounding of 1 - decay).
//  - A decay that is not finite is an InvalidArgumentError; TF does not check it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::train {

// Sets `variable` to its moving average with `value` and returns the new value:
//   variable -= (variable - value) * (1 - decay)
// `value` has the variable's dtype and a shape that broadcasts to its shape; `decay` is a floating
// point tensor (cast to the variable's dtype after 1 - decay is taken, as TF) or a number. The ops
// are under the name scope `name` ("AssignMovingAvg", made unique as TF's name scopes are), and
// the update returned takes that name; it is colocated with `variable`. Every variable the update
// reads (`variable`, `value` when it is a Variable, the debias state) is read when the update runs,
// so under a control_dependencies scope it sees what the ops named there wrote, as TF1's reads of
// ref variables do (a Variable's value() is otherwise read early in the step).
//
// With zero_debias (TF's default here), `variable` is taken to start at zero and the result is
// debiased as Adam's moments are (Kingma et al., 2015, section 3): two more variables, made next
// to `variable` under the current name scope, "<variable>/biased" (the biased average, starting at
// zero) and "<variable>/local_step" (the number of updates, a scalar of the variable's dtype),
// both not trainable and colocated with `variable` (a _N suffix when a name is taken, as TF's).
// Each run then computes
//   biased -= (biased - value) * (1 - decay);  local_step += 1
//   variable = biased / (1 - decay ^ local_step)
// Every call makes its own pair: an average that several calls update needs one debias state, so
// call it once (or use ExponentialMovingAverage, which keeps it).
//
// InvalidArgumentError naming the function: a variable that is not floating point, a null value or
// decay, a value of another dtype, a decay that is not floating point (or a number that is not
// finite); shapes that do not fit raise the graph's InvalidArgumentError naming the op.
Output assign_moving_average(const Variable& variable, Output value, Output decay, bool zero_debias = true,
                             std::string name = "");
Output assign_moving_average(const Variable& variable, Output value, double decay, bool zero_debias = true,
                             std::string name = "");

// TF's tf.moving_average_variables(): the variables (not the tensors) that an
// ExponentialMovingAverage averages in `g`, in the order apply() first met them.
std::vector<Variable> moving_average_variables(Graph& g);

// Maintains moving averages of variables and tensors in shadow variables:
//   shadow -= (shadow - value) * (1 - decay)
// with decay = min(decay, (1 + num_updates) / (10 + num_updates)) when num_updates is given (an
// integer or floating point scalar, such as the global step, taken as float32 every run; a
// variable is read when the update runs, after the training step that increments it). The decay
// is float32 as TF's, cast to each shadow's dtype once 1 - decay is taken.
//
// A variable's shadow "<variable>/<name>" starts at the variable's initial value (the initial value
// tensor of its initializer: global_variables_initializer computes it once for both); a tensor's
// "<op>/<name>" starts at zeros and, with zero_debias, is debiased as assign_moving_average does
// (its "<op>/<name>/biased" and "<op>/<name>/local_step"). Shadows are made under the current name
// scope, not trainable, outside any control_dependencies scope (their initializers run alone), a
// variable's colocated with it; the moving-averaged variables join moving_average_variables(g).
//
// ExponentialMovingAverage is a copyable handle: copies share the shadows. Building is meant for
// one thread at a time, as building a graph is; average() and average_name() may be called from
// any thread.
class ExponentialMovingAverage {
 public:
  // InvalidArgumentError naming the EMA: a decay that is not finite, an empty name, a num_updates
  // that is null, not a number or not a scalar.
  explicit ExponentialMovingAverage(double decay, std::optional<Output> num_updates = std::nullopt,
                                    bool zero_debias = false, std::string name = "ExponentialMovingAverage");

  // Makes the shadows that do not exist yet, and returns an op (named `name()`, made unique) that
  // updates the shadows of `var_list` and `tensors` once each run. Built under a
  // control_dependencies scope, the updates run after the ops it names and read the variables then
  // (a training step's results, as in TF); tensors are computed as the graph computes them. Each
  // variable and tensor must be half, float, bfloat16 or double, listed once, in one graph (with
  // num_updates), a tensor's shape fully defined: else InvalidArgumentError naming the EMA and the
  // culprit. Both lists empty is an InvalidArgumentError (use apply(g)).
  Operation apply(std::vector<Variable> var_list, std::vector<Output> tensors = {});
  // TF's apply(): every trainable variable of `g` (InvalidArgumentError when there is none).
  Operation apply(Graph& g);

  // The shadow of `var` (a Variable, or a tensor given to apply), nullopt until apply() made it.
  std::optional<Variable> average(const Output& var) const;
  // The shadow's name: its actual name once made, else the name apply() would give it now
  // ("<current name scope>/<op name>/<name>", made unique as the graph would). Works before apply.
  std::string average_name(const Output& var) const;

  // TF's variables_to_restore, the map a Saver(g, map) restores the averages with:
  // every moving-averaged variable under its average_name, every other global variable of `g`
  // under its own name (a shadow's own name is already the key of its variable, so shadows map to
  // nothing else). The moving-averaged variables are `moving_avg_variables`, or when it is empty
  // trainable_variables(g) with moving_average_variables(g) (TF's default). Each must be of `g`:
  // else InvalidArgumentError.
  std::map<std::string, Variable> variables_to_restore(Graph& g,
                                                       std::vector<Variable> moving_avg_variables = {}) const;

  const std::string& name() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tessera::train
