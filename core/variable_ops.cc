// Variables: op definitions ("VariableV2", "_ReadVariable", "Assign", "AssignAdd", "AssignSub")
// and the public tessera::Variable handle.
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/ops.h"
#include "tessera/variable.h"

namespace tessera {
namespace internal {
namespace {

Status variable_shape(ShapeContext& c) {
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

// Assign*: input 0 is the new value or delta, output 0 the variable's new value.
Status assign_shape(ShapeContext& c) {
  const Node* var = c.spec().resource;
  if (var == nullptr || var->type != "VariableV2") return c.invalid("must act on a variable");
  const DType dtype = var->output_dtypes[0];
  const Shape& shape = var->output_shapes[0];
  if (c.num_inputs() != 1) return c.invalid("expects 1 input, got {}", c.num_inputs());
  if (c.input_dtype(0) != dtype) {
    return c.invalid("variable '{}' is {}, the value is {}", var->name, dtype_name(dtype),
                     dtype_name(c.input_dtype(0)));
  }
  if (!shape.compatible_with(c.input_shape(0))) {
    return c.invalid("variable '{}' has shape {}, the value has shape {}", var->name, shape.to_string(),
                     c.input_shape(0).to_string());
  }
  if (c.op_type() != "Assign" && (dtype == DType::Bool || dtype == DType::String)) {
    return c.invalid("variable '{}' is {}: arithmetic updates need a number type", var->name, dtype_name(dtype));
  }
  c.add_output(dtype, shape);
  return Status();
}

// _ReadVariable: the value of its NodeSpec.resource (a VariableV2) when the op runs. A VariableV2's
// own output is the value when that node runs, early in a step, which no control_dependencies
// scope of a consumer orders: a read built under such a scope with this op sees the updates the
// scope names, as TF1's reads of a ref variable do (ExponentialMovingAverage reads the variables it
// averages so, after the training step). Same kernels as VariableV2's, on every device.
Status read_variable_shape(ShapeContext& c) {
  const Node* var = c.spec().resource;
  if (var == nullptr || var->type != "VariableV2") return c.invalid("must act on a variable");
  if (c.num_inputs() != 0) return c.invalid("expects no inputs, got {}", c.num_inputs());
  c.add_output(var->output_dtypes[0], var->output_shapes[0]);
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"VariableV2", variable_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"_ReadVariable", read_variable_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"Assign", assign_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"AssignAdd", assign_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"AssignSub", assign_shape, /*stateful=*/true});

constexpr const char* kVariablesCollection = "variables";
// TF's LOCAL_VARIABLES: per-worker state (a SyncReplicasOptimizer's local step) that checkpoints,
// global_variables_initializer and the readiness check leave out.
constexpr const char* kLocalVariablesCollection = "local_variables";

}  // namespace

Output read_variable(Node* var) {
  Graph& g = *var->graph->owner;
  GraphScope colocate = g.colocate_with(Operation(var));
  NodeSpec spec{"_ReadVariable", var->name + "/read"};
  spec.resource = var;
  return Output(var->graph->add_node(std::move(spec)), 0);
}

}  // namespace internal

using internal::Node;
using internal::NodeSpec;

struct Variable::State {
  Node* var = nullptr;       // Not owned.
  Node* init = nullptr;      // the initializer (Assign). Not owned.
  bool trainable = true;
};

namespace {

std::shared_ptr<const Variable::State> make_variable(Output initial_value, std::string name, bool trainable) {
  Node* iv = internal::checked_node(initial_value, "Variable initial value");
  internal::GraphImpl& g = *iv->graph;
  NodeSpec spec{"VariableV2", name.empty() ? std::string("Variable") : std::move(name)};
  spec.attrs["dtype"] = initial_value.dtype();
  spec.attrs["shape"] = initial_value.shape();
  // A variable and its initializer are not ordered after whatever control scope is active (TF1
  // makes both in an init_scope): initializing must not run a step's ops. An initial value the
  // caller built under the scope keeps its own control inputs.
  GraphScope outside = internal::without_control_dependencies(g);
  Node* var = g.add_node(std::move(spec));
  auto state = std::make_shared<Variable::State>();
  state->var = var;
  state->trainable = trainable;
  {
    GraphScope colocate = g.owner->colocate_with(Operation(var));
    NodeSpec assign{"Assign", var->name + "/Assign"};
    assign.inputs = {initial_value};
    assign.resource = var;
    assign.attrs["_initializer"] = true;  // runs once: placement weighs it so (core/placement.cc)
    state->init = g.add_node(std::move(assign));
  }
  std::lock_guard<std::mutex> l(g.collections_mu_);
  g.collections_[internal::kVariablesCollection].push_back(
      std::const_pointer_cast<Variable::State>(state));
  return state;
}

}  // namespace

Variable::Variable(Graph& g, Tensor initial_value, std::string name, bool trainable) {
  if (initial_value.is_null()) throw InvalidArgumentError("Variable: null initial value");
  std::string base = name.empty() ? std::string("Variable") : name;
  Output init;
  {
    // The constant belongs under the variable's name ("v/initial_value"), outside any control
    // scope as the variable is.
    GraphScope outside = internal::without_control_dependencies(g.impl());
    GraphScope scope = g.name_scope(base);
    init = ops::constant(g, std::move(initial_value), "initial_value");
  }
  state_ = make_variable(init, std::move(base), trainable);
}

Variable::Variable(Output initial_value, std::string name, bool trainable)
    : state_(make_variable(initial_value, std::move(name), trainable)) {}

namespace {
const Variable::State& checked_state(const std::shared_ptr<const Variable::State>& s) {
  if (!s) throw InvalidArgumentError("use of a default-constructed Variable");
  return *s;
}
}  // namespace

Output Variable::value() const { return Output(checked_state(state_).var, 0); }
Operation Variable::op() const { return Operation(checked_state(state_).var); }
Operation Variable::initializer() const { return Operation(checked_state(state_).init); }
const std::string& Variable::name() const { return checked_state(state_).var->name; }
bool Variable::trainable() const { return checked_state(state_).trainable; }
DType Variable::dtype() const { return checked_state(state_).var->output_dtypes[0]; }
Shape Variable::shape() const { return checked_state(state_).var->output_shapes[0]; }

Output Variable::update(const char* type, Output value) const {
  const auto& s = checked_state(state_);
  internal::checked_node(value, type);
  GraphScope colocate = s.var->graph->owner->colocate_with(Operation(s.var));
  NodeSpec spec{type, s.var->name + "/" + type};
  spec.inputs = {value};
  spec.resource = s.var;
  return Output(s.var->graph->add_node(std::move(spec)), 0);
}

Output Variable::read_value() const { return internal::read_variable(checked_state(state_).var); }

Output Variable::assign(Output value) const { return update("Assign", value); }
Output Variable::assign_add(Output delta) const { return update("AssignAdd", delta); }
Output Variable::assign_sub(Output delta) const { return update("AssignSub", delta); }

namespace {

// The variables in `g`'s collection `key`.
std::vector<Variable> variables_in(Graph& g, const char* key) {
  auto& impl = g.impl();
  std::vector<Variable> out;
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  for (const auto& p : impl.collections_[key]) out.emplace_back(std::static_pointer_cast<const Variable::State>(p));
  return out;
}

// One op `name` running the initializers of `vars` (a no-op when there are none).
Operation initializer_of(Graph& g, const std::vector<Variable>& vars, const char* name) {
  std::vector<Operation> inits;
  for (const auto& v : vars) inits.push_back(v.initializer());
  if (inits.empty()) return ops::no_op(g, name);
  return ops::group(inits, name);
}

}  // namespace

std::vector<Variable> global_variables(Graph& g) { return variables_in(g, internal::kVariablesCollection); }

std::vector<Variable> local_variables(Graph& g) { return variables_in(g, internal::kLocalVariablesCollection); }

Variable local_variable(Graph& g, Tensor initial_value, std::string name) {
  Variable v(g, std::move(initial_value), std::move(name), /*trainable=*/false);
  auto& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  auto& globals = impl.collections_[internal::kVariablesCollection];
  // The variable just made is the last global one (made under this graph's collections lock).
  for (auto it = globals.rbegin(); it != globals.rend(); ++it) {
    if (std::static_pointer_cast<const Variable::State>(*it)->var == v.op().node()) {
      impl.collections_[internal::kLocalVariablesCollection].push_back(*it);
      globals.erase(std::next(it).base());
      break;
    }
  }
  return v;
}

Operation local_variables_initializer(Graph& g) { return initializer_of(g, local_variables(g), "init_local"); }

std::vector<Variable> trainable_variables(Graph& g) {
  std::vector<Variable> out;
  for (Variable& v : global_variables(g)) {
    if (v.trainable()) out.push_back(std::move(v));
  }
  return out;
}

Operation global_variables_initializer(Graph& g) { return initializer_of(g, global_variables(g), "init"); }


// Note [Readiness ops]
// ~~~~~~~~~~~~~~~~~~~~
// report_uninitialized_variables (TF's tf.report_uninitialized_variables) is what a monitored
// session's chief checks after initializing or restoring and what its other workers poll until
// the model is ready: one IsVariableInitialized op per variable, then one _ListUninitialized op
// that keeps the names of the variables whose op said false (TF builds the same from stack,
// logical_not and boolean_mask).
// IsVariableInitialized finds its variable by name in the resources of the task it runs on, not
// through NodeSpec::resource: a resource op joins its variable's colocation group, and placement
// gives a group only devices with a kernel for every member, so a host-only readiness op would
// pull every variable of a CUDA build off the GPU. It requests the variable's job, replica and
// task instead (or those its colocation requests: a slot variable's) and runs on that task's host, where the task's variables are (one resource
// manager per task, or per in-process session). A variable not created yet there is
// uninitialized.
namespace internal {
namespace {

Status is_variable_initialized_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("expects no inputs, got {}", c.num_inputs());
  c.add_output(DType::Bool, Shape{});
  return Status();
}

// Inputs: one Bool scalar per variable (initialized or not); attr "names": their names, a String
// vector as long as the inputs. Output: the names whose input is false, in order.
Status list_uninitialized_shape(ShapeContext& c) {
  const Tensor& names = c.attr<Tensor>("names");
  if (names.dtype() != DType::String || names.shape().rank() != 1 || names.shape().dim(0) != c.num_inputs()) {
    return c.invalid("names must be a String vector of {} names, got {}", c.num_inputs(), names.debug_string());
  }
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != DType::Bool) return c.invalid("input {} is {}, not bool", i, dtype_name(c.input_dtype(i)));
  }
  c.add_output(DType::String, Shape{-1});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"IsVariableInitialized", is_variable_initialized_shape, /*stateful=*/true,
                          /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"_ListUninitialized", list_uninitialized_shape, /*stateful=*/false,
                          /*host_only=*/true});

