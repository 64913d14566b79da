// Accumulator ops: definitions and shape functions ("ConditionalAccumulator",
// "AccumulatorApplyGradient", "AccumulatorTakeGradient", "AccumulatorNumAccumulated",
// "AccumulatorSetGlobalStep", and the internal "_AccumulatorCancelTakes"), and the public
// tessera::ConditionalAccumulator.
//
// As with queues (core/queue_ops.cc), the "ConditionalAccumulator" node only describes the
// accumulator (attrs dtype, shape, shared_name, reduction_type); the accumulator itself is a
// resource (kernels/conditional_accumulator.h) that the first op to run creates. Every other
// accumulator op names the accumulator node as its NodeSpec::resource, which places it with the
// accumulator (in host memory). Dtypes are checked when the graph is built, shapes too as far as
// the graph knows them.
#include <fmt/format.h>

#include "core/accumulator_ops.h"
#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

bool accumulates(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 || dtype == DType::Float64;
}

Status accumulator_shape(ShapeContext& c) {
  if (Status s = expect_inputs(c, 0); !s.ok()) return s;
  const DType dtype = c.attr<DType>("dtype");
  if (!accumulates(dtype)) {
    return c.invalid("dtype must be float16, bfloat16, float32 or float64, got {}", dtype_name(dtype));
  }
  const auto& reduction = c.attr<std::string>("reduction_type");
  if (reduction != "MEAN" && reduction != "SUM") {
    return c.invalid("reduction_type must be \"MEAN\" or \"SUM\", got \"{}\"", reduction);
  }
  return Status();
}

// The accumulator node an accumulator op acts on, or an error naming the op.
StatusOr<const Node*> accumulator_of(const ShapeContext& c) {
  const Node* a = c.spec().resource;
  if (a == nullptr || !is_accumulator_type(a->type)) return c.invalid("must act on a ConditionalAccumulator");
  return a;
}

// Input `i` must be a scalar (or of unknown shape) of `dtype`.
Status expect_scalar(const ShapeContext& c, int i, DType dtype, const char* what) {
  if (c.input_dtype(i) != dtype) {
    return c.invalid("{} must be {}, got {}", what, dtype_name(dtype), dtype_name(c.input_dtype(i)));
  }
  if (!Shape{}.compatible_with(c.input_shape(i))) {
    return c.invalid("{} must be a scalar, got shape {}", what, c.input_shape(i).to_string());
  }
  return Status();
}

// The accumulator node of an accumulator op that has `n` inputs, the first a scalar of `dtype`
// named `scalar` where one is named; else the error, checked in that order.
StatusOr<const Node*> accumulator_op(const ShapeContext& c, int n, const char* scalar = nullptr,
                                     DType dtype = DType::Int64) {
  auto a = accumulator_of(c);
  if (!a.ok()) return a.status();
  if (Status s = expect_inputs(c, n); !s.ok()) return s;
  if (scalar != nullptr) {
    if (Status s = expect_scalar(c, 0, dtype, scalar); !s.ok()) return s;
  }
  return a;
}

// AccumulatorApplyGradient(local_step: int64 scalar, gradient): no outputs.
Status apply_shape(ShapeContext& c) {
  auto a = accumulator_op(c, 2, "local_step", DType::Int64);
  if (!a.ok()) return a.status();
  const DType dtype = a.value()->attr<DType>("dtype");
  const Shape& shape = a.value()->attr<Shape>("shape");
  if (c.input_dtype(1) != dtype) {
    return c.invalid("accumulator '{}' accumulates {}, the gradient is {}", a.value()->name, dtype_name(dtype),
                     dtype_name(c.input_dtype(1)));
  }
  if (!shape.compatible_with(c.input_shape(1))) {
    return c.invalid("accumulator '{}' has shape {}, the gradient has shape {}", a.value()->name, shape.to_string(),
                     c.input_shape(1).to_string());
  }
  return Status();
}

// AccumulatorTakeGradient(num_required: int32 scalar) -> the mean, of the accumulator's dtype and
// shape.
Status take_shape(ShapeContext& c) {
  auto a = accumulator_op(c, 1, "num_required", DType::Int32);
  if (!a.ok()) return a.status();
  c.add_output(a.value()->attr<DType>("dtype"), a.value()->attr<Shape>("shape"));
  return Status();
}

Status num_accumulated_shape(ShapeContext& c) {
  auto a = accumulator_op(c, 0);
  if (!a.ok()) return a.status();
  c.add_output(DType::Int32, Shape{});
  return Status();
}

Status set_global_step_shape(ShapeContext& c) {
  return accumulator_op(c, 1, "new_global_step", DType::Int64).status();
}

Status cancel_takes_shape(ShapeContext& c) { return accumulator_op(c, 0).status(); }

// All stateful (never deduplicated: two applies are two gradients) and in host memory next to
// their accumulator.
TESSERA_REGISTER_OP(OpDef{"ConditionalAccumulator", accumulator_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"AccumulatorApplyGradient", apply_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"AccumulatorTakeGradient", take_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"AccumulatorNumAccumulated", num_accumulated_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"AccumulatorSetGlobalStep", set_global_step_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"_AccumulatorCancelTakes", cancel_takes_shape, true, true});

