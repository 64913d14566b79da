// Distributed training of the digits MLP the TensorFlow 1 way: between-graph replication, the
// variables spread over the ps tasks by replica_device_setter, each worker a
// MonitoredTrainingSession (worker 0 the chief: it initializes or restores and checkpoints), Adam
// updates applied asynchronously or, with `sync`, through a SyncReplicasOptimizer.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "examples/digits_data.h"
#include "examples/examples.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera::examples {

namespace {

using namespace std::chrono_literals;

// Counts the sessions a monitored session made: 1, plus one per recovery.
struct SessionCounter : train::SessionRunHook::Impl {
  std::atomic<int> created{0};
  void after_create_session(Session&) override { ++created; }
};

// A worker's batches: its own shuffled order of the training rows (seeded by its task index), so
// the workers see the data in different orders, as TF1 input pipelines with per-worker seeds do.
class Batches {
 public:
  Batches(const Digits& data, int batch, uint64_t seed) : data_(data), batch_(batch), order_(data.y.size()) {
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::mt19937_64 gen(seed);
    std::shuffle(order_.begin(), order_.end(), gen);
  }
  std::pair<Tensor, Tensor> next() {
    std::vector<float> x;
    std::vector<int32_t> y;
    x.reserve(static_cast<std::size_t>(batch_) * kDigitsPixels);
    for (int r = 0; r < batch_; ++r) {
      const std::size_t row = order_[at_++ % order_.size()];
      const float* px = &data_.x[row * kDigitsPixels];
      x.insert(x.end(), px, px + kDigitsPixels);
      y.push_back(data_.y[row]);
    }
    return {Tensor::from_vector<float>(x, Shape{batch_, kDigitsPixels}), Tensor::vector<int32_t>(y)};
  }

 private:
  const Digits& data_;  // Not owned.
  int batch_;
  std::vector<std::size_t> order_;
  std::size_t at_ = 0;
};

// The queue a ps task waits on before it exits (task mode): each worker enqueues one token when
// it is done, as TF1 jobs did with a shared "done" queue per ps.
// Its capacity is the number of workers, so the ps's one dequeue_many of them can complete.
FIFOQueue done_queue(Graph& g, int ps_task, int workers) {
  auto scope = g.device(fmt::format("/job:ps/task:{}", ps_task));
  return FIFOQueue(g, std::max(1, workers), {DType::Int32}, {Shape{}}, fmt::format("done_queue_{}", ps_task),
                   fmt::format("done_queue_{}", ps_task));
}

}  // namespace

