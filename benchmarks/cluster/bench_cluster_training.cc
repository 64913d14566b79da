// Distributed training of the digits MLP on a cluster of `tessera server` processes (loopback, free
// ports), TensorFlow 1's way, as benchmarks/tensorflow/tf_bench.py's cluster_training group runs it:
//
//   BM_ps_train_digits/tessera/W     W = 1, 2, 4 workers, each a client thread with its own graph
//                                    and MonitoredTrainingSession on its worker task; the variables
//                                    spread over 2 ps tasks by replica_device_setter; Adam, updates
//                                    applied asynchronously; a batch of 64 fed per step
//   BM_sync_train_digits/tessera/W   W = 2, 4: the same through a SyncReplicasOptimizer aggregating
//                                    W gradients per global step
//
// Counters: steps_per_second (global steps: one per worker step async, one per W worker steps
// sync) and examples_per_second (every worker's batches). Each workload has a cluster of its own
// (the sync token queue and the accumulators are shared by name on the ps tasks).
#include <signal.h>

#include <tessera/server_process.h>
#include <tessera/tessera.h>

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/bench_common.h"
#include "examples/digits_data.h"
#include "training/digits_models.h"

namespace {

using namespace tessera;
using namespace std::chrono_literals;

constexpr int kBatch = 64;
constexpr int kPs = 2;

const examples::Digits& digits() {
  static const examples::Digits d = examples::split_digits(examples::read_digits(TESSERA_DIGITS_CSV)).train;
  return d;
}

struct Worker {
  Graph g;
  Output x, y, loss;
  Operation train;
  std::vector<std::pair<Tensor, Tensor>> batches;  // 16, cycled
  std::unique_ptr<train::MonitoredTrainingSession> session;
  int next = 0;
  float step() {
    auto& [bx, by] = batches[static_cast<std::size_t>(next++ % 16)];
    return session->run({loss}, {{x, bx}, {y, by}}, {train})[0].scalar<float>();
  }
};

struct TrainingFixture {
  std::vector<train::ServerProcess> tasks;
  std::vector<std::unique_ptr<Worker>> workers;
  bool ok = false;
  std::string error;

  TrainingFixture(int n, bool sync) {
    try {
      std::vector<std::string> ps, ws;
      for (int i = 0; i < kPs; ++i) ps.push_back(train::free_loopback_address());
      for (int i = 0; i < n; ++i) ws.push_back(train::free_loopback_address());
      const train::ClusterSpec cluster({{"ps", ps}, {"worker", ws}});
      train::ServerProcessOptions quiet;
      quiet.forward_stderr = false;
      for (int i = 0; i < kPs; ++i) tasks.emplace_back(TESSERA_CLI_PATH, cluster.to_json(), "ps", i, quiet);
      for (int i = 0; i < n; ++i) tasks.emplace_back(TESSERA_CLI_PATH, cluster.to_json(), "worker", i, quiet);
      for (int i = 0; i < n; ++i) {
        auto w = std::make_unique<Worker>();
        std::vector<train::SessionRunHook> hooks;
        {
          auto scope = w->g.device(train::replica_device_setter(cluster, fmt::format("/job:worker/task:{}", i)));
          w->x = ops::placeholder(w->g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
          w->y = ops::placeholder(w->g, DType::Int32, {-1}, "y");
          const Output logits = examples::digits_mlp(w->g)(w->x);
          w->loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(w->y, logits), {}, false, "loss");
          Variable step = train::get_or_create_global_step(w->g);
          train::AdamOptimizer adam(1e-3f);
          if (sync) {
            train::SyncReplicasOptimizer opt(adam, n, n);
            w->train = opt.minimize(w->loss, step);
            hooks.push_back(opt.make_session_run_hook(i == 0));
          } else {
            w->train = adam.minimize(w->loss, step);
          }
        }
        // Each worker's 16 batches start at a row of its own (7 * i), as tf_bench.py's do.
        for (int k = 0; k < 16; ++k) w->batches.push_back(tessera_bench::digits_batch(digits(), k, kBatch, 7 * i));
        // The chief first: the others then find the model ready.
        train::MonitoredTrainingSessionOptions o;
        o.master = tasks[static_cast<std::size_t>(kPs + i)].target();
        o.is_chief = i == 0;
        o.save_checkpoint_secs = 0;
        o.hooks = hooks;
        w->session = std::make_unique<train::MonitoredTrainingSession>(w->g, o);
        workers.push_back(std::move(w));
      }
      // Warm-up and check: 100 steps each, worker 0's loss falls.
      std::vector<float> first(workers.size()), last(workers.size());
      run_all(100, &first, &last);
      ok = last[0] < first[0];
      if (!ok) error = fmt::format("worker 0's loss went {} -> {}", first[0], last[0]);
    } catch (const Error& e) {
      error = e.what();
    }
  }

  void run_all(int steps, std::vector<float>* first = nullptr, std::vector<float>* last = nullptr) {
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      threads.emplace_back([&, k] {
        for (int s = 0; s < steps; ++s) {
          const float l = workers[k]->step();
          if (first && s == 0) (*first)[k] = l;
          if (last) (*last)[k] = l;
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  ~TrainingFixture() {
    for (auto it = workers.rbegin(); it != workers.rend(); ++it) (*it)->session->close();
    workers.clear();
    for (auto& t : tasks) t.kill(SIGTERM);
    for (auto& t : tasks) t.wait(5s);
  }
};

void BM_train_digits(benchmark::State& state, bool sync) {
  tessera_bench::set_impl(state, "tessera");
  const int n = static_cast<int>(state.range(0));
  static std::map<std::pair<int, bool>, std::unique_ptr<TrainingFixture>> fixtures;
  auto it = fixtures.find({n, sync});
  if (it == fixtures.end()) {
    fixtures.clear();  // one cluster at a time: the previous workload's processes stop first
    it = fixtures.emplace(std::make_pair(n, sync), std::make_unique<TrainingFixture>(n, sync)).first;
  }
  auto& fixture = it->second;
  if (!tessera_bench::check(state, fixture->ok, fixture->error)) return;
  constexpr int kStepsPerWorker = 20;
  for (auto _ : state) fixture->run_all(kStepsPerWorker);
  const double global_steps = sync ? kStepsPerWorker : static_cast<double>(n) * kStepsPerWorker;
  state.counters["steps_per_second"] = benchmark::Counter(global_steps, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["examples_per_second"] = benchmark::Counter(static_cast<double>(n) * kStepsPerWorker * kBatch,
                                                             benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_train_digits, ps, false)
    ->Name("BM_ps_train_digits/tessera")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_train_digits, sync, true)
    ->Name("BM_sync_train_digits/tessera")
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
