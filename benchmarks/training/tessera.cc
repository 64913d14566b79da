// Workload training: Adam steps per second of examples/digits.cc's models on the digits, each step
// fed a batch (x, y) and fetching the loss, as a TensorFlow 1 training loop calls session.run
// (benchmarks/tensorflow/tf_digits.py is the peer, the same graphs).
//
//   BM_train_mlp_digits/tessera/<batch>   MLP 64-128-64-10, batch 64 or 256
//   BM_train_cnn_digits/tessera/<batch>   CNN (two 3x3 convs + pools, two dense layers)
//   .../tessera_gpu/<batch>               the same step built under g.device("/gpu:0"), fed from host
//                                         memory (skipped with an error where no GPU is registered;
//                                         the plain impl leaves placement to the session's policy)
//   BM_train_lstm_seq/tessera             Adam steps of an LSTM (64 units, nn::dynamic_rnn) over a fed
//                                         batch of 32 sequences of 20 steps of 16 features, a dense
//                                         layer on the last h regressing one number (the same graph as
//                                         tf_bench.py's tf.nn.dynamic_rnn of a BasicLSTMCell)
#include <tessera/tessera.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bench_common.h"
#include "training/digits_models.h"

namespace {

using namespace tessera;

const examples::Digits& digits() {
  static const examples::Digits* data =
      new examples::Digits(examples::split_digits(examples::read_digits(TESSERA_DIGITS_CSV)).train);
  return *data;
}

bool has_gpu() {
  static const bool found = [] {
    for (const DeviceInfo& d : list_devices()) {
      if (d.type == "GPU") return true;
    }
    return false;
  }();
  return found;
}

// `device`: "" for the session's placement, else the scope every op of the step is built under.
template <class Build>
void train_steps(benchmark::State& state, const char* impl, const std::string& device, Build build) {
  tessera_bench::set_impl(state, impl);
  if (device == "/gpu:0" && !has_gpu()) return state.SkipWithError("no GPU registered");
  const int batch = static_cast<int>(state.range(0));
  Graph g;
  tessera_bench::DigitsStep step = [&] {
    if (device.empty()) return build(g);
    auto scope = g.device(device);
    return build(g);
  }();
  Session s(g);
  s.run(global_variables_initializer(g));
  std::vector<FeedMap> feeds;  // 16 batches, cycled
  for (int i = 0; i < 16; ++i) {
    auto [x, y] = tessera_bench::digits_batch(digits(), i, batch);
    feeds.push_back({{step.x, std::move(x)}, {step.y, std::move(y)}});
  }
  // Warm-up, and the check: the loss falls over the first steps.
  float first = 0, last = 0;
  for (int i = 0; i < 50; ++i) {
    last = s.run({step.loss}, feeds[static_cast<std::size_t>(i % 16)], {step.train})[0].scalar<float>();
    if (i == 0) first = last;
  }
  if (!tessera_bench::check(state, std::isfinite(last) && last < first, "the loss did not fall in 50 steps")) return;
  std::size_t i = 0;
  for (auto _ : state) {
    auto out = s.run({step.loss}, feeds[i++ % 16], {step.train});
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["steps_per_second"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_train_mlp_digits(benchmark::State& state, const char* impl, const std::string& device) {
  train_steps(state, impl, device, [](Graph& g) { return tessera_bench::digits_mlp_step(g, 1e-3f); });
}
void BM_train_cnn_digits(benchmark::State& state, const char* impl, const std::string& device) {
  train_steps(state, impl, device, [](Graph& g) { return tessera_bench::digits_cnn_step(g, 1e-3f); });
}

// The LSTM workload's batch, a formula both peers compute: x[b, t, d] = sin(0.1 (320 b + 16 t + d)),
// y[b] = 0.1 sum_t x[b, t, 0].
constexpr int kSeqBatch = 32, kSeqTime = 20, kSeqDepth = 16, kSeqUnits = 64;

void BM_train_lstm_seq(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{kSeqBatch, kSeqTime, kSeqDepth}, "x");
  Output y = ops::placeholder(g, DType::Float32, Shape{kSeqBatch, 1}, "y");
  nn::BasicLSTMCell cell(kSeqUnits);
  auto [outputs, final_state] = nn::dynamic_rnn(cell, x);
  Output pred = layers::dense(final_state[1], 1);
  Output loss = ops::reduce_mean(ops::square(ops::sub(pred, y)));
  Operation train = train::AdamOptimizer(1e-3f).minimize(loss);
  std::vector<float> xs(static_cast<std::size_t>(kSeqBatch) * kSeqTime * kSeqDepth), ys(kSeqBatch, 0.0f);
  for (int b = 0; b < kSeqBatch; ++b) {
    for (int t = 0; t < kSeqTime; ++t) {
      for (int d = 0; d < kSeqDepth; ++d) {
        const float v = std::sin(0.1f * static_cast<float>(320 * b + 16 * t + d));
        xs[(static_cast<std::size_t>(b) * kSeqTime + t) * kSeqDepth + d] = v;
        if (d == 0) ys[static_cast<std::size_t>(b)] += 0.1f * v;
      }
    }
  }
  const FeedMap feeds = {{x, Tensor::from_vector<float>(xs, Shape{kSeqBatch, kSeqTime, kSeqDepth})},
                         {y, Tensor::from_vector<float>(ys, Shape{kSeqBatch, 1})}};
  Session s(g);
  s.run(global_variables_initializer(g));
  float first = 0, last = 0;
  for (int i = 0; i < 50; ++i) {
    last = s.run({loss}, feeds, {train})[0].scalar<float>();
    if (i == 0) first = last;
  }
  if (!tessera_bench::check(state, std::isfinite(last) && last < first, "the loss did not fall in 50 steps")) return;
  for (auto _ : state) {
    auto out = s.run({loss}, feeds, {train});
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["steps_per_second"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_train_lstm_seq, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_train_mlp_digits, tessera, "tessera", "")
    ->Name("BM_train_mlp_digits/tessera")->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_train_cnn_digits, tessera, "tessera", "")
    ->Name("BM_train_cnn_digits/tessera")->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_train_mlp_digits, tessera_gpu, "tessera_gpu", "/gpu:0")
    ->Name("BM_train_mlp_digits/tessera_gpu")->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_train_cnn_digits, tessera_gpu, "tessera_gpu", "/gpu:0")
    ->Name("BM_train_cnn_digits/tessera_gpu")->Arg(64)->Arg(256)->UseRealTime();
