// The digits models (examples/digits_data.h) as training steps fed batch by batch (placeholders
// x: [n, 64] float32, y: [n] int32), shared by the training benchmark (tessera.cc) and the
// TensorFlow fidelity check (digits_fidelity.cc). benchmarks/tensorflow/tf_digits.py builds the
// same graphs in TensorFlow 1: keep the two in step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <tessera/tessera.h>

#include "examples/digits_data.h"

namespace tessera_bench {

using namespace tessera;

// One training step: feed x and y, run `train`, fetch `loss`.
struct DigitsStep {
  Output x, y, loss;
  Operation train;
};

// The step of `model` (examples/digits_data.h), whose loss is examples::digits_loss's for the
// model named `name` (the mean sparse softmax cross entropy; for "layers" through tf.losses with
// the penalties): Adam, after the layers' update_ops (none for the models of plain ops).
inline DigitsStep digits_step(Graph& g, const examples::DigitsModel& model, float learning_rate,
                              const std::string& name) {
  DigitsStep s;
  s.x = ops::placeholder(g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
  s.y = ops::placeholder(g, DType::Int32, {-1}, "y");
  s.loss = examples::digits_loss(g, name, s.y, model(s.x));
  GraphScope after = g.control_dependencies(layers::update_ops(g));
  s.train = train::AdamOptimizer(learning_rate).minimize(s.loss);
  return s;
}

// The MLP's step; `init`: its six initial values (examples::digits_mlp), or empty for random ones.
inline DigitsStep digits_mlp_step(Graph& g, float learning_rate, const std::vector<Tensor>& init = {}) {
  return digits_step(g, examples::digits_mlp(g, init), learning_rate, "mlp");
}

// The penalty on the last kernel of digits_layers_step (tf_digits.py's LAYERS_L2).
inline constexpr double kLayersL2 = 1e-2;

// The MLP written with tessera::layers and tessera::losses, as tf_digits.py's layers_step writes it
// with tf.compat.v1.layers: dense 128 (no bias) -> batch normalization (training) -> ReLU -> dense
// 64 (ReLU) -> dense 10 with an L2 penalty; the sparse cross entropy plus the penalty
// (get_total_loss); Adam after layers::update_ops. `init`: the MLP's six initial values (b1 is not
// used). moving_mean and moving_variance: the batch normalization's moving statistics.
struct DigitsLayersStep : DigitsStep {
  Variable moving_mean, moving_variance;
};
inline DigitsLayersStep digits_layers_step(Graph& g, float learning_rate, const std::vector<Tensor>& init) {
  auto value = [](const Tensor& t) -> Initializer {
    return [t](Graph& graph, const Shape&, DType) { return ops::constant(graph, t); };
  };
  examples::DigitsModel model = [value, &init](Output x) {
    Output h = layers::dense(x, 128, {.use_bias = false, .kernel_initializer = value(init[0])});
    h = ops::relu(layers::batch_normalization(h, {.training = true}));
    h = layers::dense(h, 64, {.activation = ops::relu, .kernel_initializer = value(init[2]),
                              .bias_initializer = value(init[3])});
    return layers::dense(h, examples::kDigitsClasses,
                         {.kernel_initializer = value(init[4]), .bias_initializer = value(init[5]),
                          .kernel_regularizer = layers::l2_regularizer(kLayersL2)});
  };
  DigitsLayersStep s;
  static_cast<DigitsStep&>(s) = digits_step(g, model, learning_rate, "layers");
  for (const Variable& v : global_variables(g)) {
    if (v.name() == "batch_normalization/moving_mean") s.moving_mean = v;
    if (v.name() == "batch_normalization/moving_variance") s.moving_variance = v;
  }
  return s;
}

inline DigitsStep digits_cnn_step(Graph& g, float learning_rate) {
  return digits_step(g, examples::digits_cnn(g), learning_rate, "cnn");
}

// Batch i of `batch` rows of `data`, taken in order from row `first_row` and wrapping around:
// (x, y) tensors.
inline std::pair<Tensor, Tensor> digits_batch(const examples::Digits& data, int64_t i, int batch,
                                              int64_t first_row = 0) {
  const auto n = static_cast<int64_t>(data.y.size());
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int r = 0; r < batch; ++r) {
    const auto row = static_cast<std::size_t>((first_row + i * batch + r) % n);
    const auto* px = &data.x[row * examples::kDigitsPixels];
    x.insert(x.end(), px, px + examples::kDigitsPixels);
    y.push_back(data.y[row]);
  }
  return {Tensor::from_vector<float>(x, Shape{batch, examples::kDigitsPixels}), Tensor::vector<int32_t>(y)};
}

}  // namespace tessera_bench