// No gradient crosses an accumulator, as in TensorFlow (data_flow_grad.py): what is applied
// reaches the take through the accumulator's state, not an edge.
TESSERA_NOT_DIFFERENTIABLE("ConditionalAccumulator");
TESSERA_NOT_DIFFERENTIABLE("AccumulatorApplyGradient");
TESSERA_NOT_DIFFERENTIABLE("AccumulatorTakeGradient");
TESSERA_NOT_DIFFERENTIABLE("AccumulatorNumAccumulated");
TESSERA_NOT_DIFFERENTIABLE("AccumulatorSetGlobalStep");
TESSERA_NOT_DIFFERENTIABLE("_AccumulatorCancelTakes");

}  // namespace
}  // namespace internal

using internal::Node;
using internal::NodeSpec;

struct ConditionalAccumulator::State : internal::ResourceNode {  // the accumulator's node
  using ResourceNode::ResourceNode;
  DType dtype = DType::Float32;
  Shape shape;
};

ConditionalAccumulator::ConditionalAccumulator(Graph& g, DType dtype, Shape shape, std::string shared_name,
                                               std::string name, std::string reduction_type) {
  NodeSpec spec{"ConditionalAccumulator", name.empty() ? std::string("conditional_accumulator") : std::move(name)};
  spec.attrs["dtype"] = dtype;
  spec.attrs["shape"] = shape;
  spec.attrs["shared_name"] = std::move(shared_name);
  spec.attrs["reduction_type"] = std::move(reduction_type);
  Node* n = g.impl().add_node(std::move(spec));
  auto state = std::make_shared<State>(n);
  state->dtype = dtype;
  state->shape = std::move(shape);
  state_ = std::move(state);
}

namespace {

const ConditionalAccumulator::State& checked_state(const std::shared_ptr<const ConditionalAccumulator::State>& s) {
  if (!s) throw InvalidArgumentError("use of a default-constructed ConditionalAccumulator");
  return *s;
}

// `value` as an int64 scalar: other integer dtypes are cast, as TensorFlow's apply_grad casts
// local_step.
Output as_int64(Output value, const char* what) {
  internal::checked_node(value, what);
  if (value.dtype() == DType::Int32) return ops::cast(value, DType::Int64);
  return value;
}

}  // namespace

Operation ConditionalAccumulator::apply_grad(Output grad, Output local_step, std::string name) const {
  const State& s = checked_state(state_);
  return Operation(s.add_op("AccumulatorApplyGradient", "_ApplyGradient", std::move(name),
                            {as_int64(local_step, "apply_grad (local_step)"), grad}));
}

Operation ConditionalAccumulator::apply_grad(Output grad, int64_t local_step, std::string name) const {
  const State& s = checked_state(state_);
  Output step = ops::constant(*s.node->graph->owner, Tensor::scalar<int64_t>(local_step));
  return apply_grad(std::move(grad), step, std::move(name));
}

Output ConditionalAccumulator::take_grad(Output num_required, std::string name) const {
  const State& s = checked_state(state_);
  return Output(s.add_op("AccumulatorTakeGradient", "_TakeGradient", std::move(name), {num_required}), 0);
}

Output ConditionalAccumulator::take_grad(int num_required, std::string name) const {
  const State& s = checked_state(state_);
  return take_grad(ops::constant(*s.node->graph->owner, Tensor::scalar<int32_t>(num_required)), std::move(name));
}

Output ConditionalAccumulator::num_accumulated(std::string name) const {
  return Output(checked_state(state_).add_op("AccumulatorNumAccumulated", "_NumAccumulated", std::move(name)), 0);
}

Operation ConditionalAccumulator::set_global_step(Output new_global_step, std::string name) const {
  return Operation(checked_state(state_).add_op("AccumulatorSetGlobalStep", "_SetGlobalStep", std::move(name),
                                                {as_int64(new_global_step, "set_global_step")}));
}

Operation ConditionalAccumulator::set_global_step(int64_t new_global_step, std::string name) const {
  const State& s = checked_state(state_);
  return set_global_step(ops::constant(*s.node->graph->owner, Tensor::scalar<int64_t>(new_global_step)),
                         std::move(name));
}

Operation ConditionalAccumulator::op() const { return Operation(checked_state(state_).node); }
Graph& ConditionalAccumulator::graph() const { return *checked_state(state_).node->graph->owner; }
const std::string& ConditionalAccumulator::name() const { return checked_state(state_).node->name; }
DType ConditionalAccumulator::dtype() const { return checked_state(state_).dtype; }
const Shape& ConditionalAccumulator::shape() const { return checked_state(state_).shape; }

Operation internal::accumulator_cancel_takes(const ConditionalAccumulator& acc, std::string name) {
  internal::Node* n = acc.op().node();
  NodeSpec spec{"_AccumulatorCancelTakes", name.empty() ? n->name + "_CancelTakes" : std::move(name)};
  spec.resource = n;
  return Operation(n->graph->add_node(std::move(spec)));
}

}  // namespace tessera
