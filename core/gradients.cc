// tessera::gradients: the backward pass built into the graph (Note [Building the backward pass]),
// the gradient registry and the helpers of core/gradients.h.
//
// Note [Building the backward pass]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As TensorFlow 1's gradients_impl: (1) the ops reached forward from the xs' ops through
// floating point outputs (an integer output carries no gradient, so an argmax or a shape ends the
// walk); (2) among those, the ops from which the ys are reached backward through data inputs: the
// "between" ops, which the backward pass visits; (3) each between op waits for the gradients of
// all its consumers among the between ops (a pending count per op), so fan-out is summed (AddN)
// before the op's gradient function sees it, and the visit order is a reverse topological order
// whatever the graph's shape. An x's op whose own inputs are not between is where the walk stops
// (a variable, a placeholder, or an x that depends on nothing between), so no gradient function
// is asked of it. The gradient of an x is the sum of what flows into it, or null when nothing does.
// An integer y is accepted but, not being backpropagatable, contributes nothing (TF fills it with
// ones of its dtype, which no gradient function turns into a float gradient: Cast's gives None);
// a bool or string y raises, as TF's _DefaultGradYs does ("must be numeric").
#include "core/gradients.h"

#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "core/broadcast.h"
#include "core/shape_ops.h"
#include "tessera/gradients.h"

namespace tessera {
namespace internal {

Output GradContext::input(int i) const {
  const Endpoint& e = node_.inputs.at(static_cast<std::size_t>(i));
  return Output(e.node, e.index);
}

Output GradContext::output(int i) const { return Output(const_cast<Node*>(&node_), i); }

Output GradContext::grad(int i) const {
  const Output& g = grads_.at(static_cast<std::size_t>(i));
  return g.is_null() ? ops::zeros_like(output(i)) : g;
}

GradientRegistry& GradientRegistry::global() {
  static auto* registry = new GradientRegistry;
  return *registry;
}

void GradientRegistry::register_gradient(const std::string& op_type, GradFn fn) {
  TESSERA_CHECK(fn != nullptr);
  TESSERA_CHECK(fns_.emplace(op_type, std::move(fn)).second);
}

void GradientRegistry::register_not_differentiable(const std::string& op_type) {
  TESSERA_CHECK(fns_.emplace(op_type, GradFn()).second);
}

const GradFn* GradientRegistry::find(const std::string& op_type, bool* known) const {
  auto it = fns_.find(op_type);
  *known = it != fns_.end();
  return *known && it->second ? &it->second : nullptr;
}

std::vector<std::string> GradientRegistry::differentiable_op_types() const {
  std::vector<std::string> types;  // std::map: already sorted
  for (const auto& [type, fn] : fns_) {
    if (fn) types.push_back(type);
  }
  return types;
}

Output scalar_constant(Graph& g, DType dtype, double value, const std::string& name) {
  switch (dtype) {
    case DType::Float32: return ops::constant(g, static_cast<float>(value), name);
    case DType::Float64: return ops::constant(g, value, name);
    default: return ops::cast(ops::constant(g, static_cast<float>(value)), dtype, name);
  }
}

Output constant_like(const Output& x, double value) { return scalar_constant(*x.node()->graph->owner, x.dtype(), value); }

namespace {

bool same_known_shape(const Shape& a, const Shape& b) { return a.fully_defined() && b.fully_defined() && a == b; }

}  // namespace

Output reduce_to_shape_of(Output grad, Output x) {
  if (same_known_shape(grad.shape(), x.shape())) return grad;
  return add_op("reduce_to_shape_of", NodeSpec{"SumToShapeOf", ""}, {grad, x});
}

Output reshape_to_shape_of(Output y, Output x) {
  const Shape xs = x.shape();
  if (same_known_shape(y.shape(), xs)) return y;
  if (!xs.unknown_rank()) {
    std::vector<int64_t> dims;
    int unknown = 0;
    for (int i = 0; i < xs.rank(); ++i) {
      dims.push_back(xs.dim(i));
      unknown += xs.dim(i) < 0 ? 1 : 0;
    }
    if (unknown <= 1) return ops::reshape(y, dims);  // the kernel infers the one unknown dim
  }
  return add_op("reshape_to_shape_of", NodeSpec{"ReshapeToShapeOf", ""}, {y, x});
}

namespace {

// "SumToShapeOf"(grad, x) and "ReshapeToShapeOf"(y, x): input 0's dtype, input 1's shape.
Status sum_to_shape_of_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  if (c.input_dtype(0) == DType::Bool) return c.invalid("bool tensors are not supported");
  auto mask = sum_to_shape_mask(c.input_shape(0), c.input_shape(1));
  if (!mask.ok()) return c.invalid("{}", mask.status().message());
  c.add_output(c.input_dtype(0), c.input_shape(1));
  return Status();
}

Status reshape_to_shape_of_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  return add_shaped(c, c.input_dtype(0), reshape_to_shape(c.input_shape(0), c.input_shape(1)));
}

TESSERA_REGISTER_OP(OpDef{"SumToShapeOf", sum_to_shape_of_shape});
TESSERA_REGISTER_OP(OpDef{"ReshapeToShapeOf", reshape_to_shape_of_shape});

struct EndpointHash {
  std::size_t operator()(const std::pair<Node*, int>& e) const {
    return std::hash<const void*>()(e.first) * 31 + static_cast<std::size_t>(e.second);
  }
};
using EndpointKey = std::pair<Node*, int>;

bool carries_gradient(DType dtype) { return dtype_is_floating(dtype); }

// Calls visit(n, queue) for each node taken from a queue that starts with the nodes of `from`;
// visit pushes the nodes to go on to (and skips a node it has seen).
template <class Visit>
void breadth_first(const std::vector<Output>& from, Visit visit) {
  std::deque<Node*> queue;
  for (const Output& o : from) queue.push_back(o.node());
  while (!queue.empty()) {
    Node* n = queue.front();
    queue.pop_front();
    visit(n, queue);
  }
}

// The backward pass of one tessera::gradients call (Note [Building the backward pass]).
class BackwardPass {
 public:
  BackwardPass(GraphImpl& g, const std::vector<Output>& ys, const std::vector<Output>& xs)
      : graph_(g), ys_(ys), xs_(xs) {
    for (Node* n : g.nodes()) {
      for (const Endpoint& e : n->inputs) consumers_[e.node].push_back(n);
    }
    mark_reached();
    mark_between();
  }

