// Losses, as TensorFlow 1's tf.losses: each function builds a loss from existing ops, reduces it
// (by default the weighted sum divided by the number of nonzero weights) and adds it to the
// graph's LOSSES collection, which get_total_loss sums together with the regularization losses:
//
//   Output logits = ops::matmul(x, w);                            // [batch, classes]
//   losses::softmax_cross_entropy(onehot_labels, logits, 1.0, /*label_smoothing=*/0.1);
//   losses::mean_squared_error(targets, predictions, example_weights);   // [batch, 1] weights
//   Output total = losses::get_total_loss(g);                     // both, plus the penalties
//   Operation step = train::GradientDescentOptimizer(0.1f).minimize(total);
//
// Labels, predictions and weights are cast to float32 as TF 1.15's losses_impl.py casts them (the
// cross entropies keep the logits' dtype; compute_weighted_loss returns its input's dtype). Bad
// arguments are InvalidArgumentErrors naming the function ("losses::huber_loss: ...") raised when
// the graph is built: a null tensor, labels and predictions whose shapes cannot match, weights
// that do not broadcast to the losses (TF's assert_broadcastable: a scalar, or the losses' rank
// with each dim 1 or the losses' dim). The ops of a loss are under the name scope
// LossOptions::scope (TF's default when empty: "mean_squared_error", "huber_loss",
// "softmax_cross_entropy_loss", ...); a scalar reduction's result op is "<scope>/value" when its
// dtype is float32.
//
// Where this differs from TF 1.15, and why:
// - Weights whose shape is not known at build time are checked when the loss runs only as far as
//   the losses' shape goes: weights that would make the weighted losses larger than the losses
//   (more elements) fail the run, in an op under "<scope>/assert_broadcastable"; weights of another
//   rank that broadcast without growing them (shape [1] against [3, 4]) are taken as broadcast.
//   TF's run-time Assert refuses those too; tessera has no Assert op (and TF 1.15's message text,
//   "weights can not be broadcast to values", is only the build-time one here).
// - sparse_softmax_cross_entropy squeezes a trailing dim of 1 of the labels, and weights of shape
//   [batch, 1], when their ranks are known at build time; TF also does it at run time (a cond)
//   for ranks only known then. Labels of rank other than 1 need the number of classes known at
//   build time (they and the logits are flattened for the op, which takes [batch] and
//   [batch, classes]).
// - mean_pairwise_squared_error needs the rank of its inputs at build time (TF's takes ranks known
//   only at run time: a range op tessera does not have).
// - softmax_cross_entropy takes logits of rank 2 ([batch, classes]), as the op it is built from
//   does (TF's _v2 op flattens other ranks).
// - mean_pairwise_squared_error has no reduction (TF 1.15's has none either): it is the sum over
//   the batch of the weighted per-example losses, 0 when every weight is 0. LossOptions::reduction
//   must be left at its default; anything else is an InvalidArgumentError rather than ignored.
// - Names of a second loss in one scope get the graph's _N suffix on the op ("mse/value_1"), not
//   on the scope ("mse_1/value") as TF's name scopes do.
// - get_total_loss with no losses is an InvalidArgumentError ("no losses"); TF 1.15's is add_n's
//   ValueError on an empty list. There is no `scope` filter on the collection getters.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::losses {

// TF's tf.losses.Reduction: how the weighted losses become the loss.
enum class Reduction {
  none,                    // the weighted losses, unreduced (the losses' shape)
  sum,                     // their sum (TF's SUM, "weighted_sum")
  sum_over_batch_size,     // their sum / the number of losses
  mean,                    // their sum / the sum of the weights broadcast to the losses
  sum_by_nonzero_weights,  // their sum / the number of nonzero weights broadcast to the losses
};

// TF's `weights` argument: a number, or a tensor (any number dtype, cast to float32) that
// broadcasts to the losses: a scalar, or of the losses' rank with each dim 1 or the losses' dim.
class Weights {
 public:
  Weights(double w) : number_(w) {}                    // NOLINT(google-explicit-constructor)
  Weights(Output w) : tensor_(w), is_tensor_(true) {}  // NOLINT(google-explicit-constructor)
  Weights(const Variable& w) : Weights(w.value()) {}   // NOLINT(google-explicit-constructor)

  bool is_tensor() const { return is_tensor_; }
  double number() const { return number_; }         // when !is_tensor()
  const Output& tensor() const { return tensor_; }  // when is_tensor() (null: an error when used)

