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
//
// Async, an iteration is 20 steps of each worker. Sync, the workers train without pause from the
// fixture's start to its end, as a real synchronous job does, and an iteration is the time the
// global step takes to advance by 20: stopping the workers after a fixed number of their own steps
// can leave one waiting forever for a token (a fast worker's second gradient of a step made a
// slower one's stale, so fewer global steps happen than the workers expect; TensorFlow's
// SyncReplicasOptimizer has the same property). At the end the chief's graph enqueues a token per
// worker, so that none stays blocked, and the threads are joined.
#include <signal.h>

#include <tessera/server_process.h>
#include <tessera/tessera.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
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
  Output x, y, loss, global_step;
  Operation train;
  std::vector<std::pair<Tensor, Tensor>> batches;  // 16, cycled
  std::unique_ptr<train::MonitoredTrainingSession> session;
  int next = 0;
  // One step: the loss, and (sync, which stops by it) the global step as read during the step,
  // else -1 (async fetches the loss only, as tf_bench.py's workers do).
  std::pair<float, int64_t> step(bool with_global_step = false) {
    auto& [bx, by] = batches[static_cast<std::size_t>(next++ % 16)];
    if (!with_global_step) return {session->run({loss}, {{x, bx}, {y, by}}, {train})[0].scalar<float>(), -1};
    auto out = session->run({loss, global_step}, {{x, bx}, {y, by}}, {train});
    return {out[0].scalar<float>(), out[1].scalar<int64_t>()};
  }
};

struct TrainingFixture {
  std::vector<train::ServerProcess> tasks;
  std::vector<std::unique_ptr<Worker>> workers;
  bool ok = false;
  std::string error;
  // Sync: the workers' threads, running until `stop`, and what they report.
  std::vector<std::thread> running;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable progressed;
  int64_t global_step = 0;        // the highest a worker read; guarded by mu
  std::string failure;            // the first error of a worker thread; guarded by mu
  std::vector<float> first_loss;  // per worker; guarded by mu
  std::vector<float> last_loss;
  std::unique_ptr<Session> release;  // on the chief's graph: runs release_tokens at the end
  Operation release_tokens;

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
          w->global_step = step.value();
          train::AdamOptimizer adam(1e-3f);
          if (sync) {
            train::SyncReplicasOptimizer opt(adam, n, n);
            w->train = opt.minimize(w->loss, step);
            hooks.push_back(opt.make_session_run_hook(i == 0));
            if (i == 0) release_tokens = opt.get_init_tokens_op(n);
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
      std::vector<float> first(workers.size()), last(workers.size());
      if (sync) {
        // Warm-up and check: 100 global steps, worker 0's loss falls.
        release = std::make_unique<Session>(workers[0]->g, tasks[kPs].target());
        first_loss.assign(workers.size(), 0.0f);
        last_loss.assign(workers.size(), 0.0f);
        for (std::size_t k = 0; k < workers.size(); ++k) running.emplace_back([this, k] { train_until_stopped(k); });
        if (std::string e = wait_for_steps(100); !e.empty()) throw std::runtime_error(e);
        std::lock_guard<std::mutex> l(mu);
        first = first_loss;
        last = last_loss;
      } else {
        // Warm-up and check: 100 steps each, worker 0's loss falls.
        run_all(100, &first, &last);
      }
      ok = last[0] < first[0];
      if (!ok) error = fmt::format("worker 0's loss went {} -> {}", first[0], last[0]);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }

  // Sync: worker k's thread.
  void train_until_stopped(std::size_t k) {
    bool first = true;
    while (!stop) {
      try {
        auto [loss, step] = workers[k]->step(/*with_global_step=*/true);
        std::lock_guard<std::mutex> l(mu);
        if (first) first_loss[k] = loss;
        first = false;
        last_loss[k] = loss;
        global_step = std::max(global_step, step);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(mu);
        if (failure.empty() && !stop) failure = fmt::format("worker {}: {}", k, e.what());
        progressed.notify_all();
        return;
      }
      progressed.notify_all();
    }
  }

  // Sync: waits until the global step has advanced by `steps` (at most 120 s); "" or the error.
  std::string wait_for_steps(int64_t steps) {
    std::unique_lock<std::mutex> l(mu);
    const int64_t target = global_step + steps;
    if (!progressed.wait_for(l, 120s, [&] { return global_step >= target || !failure.empty(); })) {
      return fmt::format("the global step did not advance by {} within 120 s", steps);
    }
    return failure;
  }

  void run_all(int steps, std::vector<float>* first = nullptr, std::vector<float>* last = nullptr) {
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      threads.emplace_back([&, k] {
        for (int s = 0; s < steps; ++s) {
          const float l = workers[k]->step().first;
          if (first && s == 0) (*first)[k] = l;
          if (last) (*last)[k] = l;
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  ~TrainingFixture() {
    if (!running.empty()) {
      stop = true;
      // A worker waiting for a token gets one and sees `stop`.
      try {
        if (release) release->run(std::vector<Output>{}, {}, {release_tokens});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cluster_training: releasing the workers failed: %s\n", e.what());
      }
      for (auto& t : running) t.join();
      if (release) release->close();
    }
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
  for (auto _ : state) {
    if (!sync) {
      fixture->run_all(kStepsPerWorker);
    } else if (std::string e = fixture->wait_for_steps(kStepsPerWorker); !e.empty()) {
      state.SkipWithError(e.c_str());
      break;
    }
  }
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