  std::vector<Output> run(const std::vector<Output>& grad_ys) {
    Graph& graph = *graph_.owner;
    GraphScope scope = graph.name_scope("gradients");
    for (std::size_t i = 0; i < ys_.size(); ++i) {
      const Output& y = ys_[i];
      if (!carries_gradient(y.dtype())) continue;  // an integer y: nothing flows from it
      Output g = grad_ys.empty() || grad_ys[i].is_null() ? ops::ones_like(y, "grad_ys") : grad_ys[i];
      contributions_[{y.node(), y.index()}].push_back(g);
    }
    // Ops whose consumers among the between ops have all passed their gradients on.
    std::unordered_map<Node*, int> pending;
    for (Node* n : between_) {
      for (const Endpoint& e : n->inputs) {
        if (between_.count(e.node)) ++pending[e.node];
      }
    }
    std::deque<Node*> ready;
    for (Node* n : between_) {
      if (pending[n] == 0) ready.push_back(n);
    }
    while (!ready.empty()) {
      Node* n = ready.front();
      ready.pop_front();
      visit(*n);
      for (const Endpoint& e : n->inputs) {
        if (between_.count(e.node) && --pending[e.node] == 0) ready.push_back(e.node);
      }
    }
    std::vector<Output> out;
    out.reserve(xs_.size());
    for (const Output& x : xs_) out.push_back(summed(x.node(), x.index()));
    return out;
  }

 private:
  void mark_reached() {
    breadth_first(xs_, [&](Node* n, std::deque<Node*>& queue) {
      if (!reached_.insert(n).second) return;
      auto it = consumers_.find(n);
      if (it == consumers_.end()) return;
      for (Node* c : it->second) {
        for (const Endpoint& e : c->inputs) {
          if (e.node == n && carries_gradient(n->output_dtypes[static_cast<std::size_t>(e.index)])) {
            queue.push_back(c);
            break;
          }
        }
      }
    });
  }

  void mark_between() {
    breadth_first(ys_, [&](Node* n, std::deque<Node*>& queue) {
      if (!reached_.count(n) || !between_.insert(n).second) return;
      for (const Endpoint& e : n->inputs) queue.push_back(e.node);
    });
  }

  // The sum of the gradients flowing into output `index` of `n`, made once; null when none flows.
  Output summed(Node* n, int index) {
    const EndpointKey key{n, index};
    if (auto it = sums_.find(key); it != sums_.end()) return it->second;
    Output sum;
    auto it = contributions_.find(key);
    if (it != contributions_.end() && !it->second.empty()) {
      sum = it->second.size() == 1 ? it->second.front() : ops::add_n(it->second);
    }
    sums_.emplace(key, sum);
    return sum;
  }

