// Note [Conditionals]
// ~~~~~~~~~~~~~~~~~~~
// ops::cond builds TensorFlow 1's conditional out of two ops and dead tensors (Note [Dead tensors]
// in core/executor.cc):
//   * Switch(data, pred) forwards data to output 1 when pred is true, to output 0 otherwise; the
//     other output is dead.
//   * Merge(inputs...) forwards the one live input, and its index (output 1).
// cond makes pred_id = Identity(pred) and the pivots switch_t/switch_f, the two outputs of
// Switch(pred_id, pred_id) through an Identity. Each branch function then runs with its branch
// as the graph's current one (GraphImpl::cond_branch_): an op it makes that reads a tensor from
// outside the branch reads it through a Switch on pred_id (one per tensor and branch, the output
// of the branch's side), and an op without inputs (a constant) waits on the branch's pivot. So
// every op of the untaken branch has a dead input and does not run. The branches' results meet
// in one Merge per result. A cond built inside a branch is nested: its Switches are made in the
// outer branch, whose own rules apply to them.
//
// Gradients: a Merge's gradient goes to the input that was live, through
// Switch(grad, value_index == j); a Switch's gradient is the Merge of the gradients of its two
// outputs, the missing one ZerosLike of that output (dead when the output is), so exactly one is
// live whichever branch ran.
//
// Both ops run on a host CPU (host_only; one made under an accelerator's device scope runs on its
// task's CPU, OpDef::host_of_request): the executor decides deadness when it dispatches a node,
// so the predicate must be a value on the host, not work queued on a device's stream. A branch
// placed on an accelerator receives its inputs from the host's Switch (_Send/_Recv carry
// deadness), and its results go back to the host's Merge: a copy each way that TensorFlow's
// GPU Switch (data in device memory, the predicate in host memory) does not make.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "tessera/control_flow.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

Status switch_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  if (c.input_dtype(1) != DType::Bool) return c.invalid("pred must be bool, got {}", dtype_name(c.input_dtype(1)));
  const Shape& pred = c.input_shape(1);
  if (!pred.unknown_rank() && pred.rank() != 0) return c.invalid("pred must be a scalar, got shape {}", pred.to_string());
  c.add_output(c.input_dtype(0), c.input_shape(0));  // output_false
  c.add_output(c.input_dtype(0), c.input_shape(0));  // output_true
  return Status();
}

// The shape every one of `shapes` has: a dim where they differ is unknown, a rank where they differ
// makes it unknown.
Shape common_shape(const std::vector<Shape>& shapes) {
  Shape out = shapes.front();
  for (const Shape& s : shapes) {
    if (out.unknown_rank()) break;
    if (s.unknown_rank() || s.rank() != out.rank()) return Shape::unknown();
    for (int d = 0; d < s.rank(); ++d) {
      if (s.dim(d) != out.dim(d)) out.set_dim(d, -1);
    }
  }
  return out;
}

Status merge_shape(ShapeContext& c) {
  if (c.num_inputs() < 1) return c.invalid("needs at least one input");
  std::vector<Shape> shapes;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != c.input_dtype(0)) {
      return c.invalid("input {} is {}, input 0 is {}: every input must have one dtype", i,
                       dtype_name(c.input_dtype(i)), dtype_name(c.input_dtype(0)));
    }
    shapes.push_back(c.input_shape(i));
  }
  c.add_output(c.input_dtype(0), common_shape(shapes));
  c.add_output(DType::Int32, Shape{});  // value_index
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"Switch", switch_shape, /*stateful=*/false, /*host_only=*/true, /*host_of_request=*/true});
TESSERA_REGISTER_OP(OpDef{"Merge", merge_shape, /*stateful=*/false, /*host_only=*/true, /*host_of_request=*/true});

class SwitchOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    const Tensor& pred = ctx.input(1);
    if (pred.dtype() != DType::Bool || pred.shape().rank() != 0) {
      return ctx.fail(ErrorCode::kInvalidArgument, "pred must be a bool scalar, got a {} tensor of shape {}",
                      dtype_name(pred.dtype()), pred.shape().to_string());
    }
    // The other output stays unset: dead (Note [Dead tensors] in core/executor.cc).
    ctx.set_output(pred.scalar<bool>() ? 1 : 0, ctx.input(0));
  }
};

class MergeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    // The executor runs a Merge when an input is live; a dead one reads as unset.
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).is_null()) continue;
      ctx.set_output(0, ctx.input(i));
      ctx.set_output(1, Tensor::scalar<int32_t>(i));
      return;
    }
    ctx.fail(ErrorCode::kInternal, "every input is dead");
  }
};

