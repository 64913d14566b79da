// Conditionals: TensorFlow 1's tf.cond and tf.case.
//
//   Output y = ops::cond(ops::less(x, zero),
//                        [&] { return ops::neg(x); },      // runs only when x < 0
//                        [&] { return ops::square(x); });  // runs only otherwise
//
// Only the branch the predicate picks runs: ops made in the other one (a variable's assign, a
// queue's dequeue) do nothing that step. Gradients flow through the taken branch (zeros for the
// other).
//
//   // tf.while_loop: sum 1..10.
//   std::vector<Output> r = ops::while_loop(
//       [&](const std::vector<Output>& v) { return ops::less(v[0], ten); },
//       [&](const std::vector<Output>& v) { return std::vector<Output>{ops::add(v[0], one), ops::add(v[1], v[0])}; },
//       {zero, zero});
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"

namespace tessera::ops {

using BranchFn = std::function<std::vector<Output>()>;

// tf.cond: `pred` a bool scalar. Each function builds its branch and returns its results, as many
// as the other returns and of the same dtypes; result i of the cond is the taken branch's result
// i (its shape is the two branches' common one). Ops a branch makes read the tensors from outside
// it through a Switch on `pred`, so a branch does nothing, and its results are not computed, when
// the other is taken. InvalidArgumentError for a non-bool or non-scalar pred, branches that differ
// in number or dtype of results, a branch with no results, or a branch that reads the other's
// tensors. Ops are named under the unique scope `name` ("cond", "cond_1", ...).
std::vector<Output> cond(Output pred, const BranchFn& true_fn, const BranchFn& false_fn, std::string name = "cond");
Output cond(Output pred, const std::function<Output()>& true_fn, const std::function<Output()>& false_fn,
            std::string name = "cond");
// Branches that return an op (a train op, an assign's op, no_op): the returned op runs the taken
// branch's op (TF1's cond returning an Operation). As in TF, only ops a branch function makes are
// the branch's: one made before the cond and returned by a branch runs whichever is taken. E.g.
//   s.run(ops::cond(is_chief, [&] { return save_op; }, [&] { return ops::no_op(g); }));
Operation cond(Output pred, const std::function<Operation()>& true_fn, const std::function<Operation()>& false_fn,
               std::string name = "cond");

// tf.case (exclusive=False): the results of the function of the first pair whose predicate is
// true, else default_fn's; as nested conds, so only that function's branch runs. Every function
// returns results of the same number and dtypes. InvalidArgumentError for no pairs and as cond.
std::vector<Output> case_(const std::vector<std::pair<Output, BranchFn>>& pred_fn_pairs, const BranchFn& default_fn,
                          std::string name = "case");

// tf.while_loop's options.
struct WhileOptions {
  // Per loop variable, the shapes its value may take across iterations (unknown dims where it
  // changes); empty: each loop variable keeps the shape it has before the loop.
  std::vector<Shape> shape_invariants;
  // An int32 or int64 scalar: at most this many iterations (null: no limit), as TF's
  // maximum_iterations.
  Output maximum_iterations;
  std::string name = "while";
};

using LoopCondFn = std::function<Output(const std::vector<Output>&)>;
using LoopBodyFn = std::function<std::vector<Output>(const std::vector<Output>&)>;

// tf.while_loop: while cond(vars) is true, vars = body(vars), starting from `loop_vars`; returns
// the final vars. cond returns a bool scalar; body returns one tensor per loop variable, of its
// dtype and of a shape its invariant allows. Ops made in cond and body are the loop's: they run
// in each iteration, read tensors from outside the loop as they are when the loop starts, and
// nothing outside the loop may read them (InvalidArgumentError). Variables made there are made
// outside the loop (TF's init_scope).
//
// As TensorFlow 2's functional While (Note [While loops] in core/while_ops.cc): iterations run one
// after the other (TF1's parallel_iterations > 1 would overlap them), each as a step of the loop's
// own ops; the loop runs on the host CPU of its task, a request for an accelerator inside it
// meaning that task's CPU; on a cluster the task of the loop's host gets the loop with its share
// of the graph.
// Gradients flow through the loop variables and the tensors the body reads from outside, by
// recomputing each iteration backwards; a body with a stateful op other than reading a variable
// (an assign, a random op) has no gradient (InvalidArgumentError from ops::gradients).
// InvalidArgumentError for no loop variables, a cond that is not a bool scalar, a body returning
// another number of results, a dtype or a shape its invariant does not allow (at build time, or
// when an iteration makes one).
std::vector<Output> while_loop(const LoopCondFn& cond, const LoopBodyFn& body, const std::vector<Output>& loop_vars,
                               const WhileOptions& options = {});
// One loop variable.
Output while_loop(const std::function<Output(Output)>& cond, const std::function<Output(Output)>& body,
                  Output loop_var, const WhileOptions& options = {});

// TensorFlow's higher-order functions, built on while_loop and TensorArray (tessera/tensor_array.h):
// `elems` is split along its first dimension, fn runs once per element, in order, inside one loop
// (its ops are the loop's, as a body's), and gradients flow through fn, the elements and the
// tensors fn reads from outside. An `elems` that is a scalar, or elements of differing dtypes from
// what fn returns where a dtype is promised, are InvalidArgumentError.
//
// tf.map_fn: fn applied to each element, the results stacked: [n, fn's result shape...]. The
// results are of `dtype` (Float32 etc.; by default elems' dtype, as TF's dtype=None).
Output map_fn(const std::function<Output(Output)>& fn, Output elems, std::optional<DType> dtype = std::nullopt,
              std::string name = "map");
// Several element tensors (of one first dimension) and several results: fn gets one element of
// each and returns one result per `dtypes` entry (empty: as many as elems, of their dtypes).
std::vector<Output> map_fn(const std::function<std::vector<Output>(const std::vector<Output>&)>& fn,
                           const std::vector<Output>& elems, std::vector<DType> dtypes = {},
                           std::string name = "map");
// tf.scan: a = fn(a, x) for each element x, starting from `initializer` (null: the first element,
// scanning the rest), every a stacked: [n, a's shape...]. reverse: from the last element back
// (the results stay in the elements' order).
Output scan(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer = {},
            bool reverse = false, std::string name = "scan");
// tf.foldl and tf.foldr: scan's last a (fold from the first element, or from the last).
Output foldl(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer = {},
             std::string name = "foldl");
Output foldr(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer = {},
             std::string name = "foldr");

}  // namespace tessera::ops
