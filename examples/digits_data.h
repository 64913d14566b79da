// The digits of scikit-learn (examples/data/digits.csv.gz: 1797 rows of 64 pixels 0..16, then the
// digit) read the TensorFlow 1 way, split 80/20, and the two models that classify them. Shared by
// the digits example, the training benchmarks and the TensorFlow fidelity check
// (benchmarks/training/), which must see the same rows and train the same graphs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::examples {

inline constexpr int kDigitsPixels = 64;
inline constexpr int kDigitsClasses = 10;

struct Digits {
  std::vector<float> x;    // rows of 64 pixels as read (0..16)
  std::vector<int32_t> y;  // the digit of each row
};

// Every row of the CSV, in file order, through a file pipeline of one epoch
// (string_input_producer -> TextLineReader -> decode_csv -> batch).
inline Digits read_digits(const std::string& path) {
  Graph g;
  FIFOQueue files = train::string_input_producer(g, {path}, /*num_epochs=*/1, /*shuffle=*/false);
  train::TextLineReader reader(g);
  auto [key, line] = reader.read(files);
  std::vector<Tensor> defaults(kDigitsPixels + 1, Tensor::vector<int32_t>({0}));
  std::vector<Output> columns = train::decode_csv(line, defaults);
  std::vector<Output> pixel_columns;
  for (int i = 0; i < kDigitsPixels; ++i) {
    pixel_columns.push_back(ops::expand_dims(columns[static_cast<std::size_t>(i)], 0));
  }
  auto pixels = ops::cast(ops::concat(pixel_columns, 0), DType::Float32);
  auto rows = train::batch({pixels, columns.back()}, /*batch_size=*/256, /*num_threads=*/1, /*capacity=*/512,
                           /*enqueue_many=*/false, /*allow_smaller_final_batch=*/true);
  Session s(g);
  s.run(global_variables_initializer(g));
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  Digits d;
  try {
    for (;;) {
      auto batch = s.run({rows[0], rows[1]});
      auto px = batch[0].to_vector<float>();
      auto py = batch[1].to_vector<int32_t>();
      d.x.insert(d.x.end(), px.begin(), px.end());
      d.y.insert(d.y.end(), py.begin(), py.end());
    }
  } catch (const OutOfRangeError&) {
    // every line read
  }
  coord.request_stop();
  coord.join(threads);
  return d;
}

struct DigitsSplit {
  Digits train, test;  // pixels scaled to [0, 1]
};

// An 80/20 split by a fixed permutation (std::mt19937 seeded 42), as scikit-learn's
// train_test_split(random_state=...) does; pixels scaled to [0, 1].
inline DigitsSplit split_digits(const Digits& all) {
  const std::size_t n = all.y.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 gen(42);
  std::shuffle(order.begin(), order.end(), gen);
  const std::size_t n_train = n - n / 5;
  DigitsSplit split;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = order[k];
    Digits& part = k < n_train ? split.train : split.test;
    for (int p = 0; p < kDigitsPixels; ++p) {
      part.x.push_back(all.x[i * kDigitsPixels + static_cast<std::size_t>(p)] / 16.0f);
    }
    part.y.push_back(all.y[i]);
  }
  return split;
}

// A model: its variables made once, applied to any batch [n, 64] of images (the training
// batches and the test set share the weights).
using DigitsModel = std::function<Output(Output)>;

// A layer's weights: `init` when given, else a truncated normal of stddev sqrt(2 / fan_in) (He's
// rule for ReLU layers).
inline Variable he_weights(Graph& g, const Shape& shape, int fan_in, uint64_t seed, const std::string& name,
                           const Tensor* init = nullptr) {
  if (init != nullptr) return Variable(g, *init, name);
  return Variable(ops::mul(ops::truncated_normal(g, shape, DType::Float32, seed),
                           ops::constant(g, std::sqrt(2.0f / static_cast<float>(fan_in)))),
                  name);
}

// A layer's biases: `init` when given, else zeros.
inline Variable zero_biases(Graph& g, int n, const std::string& name, const Tensor* init = nullptr) {
  return Variable(g, init != nullptr ? *init : Tensor::zeros(DType::Float32, {n}), name);
}

struct DigitsDense {
  Variable w, b;
  DigitsDense(Graph& g, int in, int out, uint64_t seed, const std::string& name, const Tensor* w_init = nullptr,
              const Tensor* b_init = nullptr)
      : w(he_weights(g, Shape{in, out}, in, seed, name + "/w", w_init)), b(zero_biases(g, out, name + "/b", b_init)) {}
  Output operator()(Output x) const { return ops::bias_add(ops::matmul(x, w.value()), b.value()); }
};