TESSERA_REGISTER_KERNEL("Switch", "CPU", SwitchOp);
TESSERA_REGISTER_KERNEL("Merge", "CPU", MergeOp);

Node* add_switch(GraphImpl& g, Output data, Output pred, std::string name = "Switch") {
  NodeSpec spec{"Switch", std::move(name)};
  spec.inputs = {std::move(data), std::move(pred)};
  return g.add_node(std::move(spec));
}

Node* add_merge(GraphImpl& g, std::vector<Output> inputs, std::string name = "Merge") {
  NodeSpec spec{"Merge", std::move(name)};
  spec.inputs = std::move(inputs);
  return g.add_node(std::move(spec));
}

using Grads = std::vector<Output>;

TESSERA_REGISTER_GRADIENT("Switch", [](const GradContext& c) -> Grads {
  // grad(k) is ZerosLike(output k) where no gradient flows into it: dead exactly when that output
  // is, so one input of the Merge is live.
  return {Output(add_merge(*c.node().graph, {c.grad(0), c.grad(1)}, "cond_grad"), 0), Output()};
});

TESSERA_REGISTER_GRADIENT("Merge", [](const GradContext& c) -> Grads {
  GraphImpl& g = *c.node().graph;
  const Output value_index = c.output(1);
  const int n = c.num_inputs();
  if (n == 2) {
    Node* sw = add_switch(g, c.grad(0), ops::equal(value_index, scalar_constant(c.graph(), DType::Int32, 1)));
    return {Output(sw, 0), Output(sw, 1)};
  }
  Grads grads;
  for (int j = 0; j < n; ++j) {
    grads.push_back(
        Output(add_switch(g, c.grad(0), ops::equal(value_index, scalar_constant(c.graph(), DType::Int32, j))), 1));
  }
  return grads;
});

// Makes `branch` the graph's current branch while it lives.
class InBranch {
 public:
  InBranch(GraphImpl& g, CondBranch* branch) : g_(g), previous_(g.cond_branch_) { g.cond_branch_ = branch; }
  ~InBranch() { g_.cond_branch_ = previous_; }
  InBranch(const InBranch&) = delete;
  InBranch& operator=(const InBranch&) = delete;

 private:
  GraphImpl& g_;
  CondBranch* previous_;
};

// `name`, or name_1, name_2, ...: the first whose op `marker` (relative to it) is not in the graph
// yet, under the current name scope.
std::string unique_scope(const GraphImpl& g, const std::string& name, const std::string& marker) {
  const std::string outer = g.name_scope_.empty() ? std::string() : g.name_scope_ + "/";
  for (int k = 0;; ++k) {
    std::string candidate = k == 0 ? name : fmt::format("{}_{}", name, k);
    if (g.find(outer + candidate + "/" + marker) == nullptr) return candidate;
  }
}

}  // namespace
}  // namespace internal

