// Fidelity against TensorFlow 1 (issue 22): the digits MLP trained by tessera and by TensorFlow
// (tf.compat.v1 in benchmarks/.venv, through benchmarks/tensorflow/tf_digits.py) from the same
// initial weights on the same batches, in the same order; the losses of every step must agree to
// 1e-4 relative (float32). Prints one line with the largest difference, which benchmarks/run
// puts in its report. --model layers: the same MLP written with tessera::layers / tf.layers
// (batch normalization, an L2 penalty, tf.losses, the UPDATE_OPS idiom); the batch
// normalization's moving statistics after the last step must agree too.
//
// Exit status: 0 when the losses agree, 1 when they do not (or something failed), 77 when there is
// no Python with TensorFlow to compare against (ctest counts that as skipped).
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "training/digits_models.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

// The MLP's six initial values (w1, b1, w2, b2, w3, b3): weights normal with stddev
// sqrt(2 / fan_in) cut at two standard deviations (as truncated_normal), biases small and nonzero
// so that their gradients matter from the first step.
std::vector<Tensor> initial_weights() {
  const int sizes[] = {examples::kDigitsPixels, 128, 64, examples::kDigitsClasses};
  std::mt19937 gen(2026);
  std::vector<Tensor> init;
  for (int l = 0; l < 3; ++l) {
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(sizes[l])));
    std::vector<float> w(static_cast<std::size_t>(sizes[l] * sizes[l + 1]));
    for (float& v : w) {
      do {
        v = normal(gen);
      } while (std::abs(v) > 2.0f * normal.stddev());
    }
    std::uniform_real_distribution<float> small(-0.05f, 0.05f);
    std::vector<float> b(static_cast<std::size_t>(sizes[l + 1]));
    for (float& v : b) v = small(gen);
    init.push_back(Tensor::from_vector<float>(w, Shape{sizes[l], sizes[l + 1]}));
    init.push_back(Tensor::from_vector<float>(b, Shape{sizes[l + 1]}));
  }
  return init;
}

