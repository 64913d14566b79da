// Streaming metrics, as TensorFlow 1's tf.metrics: each function returns the metric's value and
// an update op. The state lives in local variables (not saved, not trained, initialized by
// local_variables_initializer and by every MonitoredTrainingSession), so an evaluation loop runs
// the update over its batches and reads the value once:
//
//   auto [acc, acc_update] = metrics::accuracy(labels, ops::argmax(logits, 1));
//   Session s(g);
//   s.run(local_variables_initializer(g));
//   while (more batches) s.run(acc_update, feeds);   // also returns the accuracy so far
//   float accuracy = s.run(acc).scalar<float>();
//
// Values, labels and weights are cast to float32 as TF's metrics cast them; the value is 0 before
// any update (TF's safe division). `weights` (null: every element weighs 1) must broadcast to the
// values' shape. Each metric's ops and variables are under the name scope `name` (TF's default
// when empty: "mean", "accuracy", ...), its variables "<scope>/total", "<scope>/count", ...; they
// join metric_variables(g) too. Bad arguments (a null tensor, shapes that cannot match, weights
// that do not broadcast) are InvalidArgumentErrors naming the metric. The updates of a
// metric's variables are each atomic, as TF's: a value read while another thread updates may mix
// two updates.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::metrics {

// The value (float32 scalar) and the update op, which returns the value after its update.
using Metric = std::pair<Output, Output>;

// The weighted mean of every element of `values` seen so far: total / count.
Metric mean(Output values, Output weights = Output(), std::string name = "");
// The fraction of the elements where predictions equal labels (predictions are cast to the labels'
// dtype, as TF does: argmax's int64 against int32 labels; a trailing dim of 1 on either is
// squeezed away).
Metric accuracy(Output labels, Output predictions, Output weights = Output(), std::string name = "");
// The mean of (labels - predictions)^2, of |labels - predictions|, and the square root of the first.
Metric mean_squared_error(Output labels, Output predictions, Output weights = Output(), std::string name = "");
Metric mean_absolute_error(Output labels, Output predictions, Output weights = Output(), std::string name = "");
Metric root_mean_squared_error(Output labels, Output predictions, Output weights = Output(), std::string name = "");
// Weighted counts (float32) of the elements where a prediction and its label are both true
// (true_positives), predicted true but labelled false (false_positives), predicted false but
// labelled true (false_negatives). Numbers are cast to bool first (nonzero is true), as TF's.
Metric true_positives(Output labels, Output predictions, Output weights = Output(), std::string name = "");
Metric false_positives(Output labels, Output predictions, Output weights = Output(), std::string name = "");
Metric false_negatives(Output labels, Output predictions, Output weights = Output(), std::string name = "");
// tp / (tp + fp) and tp / (tp + fn) over everything seen so far (0 while the denominator is 0).
Metric precision(Output labels, Output predictions, Output weights = Output(), std::string name = "");
Metric recall(Output labels, Output predictions, Output weights = Output(), std::string name = "");

// TF's GraphKeys.METRIC_VARIABLES: the local variables the metrics of `g` made, in creation order
// (to reset them: run their initializers, or local_variables_initializer).
std::vector<Variable> metric_variables(Graph& g);

}  // namespace tessera::metrics