namespace ops {

std::vector<Output> cond(Output pred, const BranchFn& true_fn, const BranchFn& false_fn, std::string name) {
  using internal::CondBranch;
  using internal::GraphImpl;
  GraphImpl& g = *internal::checked_node(pred, "cond (pred)")->graph;
  Graph& graph = *g.owner;
  if (pred.dtype() != DType::Bool) {
    throw InvalidArgumentError(
        fmt::format("cond: pred '{}' must be bool, got {}", pred.name(), dtype_name(pred.dtype())));
  }
  if (!pred.shape().unknown_rank() && pred.shape().rank() != 0) {
    throw InvalidArgumentError(
        fmt::format("cond: pred '{}' must be a scalar, got shape {}", pred.name(), pred.shape().to_string()));
  }
  if (!true_fn || !false_fn) throw InvalidArgumentError("cond: true_fn and false_fn must be callable");
  if (name.empty()) name = "cond";
  GraphScope scope = graph.name_scope(internal::unique_scope(g, name, "pred_id"));
  const Output pred_id = identity(pred, "pred_id");
  internal::Node* pred_switch = internal::add_switch(g, pred_id, pred_id);
  const std::string full = pred_id.node()->name.substr(0, pred_id.node()->name.rfind('/'));

  auto build = [&](int which, const BranchFn& fn) {
    auto owned = std::make_unique<CondBranch>();
    CondBranch* branch = owned.get();
    branch->outer = g.cond_branch_;
    branch->pred = pred_id;
    branch->branch = which;
    branch->pivot = identity(Output(pred_switch, which), which == 1 ? "switch_t" : "switch_f").node();
    branch->pivot->cond_branch = branch;  // live exactly when the branch is taken: read as its own
    branch->name = full + (which == 1 ? "/branch_true" : "/branch_false");
    g.cond_branches_.push_back(std::move(owned));
    internal::InBranch in(g, branch);
    std::vector<Output> results = fn();
    const char* what = which == 1 ? "true_fn" : "false_fn";
    if (results.empty()) throw InvalidArgumentError(fmt::format("cond '{}': {} returned no results", full, what));
    for (std::size_t i = 0; i < results.size(); ++i) {
      Output& r = results[i];
      if (r.is_null()) throw InvalidArgumentError(fmt::format("cond '{}': result {} of {} is null", full, i, what));
      if (r.node()->graph != &g) {
        throw InvalidArgumentError(fmt::format("cond '{}': result {} of {} is from another graph", full, i, what));
      }
      // A tensor from outside the branch comes out of it through its Switch, as TensorFlow's
      // branch results do: live only when the branch is taken.
      if (!branch->contains(r.node()->cond_branch)) r = identity(r);
    }
    return results;
  };
  const std::vector<Output> on_true = build(1, true_fn);
  const std::vector<Output> on_false = build(0, false_fn);
  if (on_true.size() != on_false.size()) {
    throw InvalidArgumentError(fmt::format("cond '{}': true_fn returned {} results, false_fn {}", full,
                                           on_true.size(), on_false.size()));
  }
  std::vector<Output> merged;
  for (std::size_t i = 0; i < on_true.size(); ++i) {
    if (on_true[i].dtype() != on_false[i].dtype()) {
      throw InvalidArgumentError(fmt::format("cond '{}': result {} is {} in true_fn and {} in false_fn", full, i,
                                             dtype_name(on_true[i].dtype()), dtype_name(on_false[i].dtype())));
    }
    merged.push_back(Output(internal::add_merge(g, {on_false[i], on_true[i]}), 0));
  }
  return merged;
}

Output cond(Output pred, const std::function<Output()>& true_fn, const std::function<Output()>& false_fn,
            std::string name) {
  if (!true_fn || !false_fn) throw InvalidArgumentError("cond: true_fn and false_fn must be callable");
  return cond(
      std::move(pred), [&] { return std::vector<Output>{true_fn()}; }, [&] { return std::vector<Output>{false_fn()}; },
      std::move(name))[0];
}

Operation cond(Output pred, const std::function<Operation()>& true_fn, const std::function<Operation()>& false_fn,
               std::string name) {
  if (!true_fn || !false_fn) throw InvalidArgumentError("cond: true_fn and false_fn must be callable");
  internal::GraphImpl& g = *internal::checked_node(pred, "cond (pred)")->graph;
  // Each branch's result is its pivot once the op has run, as TensorFlow's cond stands a pivot in
  // for an op a branch returns; the Merge of the two is the op the caller gets.
  auto done_after = [&g](const std::function<Operation()>& fn, const char* what) {
    return [&g, &fn, what] {
      Operation op = fn();
      if (op.is_null()) throw InvalidArgumentError(fmt::format("cond: {} returned a null Operation", what));
      GraphScope after = g.owner->control_dependencies({op});
      return std::vector<Output>{identity(Output(g.cond_branch_->pivot, 0), "op_done")};
    };
  };
  return cond(std::move(pred), done_after(true_fn, "true_fn"), done_after(false_fn, "false_fn"), std::move(name))[0]
      .op();
}

std::vector<Output> case_(const std::vector<std::pair<Output, BranchFn>>& pred_fn_pairs, const BranchFn& default_fn,
                          std::string name) {
  if (pred_fn_pairs.empty()) throw InvalidArgumentError("case: pred_fn_pairs is empty");
  if (!default_fn) throw InvalidArgumentError("case: default_fn must be callable");
  internal::GraphImpl& g = *internal::checked_node(pred_fn_pairs.front().first, "case (pred)")->graph;
  if (name.empty()) name = "case";
  GraphScope scope = g.owner->name_scope(internal::unique_scope(g, name, "cond/pred_id"));
  // cond(p0, f0, [] { cond(p1, f1, [] { ... default_fn() }) }): TensorFlow's non-exclusive case.
  std::function<std::vector<Output>(std::size_t)> from = [&](std::size_t k) -> std::vector<Output> {
    if (k == pred_fn_pairs.size()) return default_fn();
    const auto& [pred, fn] = pred_fn_pairs[k];
    return cond(pred, fn, [&] { return from(k + 1); });
  };
  return from(0);
}

}  // namespace ops
}  // namespace tessera
