// Layers, as TensorFlow 1's tf.layers (the functional forms) and tf.contrib.layers' regularizers:
// each call makes its variables with get_variable in a variable scope of its own ("dense",
// "dense_1", ... or the name given) and returns the layer's output.
//
//   Output is_training = ops::placeholder(g, DType::Bool, Shape{}, "is_training");
//   Output h = layers::conv2d(images, 32, {5, 5}, {.padding = "same", .activation = ops::relu});
//   h = layers::max_pooling2d(h, {2, 2}, {2, 2});
//   h = layers::batch_normalization(layers::flatten(h), {.training = is_training});
//   h = layers::dropout(layers::dense(h, 256, {.activation = ops::relu}), 0.4, is_training);
//   Output logits = layers::dense(h, 10, {.kernel_regularizer = layers::l2_regularizer(1e-4)});
//   Output loss = ops::add(ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(y, logits)),
//                          losses::get_regularization_loss(g));
//   Operation train_op;
//   {
//     auto after = g.control_dependencies(layers::update_ops(g));   // batch norm's moving averages
//     train_op = train::AdamOptimizer(1e-3f).minimize(loss);
//   }
//
// Variables are named as TF names them ("dense/kernel", "dense/bias", "conv2d/kernel",
// "batch_normalization/gamma", ".../beta", ".../moving_mean", ".../moving_variance"), so that
// checkpoints line up with a TF model's variable names. A layer built again under
// variable_scope(g, "m", Reuse::reuse), or with {.name = "fc", .reuse = true}, uses the variables
// of the first build (TF's weight sharing). Layer names are made unique as TF makes them, within
// the current variable scope.
//
// Where tessera differs from TF 1.15, and why:
//  - Keyword arguments are option structs (C++20 designated initializers, in declaration order).
//  - Only channels_last (NHWC) data, as tessera's conv2d and pooling ops; no dilation; no
//    constraints or activity regularizers.
//  - kernel_size, pool_size and strides take one number (both dims) or two.
//  - `training` may be a bool or a Bool scalar tensor. With a tensor, dropout and batch
//    normalization compute both forms and select one (TF builds a tf.cond); batch normalization's
//    moving averages are updated with momentum 1 (left as they are) when the tensor is false, as
//    Keras' smart_cond momentum does.
//  - batch_normalization is TF's non-fused form: the moving variance averages the batch's
//    variance as moments() computes it (dividing by n). TF's fused kernel, its default for 4-D
//    inputs, averages the unbiased n/(n-1) variance instead. Float16 and bfloat16 inputs are
//    normalized in float32 with float32 variables, as TF's are.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/variable_scope.h"

namespace tessera::layers {

// A layer's activation: null (none), an op function such as ops::relu or ops::tanh, or any callable
// from Output to Output.
class Activation {
 public:
  Activation() = default;
  Activation(std::nullptr_t) {}  // NOLINT: no activation, as TF's activation=None
  Activation(Output (*op)(Output, std::string)) {  // NOLINT: ops::relu, ops::sigmoid, ...
    if (op != nullptr) fn_ = [op](Output x) { return op(x, ""); };
  }
  template <class F>
    requires std::is_invocable_r_v<Output, F&, Output> && (!std::is_same_v<std::decay_t<F>, Activation>)
  Activation(F f) : fn_(std::move(f)) {}  // NOLINT
  explicit operator bool() const { return static_cast<bool>(fn_); }
  Output operator()(Output x) const { return fn_ ? fn_(std::move(x)) : x; }

 private:
  std::function<Output(Output)> fn_;
};

// Whether a layer is training: a bool fixed when the graph is built, or a Bool scalar tensor (a
// placeholder, typically) chosen per run.
class Training {
 public:
  Training(bool value) : value_(value) {}  // NOLINT
  Training(Output flag) : flag_(std::move(flag)) {}  // NOLINT
  bool is_tensor() const { return !flag_.is_null(); }
  bool value() const { return value_; }
  const Output& tensor() const { return flag_; }