// Builds `spec` requesting only the job, replica and task of `var`'s request (Note [Readiness
// ops]), outside the builder's colocation and control scopes.
// The device `var` requests, or that the nodes it is colocated with request (an optimizer's slot
// variable requests nothing and is colocated with its variable), "" when none does.
std::string effective_request(const Node* var) {
  std::vector<const Node*> todo = {var};
  std::set<const Node*> seen;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    if (!n->requested_device.empty()) return n->requested_device;
    for (const Node* c : n->colocate_with) todo.push_back(c);
    if (n->resource != nullptr) todo.push_back(n->resource);
  }
  return "";
}

Node* add_on_task_of(GraphImpl& g, const Node* var, NodeSpec spec) {
  std::string task;
  const std::string request = effective_request(var);
  if (!request.empty()) {
    DeviceSpec d = DeviceSpec::parse(request).value_or_raise();
    d.type.reset();
    d.id.reset();
    task = d.to_string();
  }
  auto saved_device = g.device_scope_;
  auto saved_colocation = g.colocation_scope_;
  auto saved_control = g.control_scope_;
  g.device_scope_ = task;
  g.colocation_scope_.clear();
  g.control_scope_.clear();
  auto node = g.try_add_node(std::move(spec));
  g.device_scope_ = saved_device;
  g.colocation_scope_ = saved_colocation;
  g.control_scope_ = saved_control;
  return std::move(node).value_or_raise();
}

}  // namespace
}  // namespace internal