  void visit(Node& n) {
    const int num_outputs = static_cast<int>(n.output_dtypes.size());
    std::vector<Output> grads;
    bool any = false;
    for (int i = 0; i < num_outputs; ++i) {
      grads.push_back(summed(&n, i));
      any = any || !grads.back().is_null();
    }
    if (!any) return;
    // Where an x's op stops the walk: nothing it reads is between.
    bool inputs_between = false;
    for (const Endpoint& e : n.inputs) inputs_between = inputs_between || between_.count(e.node) != 0;
    if (!inputs_between) return;
    bool known = false;
    const GradFn* fn = GradientRegistry::global().find(n.type, &known);
    if (!known) {
      throw InvalidArgumentError(fmt::format(
          "gradients: no gradient is defined for op {}, on the path from the xs to the ys", n.debug_name()));
    }
    if (fn == nullptr) return;  // not differentiable: nothing flows through
    Graph& graph = *graph_.owner;
    GraphScope scope = graph.name_scope(n.name + "_grad");
    GraphScope device = n.requested_device.empty() ? GraphScope() : graph.device(n.requested_device);
    std::vector<Output> in_grads = (*fn)(GradContext(n, std::move(grads)));
    if (in_grads.size() != n.inputs.size()) {
      throw InternalError(fmt::format("gradients: the gradient function of {} returned {} gradients for {} inputs",
                                      n.debug_name(), in_grads.size(), n.inputs.size()));
    }
    for (std::size_t k = 0; k < in_grads.size(); ++k) {
      const Endpoint& e = n.inputs[k];
      const Output& g = in_grads[k];
      if (g.is_null() || !between_.count(e.node)) continue;
      const DType want = e.node->output_dtypes[static_cast<std::size_t>(e.index)];
      if (!carries_gradient(want)) continue;
      if (g.dtype() != want) {
        throw InternalError(fmt::format("gradients: the gradient of input {} of {} is {}, the input is {}", k,
                                        n.debug_name(), dtype_name(g.dtype()), dtype_name(want)));
      }
      contributions_[{e.node, e.index}].push_back(g);
    }
  }

  GraphImpl& graph_;
  const std::vector<Output>& ys_;
  const std::vector<Output>& xs_;
  std::unordered_map<Node*, std::vector<Node*>> consumers_;
  std::unordered_set<Node*> reached_;
  std::unordered_set<Node*> between_;
  std::unordered_map<EndpointKey, std::vector<Output>, EndpointHash> contributions_;
  std::unordered_map<EndpointKey, Output, EndpointHash> sums_;
};

}  // namespace
}  // namespace internal

std::vector<Output> gradients(const std::vector<Output>& ys, const std::vector<Output>& xs,
                              const std::vector<Output>& grad_ys) {
  if (ys.empty()) throw InvalidArgumentError("gradients: ys is empty");
  if (!grad_ys.empty() && grad_ys.size() != ys.size()) {
    throw InvalidArgumentError(fmt::format("gradients: {} grad_ys for {} ys", grad_ys.size(), ys.size()));
  }
  internal::GraphImpl& g = *internal::checked_node(ys[0], "gradients (ys)")->graph;
  auto check = [&](const Output& o, const char* what, std::size_t i) {
    internal::Node* n = internal::checked_node(o, what);
    if (n->graph != &g) throw InvalidArgumentError(fmt::format("gradients: {}[{}] is from another graph", what, i));
  };
  for (std::size_t i = 0; i < ys.size(); ++i) {
    check(ys[i], "ys", i);
    const DType dtype = ys[i].dtype();
    if (dtype == DType::Bool || dtype == DType::String) {
      throw InvalidArgumentError(fmt::format("gradients: ys[{}] ({}) is {}: a y must be numeric to have a gradient", i,
                                             ys[i].name(), dtype_name(dtype)));
    }
    if (!grad_ys.empty() && !grad_ys[i].is_null()) {
      check(grad_ys[i], "grad_ys", i);
      if (grad_ys[i].dtype() != ys[i].dtype()) {
        throw InvalidArgumentError(fmt::format("gradients: grad_ys[{}] is {}, ys[{}] is {}", i,
                                               dtype_name(grad_ys[i].dtype()), i, dtype_name(ys[i].dtype())));
      }
    }
  }
  for (std::size_t i = 0; i < xs.size(); ++i) check(xs[i], "xs", i);
  return internal::BackwardPass(g, ys, xs).run(grad_ys);
}

}  // namespace tessera
