// The gradient registry: one gradient function per differentiable op type, which
// tessera::gradients (core/gradients.cc) calls to build the backward pass into the graph.
//
//   TESSERA_REGISTER_GRADIENT("Square", [](const GradContext& c) -> std::vector<Output> {
//     return {ops::mul(c.grad(0), ops::mul(c.input(0), constant_like(c.input(0), 2.0)))};
//   });
//   TESSERA_NOT_DIFFERENTIABLE("ArgMax");
//
// A gradient function gets the forward op and the gradients flowing into its outputs, and returns
// one Output per input: the gradient of that input, or a null Output where none flows (an integer
// input, an index, a label). It builds ops with the public builders; they land in the graph of the
// forward op, under the name scope and device request tessera::gradients sets up for it. An op type
// with neither a gradient function nor a not-differentiable mark stops tessera::gradients with an
// error naming the op, when a gradient has to pass through it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/graph.h"
#include "tessera/ops.h"

namespace tessera::internal {

// What a gradient function sees of the forward op. Cheap to copy; valid during the call.
class GradContext {
 public:
  GradContext(const Node& node, std::vector<Output> grads) : node_(node), grads_(std::move(grads)) {}

  const Node& node() const { return node_; }
  Graph& graph() const { return *node_.graph->owner; }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  int num_outputs() const { return static_cast<int>(node_.output_dtypes.size()); }
  Output input(int i) const;
  Output output(int i) const;
  // The gradient flowing into output i; zeros shaped like the output where none flows (only some
  // outputs of a multi-output op reached the ys), so it is never null.
  Output grad(int i) const;
  bool has_grad(int i) const { return !grads_.at(static_cast<std::size_t>(i)).is_null(); }

 private:
  const Node& node_;
  std::vector<Output> grads_;
};

using GradFn = std::function<std::vector<Output>(const GradContext&)>;

class GradientRegistry {
 public:
  static GradientRegistry& global();
  void register_gradient(const std::string& op_type, GradFn fn);
  void register_not_differentiable(const std::string& op_type);
  // The op's gradient function; nullptr for a not-differentiable op. `known` says whether the op
  // type was registered either way.
  const GradFn* find(const std::string& op_type, bool* known) const;
  // The op types registered with a gradient function (not those marked not differentiable),
  // sorted: what the numeric gradient checks must cover (tests/gradient_check_test.cc).
  std::vector<std::string> differentiable_op_types() const;

 private:
  std::map<std::string, GradFn> fns_;  // a null GradFn marks a not-differentiable op
};

struct GradientRegistrar {
  GradientRegistrar(const std::string& op_type, GradFn fn) {
    if (fn) {
      GradientRegistry::global().register_gradient(op_type, std::move(fn));
    } else {
      GradientRegistry::global().register_not_differentiable(op_type);
    }
  }
};

// The function may be a lambda with commas in it (hence the variadic argument).
#define TESSERA_REGISTER_GRADIENT(op_type, ...)                                                    \
  static ::tessera::internal::GradientRegistrar TESSERA_CONCAT(tessera_grad_reg_, __COUNTER__)( \
      op_type, __VA_ARGS__)
#define TESSERA_NOT_DIFFERENTIABLE(op_type)                                                        \
  static ::tessera::internal::GradientRegistrar TESSERA_CONCAT(tessera_grad_reg_, __COUNTER__)( \
      op_type, ::tessera::internal::GradFn())

// ---- Helpers for gradient functions ----

// `grad` summed down to x's shape, as it is when the op runs: the dims along which x was
// broadcast (leading dims x lacks, dims where x has 1) are summed away (op "SumToShapeOf"). The
// same Output when the shapes are known at build time and equal.
Output reduce_to_shape_of(Output grad, Output x);
// `y`'s elements with x's shape as it is when the op runs (op "ReshapeToShapeOf": no data moves).
// The same Output when the shapes are known at build time and equal.
Output reshape_to_shape_of(Output y, Output x);
// A scalar `value` of `dtype` in `g`: float32 and float64 constants directly, other dtypes cast
// from a float32 constant (Tensor cannot make the 16-bit floats); `name` names the op returned.
Output scalar_constant(Graph& g, DType dtype, double value, const std::string& name = "");
// A scalar of x's dtype.
Output constant_like(const Output& x, double value);

}  // namespace tessera::internal
