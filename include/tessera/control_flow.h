// Conditionals: TensorFlow 1's tf.cond and tf.case.
//
//   Output y = ops::cond(ops::less(x, zero),
//                        [&] { return ops::neg(x); },      // runs only when x < 0
//                        [&] { return ops::square(x); });  // runs only otherwise
//
// Only the branch the predicate picks runs: ops made in the other one (a variable's assign, a
// queue's dequeue) do nothing that step. Gradients flow through the taken branch (zeros for the
// other). Loops (tf.while_loop) are not supported.
#pragma once

#include <functional>
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

}  // namespace tessera::ops