Output is_variable_initialized(const Variable& var) {
  Node* v = var.op().node();
  NodeSpec spec{"IsVariableInitialized", var.name() + "/IsVariableInitialized"};
  spec.attrs["var_name"] = var.name();
  return Output(internal::add_on_task_of(*v->graph, v, std::move(spec)), 0);
}

Output report_uninitialized_variables(Graph& g, std::vector<Variable> var_list) {
  if (var_list.empty()) var_list = global_variables(g);
  GraphScope scope = g.name_scope("report_uninitialized_variables");
  if (var_list.empty()) return ops::constant(g, Tensor::vector<std::string>({}), "Const");
  std::vector<Output> initialized;
  std::vector<std::string> names;
  for (const Variable& v : var_list) {
    if (v.op().node()->graph != &g.impl()) {
      throw InvalidArgumentError(fmt::format("report_uninitialized_variables: variable '{}' belongs to another graph",
                                             v.name()));
    }
    initialized.push_back(is_variable_initialized(v));
    names.push_back(v.name());
  }
  NodeSpec spec{"_ListUninitialized", "uninitialized_names"};
  spec.attrs["names"] = Tensor::vector<std::string>(std::move(names));
  return internal::add_op("report_uninitialized_variables", std::move(spec), std::move(initialized));
}

}  // namespace tessera