template <class T>
void append_raw(std::ofstream& out, const Tensor& t) {
  const std::vector<T> v = t.to_vector<T>();
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

std::string shell_quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The digits MLP trained by tessera and by TensorFlow 1 from the same start: do the losses agree?"};
  std::string python = TESSERA_BENCH_VENV_PYTHON;
  std::string script = TESSERA_TF_DIGITS_PY;
  std::string data = TESSERA_DIGITS_CSV;
  int steps = 200;
  int batch = 64;
  float learning_rate = 1e-3f;
  double tolerance = 1e-4;
  std::string model = "mlp";
  app.add_option("--python", python, "a Python with TensorFlow (default: benchmarks/.venv's)");
  app.add_option("--data", data, "the digits CSV");
  app.add_option("--steps", steps, "training steps compared")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--tolerance", tolerance, "largest relative difference allowed");
  app.add_option("--model", model, "mlp (of ops) or layers (of tessera::layers and tessera::losses)")
      ->check(CLI::IsMember({"mlp", "layers"}));
  CLI11_PARSE(app, argc, argv);

  if (!fs::exists(python)) {
    std::cout << "digits_fidelity: skipped: no " << python << " (benchmarks/run --with-tensorflow creates it)\n";
    return 77;
  }
  const fs::path dir = fs::temp_directory_path() / ("tessera_fidelity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};

  // The same start and the same batches for both: written for TensorFlow as raw float32/int32.
  const examples::Digits train = examples::split_digits(examples::read_digits(data)).train;
  const std::vector<Tensor> init = initial_weights();
  std::vector<std::pair<Tensor, Tensor>> batches;
  {
    std::ofstream w(dir / "init.f32", std::ios::binary), x(dir / "x.f32", std::ios::binary),
        y(dir / "y.i32", std::ios::binary);
    for (const Tensor& t : init) append_raw<float>(w, t);
    for (int i = 0; i < steps; ++i) {
      batches.push_back(tessera_bench::digits_batch(train, i, batch));
      append_raw<float>(x, batches.back().first);
      append_raw<int32_t>(y, batches.back().second);
    }
  }
  const std::string command = "timeout 600 " + shell_quoted(python) + " " + shell_quoted(script) + " fidelity --dir " +
                              shell_quoted(dir.string()) + " --steps " + std::to_string(steps) + " --batch " +
                              std::to_string(batch) + " --learning-rate " + std::to_string(learning_rate) +
                              " --model " + model;
  // TensorFlow's start-up chatter goes to a log, shown only when the run fails.
  const fs::path log = dir / "tensorflow.log";
  const int status = std::system((command + " >" + shell_quoted(log.string()) + " 2>&1").c_str());
  if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 77)) {
    std::cout << "digits_fidelity: FAILED: `" << command << "` exited with status " << status << ":\n"
              << std::ifstream(log).rdbuf() << "\n";
    return 1;
  }
  if (WEXITSTATUS(status) == 77) {
    std::cout << "digits_fidelity: skipped: " << python << " cannot import tensorflow"
              << (model == "layers" ? " with tf.compat.v1.layers (tf_keras)" : "") << "\n";
    return 77;
  }
  std::vector<double> tf_losses;
  std::string tf_version;
  {
    std::ifstream in(dir / "losses.txt");
    in >> tf_version;
    for (double v; in >> v;) tf_losses.push_back(v);
  }
  if (tf_losses.size() != static_cast<std::size_t>(steps)) {
    std::cout << "digits_fidelity: FAILED: TensorFlow wrote " << tf_losses.size() << " losses, not " << steps << "\n";
    return 1;
  }

  Graph g;
  std::optional<tessera_bench::DigitsLayersStep> layered;
  tessera_bench::DigitsStep step;
  if (model == "layers") {
    layered = tessera_bench::digits_layers_step(g, learning_rate, init);
    step = *layered;
  } else {
    step = tessera_bench::digits_mlp_step(g, learning_rate, init);
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  double worst = 0;
  int worst_step = 0;
  for (int i = 0; i < steps; ++i) {
    const auto& [x, y] = batches[static_cast<std::size_t>(i)];
    const double loss = s.run({step.loss}, {{step.x, x}, {step.y, y}}, {step.train})[0].scalar<float>();
    const double tf_loss = tf_losses[static_cast<std::size_t>(i)];
    const double rel = std::abs(loss - tf_loss) / std::max(std::abs(tf_loss), 1e-30);
    if (i < 3 || i + 1 == steps) std::printf("  step %3d  tessera %.7f  tensorflow %.7f\n", i, loss, tf_loss);
    if (!(rel <= worst)) {  // also catches a NaN
      worst = rel;
      worst_step = i;
    }
  }
  bool ok = worst <= tolerance;
  std::string moving_line;
  if (layered) {
    // The moving statistics TensorFlow ended with (mean, then variance), against tessera's: each
    // element within `tolerance` relative to the largest of its vector.
    std::vector<float> tf_moving(256);
    std::ifstream in(dir / "moving.f32", std::ios::binary);
    in.read(reinterpret_cast<char*>(tf_moving.data()), static_cast<std::streamsize>(tf_moving.size() * sizeof(float)));
    if (!in) {
      std::cout << "digits_fidelity: FAILED: TensorFlow wrote no moving statistics\n";
      return 1;
    }
    double moving_worst = 0;
    const Variable* vars[] = {&layered->moving_mean, &layered->moving_variance};
    for (int v = 0; v < 2; ++v) {
      const std::vector<float> ours = s.run(vars[v]->value()).to_vector<float>();
      double scale = 1e-30;
      for (int i = 0; i < 128; ++i) scale = std::max(scale, std::abs(double{tf_moving[v * 128 + i]}));
      for (int i = 0; i < 128; ++i) {
        const double d = std::abs(ours[static_cast<std::size_t>(i)] - double{tf_moving[v * 128 + i]}) / scale;
        if (!(d <= moving_worst)) moving_worst = d;
      }
    }
    ok = ok && moving_worst <= tolerance;
    moving_line = fmt::format("; moving statistics after the last step differ by {:.3g}", moving_worst);
  }
  std::printf("digits_fidelity: %d Adam steps of the digits %s (batch %d) against TensorFlow %s: largest relative "
              "loss difference %.3g (step %d)%s; %s (tolerance %.0e)\n",
              steps, model == "layers" ? "MLP of layers" : "MLP", batch, tf_version.c_str(), worst, worst_step,
              moving_line.c_str(), ok ? "agree" : "DIFFER", tolerance);
  return ok ? 0 : 1;
}
