// Op constructors. Each adds one node to the graph of its inputs, inferring dtypes and shapes now:
// an incompatible dtype or shape raises InvalidArgumentError naming the op and both shapes.
//
//   auto x = ops::placeholder(g, DType::Float32, {-1, 4}, "x");
//   auto w = ops::random_normal(g, {4, 2}, DType::Float32, /*seed=*/7);
//   auto y = ops::relu(ops::add(ops::matmul(x, w), ops::constant(g, 0.5f)));
//   auto loss = ops::reduce_mean(ops::square(y));
//
// `name` = "" picks the op type as name; names are made unique with a _N suffix. Thread safety:
// building a graph is meant for one thread at a time (as in TensorFlow).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"
#include "tessera/tensor.h"
#include "tessera/variable.h"

namespace tessera::ops {

Output constant(Graph& g, Tensor value, std::string name = "");
Output constant(Graph& g, float value, std::string name = "");
Output constant(Graph& g, double value, std::string name = "");
Output constant(Graph& g, int32_t value, std::string name = "");
Output constant(Graph& g, int64_t value, std::string name = "");
Output constant(Graph& g, bool value, std::string name = "");
Output placeholder(Graph& g, DType dtype, Shape shape = Shape::unknown(), std::string name = "");

// Binary elementwise ops with NumPy broadcasting; both inputs must have the same dtype.
Output add(Output a, Output b, std::string name = "");
Output sub(Output a, Output b, std::string name = "");
Output mul(Output a, Output b, std::string name = "");
Output div(Output a, Output b, std::string name = "");  // integers: rounded down (TF1's tf.div); /0 raises
Output maximum(Output a, Output b, std::string name = "");
Output minimum(Output a, Output b, std::string name = "");
// x to the power y. Integers: by repeated multiplication (wrapping around), and a negative exponent
// fails the op with InvalidArgumentError, as TensorFlow's Pow.
Output pow(Output x, Output y, std::string name = "");

// Unary elementwise ops.
Output neg(Output x, std::string name = "");
Output relu(Output x, std::string name = "");
Output exp(Output x, std::string name = "");      // floating point only
Output log(Output x, std::string name = "");      // floating point only
Output sqrt(Output x, std::string name = "");     // floating point only
Output tanh(Output x, std::string name = "");     // floating point only
Output sigmoid(Output x, std::string name = "");  // floating point only
Output square(Output x, std::string name = "");
Output floor(Output x, std::string name = "");    // floating point only; no gradient flows through it
Output sin(Output x, std::string name = "");      // floating point only
Output cos(Output x, std::string name = "");      // floating point only
// |x|; integers wrap as TensorFlow's (abs of the smallest value is itself). Gradient g * sign(x).
Output abs(Output x, std::string name = "");
// -1, 0 or 1 by the sign of x (NaN stays NaN); its gradient is zero, as TensorFlow's.
Output sign(Output x, std::string name = "");
Output rsqrt(Output x, std::string name = "");       // 1 / sqrt(x), floating point only
Output reciprocal(Output x, std::string name = "");  // 1 / x, floating point only
// log(1 + exp(x)), computed without overflow (x for large x, exp(x) for very negative x);
// floating point only. Its gradient is sigmoid(x).
Output softplus(Output x, std::string name = "");
// x for x > 0, exp(x) - 1 otherwise; floating point only.
Output elu(Output x, std::string name = "");
// min(max(x, 0), 6); its gradient passes where 0 < x < 6, as TensorFlow's Relu6Grad.
Output relu6(Output x, std::string name = "");
// x for x > 0, alpha * x otherwise (TensorFlow's LeakyRelu; its gradient is g or alpha * g).
// Built from where, so that it runs wherever where does. Floating point; integers are cast to
// float32 first, as TensorFlow's leaky_relu does.
Output leaky_relu(Output x, float alpha = 0.2f, std::string name = "");
// (x - y)^2 elementwise, with broadcasting (TensorFlow's squared_difference).
Output squared_difference(Output x, Output y, std::string name = "");

// Clipping, as TensorFlow's clip_ops, built from the ops above (gradients flow through them).
// Bounds and norms of another dtype than t's are cast to it; scalars are constants of t's dtype.
// t with each element clipped to [clip_value_min, clip_value_max], which broadcast to t's shape (a
// bound that would make the result larger than t is an InvalidArgumentError).
Output clip_by_value(Output t, Output clip_value_min, Output clip_value_max, std::string name = "");
Output clip_by_value(Output t, double clip_value_min, double clip_value_max, std::string name = "");
// t * clip_norm / max(l2 norm of t over `axes` (empty = all), clip_norm): t while its norm is at
// most clip_norm (a negative clip_norm counts as 0).
Output clip_by_norm(Output t, Output clip_norm, std::vector<int> axes = {}, std::string name = "");
Output clip_by_norm(Output t, double clip_norm, std::vector<int> axes = {}, std::string name = "");
// sqrt(sum of the squares of every element of every tensor), a scalar; null entries are skipped.
// The tensors share one floating point dtype; none at all is an InvalidArgumentError.
Output global_norm(const std::vector<Output>& t_list, std::string name = "");
// Each t * clip_norm / max(global norm, clip_norm), null entries kept null, and the global norm
// (`use_norm` when given, else global_norm(t_list)); a norm that is inf or NaN makes every element
// NaN, as TensorFlow's. The usual gradient clipping: clip_by_global_norm(grads, 5.0).first.
std::pair<std::vector<Output>, Output> clip_by_global_norm(const std::vector<Output>& t_list, Output clip_norm,
                                                           Output use_norm = Output(), std::string name = "");
std::pair<std::vector<Output>, Output> clip_by_global_norm(const std::vector<Output>& t_list, double clip_norm,
                                                           Output use_norm = Output(), std::string name = "");

// Rank-2 matrix product; float32/float64 go through BLAS.
Output matmul(Output a, Output b, bool transpose_a = false, bool transpose_b = false,
              std::string name = "");

// Reductions over `axes` (empty = all; negative counts from the end).
Output reduce_sum(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");
Output reduce_mean(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");
Output reduce_max(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");
// The minimum of nothing is +inf (the dtype's largest value for integers), the product of nothing 1.
Output reduce_min(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");
Output reduce_prod(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");
// log(sum(exp(x))) over `axes`, computed after subtracting the largest finite value, as TensorFlow's
// reduce_logsumexp (no overflow for large x; -inf where every element is -inf). Floating point.
Output reduce_logsumexp(Output x, std::vector<int> axes = {}, bool keep_dims = false, std::string name = "");

Output identity(Output x, std::string name = "");
Output cast(Output x, DType dtype, std::string name = "");

// Shape ops, any dtype. Arguments are checked when the graph is built as far as the input's shape
// is known there, else when the op runs (InvalidArgumentError naming the op either way); negative
// axes count from the end. reshape, expand_dims and squeeze share the input's buffer.
Output reshape(Output x, std::vector<int64_t> shape, std::string name = "");  // one -1 is inferred
Output transpose(Output x, std::vector<int> perm = {}, std::string name = "");  // {} = reverse dims
Output concat(std::vector<Output> values, int axis, std::string name = "");
// `num` equal pieces along `axis` (which it must divide).
std::vector<Output> split(Output x, int num, int axis, std::string name = "");
// x[begin[i] : begin[i] + size[i]] in every dim i; size -1 = to the end.
Output slice(Output x, std::vector<int64_t> begin, std::vector<int64_t> size, std::string name = "");
Output expand_dims(Output x, int axis, std::string name = "");  // axis in [-rank - 1, rank]
// Removes the size-1 dims `axes` (each must be 1); {} = every size-1 dim.
Output squeeze(Output x, std::vector<int> axes = {}, std::string name = "");
Output tile(Output x, std::vector<int64_t> multiples, std::string name = "");
// The N tensors of one shape stacked along a new dim `axis` (in [-rank - 1, rank]): the result's
// shape is the values' with N inserted at axis (TensorFlow's stack). None at all, or tensors
// whose shapes or dtypes differ, are InvalidArgumentError.
Output stack(std::vector<Output> values, int axis = 0, std::string name = "");
// The slices of x along `axis`, that dim removed (TensorFlow's unstack); the dim's size must be
// known when the graph is built (InvalidArgumentError otherwise).
std::vector<Output> unstack(Output x, int axis = 0, std::string name = "");
// Zeros (false) around x: (before, after) per dim.
Output pad(Output x, std::vector<std::pair<int64_t, int64_t>> paddings, std::string name = "");
// A tensor of `shape` (fully defined), every element the scalar `value`, of its dtype.
Output fill(Graph& g, Shape shape, Tensor value, std::string name = "");
Output zeros_like(Output x, std::string name = "");
Output ones_like(Output x, std::string name = "");  // bool: true
Output shape(Output x, std::string name = "");      // int32 [rank]
Output size(Output x, std::string name = "");       // int32 scalar: the number of elements

// Comparisons (bool output, NumPy broadcasting, same-dtype inputs; equal and not_equal take bool too).
Output equal(Output a, Output b, std::string name = "");
Output not_equal(Output a, Output b, std::string name = "");
Output less(Output a, Output b, std::string name = "");
Output less_equal(Output a, Output b, std::string name = "");
Output greater(Output a, Output b, std::string name = "");
Output greater_equal(Output a, Output b, std::string name = "");
// Logical ops on bool tensors (binary ones broadcast).
Output logical_and(Output a, Output b, std::string name = "");
Output logical_or(Output a, Output b, std::string name = "");
Output logical_not(Output x, std::string name = "");
// Elementwise cond ? x : y, broadcasting among all three (TensorFlow's where_v2); cond is bool.
Output where(Output cond, Output x, Output y, std::string name = "");
// params' slices along `axis` picked by `indices` (int32 or int64): the output's shape is
// params.shape[:axis] + indices.shape + params.shape[axis + 1:]. An index outside
// [0, params.shape[axis]) raises InvalidArgumentError naming the op and the index when it runs.
Output gather(Output params, Output indices, int axis = 0, std::string name = "");
// float32 indices.shape + [depth]: `on` where the last index equals the position, else `off` (an
// index outside [0, depth) gives a row of `off`).
Output one_hot(Output indices, int depth, float on = 1, float off = 0, std::string name = "");
// The int64 position of the largest (smallest) value along `axis`; ties pick the first.
Output argmax(Output x, int axis, std::string name = "");
Output argmin(Output x, int axis, std::string name = "");
// The elementwise sum of tensors of one shape and dtype.
Output add_n(std::vector<Output> inputs, std::string name = "");

// The k largest values along the last dim (rank >= 1, at least k there) and their int32
// positions, largest first; equal values in the order of their positions, NaN before every number
// (TensorFlow's top_k with sorted=true). The values' gradient flows back to the positions.
std::pair<Output, Output> top_k(Output input, int k = 1, std::string name = "");
// bool [batch]: whether targets[i] (int32 or int64) is among the k largest of predictions[i]
// (float32 [batch, classes]): fewer than k predictions of its row are larger, so ties count as in
// (TensorFlow's in_top_k). A target outside [0, classes), or whose prediction is not finite, gives
// false.
Output in_top_k(Output predictions, Output targets, int k, std::string name = "");

// Cumulative sums and products along `axis` (an int32 or int64 scalar; negative counts from the
// end), as TensorFlow's cumsum/cumprod: x (float32, float64, int32 or int64) and the output have
// one shape. exclusive: each output leaves its own element out (the first is 0, or 1); reverse:
// the scan runs from the end. An axis outside [-rank, rank), or not a scalar, raises
// InvalidArgumentError naming the op and the axis: when the graph is built if the axis is a
// constant (the int overloads), else when the op runs. Integer sums and products wrap around.
Output cumsum(Output x, int axis = 0, bool exclusive = false, bool reverse = false, std::string name = "");
Output cumsum(Output x, Output axis, bool exclusive = false, bool reverse = false, std::string name = "");
Output cumprod(Output x, int axis = 0, bool exclusive = false, bool reverse = false, std::string name = "");
Output cumprod(Output x, Output axis, bool exclusive = false, bool reverse = false, std::string name = "");

// Neural-network ops, TensorFlow's semantics. Floating point inputs unless said otherwise; the
// class (channel) axis is the last one.
// softmax(x) = exp(x - max) / sum(exp(x - max)) along the last axis (rank >= 1); log_softmax its log.
Output softmax(Output logits, std::string name = "");
Output log_softmax(Output logits, std::string name = "");
// The per-example loss [batch] of int32/int64 labels [batch] against logits [batch, classes]. A
// label outside [0, classes) raises InvalidArgumentError naming the op and the label when it runs.
// The op's output 1 is the gradient with respect to the logits (softmax - one_hot(labels)).
Output sparse_softmax_cross_entropy_with_logits(Output labels, Output logits, std::string name = "");
// The same for label distributions [batch, classes] (logits' shape and dtype); output 1 is
// softmax - labels.
Output softmax_cross_entropy_with_logits(Output labels, Output logits, std::string name = "");
// value (rank >= 2, any number dtype) + bias [C] along the last dim of value (NHWC).
Output bias_add(Output value, Output bias, std::string name = "");
// The per-element loss of logits against labels in [0, 1] (same shape and dtype), as TensorFlow
// computes it without overflow: max(x, 0) - x * z + log(1 + exp(-|x|)).
Output sigmoid_cross_entropy_with_logits(Output labels, Output logits, std::string name = "");
// The mean and variance of x over `axes` (TensorFlow's nn.moments): the variance is the mean of
// the squared differences from the mean, through which no gradient flows back into the mean
// (as TensorFlow's). keep_dims keeps the reduced dims as size 1.
std::pair<Output, Output> moments(Output x, std::vector<int> axes, bool keep_dims = false, std::string name = "");
// (x - mean) * scale / sqrt(variance + variance_epsilon) + offset, broadcasting (TensorFlow's
// nn.batch_normalization); offset and scale may be null (0 and 1).
Output batch_normalization(Output x, Output mean, Output variance, Output offset, Output scale,
                           float variance_epsilon, std::string name = "");
// sum(x^2) / 2, a scalar.
Output l2_loss(Output x, std::string name = "");
// x * mask, the mask (the op's output 1) 1/keep_prob with probability keep_prob, else 0;
// keep_prob in (0, 1] (else InvalidArgumentError). A new mask every run; seeds as the random ops'.
Output dropout(Output x, float keep_prob, uint64_t seed = 0, std::string name = "");
// Normal values (mean 0, stddev 1) with those beyond 2 redrawn; seeds as the random ops'.
Output truncated_normal(Graph& g, Shape shape, DType dtype = DType::Float32, uint64_t seed = 0,
                        std::string name = "");
// x itself (its buffer, on every device); gradients do not flow through it.
Output stop_gradient(Output x, std::string name = "");

// Convolution and pooling over NHWC inputs (float16, bfloat16, float32 or float64; max_pool also
// int32 and int64), as TensorFlow's ops of the same names. strides and ksize have 4 elements
// [1, height, width, 1]; padding is "SAME" (output ceil(in / stride), zeros around the input:
// TF's split, the odd one after) or "VALID" (windows inside the input only). Bad arguments raise
// InvalidArgumentError naming the op, when the graph is built as far as the shapes are known
// there, else when the op runs.
// conv2d's filter is HWIO: [height, width, in channels (the input's), out channels].
Output conv2d(Output input, Output filter, std::vector<int> strides, std::string padding, std::string name = "");
// The largest value of each window.
Output max_pool(Output x, std::vector<int> ksize, std::vector<int> strides, std::string padding,
                std::string name = "");
// The mean of each window over its elements inside the input (SAME's padding is not counted).
Output avg_pool(Output x, std::vector<int> ksize, std::vector<int> strides, std::string padding,
                std::string name = "");

// Random ops draw new values on every run. seed = 0 picks a random seed; a nonzero seed makes the
// sequence of values over runs of one session reproducible (Philox4x32-10). dtype is float32 or
// float64, or float16 or bfloat16: float32's values of the same seed, rounded (as truncated_normal).
Output random_uniform(Graph& g, Shape shape, DType dtype = DType::Float32, uint64_t seed = 0,
                      std::string name = "");  // [0, 1)
Output random_normal(Graph& g, Shape shape, DType dtype = DType::Float32, uint64_t seed = 0,
                     float mean = 0.0f, float stddev = 1.0f, std::string name = "");
// A random permutation of the rows (first dimension) of x, new on every run.
Output random_shuffle(Output x, uint64_t seed = 0, std::string name = "");

// Increments `ref`, an int32 or int64 scalar variable, and returns its value before the
// increment; once that value has reached `limit`, raises OutOfRangeError naming the op and the
// limit ("Reached limit of N") and leaves the variable as it is. Atomic: N threads running it hand
// out each value once. Runs on the host, with its variable.
Output count_up_to(const Variable& ref, int64_t limit, std::string name = "");

Operation no_op(Graph& g, std::string name = "");
// A no_op that runs after every op of `ops`.
Operation group(const std::vector<Operation>& ops, std::string name = "");

// ---- String constants (DType::String) ----
// String scalars; without these a literal would pick constant(Graph&, bool).
Output constant(Graph& g, const char* value, std::string name = "");
Output constant(Graph& g, std::string value, std::string name = "");

}  // namespace tessera::ops
