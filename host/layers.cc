// The layers of tessera/layers.h, built as TensorFlow 1's tf.layers builds them (core.py,
// convolutional.py, pooling.py, normalization.py over Keras' layers): a variable scope per layer,
// named as TF's Layer._set_scope names it, get_variable for the weights, existing ops for the rest.
#include "tessera/layers.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/op_functions.h"
#include "host/graph_collection.h"
#include "host/variable_store.h"
#include "tessera/errors.h"
#include "tessera/moving_averages.h"
#include "tessera/ops.h"

namespace tessera::layers {
namespace {

using internal::expect_floating;
using internal::expect_not_null;
using internal::graph_of;

// The layer's variable scope, as TF's Layer._set_scope: reusing, the name itself (or the base
// name); otherwise the name (or the base name) made unique in the current variable scope, so that
// "fc" built twice is "fc" and "fc_1".
GraphScope layer_scope(Graph& g, const std::string& name, const char* base, bool reuse) {
  const std::string wanted = name.empty() ? std::string(base) : name;
  if (reuse) return variable_scope(g, wanted, Reuse::reuse);
  return variable_scope(g, internal::unique_variable_scope(g, wanted));
}

// A window or stride of one number (both dims) or two.
std::pair<int, int> two_ints(const std::vector<int>& v, const char* layer, const char* arg) {
  if ((v.size() != 1 && v.size() != 2) || std::any_of(v.begin(), v.end(), [](int x) { return x <= 0; })) {
    throw InvalidArgumentError(
        fmt::format("layers::{}: {} must be one or two positive numbers, not {} of them ({})", layer, arg, v.size(),
                    fmt::join(v, ", ")));
  }
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

// "valid" or "same" in any case, as TF's normalize_padding, to the ops' "VALID" / "SAME".
std::string padding_of(const std::string& padding, const char* layer) {
  std::string lower = padding;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "valid") return "VALID";
  if (lower == "same") return "SAME";
  throw InvalidArgumentError(
      fmt::format("layers::{}: padding must be \"valid\" or \"same\", not \"{}\"", layer, padding));
}

void expect_rank(const Output& x, int rank, const char* layer) {
  if (x.shape().rank() != rank) {
    throw InvalidArgumentError(fmt::format("layers::{}: inputs {} must have rank {}, not shape {}", layer, x.name(),
                                           rank, x.shape().to_string()));
  }
}

void check_training(const Training& training, const char* layer) {
  if (!training.is_tensor()) return;
  const Output& flag = training.tensor();
  if (flag.dtype() != DType::Bool || (!flag.shape().unknown_rank() && flag.shape().rank() != 0)) {
    throw InvalidArgumentError(fmt::format("layers::{}: training {} must be a bool scalar, not {} of shape {}", layer,
                                           flag.name(), dtype_name(flag.dtype()), flag.shape().to_string()));
  }
}

Output add_bias_and_activate(Output y, bool use_bias, Graph& g, int64_t units, DType dtype, const Initializer& init,
                             const Regularizer& reg, bool trainable, const Activation& activation) {
  if (use_bias) {
    Variable bias = get_variable(g, "bias", Shape{units}, dtype, init ? init : initializers::zeros(), reg, trainable);
    y = ops::bias_add(y, bias);
  }
  return activation(y);
}

Regularizer checked_scale_regularizer(double scale, const char* what, std::function<Output(Output)> penalty) {
  if (!std::isfinite(scale) || scale < 0) {
    throw InvalidArgumentError(fmt::format("layers::{}: the scale must be finite and 0 or more, not {}", what, scale));
  }
  if (scale == 0) return [](Output) { return Output(); };  // TF: "Scale of 0 disables regularizer."
  return penalty;
}

}  // namespace

Output dense(Output inputs, int64_t units, const DenseOptions& o) {
  expect_not_null(inputs, "layers::dense", "inputs");
  expect_floating(inputs, "layers::dense");
  if (units <= 0) throw InvalidArgumentError(fmt::format("layers::dense: units must be positive, not {}", units));
  const Shape s = inputs.shape();
  if (s.unknown_rank() || s.rank() < 2) {
    throw InvalidArgumentError(fmt::format("layers::dense: inputs {} must have rank 2 or more, not shape {}",
                                           inputs.name(), s.to_string()));
  }
  const int r = s.rank();
  const int64_t in = s.dim(-1);
  if (in < 0) {
    throw InvalidArgumentError(
        fmt::format("layers::dense: the last dimension of inputs {} must be known (shape {})", inputs.name(),
                    s.to_string()));
  }
  std::vector<int64_t> out_dims;  // for inputs of rank > 2: [d0 or -1, d1, ..., units]
  if (r > 2) {
    out_dims.push_back(s.dim(0) < 0 ? -1 : s.dim(0));
    for (int i = 1; i < r - 1; ++i) {
      if (s.dim(i) < 0) {
        throw InvalidArgumentError(fmt::format(
            "layers::dense: inputs {} of shape {} must have every dimension but the first known", inputs.name(),
            s.to_string()));
      }
      out_dims.push_back(s.dim(i));
    }
    out_dims.push_back(units);
  }
  Graph& g = graph_of(inputs);
  GraphScope scope = layer_scope(g, o.name, "dense", o.reuse);
  Variable kernel =
      get_variable(g, "kernel", Shape{in, units}, inputs.dtype(), o.kernel_initializer, o.kernel_regularizer,
                   o.trainable);
  Output y = r == 2 ? ops::matmul(inputs, kernel)
                    : ops::reshape(ops::matmul(ops::reshape(inputs, {-1, in}), kernel), out_dims);
  return add_bias_and_activate(y, o.use_bias, g, units, inputs.dtype(), o.bias_initializer, o.bias_regularizer,
                               o.trainable, o.activation);
}

Output conv2d(Output inputs, int64_t filters, std::vector<int> kernel_size, const Conv2DOptions& o) {
  expect_not_null(inputs, "layers::conv2d", "inputs");
  expect_floating(inputs, "layers::conv2d");
  expect_rank(inputs, 4, "conv2d");
  if (filters <= 0) {
    throw InvalidArgumentError(fmt::format("layers::conv2d: filters must be positive, not {}", filters));
  }
  const int64_t channels = inputs.shape().dim(3);
  if (channels < 0) {
    throw InvalidArgumentError(fmt::format("layers::conv2d: the channels (last dimension) of inputs {} must be known "
                                           "(shape {})",
                                           inputs.name(), inputs.shape().to_string()));
  }
  auto [kh, kw] = two_ints(kernel_size, "conv2d", "kernel_size");
  auto [sh, sw] = two_ints(o.strides, "conv2d", "strides");
  const std::string padding = padding_of(o.padding, "conv2d");
  Graph& g = graph_of(inputs);
  GraphScope scope = layer_scope(g, o.name, "conv2d", o.reuse);
  Variable kernel = get_variable(g, "kernel", Shape{kh, kw, channels, filters}, inputs.dtype(), o.kernel_initializer,
                                 o.kernel_regularizer, o.trainable);
  Output y = ops::conv2d(inputs, kernel, {1, sh, sw, 1}, padding);
  return add_bias_and_activate(y, o.use_bias, g, filters, inputs.dtype(), o.bias_initializer, o.bias_regularizer,
                               o.trainable, o.activation);
}

namespace {

template <class Pool>
Output pooling(Output inputs, const std::vector<int>& pool_size, const std::vector<int>& strides,
               const std::string& padding, const std::string& name, const char* layer, Pool pool) {
  expect_not_null(inputs, fmt::format("layers::{}", layer).c_str(), "inputs");
  expect_rank(inputs, 4, layer);
  auto [ph, pw] = two_ints(pool_size, layer, "pool_size");
  auto [sh, sw] = two_ints(strides, layer, "strides");
  const std::string pad = padding_of(padding, layer);
  Graph& g = graph_of(inputs);
  GraphScope scope = layer_scope(g, name, layer, /*reuse=*/false);
  return pool(inputs, std::vector<int>{1, ph, pw, 1}, std::vector<int>{1, sh, sw, 1}, pad);
}

}  // namespace

Output max_pooling2d(Output inputs, std::vector<int> pool_size, std::vector<int> strides, std::string padding,
                     std::string name) {
  return pooling(inputs, pool_size, strides, padding, name, "max_pooling2d",
                 [](Output x, std::vector<int> k, std::vector<int> s, std::string p) {
                   return ops::max_pool(x, std::move(k), std::move(s), std::move(p));
                 });
}

Output average_pooling2d(Output inputs, std::vector<int> pool_size, std::vector<int> strides, std::string padding,
                         std::string name) {
  return pooling(inputs, pool_size, strides, padding, name, "average_pooling2d",
                 [](Output x, std::vector<int> k, std::vector<int> s, std::string p) {
                   return ops::avg_pool(x, std::move(k), std::move(s), std::move(p));
                 });
}

Output flatten(Output inputs, std::string name) {
  expect_not_null(inputs, "layers::flatten", "inputs");
  const Shape s = inputs.shape();
  if (s.unknown_rank() || s.rank() < 1) {
    throw InvalidArgumentError(fmt::format("layers::flatten: inputs {} must have rank 1 or more, not shape {}",
                                           inputs.name(), s.to_string()));
  }
  int64_t rest = 1;
  for (int i = 1; i < s.rank(); ++i) {
    if (s.dim(i) < 0) {
      throw InvalidArgumentError(fmt::format(
          "layers::flatten: inputs {} of shape {} must have every dimension but the first known", inputs.name(),
          s.to_string()));
    }
    rest *= s.dim(i);
  }
  Graph& g = graph_of(inputs);
  GraphScope scope = layer_scope(g, name, "flatten", /*reuse=*/false);
  return ops::reshape(inputs, {s.dim(0) < 0 ? -1 : s.dim(0), rest});
}

Output dropout(Output inputs, double rate, Training training, uint64_t seed, std::string name) {
  expect_not_null(inputs, "layers::dropout", "inputs");
  expect_floating(inputs, "layers::dropout");
  if (!(rate >= 0 && rate < 1)) {
    throw InvalidArgumentError(fmt::format("layers::dropout: rate must be in [0, 1), not {}", rate));
  }
  check_training(training, "dropout");
  if ((!training.is_tensor() && !training.value()) || rate == 0) return inputs;
  Graph& g = graph_of(inputs);
  GraphScope scope = layer_scope(g, name, "dropout", /*reuse=*/false);
  Output dropped = ops::dropout(inputs, static_cast<float>(1 - rate), seed);
  return training.is_tensor() ? ops::where(training.tensor(), dropped, inputs) : dropped;
}

Output batch_normalization(Output inputs, const BatchNormalizationOptions& o) {
  expect_not_null(inputs, "layers::batch_normalization", "inputs");
  expect_floating(inputs, "layers::batch_normalization");
  check_training(o.training, "batch_normalization");
  const Shape s = inputs.shape();
  if (s.unknown_rank() || s.rank() < 1) {
    throw InvalidArgumentError(fmt::format("layers::batch_normalization: inputs {} must have a known rank of 1 or "
                                           "more, not shape {}",
                                           inputs.name(), s.to_string()));
  }
  const int r = s.rank();
  const int axis = o.axis < 0 ? o.axis + r : o.axis;
  if (axis < 0 || axis >= r) {
    throw InvalidArgumentError(fmt::format("layers::batch_normalization: axis {} is out of range for inputs {} of "
                                           "rank {}",
                                           o.axis, inputs.name(), r));
  }
  const int64_t features = s.dim(axis);
  if (features < 0) {
    throw InvalidArgumentError(fmt::format("layers::batch_normalization: axis {} of inputs {} (shape {}) must be known",
                                           o.axis, inputs.name(), s.to_string()));
  }
  if (!(o.momentum >= 0 && o.momentum <= 1) || !(o.epsilon > 0) || !std::isfinite(o.epsilon)) {
    throw InvalidArgumentError(fmt::format("layers::batch_normalization: momentum must be in [0, 1] and epsilon "
                                           "positive, not {} and {}",
                                           o.momentum, o.epsilon));
  }
  Graph& g = graph_of(inputs);
  // 16-bit inputs are normalized in float32, with float32 variables (TF's _param_dtype).
  const bool widen = inputs.dtype() == DType::Float16 || inputs.dtype() == DType::BFloat16;
  const DType dtype = widen ? DType::Float32 : inputs.dtype();

  GraphScope scope = layer_scope(g, o.name, "batch_normalization", o.reuse);
  Output x = widen ? ops::cast(inputs, DType::Float32) : inputs;
  const Shape param_shape{features};
  Variable gamma, beta;
  if (o.scale) {
    gamma = get_variable(g, "gamma", param_shape, dtype,
                         o.gamma_initializer ? o.gamma_initializer : initializers::ones(), o.gamma_regularizer,
                         o.trainable);
  }
  if (o.center) {
    beta = get_variable(g, "beta", param_shape, dtype, o.beta_initializer ? o.beta_initializer : initializers::zeros(),
                        o.beta_regularizer, o.trainable);
  }
  Variable moving_mean = get_variable(
      g, "moving_mean", param_shape, dtype,
      o.moving_mean_initializer ? o.moving_mean_initializer : initializers::zeros(), {}, /*trainable=*/false);
  Variable moving_variance = get_variable(
      g, "moving_variance", param_shape, dtype,
      o.moving_variance_initializer ? o.moving_variance_initializer : initializers::ones(), {}, /*trainable=*/false);

  // Per-feature [C] tensors broadcast against x as [1, .., C, .., 1] (as they are when C is last).
  std::vector<int64_t> broadcast_dims(r, 1);
  broadcast_dims[axis] = features;
  auto broadcast = [&](Output p) { return axis == r - 1 || p.is_null() ? p : ops::reshape(p, broadcast_dims); };

  Output mean = moving_mean.value(), variance = moving_variance.value();
  const Training& training = o.training;
  if (training.is_tensor() || training.value()) {
    std::vector<int> reduction;
    for (int i = 0; i < r; ++i) {
      if (i != axis) reduction.push_back(i);
    }
    auto [batch_mean, batch_variance] = ops::moments(x, reduction);
    Output decay = internal::scalar_constant(g, dtype, o.momentum);
    if (training.is_tensor()) {
      const Output& flag = training.tensor();
      mean = ops::where(flag, batch_mean, mean);
      variance = ops::where(flag, batch_variance, variance);
      decay = ops::where(flag, decay, internal::scalar_constant(g, dtype, 1.0));  // not training: left as is
    } else {
      mean = batch_mean;
      variance = batch_variance;
    }
    Output mean_update = train::assign_moving_average(moving_mean, batch_mean, decay, /*zero_debias=*/false);
    Output variance_update =
        train::assign_moving_average(moving_variance, batch_variance, decay, /*zero_debias=*/false);
    internal::add_to_collection(g, internal::kUpdateOpsCollection, mean_update.op());
    internal::add_to_collection(g, internal::kUpdateOpsCollection, variance_update.op());
  }
  Output y = ops::batch_normalization(x, broadcast(mean), broadcast(variance),
                                      o.center ? broadcast(beta.value()) : Output(),
                                      o.scale ? broadcast(gamma.value()) : Output(), static_cast<float>(o.epsilon));
  return widen ? ops::cast(y, inputs.dtype()) : y;
}

std::vector<Operation> update_ops(Graph& g) {
  return internal::collection<Operation>(g, internal::kUpdateOpsCollection);
}

Regularizer l1_regularizer(double scale) {
  return checked_scale_regularizer(scale, "l1_regularizer", [scale](Output w) {
    GraphScope names = graph_of(w).name_scope("l1_regularizer");
    return ops::mul(internal::constant_like(w, scale), ops::reduce_sum(ops::abs(w)));
  });
}

Regularizer l2_regularizer(double scale) {
  return checked_scale_regularizer(scale, "l2_regularizer", [scale](Output w) {
    GraphScope names = graph_of(w).name_scope("l2_regularizer");
    return ops::mul(internal::constant_like(w, scale), ops::l2_loss(w));
  });
}

Regularizer l1_l2_regularizer(double scale_l1, double scale_l2) {
  Regularizer l1 = l1_regularizer(scale_l1);
  Regularizer l2 = l2_regularizer(scale_l2);
  return [l1, l2](Output w) {
    Output a = l1(w), b = l2(w);
    if (a.is_null()) return b;
    if (b.is_null()) return a;
    return ops::add(a, b);
  };
}

}  // namespace tessera::layers
