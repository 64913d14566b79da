// Parameter-server training across processes, the TensorFlow 1 way (between-graph replication):
// one `ps` task holds the variables, each `worker` task runs its own client graph with a
// QueueRunner input pipeline and updates the shared variables on the ps.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <exception>
#include <iomanip>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "examples/examples.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera::examples {

namespace {

using namespace std::chrono_literals;


constexpr int kBatch = 64;

// One worker's client: its own graph (the same on every worker), its input pipeline on its own
// task, the model's variables on the ps.
struct Client {
  Graph g;
  Variable w, b;
  Output loss;
  Operation train;
  std::unique_ptr<Session> session;

  Client(const std::string& target, int index) {
    {
      auto ps = g.device("/job:ps/task:0");
      w = Variable(g, Tensor::scalar(0.0f), "w");
      b = Variable(g, Tensor::scalar(0.0f), "b");
    }
    // Input pipeline (no device: it runs on this client's worker task): noisy y = 3x + 2.
    FIFOQueue batches(g, 16, {DType::Float32, DType::Float32}, {Shape{kBatch}, Shape{kBatch}}, "", "batches");
    auto x = ops::random_uniform(g, {kBatch}, DType::Float32, /*seed=*/11 + static_cast<uint64_t>(index));
    auto noise = ops::random_normal(g, {kBatch}, DType::Float32, /*seed=*/23 + static_cast<uint64_t>(index), 0.0f, 0.1f);
    auto y = ops::add(ops::add(ops::mul(x, ops::constant(g, 3.0f)), ops::constant(g, 2.0f)), noise);
    auto enqueue = batches.enqueue({x, y});
    train::add_queue_runner(g, train::QueueRunner(batches, {enqueue}));
    // Model and hand-written gradients of the mean squared error, computed on the worker.
    auto batch = batches.dequeue();
    auto err = ops::sub(ops::add(ops::mul(batch[0], w.value()), b.value()), batch[1]);
    loss = ops::reduce_mean(ops::square(err), {}, false, "loss");
    auto lr = ops::constant(g, 0.2f, "learning_rate");
    auto grad_w = ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(ops::mul(err, batch[0])));
    auto grad_b = ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(err));
    train = ops::group({w.assign_sub(ops::mul(lr, grad_w)).op(), b.assign_sub(ops::mul(lr, grad_b)).op()}, "train");
    session = std::make_unique<Session>(g, target);
  }
};

}  // namespace

