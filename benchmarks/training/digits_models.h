// The digits models of examples/digits.cc as training steps fed batch by batch (placeholders
// x: [n, 64] float32, y: [n] int32), shared by the training benchmark (tessera.cc) and the
// TensorFlow fidelity check (digits_fidelity.cc). benchmarks/tensorflow/tf_digits.py builds the
// same graphs in TensorFlow 1: keep the two in step.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
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

// A variable of `shape` initialised from `init` if given, else (weights) from a truncated normal
// of stddev sqrt(2 / fan_in) or (biases, `fan_in` 0) zeros.
inline Variable digits_variable(Graph& g, const Shape& shape, int fan_in, const Tensor* init, uint64_t seed,
                                const std::string& name) {
  if (init != nullptr) return Variable(g, *init, name);
  if (fan_in == 0) return Variable(g, Tensor::zeros(DType::Float32, shape), name);
  return Variable(ops::mul(ops::truncated_normal(g, shape, DType::Float32, seed),
                           ops::constant(g, std::sqrt(2.0f / static_cast<float>(fan_in)))),
                  name);
}

// The MLP 64 -> 128 -> 64 -> 10 (ReLU), mean sparse softmax cross entropy, Adam. `init`: the six
// initial values w1, b1, w2, b2, w3, b3, or empty for random ones.
inline DigitsStep digits_mlp_step(Graph& g, float learning_rate, const std::vector<Tensor>& init = {}) {
  const int sizes[] = {examples::kDigitsPixels, 128, 64, examples::kDigitsClasses};
  DigitsStep s;
  s.x = ops::placeholder(g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
  s.y = ops::placeholder(g, DType::Int32, {-1}, "y");
  Output h = s.x;
  for (int l = 0; l < 3; ++l) {
    const auto k = static_cast<std::size_t>(l);
    const Tensor* w_init = init.empty() ? nullptr : &init[2 * k];
    const Tensor* b_init = init.empty() ? nullptr : &init[2 * k + 1];
    const std::string name = "mlp/layer" + std::to_string(l + 1);
    Variable w = digits_variable(g, Shape{sizes[l], sizes[l + 1]}, sizes[l], w_init, 1 + k, name + "/w");
    Variable b = digits_variable(g, Shape{sizes[l + 1]}, 0, b_init, 0, name + "/b");
    h = ops::bias_add(ops::matmul(h, w.value()), b.value());
    if (l < 2) h = ops::relu(h);
  }
  s.loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(s.y, h), {}, false, "loss");
  s.train = train::AdamOptimizer(learning_rate).minimize(s.loss);
  return s;
}

// The CNN: conv 3x3x32 + ReLU, max pool 2, conv 3x3x64 + ReLU, max pool 2, dense 256 -> 128 (ReLU)
// -> 10; the same loss and optimizer.
inline DigitsStep digits_cnn_step(Graph& g, float learning_rate) {
  DigitsStep s;
  s.x = ops::placeholder(g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
  s.y = ops::placeholder(g, DType::Int32, {-1}, "y");
  auto conv = [&](Output in, int channels_in, int channels_out, uint64_t seed, const std::string& name) {
    Variable w = digits_variable(g, Shape{3, 3, channels_in, channels_out}, 9 * channels_in, nullptr, seed,
                                 name + "/w");
    Variable b = digits_variable(g, Shape{channels_out}, 0, nullptr, 0, name + "/b");
    auto c = ops::relu(ops::bias_add(ops::conv2d(in, w.value(), {1, 1, 1, 1}, "SAME"), b.value()));
    return ops::max_pool(c, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  };
  auto p1 = conv(ops::reshape(s.x, {-1, 8, 8, 1}), 1, 32, 11, "cnn/conv1");  // [n, 4, 4, 32]
  auto p2 = conv(p1, 32, 64, 12, "cnn/conv2");                               // [n, 2, 2, 64]
  Variable fc_w = digits_variable(g, Shape{256, 128}, 256, nullptr, 13, "cnn/fc/w");
  Variable fc_b = digits_variable(g, Shape{128}, 0, nullptr, 0, "cnn/fc/b");
  Variable out_w = digits_variable(g, Shape{128, examples::kDigitsClasses}, 128, nullptr, 14, "cnn/logits/w");
  Variable out_b = digits_variable(g, Shape{examples::kDigitsClasses}, 0, nullptr, 0, "cnn/logits/b");
  auto fc = ops::relu(ops::bias_add(ops::matmul(ops::reshape(p2, {-1, 256}), fc_w.value()), fc_b.value()));
  auto logits = ops::bias_add(ops::matmul(fc, out_w.value()), out_b.value());
  s.loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(s.y, logits), {}, false, "loss");
  s.train = train::AdamOptimizer(learning_rate).minimize(s.loss);
  return s;
}

// Batch i of `batch` rows of `data`, taken in order and wrapping around: (x, y) tensors.
inline std::pair<Tensor, Tensor> digits_batch(const examples::Digits& data, int64_t i, int batch) {
  const auto n = static_cast<int64_t>(data.y.size());
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int r = 0; r < batch; ++r) {
    const auto row = static_cast<std::size_t>((i * batch + r) % n);
    const auto* px = &data.x[row * examples::kDigitsPixels];
    x.insert(x.end(), px, px + examples::kDigitsPixels);
    y.push_back(data.y[row]);
  }
  return {Tensor::from_vector<float>(x, Shape{batch, examples::kDigitsPixels}), Tensor::vector<int32_t>(y)};
}

}  // namespace tessera_bench