PsDigitsResult ps_digits_worker(std::ostream& out, const train::ClusterSpec& cluster, int task_index,
                                const std::string& target, const PsDigitsOptions& opt,
                                const std::function<void(int64_t)>& on_step) {
  const DigitsSplit data = split_digits(read_digits(opt.data));
  const int workers = cluster.num_tasks("worker");
  const bool chief = task_index == 0;
  Graph g;
  Output x, y, loss, accuracy;
  Variable global_step;
  Operation train_op;
  std::vector<train::SessionRunHook> hooks;
  {
    auto scope = g.device(train::replica_device_setter(cluster, fmt::format("/job:worker/task:{}", task_index),
                                                       opt.ps_strategy));
    x = ops::placeholder(g, DType::Float32, {-1, kDigitsPixels}, "x");
    y = ops::placeholder(g, DType::Int32, {-1}, "y");
    DigitsModel model = digits_model(g, opt.model);
    loss = digits_loss(g, opt.model, y, model(x));
    const auto n_test = static_cast<int64_t>(data.test.y.size());
    auto test_x = ops::constant(g, Tensor::from_vector<float>(data.test.x, Shape{n_test, kDigitsPixels}));
    auto test_y = ops::constant(g, Tensor::vector<int32_t>(data.test.y));
    auto correct = ops::equal(ops::cast(ops::argmax(model(test_x), 1), DType::Int32), test_y);
    accuracy = ops::reduce_mean(ops::cast(correct, DType::Float32), {}, false, "accuracy");
    global_step = train::get_or_create_global_step(g);
    train::AdamOptimizer adam(opt.learning_rate);
    std::optional<train::SyncReplicasOptimizer> sync;
    {
      // The step after batch normalization's moving averages (TF1's UPDATE_OPS; none for the MLP).
      GraphScope after_updates = g.control_dependencies(layers::update_ops(g));
      if (opt.sync) {
        sync.emplace(adam, workers, workers);
        train_op = sync->minimize(loss, global_step);
      } else {
        train_op = adam.minimize(loss, global_step);
      }
    }
    if (sync) hooks.push_back(sync->make_session_run_hook(chief));
    if (!opt.logdir.empty()) {
      // Every worker builds the same graph (between-graph replication); the chief's monitored
      // session writes them (merge_all through its SummarySaverHook).
      summary::scalar("train/loss", loss);
      summary::scalar("test/accuracy", accuracy);
      const Variable first_weights = global_variables(g).front();
      summary::histogram("weights/" + first_weights.name(), first_weights.value());
    }
  }
  auto counter = std::make_shared<SessionCounter>();
  hooks.emplace_back(counter);
  hooks.push_back(train::StopAtStepHook(opt.steps));

  train::MonitoredTrainingSessionOptions mts;
  mts.master = target;
  mts.is_chief = chief;
  mts.checkpoint_dir = chief ? opt.checkpoint_dir : "";
  mts.save_checkpoint_steps = opt.save_checkpoint_steps;
  mts.summary_dir = opt.logdir;
  mts.save_summaries_steps = opt.summary_steps;
  mts.hooks = hooks;
  mts.config = opt.config;
  mts.recovery_wait = opt.recovery_wait;

  PsDigitsResult r;
  Batches batches(data.train, opt.batch_size, 1000 + static_cast<uint64_t>(task_index));
  const auto t0 = std::chrono::steady_clock::now();
  train::MonitoredTrainingSession session(g, mts);
  while (!session.should_stop()) {
    auto [bx, by] = batches.next();
    auto v = session.run({loss, global_step.value()}, {{x, bx}, {y, by}}, {train_op});
    const float l = v[0].scalar<float>();
    const int64_t step = v[1].scalar<int64_t>();
    if (r.local_steps == 0) r.first_loss = l;
    r.last_loss = l;
    r.final_step = step;
    ++r.local_steps;
    if (opt.log_every > 0 && r.local_steps % opt.log_every == 0) {
      out << fmt::format("worker {}  global step {:5d}  loss {:.4f}\n", task_index, step, l);
    }
    if (on_step) on_step(step);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (chief) {
    Session eval(g, target, opt.config);
    r.test_accuracy = eval.run(accuracy).scalar<float>();
    // The global step now: a run's read of it is not ordered after that run's increment.
    r.final_step = eval.run(global_step.value()).scalar<int64_t>();
    eval.close();
    if (opt.report_placement) {
      out << "worker 0's ";
      report_placement(out, g, opt.log_placement);
    }
  }
  session.close();
  r.sessions_created = counter->created.load();
  return r;
}

int ps_digits_task(std::ostream& out, const train::ClusterSpec& cluster, const train::TaskSpec& task,
                   const train::ServerOptions& server_options, const PsDigitsOptions& opt) {
  train::Server server(cluster, task.job, task.index, server_options);
  out << fmt::format("/job:{}/task:{} listening on {}\n", task.job, task.index, server.target()) << std::flush;
  const int workers = cluster.num_tasks("worker");
  const std::vector<std::string> jobs = cluster.jobs();
  const std::vector<int> ps_tasks =
      std::find(jobs.begin(), jobs.end(), "ps") != jobs.end() ? cluster.task_indices("ps") : std::vector<int>{};
  if (task.job == "ps") {
    // Serve until every worker said it is done.
    Graph g;
    FIFOQueue done = done_queue(g, task.index, workers);
    Session s(g, server.target(), opt.config);
    s.run(done.dequeue_many(workers));
    out << fmt::format("/job:ps/task:{}: all {} workers are done\n", task.index, workers);
    s.close();
    return 0;
  }
  if (task.job != "worker") {
    out << "ps_digits: a task of job '" << task.job << "' has nothing to do (jobs: ps, worker)\n";
    return 1;
  }
  PsDigitsResult r = ps_digits_worker(out, cluster, task.index, server.target(), opt);
  out << fmt::format("worker {}: {} steps to global step {} in {:.1f} s, loss {:.4f} -> {:.4f}", task.index,
                     r.local_steps, r.final_step, r.seconds, r.first_loss, r.last_loss);
  if (task.index == 0) out << fmt::format(", test accuracy {:.3f}", r.test_accuracy);
  out << "\n";
  // One token to each ps task. A ps stops as soon as it has every worker's token, so the step that
  // carried the last one can fail Cancelled ("is stopping") or Unavailable after the enqueue
  // itself ran there; and a ps that is gone needs no token. Either way the next ps still gets its
  // own: one ps's end must not leave the others waiting forever.
  Graph g;
  std::vector<Operation> tokens;
  for (int k : ps_tasks) tokens.push_back(done_queue(g, k, workers).enqueue({ops::constant(g, 1)}));
  Session s(g, server.target(), opt.config);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    try {
      s.run(tokens[i]);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kCancelled && e.code() != ErrorCode::kUnavailable) throw;
      out << fmt::format("worker {}: /job:ps/task:{} ended as its done token went ({}): on to the next\n",
                         task.index, ps_tasks[i], e.what());
    }
  }
  try {
    s.close();
  } catch (const Error& e) {
    out << fmt::format("worker {}: closing the done-token session: {}\n", task.index, e.what());
  }
  return r.last_loss < r.first_loss ? 0 : 1;
}