int ps_training(std::ostream& out, const std::string& tessera_binary, int workers, int steps, bool log_placement) {
  namespace fs = std::filesystem;
  const fs::path checkpoints = fs::temp_directory_path() / fmt::format("tessera_demo_ckpt_{}", ::getpid());
  fs::remove_all(checkpoints);
  fs::create_directories(checkpoints);
  // The cluster on free loopback ports; a port taken in between makes that task fail to start: retry.
  // Each task's stderr (its log's warnings) goes on to this process's stderr.
  std::vector<train::ServerProcess> tasks;
  std::vector<std::string> targets;
  std::string cluster_json;
  std::string start_error;
  for (int attempt = 0; attempt < 3 && tasks.empty(); ++attempt) {
    try {
      std::vector<std::string> addresses;
      for (int i = 0; i <= workers; ++i) addresses.push_back(train::free_loopback_address());
      cluster_json = fmt::format("{{\"ps\": [\"{}\"], \"worker\": [", addresses[0]);
      for (int i = 1; i <= workers; ++i) cluster_json += fmt::format("{}\"{}\"", i > 1 ? ", " : "", addresses[i]);
      cluster_json += "]}";
      for (int i = 0; i <= workers; ++i) {
        tasks.emplace_back(tessera_binary, cluster_json, i == 0 ? "ps" : "worker", i == 0 ? 0 : i - 1);
        out << "started " << tasks.back().ready_line() << "  (pid " << tasks.back().pid() << ")\n";
        if (i > 0) targets.push_back(tasks.back().target());
      }
    } catch (const Error& e) {
      start_error = e.what();
      tasks.clear();  // kills what started
      targets.clear();
    }
  }
  if (tasks.empty()) {
    out << "ps_training: could not start the cluster's tasks: " << start_error << "\n";
    return 1;
  }
  out << "cluster " << cluster_json << "\n";

  int rc = 0;
  try {
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < workers; ++i) {
      clients.push_back(std::make_unique<Client>(targets[static_cast<std::size_t>(i)], i));
    }
    // The chief (worker 0) initializes the shared variables once, or restores them from the latest
    // checkpoint when there is one; it saves every `save_every` of its steps.
    train::Saver saver(clients[0]->g, {clients[0]->w, clients[0]->b});
    const int save_every = std::max(1, steps / 3);
    if (auto latest = train::latest_checkpoint(checkpoints.string())) {
      saver.restore(*clients[0]->session, *latest);
      out << "restored " << *latest << "\n";
    } else {
      clients[0]->session->run(global_variables_initializer(clients[0]->g));
    }

    std::mutex mu;
    float first_loss = -1, last_loss = -1;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> trainers;
    std::exception_ptr failure;  // the first trainer's error, rethrown here once all have joined
    for (int i = 0; i < workers; ++i) {
      trainers.emplace_back([&, i] {
        try {
          Client& c = *clients[static_cast<std::size_t>(i)];
          train::Coordinator coord;
          auto runners = train::start_queue_runners(*c.session, coord);
          coord.stop_on_exception([&] {
            for (int step = 0; step < steps && !coord.should_stop(); ++step) {
              const float l = c.session->run({c.loss}, {}, {c.train})[0].scalar<float>();
              if (i != 0) continue;
              if ((step + 1) % save_every == 0) {
                saver.save(*c.session, (checkpoints / "model").string(), step + 1);
              }
              std::lock_guard<std::mutex> lock(mu);
              if (step == 0) first_loss = l;
              last_loss = l;
              if (step % std::max(1, steps / 5) == 0 || step == steps - 1) {
                out << "worker 0  step " << std::setw(4) << step << "  loss " << std::fixed
                    << std::setprecision(5) << l << "\n";
              }
            }
          });
          coord.request_stop();  // after N steps: the input pipeline stops too
          coord.join(runners);  // rethrows what stopped the coordinator
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failure) failure = std::current_exception();
        }
      });
    }
    for (auto& t : trainers) t.join();
    if (failure) std::rethrow_exception(failure);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto wb = clients[0]->session->run({clients[0]->w.value(), clients[0]->b.value()});
    const float w = wb[0].scalar<float>(), b = wb[1].scalar<float>();
    out << fmt::format("{} workers x {} steps in {:.2f} s ({:.0f} steps/s in all); on the ps: w = {:.3f} (true 3), "
                       "b = {:.3f} (true 2); worker 0's loss {:.4f} -> {:.4f}\n",
                       workers, steps, seconds, workers * steps / seconds, w, b, first_loss, last_loss);
    out << "worker 0's ";
    report_placement(out, clients[0]->g, log_placement);
    bool ok = last_loss < first_loss && std::abs(w - 3.0f) < 0.2f && std::abs(b - 2.0f) < 0.2f;
    for (auto& c : clients) c->session->close();

    // The ps dies (kill -9) and comes back empty; the chief restores the latest checkpoint.
    auto latest = train::latest_checkpoint(checkpoints.string());
    tasks[0].kill(SIGKILL);
    tasks[0].wait(10s);
    tasks[0] = train::ServerProcess(tessera_binary, cluster_json, "ps", 0);  // raises when it does not come back
    const std::string& line = tasks[0].ready_line();
    if (!latest) throw UnavailableError("no checkpoint was written");
    Client chief(targets[0], 0);
    train::Saver restorer(chief.g, {chief.w, chief.b});
    restorer.restore(*chief.session, *latest);
    auto restored = chief.session->run({chief.w.value(), chief.b.value()});
    out << fmt::format("killed the ps (kill -9) and restarted it ({}); restored {}: w = {:.3f}, b = {:.3f}\n", line,
                       fs::path(*latest).filename().string(), restored[0].scalar<float>(), restored[1].scalar<float>());
    ok = ok && std::abs(restored[0].scalar<float>() - 3.0f) < 0.3f;
    chief.session->close();
    rc = ok ? 0 : 1;
  } catch (const Error& e) {
    out << "ps_training: " << error_code_name(e.code()) << ": " << e.what() << "\n";
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
