// Handwritten digits (scikit-learn's 8x8 digits, examples/data) classified the TensorFlow 1 way:
// the CSV read by a file pipeline (string_input_producer -> TextLineReader -> decode_csv ->
// batch), an 80/20 split, training batches from slice_input_producer -> shuffle_batch filled by
// queue runner threads, a model built from ops, its gradients by tessera::gradients and Adam
// updating the variables, accuracy on the held-out fifth.
#include <chrono>
#include <functional>
#include <cmath>
#include <iomanip>
#include <string>
#include <vector>

#include "examples/digits_data.h"
#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {
namespace {

constexpr int kPixels = kDigitsPixels;
constexpr int kClasses = kDigitsClasses;

// A dense layer's variables: weights from a truncated normal (stddev sqrt(2 / fan_in), He's
// rule for ReLU layers), biases at zero.
struct Dense {
  Variable w, b;
  Dense(Graph& g, int in, int out, uint64_t seed, const std::string& name)
      : w(ops::mul(ops::truncated_normal(g, {in, out}, DType::Float32, seed),
                   ops::constant(g, std::sqrt(2.0f / static_cast<float>(in)))),
          name + "/w"),
        b(g, Tensor::zeros(DType::Float32, {out}), name + "/b") {}
  Output operator()(Output x) const { return ops::bias_add(ops::matmul(x, w.value()), b.value()); }
};

struct Conv {
  Variable w, b;
  Conv(Graph& g, int k, int in, int out, uint64_t seed, const std::string& name)
      : w(ops::mul(ops::truncated_normal(g, {k, k, in, out}, DType::Float32, seed),
                   ops::constant(g, std::sqrt(2.0f / static_cast<float>(k * k * in)))),
          name + "/w"),
        b(g, Tensor::zeros(DType::Float32, {out}), name + "/b") {}
  Output operator()(Output x) const {
    return ops::relu(ops::bias_add(ops::conv2d(x, w.value(), {1, 1, 1, 1}, "SAME"), b.value()));
  }
};

// A model: its variables made once, applied to any batch [n, 64] of images (the training
// batches and the test set share the weights).
using Model = std::function<Output(Output)>;

Model mlp(Graph& g) {
  Dense h1(g, kPixels, 128, 1, "mlp/hidden1");
  Dense h2(g, 128, 64, 2, "mlp/hidden2");
  Dense out(g, 64, kClasses, 3, "mlp/logits");
  return [=](Output x) { return out(ops::relu(h2(ops::relu(h1(x))))); };
}

Model cnn(Graph& g) {
  Conv c1(g, 3, 1, 32, 11, "cnn/conv1");
  Conv c2(g, 3, 32, 64, 12, "cnn/conv2");
  Dense fc(g, 2 * 2 * 64, 128, 13, "cnn/fc");
  Dense out(g, 128, kClasses, 14, "cnn/logits");
  return [=](Output x) {
    auto images = ops::reshape(x, {-1, 8, 8, 1});
    auto p1 = ops::max_pool(c1(images), {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");  // [n, 4, 4, 32]
    auto p2 = ops::max_pool(c2(p1), {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");      // [n, 2, 2, 64]
    return out(ops::relu(fc(ops::reshape(p2, {-1, 2 * 2 * 64}))));
  };
}

}  // namespace

DigitsResult digits(std::ostream& out, const DigitsOptions& opt) {
  const DigitsSplit data = split_digits(read_digits(opt.data));
  const auto n_train = static_cast<int64_t>(data.train.y.size());
  const auto n_test = static_cast<int64_t>(data.test.y.size());
  out << "digits: " << n_train + n_test << " images read through string_input_producer -> TextLineReader -> "
      << "decode_csv; " << n_train << " to train, " << n_test << " to test\n";

  Graph g;
  auto scope = g.device(opt.device);
  // Training input: one example per run from the training tensors, batched by shuffle_batch.
  auto train_x = ops::constant(g, Tensor::from_vector<float>(data.train.x, Shape{n_train, kPixels}));
  auto train_y = ops::constant(g, Tensor::vector<int32_t>(data.train.y));
  auto example = train::slice_input_producer({train_x, train_y}, /*num_epochs=*/0, /*shuffle=*/true, /*seed=*/7);
  auto batch = train::shuffle_batch(example, opt.batch_size, /*capacity=*/1024, /*min_after_dequeue=*/256,
                                    /*num_threads=*/2, /*seed=*/8);
  Model model = opt.model == "cnn" ? cnn(g) : mlp(g);
  auto loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(batch[1], model(batch[0])), {}, false,
                               "loss");
  // The held-out fifth, through the same weights.
  auto test_x = ops::constant(g, Tensor::from_vector<float>(data.test.x, Shape{n_test, kPixels}));
  auto test_y = ops::constant(g, Tensor::vector<int32_t>(data.test.y));
  auto correct = ops::equal(ops::cast(ops::argmax(model(test_x), 1), DType::Int32), test_y);
  auto accuracy = ops::reduce_mean(ops::cast(correct, DType::Float32), {}, false, "accuracy");
  Variable step = train::get_or_create_global_step(g);
  Operation train_op = train::AdamOptimizer(opt.learning_rate).minimize(loss, step);

  Session s(g);
  s.run(global_variables_initializer(g));
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  DigitsResult r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.steps; ++i) {
    auto l = s.run({loss}, {}, {train_op});
    const float value = l[0].scalar<float>();
    if (i == 0) r.first_loss = value;
    r.last_loss = value;
    if (opt.log_every > 0 && (i % opt.log_every == 0 || i + 1 == opt.steps)) {
      out << "  step " << std::setw(5) << i << "  loss " << std::fixed << std::setprecision(4) << value << "\n";
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  coord.request_stop();
  coord.join(threads);
  r.test_accuracy = s.run(accuracy).scalar<float>();
  r.steps = s.run(step.value()).scalar<int64_t>();
  out << "digits " << opt.model << ": " << r.steps << " Adam steps of " << opt.batch_size << " in " << std::setprecision(1)
      << r.seconds << " s, loss " << std::setprecision(3) << r.first_loss << " -> " << r.last_loss
      << ", test accuracy " << std::setprecision(2) << 100.0 * r.test_accuracy << "%\n";
  report_placement(out, g, opt.log_placement);
  return r;
}

}  // namespace tessera::examples