 private:
  double number_ = 1.0;
  Output tensor_;
  bool is_tensor_ = false;
};

struct LossOptions {
  Reduction reduction = Reduction::sum_by_nonzero_weights;
  std::string scope;              // name scope of the ops ("" = the loss's TF name)
  bool add_to_collection = true;  // TF's loss_collection=GraphKeys.LOSSES (false = None)
};

// `losses` (any floating or integer dtype) times `weights`, reduced; the result has losses' dtype
// (computed in float32). Scope "weighted_loss".
Output compute_weighted_loss(Output losses, Weights weights = 1.0, const LossOptions& options = {});

// |predictions - labels|. Scope "absolute_difference".
Output absolute_difference(Output labels, Output predictions, Weights weights = 1.0, const LossOptions& options = {});
// (predictions - labels)^2. Scope "mean_squared_error".
Output mean_squared_error(Output labels, Output predictions, Weights weights = 1.0, const LossOptions& options = {});
// 0.5 x^2 where |x| <= delta, else 0.5 delta^2 + delta (|x| - delta), x = predictions - labels.
// Scope "huber_loss".
Output huber_loss(Output labels, Output predictions, Weights weights = 1.0, double delta = 1.0,
                  const LossOptions& options = {});
// -labels log(predictions + epsilon) - (1 - labels) log(1 - predictions + epsilon). Scope "log_loss".
Output log_loss(Output labels, Output predictions, Weights weights = 1.0, double epsilon = 1e-7,
                const LossOptions& options = {});
// max(0, 1 - (2 labels - 1) logits), labels 0 or 1. Scope "hinge_loss".
Output hinge_loss(Output labels, Output logits, Weights weights = 1.0, const LossOptions& options = {});
// sigmoid_cross_entropy_with_logits per element, the labels (cast to the logits' dtype) smoothed
// towards 1/2 first: labels (1 - s) + 0.5 s. Scope "sigmoid_cross_entropy_loss".
Output sigmoid_cross_entropy(Output multi_class_labels, Output logits, Weights weights = 1.0,
                             double label_smoothing = 0, const LossOptions& options = {});
// softmax_cross_entropy_with_logits per example ([batch]), the labels [batch, classes] smoothed
// towards 1/classes first: labels (1 - s) + s / classes; no gradient flows into the labels.
// Weights broadcast to [batch]. Scope "softmax_cross_entropy_loss".
Output softmax_cross_entropy(Output onehot_labels, Output logits, Weights weights = 1.0, double label_smoothing = 0,
                             const LossOptions& options = {});
// sparse_softmax_cross_entropy_with_logits of int32/int64 labels [d0, .. dn] (a trailing dim of 1
// is squeezed) against logits [d0, .. dn, classes]; weights of the labels' rank + 1 lose their last
// dim (weights [batch, 1] for labels [batch]). Scope "sparse_softmax_cross_entropy_loss".
Output sparse_softmax_cross_entropy(Output labels, Output logits, Weights weights = 1.0,
                                    const LossOptions& options = {});
// 1 - sum(labels * predictions) along `axis` (kept as a dim of 1), for unit-normalized labels and
// predictions. Scope "cosine_distance_loss".
Output cosine_distance(Output labels, Output predictions, int axis, Weights weights = 1.0,
                       const LossOptions& options = {});
// For each example (dim 0), the mean over pairs of its elements of ((l_i - l_j) - (p_i - p_j))^2,
// as TF 1.15 computes it from the present (nonzero-weight) elements; times the weights and summed
// over the batch (no reduction: see above). Scope "mean_pairwise_squared_error".
Output mean_pairwise_squared_error(Output labels, Output predictions, Weights weights = 1.0,
                                   const LossOptions& options = {});

// Adds `loss` to the LOSSES collection of its graph (TF's tf.losses.add_loss).
void add_loss(Output loss);
// The LOSSES collection, in the order the losses were added.
std::vector<Output> get_losses(Graph& g);
// The REGULARIZATION_LOSSES collection (the regularizers' penalties), in the order they were added.
std::vector<Output> get_regularization_losses(Graph& g);
// Their add_n named `name`, or a float32 0 (named `name`) when there are none.
Output get_regularization_loss(Graph& g, std::string name = "total_regularization_loss");
// add_n of the losses (and the regularization losses), named `name`. InvalidArgumentError when
// there are none, or when they do not share a dtype and shape.
Output get_total_loss(Graph& g, bool add_regularization_losses = true, std::string name = "total_loss");

}  // namespace tessera::losses
