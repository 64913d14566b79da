// Variable scopes, get_variable and initializers, as TensorFlow 1's tf.variable_scope,
// tf.get_variable and tf.initializers: variables named by the scopes they are made in, made once
// and shared on request, which is how TF1 models share weights between towers (train and eval,
// or two inputs through one network).
//
//   Output tower(Graph& g, Output x) {
//     Variable w = get_variable(g, "w", {784, 10}, DType::Float32, initializers::glorot_uniform());
//     return ops::matmul(x, w);
//   }
//   {
//     auto scope = variable_scope(g, "model");
//     train_logits = tower(g, train_x);                  // makes "model/w"
//   }
//   {
//     auto scope = variable_scope(g, "model", Reuse::reuse);
//     eval_logits = tower(g, eval_x);                    // the same "model/w"
//   }
//
// A variable scope is also a name scope of the same name for the ops made in it ("model/MatMul").
// get_variable ignores name scopes (Graph::name_scope), as TF's does: its variable is named by the
// variable scopes alone, its initial value ops are "<variable>/Initializer/..." and its
// regularizer's "<variable>/Regularizer/...". It is made outside any control_dependencies scope,
// as TF lifts a variable's initialization out of them, and on the device the current device scope
// (or replica_device_setter) names.
//
// Where tessera differs from TF 1.15, and why:
//  - Reuse has no "false": TF's reuse=False inherits the enclosing scope's reuse, which is
//    Reuse::inherit here.
//  - A scope is opened by name only (no scope object to re-enter, no default_name or values
//    arguments; layers::dense and the other layers make their unique names as TF's do). Re-entering
//    a name re-enters that scope, as TF's variable_scope("name") does.
//  - No partitioners, custom getters or caching devices.
//  - A variable made with the Variable constructor is not in get_variable's store (as TF's
//    tf.Variable is not): get_variable with the same name makes a new variable, whose node the
//    graph names "<name>_1".
//
// Graphs are built from one thread at a time (as TF's); the scope state belongs to the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera {

// Makes a variable's initial value: a tensor of `shape` (fully defined) and `dtype`, built in `g`
// (TF's initializer objects). Random initializers draw new values on every run of the initial
// value; a nonzero seed makes them repeat, as the random ops' seeds do.
using Initializer = std::function<Output(Graph& g, const Shape& shape, DType dtype)>;
// A penalty on a weight, added to the REGULARIZATION_LOSSES collection when get_variable makes the
// weight (TF's regularizer functions; see losses::get_regularization_losses). A null Output means
// no penalty.
using Regularizer = std::function<Output(Output weights)>;

namespace initializers {
// Every element `value`, in any numeric dtype (TF's zeros_initializer, ones_initializer and
// constant_initializer with a scalar).
Initializer zeros();
Initializer ones();
Initializer constant(double value);
// The others are for floating point variables (an InvalidArgumentError names the initializer
// otherwise). Uniform in [minval, maxval); normal; normal with values beyond two standard
// deviations redrawn (TF's random_uniform_initializer, random_normal_initializer and
// truncated_normal_initializer).
Initializer random_uniform(double minval = 0, double maxval = 1, uint64_t seed = 0);
Initializer random_normal(double mean = 0, double stddev = 1, uint64_t seed = 0);
Initializer truncated_normal(double mean = 0, double stddev = 1, uint64_t seed = 0);
// TF's variance_scaling_initializer: with n the fan in, the fan out or their mean (`mode`
// "fan_in", "fan_out" or "fan_avg"; a 2-D shape's fans are its rows and columns, a convolution
// filter's are its input and output channels times its window's size), draws from a
// "truncated_normal" of standard deviation sqrt(scale / n) / 0.8796 (the truncation's correction),
// an "untruncated_normal" of sqrt(scale / n) or a "uniform" within +-sqrt(3 scale / n). A scale
// that is not positive, or another mode or distribution, is an InvalidArgumentError.
Initializer variance_scaling(double scale = 1, std::string mode = "fan_in",
                             std::string distribution = "truncated_normal", uint64_t seed = 0);
// The named special cases: glorot (fan_avg, scale 1), he (fan_in, scale 2) and lecun (fan_in,
// scale 1), each "uniform" or truncated normal. glorot_uniform is get_variable's default.
Initializer glorot_uniform(uint64_t seed = 0);
Initializer glorot_normal(uint64_t seed = 0);
Initializer he_uniform(uint64_t seed = 0);
Initializer he_normal(uint64_t seed = 0);
Initializer lecun_uniform(uint64_t seed = 0);
Initializer lecun_normal(uint64_t seed = 0);
}  // namespace initializers

// Whether get_variable in a scope makes variables or finds them: `inherit` takes the enclosing
// scope's (the top level makes them), `reuse` finds them (a missing one is an error) and
// `auto_reuse` finds them or makes them. TF's reuse=None / True / tf.AUTO_REUSE.
enum class Reuse { inherit, reuse, auto_reuse };

struct VariableScopeOptions {
  Reuse reuse = Reuse::inherit;
  // The defaults of get_variable in this scope and those inside it (null: the enclosing scope's).
  Initializer initializer;
  Regularizer regularizer;
};

// Opens the variable scope `name` inside the current one (and a name scope of the same name);
// closing it (the returned scope's destruction) restores both. `name` is not empty and has no ':'.
GraphScope variable_scope(Graph& g, const std::string& name, VariableScopeOptions options = {});
GraphScope variable_scope(Graph& g, const std::string& name, Reuse reuse);
// The current variable scope's full name ("" at the top), TF's get_variable_scope().name.
std::string variable_scope_name(Graph& g);

// TF's get_variable: the variable "<scope>/<name>". Unless the scope reuses, makes it with the
// initial value `initializer` builds (null: the scope's, else glorot_uniform for floating point
// and zeros for other dtypes), adds `regularizer`'s penalty (null: the scope's) to the
// regularization losses, and adds it to trainable_variables when `trainable`. In a reusing scope,
// returns the variable of that name made by get_variable before. InvalidArgumentErrors, each
// naming the variable: it exists and the scope does not reuse ("Did you mean to set
// reuse=Reuse::reuse ...?"); it does not exist and the scope reuses (Reuse::reuse); the shape is
// not fully defined when making it; the shape or dtype differs from the existing variable's.
Variable get_variable(Graph& g, const std::string& name, const Shape& shape, DType dtype = DType::Float32,
                      Initializer initializer = {}, Regularizer regularizer = {}, bool trainable = true);

}  // namespace tessera