int ps_digits_demo(std::ostream& out, const std::string& tessera_binary, PsDigitsOptions opt, bool log_placement) {
  namespace fs = std::filesystem;
  constexpr int kPs = 2, kWorkers = 2;
  const fs::path checkpoints = fs::temp_directory_path() / fmt::format("tessera_demo_digits_{}", ::getpid());
  fs::remove_all(checkpoints);
  opt.checkpoint_dir = checkpoints.string();
  // The cluster on free loopback ports; a port taken in between makes a task fail to start: retry.
  std::vector<train::ServerProcess> tasks;  // ps 0, ps 1, worker 0, worker 1
  std::string cluster_json, start_error;
  for (int attempt = 0; attempt < 3 && tasks.empty(); ++attempt) {
    try {
      std::vector<std::string> ps, workers;
      for (int i = 0; i < kPs; ++i) ps.push_back(train::free_loopback_address());
      for (int i = 0; i < kWorkers; ++i) workers.push_back(train::free_loopback_address());
      cluster_json = train::ClusterSpec({{"ps", ps}, {"worker", workers}}).to_json();
      for (int i = 0; i < kPs; ++i) tasks.emplace_back(tessera_binary, cluster_json, "ps", i);
      for (int i = 0; i < kWorkers; ++i) tasks.emplace_back(tessera_binary, cluster_json, "worker", i);
    } catch (const Error& e) {
      start_error = e.what();
      tasks.clear();
    }
  }
  if (tasks.empty()) {
    out << "ps_digits: could not start the cluster's tasks: " << start_error << "\n";
    return 1;
  }
  const train::ClusterSpec cluster = train::ClusterSpec::from_json(cluster_json);
  out << "cluster " << cluster_json << " (each task a `tessera server` process)\n";

  // Worker 0 (the chief) kills ps 1 once the global step passes 40% of the target, and restarts
  // it at the same address, empty; both monitored sessions recover on their own.
  std::atomic<bool> killed{false};
  std::string restart_line;
  int64_t killed_at = 0;
  auto on_chief_step = [&](int64_t step) {
    if (killed.load() || step < opt.steps * 2 / 5) return;
    killed = true;
    killed_at = step;
    tasks[1].kill(SIGKILL);
    tasks[1].wait(10s);
    tasks[1] = train::ServerProcess(tessera_binary, cluster_json, "ps", 1);
    restart_line = tasks[1].ready_line();
  };
  std::vector<PsDigitsResult> results(kWorkers);
  std::exception_ptr failure;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      try {
        // Only the chief writes to `out` while both train.
        PsDigitsOptions mine = opt;
        if (i != 0) mine.log_every = 0;
        mine.report_placement = i == 0;
        mine.log_placement = log_placement;
        results[static_cast<std::size_t>(i)] =
            ps_digits_worker(out, cluster, i, tasks[static_cast<std::size_t>(kPs + i)].target(), mine,
                             i == 0 ? std::function<void(int64_t)>(on_chief_step) : nullptr);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  int rc = 0;
  try {
    if (failure) std::rethrow_exception(failure);
    if (killed) {
      out << fmt::format("killed ps 1 (kill -9) at global step {} and restarted it ({}); the monitored sessions "
                         "made {} and {} sessions (each recovery restores the latest checkpoint)\n",
                         killed_at, restart_line, results[0].sessions_created, results[1].sessions_created);
    }
    for (int i = 0; i < kWorkers; ++i) {
      const PsDigitsResult& r = results[static_cast<std::size_t>(i)];
      out << fmt::format("worker {}: {} steps in {:.1f} s, loss {:.4f} -> {:.4f}\n", i, r.local_steps, r.seconds,
                         r.first_loss, r.last_loss);
    }
    out << fmt::format("global step {}; test accuracy {:.3f}; checkpoints: {}\n", results[0].final_step,
                       results[0].test_accuracy, train::latest_checkpoint(checkpoints.string()).value_or("none"));
    const bool ok = killed && results[0].sessions_created >= 2 && results[0].final_step >= opt.steps &&
                    results[0].test_accuracy > 0.8f;
    rc = ok ? 0 : 1;
  } catch (const Error& e) {
    out << "ps_digits: " << error_code_name(e.code()) << ": " << e.what() << "\n";
    rc = 1;
  }
  fs::remove_all(checkpoints);
  for (auto& t : tasks) t.kill(SIGTERM);
  for (auto& t : tasks) {
    if (!t.wait(5s)) out << "a task did not stop within 5 s of SIGTERM: killed\n";
  }
  return rc;
}

}  // namespace tessera::examples
