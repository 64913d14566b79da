// Op definitions and constructors: Const, Placeholder, Identity, NoOp (group).
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

Status const_shape(ShapeContext& c) {
  const auto& t = c.attr<Tensor>("value");
  c.add_output(t.dtype(), t.shape());
  return Status();
}

Status placeholder_shape(ShapeContext& c) {
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

Status identity_shape(ShapeContext& c) {
  if (c.num_inputs() != 1) return c.invalid("expects 1 input, got {}", c.num_inputs());
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

Status no_output_shape(ShapeContext& c) { return Status(); }

TESSERA_REGISTER_OP(OpDef{"Const", const_shape});
TESSERA_REGISTER_OP(OpDef{"Placeholder", placeholder_shape});
TESSERA_REGISTER_OP(OpDef{"Identity", identity_shape});
TESSERA_REGISTER_OP(OpDef{"NoOp", no_output_shape});

}  // namespace
}  // namespace internal

namespace ops {

Output constant(Graph& g, Tensor value, std::string name) {
  if (value.is_null()) throw InvalidArgumentError("constant: null tensor");
  NodeSpec spec{"Const", std::move(name)};
  spec.attrs["value"] = std::move(value);
  return Output(g.impl().add_node(std::move(spec)), 0);
}
Output constant(Graph& g, float v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, double v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, int32_t v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, int64_t v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, bool v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, const char* v, std::string name) { return constant(g, Tensor::scalar(v), std::move(name)); }
Output constant(Graph& g, std::string v, std::string name) {
  return constant(g, Tensor::scalar(std::move(v)), std::move(name));
}

Output placeholder(Graph& g, DType dtype, Shape shape, std::string name) {
  NodeSpec spec{"Placeholder", std::move(name)};
  spec.attrs["dtype"] = dtype;
  spec.attrs["shape"] = shape;
  return Output(g.impl().add_node(std::move(spec)), 0);
}

Output identity(Output x, std::string name) {
  internal::Node* n = internal::checked_node(x, "identity");
  NodeSpec spec{"Identity", std::move(name)};
  spec.inputs = {x};
  return Output(n->graph->add_node(std::move(spec)), 0);
}

Operation no_op(Graph& g, std::string name) {
  return Operation(g.impl().add_node(NodeSpec{"NoOp", std::move(name)}));
}

Operation group(const std::vector<Operation>& deps, std::string name) {
  if (deps.empty()) throw InvalidArgumentError("group: needs at least one op (its graph is theirs)");
  internal::Node* first = deps.front().node();
  NodeSpec spec{"NoOp", name.empty() ? std::string("group_deps") : std::move(name)};
  spec.extra_control_inputs = deps;
  return Operation(first->graph->add_node(std::move(spec)));
}

}  // namespace ops
}  // namespace tessera
