// The digits models (examples/digits_data.h) as training steps fed batch by batch (placeholders
// x: [n, 64] float32, y: [n] int32), shared by the training benchmark (tessera.cc) and the
// TensorFlow fidelity check (digits_fidelity.cc). benchmarks/tensorflow/tf_digits.py builds the
// same graphs in TensorFlow 1: keep the two in step.
#pragma once

#include <cstdint>
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

// The step of `model` (examples/digits_data.h): mean sparse softmax cross entropy, Adam.
inline DigitsStep digits_step(Graph& g, const examples::DigitsModel& model, float learning_rate) {
  DigitsStep s;
  s.x = ops::placeholder(g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
  s.y = ops::placeholder(g, DType::Int32, {-1}, "y");
  const Output logits = model(s.x);
  s.loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(s.y, logits), {}, false, "loss");
  s.train = train::AdamOptimizer(learning_rate).minimize(s.loss);
  return s;
}

// The MLP's step; `init`: its six initial values (examples::digits_mlp), or empty for random ones.
inline DigitsStep digits_mlp_step(Graph& g, float learning_rate, const std::vector<Tensor>& init = {}) {
  return digits_step(g, examples::digits_mlp(g, init), learning_rate);
}

inline DigitsStep digits_cnn_step(Graph& g, float learning_rate) {
  return digits_step(g, examples::digits_cnn(g), learning_rate);
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