// A 3x3 SAME convolution with its biases and a ReLU.
struct DigitsConv {
  Variable w, b;
  DigitsConv(Graph& g, int in, int out, uint64_t seed, const std::string& name)
      : w(he_weights(g, Shape{3, 3, in, out}, 9 * in, seed, name + "/w")), b(zero_biases(g, out, name + "/b")) {}
  Output operator()(Output x) const {
    return ops::relu(ops::bias_add(ops::conv2d(x, w.value(), {1, 1, 1, 1}, "SAME"), b.value()));
  }
};

// The MLP 64 -> 128 -> 64 -> 10 (ReLU). `init`: the six initial values w1, b1, w2, b2, w3, b3, or
// empty for random ones.
inline DigitsModel digits_mlp(Graph& g, const std::vector<Tensor>& init = {}) {
  auto at = [&](std::size_t i) { return init.empty() ? nullptr : &init[i]; };
  DigitsDense h1(g, kDigitsPixels, 128, 1, "mlp/hidden1", at(0), at(1));
  DigitsDense h2(g, 128, 64, 2, "mlp/hidden2", at(2), at(3));
  DigitsDense out(g, 64, kDigitsClasses, 3, "mlp/logits", at(4), at(5));
  return [=](Output x) { return out(ops::relu(h2(ops::relu(h1(x))))); };
}

// The CNN: conv 3x3x32 + ReLU, max pool 2, conv 3x3x64 + ReLU, max pool 2, dense 256 -> 128 (ReLU)
// -> 10.
inline DigitsModel digits_cnn(Graph& g) {
  DigitsConv c1(g, 1, 32, 11, "cnn/conv1");
  DigitsConv c2(g, 32, 64, 12, "cnn/conv2");
  DigitsDense fc(g, 2 * 2 * 64, 128, 13, "cnn/fc");
  DigitsDense out(g, 128, kDigitsClasses, 14, "cnn/logits");
  return [=](Output x) {
    auto images = ops::reshape(x, {-1, 8, 8, 1});
    auto p1 = ops::max_pool(c1(images), {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");  // [n, 4, 4, 32]
    auto p2 = ops::max_pool(c2(p1), {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");      // [n, 2, 2, 64]
    return out(ops::relu(fc(ops::reshape(p2, {-1, 2 * 2 * 64}))));
  };
}

// The MLP written as a TF1 script writes it with tf.layers: dense 128 -> batch normalization ->
// ReLU -> dropout 0.1 -> dense 64 (ReLU) -> dense 10, the last kernel with an L2 penalty (in the
// REGULARIZATION_LOSSES that losses::get_total_loss adds) and batch normalization's moving
// averages in layers::update_ops. The first call builds the training tower (batch statistics,
// dropout); every later call an evaluation tower in a reusing variable scope (the moving
// statistics, no dropout) through the same variables, TF1's weight sharing.
inline DigitsModel digits_layers(Graph& g) {
  auto built = std::make_shared<bool>(false);
  return [&g, built](Output x) {
    const bool training = !*built;
    *built = true;
    auto scope = variable_scope(g, "layers", training ? Reuse::inherit : Reuse::reuse);
    Output h = layers::dense(x, 128, {.use_bias = false, .kernel_initializer = initializers::he_normal(1)});
    h = ops::relu(layers::batch_normalization(h, {.training = training}));
    h = layers::dropout(h, 0.1, training, /*seed=*/4);
    h = layers::dense(h, 64, {.activation = ops::relu, .kernel_initializer = initializers::he_normal(2)});
    return layers::dense(h, kDigitsClasses, {.kernel_initializer = initializers::glorot_uniform(3),
                                             .kernel_regularizer = layers::l2_regularizer(1e-4)});
  };
}

// The model named `name`: "mlp" (digits_mlp), "cnn" (digits_cnn) or "layers" (digits_layers).
inline DigitsModel digits_model(Graph& g, const std::string& name) {
  if (name == "mlp") return digits_mlp(g);
  if (name == "cnn") return digits_cnn(g);
  if (name == "layers") return digits_layers(g);
  throw InvalidArgumentError("digits: the model is \"mlp\", \"cnn\" or \"layers\", not \"" + name + "\"");
}

// The training loss ("loss") of `logits` for `labels`: the mean sparse softmax cross entropy; for
// the "layers" model through tf.losses, with the regularization penalties (get_total_loss).
inline Output digits_loss(Graph& g, const std::string& model, Output labels, Output logits) {
  if (model == "layers") {
    losses::sparse_softmax_cross_entropy(labels, logits);
    return losses::get_total_loss(g, /*add_regularization_losses=*/true, "loss");
  }
  return ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(labels, logits), {}, false, "loss");
}

}  // namespace tessera::examples