 private:
  bool value_ = false;
  Output flag_;
};

struct DenseOptions {
  Activation activation;
  bool use_bias = true;
  Initializer kernel_initializer;  // null: the variable scope's, else glorot_uniform
  Initializer bias_initializer;    // null: zeros
  Regularizer kernel_regularizer;
  Regularizer bias_regularizer;
  bool trainable = true;
  std::string name;  // the layer's variable scope; "" = a unique "dense"
  bool reuse = false;  // use the variables an earlier layer of this name made
};
// activation(inputs . kernel + bias), with kernel [in, units] and bias [units]. `inputs` is
// floating point with a known last dim; more than two dims are flattened to [-1, in] for the
// product and restored after (TF's tensordot), which needs every dim but the first known.
Output dense(Output inputs, int64_t units, const DenseOptions& options = {});

struct Conv2DOptions {
  std::vector<int> strides = {1, 1};
  std::string padding = "valid";  // or "same", in either case
  Activation activation;
  bool use_bias = true;
  Initializer kernel_initializer;
  Initializer bias_initializer;
  Regularizer kernel_regularizer;
  Regularizer bias_regularizer;
  bool trainable = true;
  std::string name;  // "" = a unique "conv2d"
  bool reuse = false;
};
// 2-D convolution of NHWC inputs with `filters` output channels and a kernel_size window (one or
// two numbers): kernel [kh, kw, in channels, filters], bias [filters].
Output conv2d(Output inputs, int64_t filters, std::vector<int> kernel_size, const Conv2DOptions& options = {});

// Pooling of NHWC inputs over pool_size windows (one or two numbers) moved by strides. No
// variables; the ops are under the name scope `name` ("" = "max_pooling2d" / "average_pooling2d").
Output max_pooling2d(Output inputs, std::vector<int> pool_size, std::vector<int> strides,
                     std::string padding = "valid", std::string name = "");
Output average_pooling2d(Output inputs, std::vector<int> pool_size, std::vector<int> strides,
                         std::string padding = "valid", std::string name = "");

// [batch, everything else]: the dims after the first must be known.
Output flatten(Output inputs, std::string name = "");

// When training, each element is zeroed with probability `rate` and the rest scaled by
// 1 / (1 - rate); otherwise `inputs` unchanged (TF's default training=false). rate in [0, 1).
Output dropout(Output inputs, double rate = 0.5, Training training = false, uint64_t seed = 0, std::string name = "");

struct BatchNormalizationOptions {
  int axis = -1;  // the features' axis (-1: the last, channels_last)
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  // a beta offset
  bool scale = true;   // a gamma scale
  Initializer beta_initializer;             // null: zeros
  Initializer gamma_initializer;            // null: ones
  Initializer moving_mean_initializer;      // null: zeros
  Initializer moving_variance_initializer;  // null: ones
  Regularizer beta_regularizer;
  Regularizer gamma_regularizer;
  Training training = false;
  bool trainable = true;  // gamma and beta; the moving statistics are never trainable
  std::string name;  // "" = a unique "batch_normalization"
  bool reuse = false;
};
// (x - mean) / sqrt(variance + epsilon) * gamma + beta per feature of `axis`. Training, mean and
// variance are the batch's (over every other axis) and the moving statistics are updated by ops
// in update_ops(g): moving = moving * momentum + batch * (1 - momentum). Otherwise the moving
// statistics normalize and nothing is added to update_ops.
Output batch_normalization(Output inputs, const BatchNormalizationOptions& options = {});

// TF's GraphKeys.UPDATE_OPS: the updates layers added to `g` (batch normalization's moving
// averages), for a train op to run after, as in the example above.
std::vector<Operation> update_ops(Graph& g);

// tf.contrib.layers' regularizers: scale * sum(|w|), scale * sum(w^2) / 2 (l2_loss) and their sum.
// A scale of 0 gives no penalty; a negative or non-finite scale is an InvalidArgumentError.
Regularizer l1_regularizer(double scale);
Regularizer l2_regularizer(double scale);
Regularizer l1_l2_regularizer(double scale_l1 = 1.0, double scale_l2 = 1.0);

}  // namespace tessera::layers
