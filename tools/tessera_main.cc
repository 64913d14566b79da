// The tessera command line: `tessera demo`, `tessera devices`, `tessera server`, `tessera keygen`,
// `tessera --version`.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "examples/examples.h"
#include "tessera/tessera.h"

#if defined(TESSERA_TSAN)
// libzmq, OpenBLAS and libsodium (CURVE's decryption on libzmq's I/O thread) are not instrumented:
// the hand-overs they make are invisible to TSan, so a race reported with one of them in its
// stacks is not ours (as in the tests, see tests/testing/tsan_suppressions.cc, whose `tessera
// server` children this binary is).
extern "C" const char* __tsan_default_suppressions() {
  return "race:libzmq.so\nrace:libopenblas.so\nrace:libsodium.so\n";
}
#endif

namespace {

// This program's own path (the cluster demo starts its tasks as `tessera server` processes).
std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw tessera::InternalError(fmt::format("cannot read /proc/self/exe: {}", std::strerror(errno)));
  return std::string(buf, static_cast<std::size_t>(n));
}

int run_demo(int steps, const std::string& trace_file, bool log_placement, const std::string& logdir) {
  // Line-buffered stdout: the demo prints to stdout only, but the library's log (warnings; a CUDA
  // build saying why it has no GPU) and the cluster tasks' forwarded logs go to stderr, whole lines
  // each; so that `tessera demo > log 2>&1` reads in order, no stdout line waits in a buffer while
  // they are written.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // One line saying where the demo can run: the GPUs when this build has the CUDA device and one
  // is usable (a CUDA build without one says why, on stderr, as it starts).
  std::vector<std::string> gpus;
  for (const tessera::DeviceInfo& d : tessera::list_devices()) {
    if (d.type == "GPU") gpus.push_back(d.name + " (" + d.description + ")");
  }
  std::cout << (gpus.empty() ? std::string("devices: no GPU in use: the host CPU")
                             : fmt::format("devices: the host CPU and {}", fmt::join(gpus, ", ")))
            << (TESSERA_WITH_CUDA ? "" : " (a CPU-only build: scripts/demo builds the CUDA device where nvcc is found)")
            << "\n";
  if (!log_placement) std::cout << "each part ends with where its ops ran; --log-placement lists every op's device\n";
  std::cout << "\n== tessera demo 1/7: ten threads dequeue c = a + b through a QueueRunner ==\n";
  int rc = tessera::examples::queue_add(std::cout, log_placement);
  std::cout << "\n== tessera demo 2/7: linear regression, 4 training threads on shared variables ==\n";
  rc |= tessera::examples::linear_regression(std::cout, steps, log_placement);
  std::cout << "\n== tessera demo 3/7: a two-task cluster, ten threads running one session ==\n";
  rc |= tessera::examples::seed_cluster(std::cout, log_placement);
  std::cout << "\n== tessera demo 4/7: the digits MLP trained by 2 workers on 2 ps tasks; a ps dies and comes back ==\n"
            << std::flush;
  {
    tessera::examples::PsDigitsOptions ps_digits;
    ps_digits.steps = 600;
    ps_digits.log_every = 100;
    if (!logdir.empty()) ps_digits.logdir = logdir + "/ps_digits";
    rc |= tessera::examples::ps_digits_demo(std::cout, self_path(), ps_digits, log_placement);
  }
  std::cout << "\n== tessera demo 5/7: a two-layer network placed over the host and accelerators ==\n";
  if (tessera::list_devices().size() == 1) {
    // No GPU and no TESSERA_SIM_ACCELERATORS: simulate one, so placement has a choice to make.
    tessera::add_simulated_accelerators(1);
    std::cout << "no accelerator found: simulating one (/device:SIM:0; TESSERA_SIM_ACCELERATORS=N sets more)\n";
  }
  rc |= tessera::examples::heterogeneous(std::cout, trace_file, log_placement);
  std::cout << "\n== tessera demo 6/7: handwritten digits, an MLP trained with Adam on shuffled batches ==\n";
  {
    tessera::examples::DigitsOptions digits;
    digits.steps = 600;
    digits.log_every = 150;
    digits.log_placement = log_placement;
    if (!logdir.empty()) digits.logdir = logdir + "/digits";
    // Real hardware: the GPU when there is one, else the CPU (part 5's simulated accelerator is a
    // simulation; split over it, this model's 50 small tensors per step would cross a copy queue
    // each, and the step would measure the simulation).
    digits.device = gpus.empty() ? "/cpu:0" : "/gpu:0";
    const auto r = tessera::examples::digits(std::cout, digits);
    rc |= r.last_loss < r.first_loss && r.test_accuracy > 0.9f ? 0 : 1;
  }
  std::cout << "\n== tessera demo 7/7: a recurrent network, an LSTM (dynamic_rnn) learns the adding problem ==\n";
  {
    tessera::examples::SequenceOptions sequence;
    sequence.log_placement = log_placement;
    sequence.device = gpus.empty() ? "/cpu:0" : "/gpu:0";  // as part 6: real hardware, not the simulation
    const auto r = tessera::examples::sequence(std::cout, sequence);
    // Far below the constant guess's 1/6.
    rc |= r.last_loss < 0.02f ? 0 : 1;
  }
  std::cout << (rc == 0 ? "\ndemo: OK\n" : "\ndemo: FAILED\n");
  return rc;
}

// Lists the devices sessions place ops on: the CPU, the simulated accelerators
// TESSERA_SIM_ACCELERATORS asks for, and the GPUs of a CUDA build.
int list_devices() {
  std::vector<tessera::DeviceInfo> devices;
  try {
    devices = tessera::list_devices();
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << tessera::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 2;
  }
  std::printf("build %s, %u hardware threads\n", TESSERA_WITH_CUDA ? "cuda" : "cpu-only",
              std::thread::hardware_concurrency());
  for (const tessera::DeviceInfo& d : devices) {
    std::string transfer = "host memory";
    if (d.transfer_bandwidth > 0) {
      transfer = fmt::format("transfer {:.1f} GB/s + {:.0f} us", d.transfer_bandwidth / 1e9,
                             d.transfer_latency_seconds * 1e6);
    }
    std::printf("%s  type %s  %.0f GFLOP/s  %s  (%s)\n", d.name.c_str(), d.type.c_str(), d.flops_per_second / 1e9,
                transfer.c_str(), d.description.c_str());
  }
  return 0;
}

// ---- tessera server ----

// SIGINT and SIGTERM write a byte here; a thread blocked reading it stops the server (see Note
// [Server security and signals] in transport/server.cc: nothing but write() runs in the handler).
int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int /*signo*/) {
  const int saved_errno = errno;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &byte, 1);
  errno = saved_errno;
}

void install_stop_handlers() {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) {
    throw tessera::InternalError(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signo : {SIGINT, SIGTERM}) {
    if (::sigaction(signo, &action, nullptr) != 0) {
      throw tessera::InternalError(fmt::format("cannot handle signal {}: {}", signo, std::strerror(errno)));
    }
  }
  // A log line written to a pipe whose reader is gone (a launcher that died) fails with EPIPE
  // instead of killing the task before it stopped cleanly.
  ::signal(SIGPIPE, SIG_IGN);
}

// --cluster: inline JSON when it starts with '{', else the path of a JSON file.
tessera::train::ClusterSpec read_cluster(const std::string& arg) {
  const std::size_t first = arg.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && arg[first] == '{') return tessera::train::ClusterSpec::from_json(arg);
  return tessera::train::ClusterSpec::from_file(arg);  // bounded, never blocking on a FIFO
}

// --exit-with-parent PID: while the server runs, looks every kParentLook whether this process's
// parent is still PID (a dead parent's children are reparented, to init or a subreaper); once it
// is not, stops the server as SIGTERM would. Polling, not PR_SET_PDEATHSIG: that signal follows
// the thread that started the process, and a launcher may start tasks from a thread that ends.
constexpr auto kParentLook = std::chrono::milliseconds(100);

class ParentWatch {
 public:
  explicit ParentWatch(pid_t parent) {
    if (parent <= 0) return;
    thread_ = std::thread([this, parent] {
      std::unique_lock<std::mutex> l(mu_);
      while (!cv_.wait_for(l, kParentLook, [this] { return done_; })) {
        if (::getppid() == parent) continue;
        std::cerr << "tessera server: the process that started it (pid " << parent << ") is gone: stopping"
                  << std::endl;
        on_stop_signal(SIGTERM);
        return;
      }
    });
  }
  ~ParentWatch() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

// Runs one task of a cluster until SIGINT or SIGTERM (or, with `exit_with_parent`, until that
// process is gone). The task comes from the flags, or from the environment (TF_CONFIG, then Slurm)
// for what the flags leave out.
int run_server(const std::optional<std::string>& cluster_arg, const std::optional<std::string>& job_arg,
               const std::optional<int>& task_arg, const tessera::train::ServerOptions& options,
               pid_t exit_with_parent) {
  try {
    if (job_arg.has_value() != task_arg.has_value()) {
      throw tessera::InvalidArgumentError("--job and --task go together: give both or neither");
    }
    std::optional<tessera::train::ClusterSpec> cluster;
    std::string job;
    int task = 0;
    if (cluster_arg) {
      if (!job_arg) throw tessera::InvalidArgumentError("--cluster needs --job and --task (this process's task)");
      cluster = read_cluster(*cluster_arg);
      job = *job_arg;
      task = *task_arg;
    } else {
      tessera::train::ResolvedCluster resolved = tessera::train::resolve_cluster_from_env();
      cluster = std::move(resolved.cluster);
      if (job_arg) {
        job = *job_arg;
        task = *task_arg;
      } else if (resolved.task) {
        job = resolved.task->job;
        task = resolved.task->index;
      } else {
        throw tessera::InvalidArgumentError(
            fmt::format("{} names no task for this process: add \"task\" to it, or pass --job and --task",
                        resolved.source));
      }
    }
    install_stop_handlers();
    ParentWatch parent_watch(exit_with_parent);  // from here a parent gone stops the server
    tessera::train::Server server(std::move(*cluster), job, task, options);
    std::cout << "tessera server: /job:" << job << "/task:" << task << " listening on " << server.target();
    if (options.busy_poll.count() > 0) std::cout << " (busy polling " << options.busy_poll.count() << " us)";
    std::cout << std::endl;  // flushed: a launcher may be waiting for this line
    std::thread stopper([&server] {
      char byte;
      while (::read(g_stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
      }
      server.stop();
    });
    server.join();
    stopper.join();
    std::cout << "tessera server: stopped" << std::endl;
    return 0;
  } catch (const tessera::Error& e) {
    std::cerr << "tessera server: " << tessera::error_code_name(e.code()) << ": " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tessera server: " << e.what() << std::endl;
    return 2;
  }
}

// ---- tessera digits --cluster / --from-env ----

struct DistributedDigitsArgs {
  std::string cluster, job;
  int task = -1;
  bool from_env = false;
  tessera::train::SecurityOptions security;
  tessera::examples::PsDigitsOptions options;
};

// One task of the distributed digits job (examples/ps_digits.cc); the task from the flags or the
// environment, as `tessera server` finds it.
int run_distributed_digits(DistributedDigitsArgs args, const tessera::examples::DigitsOptions& local) {
  if (args.from_env && !args.cluster.empty()) {
    throw tessera::InvalidArgumentError("--cluster and --from-env exclude each other");
  }
  std::optional<tessera::train::ClusterSpec> cluster;
  tessera::train::TaskSpec task;
  if (!args.cluster.empty()) {
    if (args.job.empty() || args.task < 0) throw tessera::InvalidArgumentError("--cluster needs --job and --task");
    cluster = read_cluster(args.cluster);
    task = {args.job, args.task};
  } else {
    tessera::train::ResolvedCluster resolved = tessera::train::resolve_cluster_from_env();
    if (!resolved.task) {
      throw tessera::InvalidArgumentError(fmt::format("{} names no task for this process", resolved.source));
    }
    cluster = std::move(resolved.cluster);
    task = *resolved.task;
  }
  args.options.model = local.model;
  args.options.steps = local.steps;
  args.options.batch_size = local.batch_size;
  args.options.learning_rate = local.learning_rate;
  args.options.data = local.data;
  args.options.logdir = local.logdir;
  args.options.log_every = std::max(1, local.steps / 10);
  args.options.config.security = args.security;
  tessera::train::ServerOptions server;
  server.security = args.security;
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  return tessera::examples::ps_digits_task(std::cout, *cluster, task, server, args.options);
}

// ---- tessera keygen ----

// Writes PREFIX.key and PREFIX.pub (see transport/security.h) and prints the public key.
int run_keygen(const std::string& prefix, bool force) {
  tessera::train::KeyPair keys;
  try {
    keys = tessera::train::generate_key_pair();
    tessera::train::write_key_pair(prefix, keys, force);
  } catch (const tessera::Error& e) {
    std::cerr << "tessera keygen: " << tessera::error_code_name(e.code()) << ": " << e.what() << std::endl;
    return 2;
  }
  const std::string& public_key = keys.public_key;
  std::cout << "wrote " << prefix << ".key (the key pair: keep it secret, mode 0600) and " << prefix << ".pub\n"
            << "public key: " << public_key << "\n"
            << "add it to the cluster keys file as '" << public_key << " HOST:PORT' for a task (the address the "
            << "cluster gives it) or '" << public_key << " NAME' for a client" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera: a dataflow runtime in the spirit of TensorFlow 1's engine"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  app.require_subcommand(1);

  int steps = 300;
  auto* demo = app.add_subcommand("demo", "Run the README's main job: the seed's queue example and multithreaded SGD");
  demo->add_option("--steps", steps, "SGD steps per training thread")->check(CLI::Range(1, 1000000));
  std::string trace_file;
  demo->add_option("--trace", trace_file, "Write a Chrome trace (Perfetto) of the heterogeneous step to FILE");
  bool log_placement = false;
  demo->add_flag("--log-placement", log_placement,
                 "List every op's device after each part (without it: one summary line per part)");
  std::string demo_logdir;
  demo->add_option("--logdir", demo_logdir,
                   "Write TensorBoard summaries of the two digits parts to DIR/ps_digits and DIR/digits");
  auto* digits = app.add_subcommand(
      "digits", "Train an MLP (of ops or of tessera::layers) or a small CNN on scikit-learn's handwritten digits "
                "(examples/data) with Adam and print the loss and the test accuracy");
  tessera::examples::DigitsOptions digits_options;
  digits->add_option("--model", digits_options.model,
                     "mlp, cnn, or layers (the MLP written with tessera::layers: batch normalization, dropout, an L2 "
                     "penalty)")
      ->check(CLI::IsMember({"mlp", "cnn", "layers"}))
      ->capture_default_str();
  digits->add_option("--device", digits_options.device,
                     "Where the model runs: /cpu:0, /device:SIM:0, /gpu:0 (default: placement decides)");
  digits->add_option("--steps", digits_options.steps, "Training steps")->check(CLI::Range(1, 10000000))->capture_default_str();
  digits->add_option("--batch", digits_options.batch_size, "Batch size")->check(CLI::Range(1, 1437))->capture_default_str();
  digits->add_option("--learning-rate", digits_options.learning_rate, "Adam's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  digits->add_flag("--log-placement", digits_options.log_placement, "List every op's device at the end");
  digits->add_option("--data", digits_options.data, "The digits CSV (gzipped or plain)")->capture_default_str();
  digits->add_option("--trace", digits_options.trace_file,
                     "Write a Chrome trace (Perfetto) of the last training step to FILE");
  digits->add_option("--logdir", digits_options.logdir,
                     "Write TensorBoard summaries (the graph, loss, test accuracy, a weight histogram; with "
                     "--cluster the chief's, with global_step/sec) to DIR");
  digits->add_option("--moving-average", digits_options.moving_average_decay,
                     "Also keep an ExponentialMovingAverage of the weights with this decay (e.g. 0.99) and report "
                     "the test accuracy with the averages")
      ->check(CLI::Range(0.0, 1.0));
  double digits_expect = 0;
  digits->add_option("--expect-accuracy", digits_expect,
                     "Exit with status 1 unless the test accuracy reaches this fraction (the tests use it)")
      ->check(CLI::Range(0.0, 1.0));
  // Distributed: this process is one task of a ps/worker job (examples/ps_digits.cc).
  DistributedDigitsArgs dist;
  auto* dist_cluster = digits->add_option(
      "--cluster", dist.cluster,
      "Train as one task of a cluster with ps and worker jobs (a JSON file or inline JSON): a ps task serves the "
      "variables until the workers are done, a worker trains the MLP with a MonitoredTrainingSession (worker 0 is "
      "the chief); needs --job and --task");
  digits->add_flag("--from-env", dist.from_env,
                   "As --cluster, the cluster and this task from TF_CONFIG or Slurm's SLURM_* variables");
  digits->add_option("--job", dist.job, "This task's job (ps or worker) with --cluster");
  digits->add_option("--task", dist.task, "This task's index with --cluster")->check(CLI::NonNegativeNumber);
  digits->add_flag("--sync", dist.options.sync,
                   "Synchronous training: a SyncReplicasOptimizer aggregates one gradient from every worker per step");
  digits->add_option("--checkpoint-dir", dist.options.checkpoint_dir,
                     "The chief's checkpoints: restored from when it starts, written every 100 steps and at the end");
  digits->add_option("--ps-strategy", dist.options.ps_strategy, "round_robin or greedy_bytes")
      ->check(CLI::IsMember({"round_robin", "greedy_bytes"}));
  digits->add_option("--keys", dist.security.key_file, "This task's key pair (as `tessera server --keys`)");
  digits->add_option("--cluster-keys", dist.security.cluster_keys_file, "The cluster's public keys (as `tessera server`)");
  digits->add_flag("--insecure", dist.security.insecure, "Serve other hosts without keys (as `tessera server`)");
  auto* devices = app.add_subcommand("devices", "List the devices this process can run ops on");
  auto* server = app.add_subcommand(
      "server", "Run one task of a cluster until SIGINT or SIGTERM. Without --cluster, the cluster comes from "
                "TF_CONFIG or Slurm's SLURM_* variables, and so does the task unless --job/--task are given");
  std::string cluster_arg, job_arg;
  int task_arg = 0;
  auto* cluster_opt = server->add_option("--cluster", cluster_arg,
                                         "The cluster: a JSON file, or inline JSON such as "
                                         "'{\"worker\": [\"127.0.0.1:2222\", \"127.0.0.1:2223\"]}'");
  auto* job_opt = server->add_option("--job", job_arg, "This task's job name");
  // A whole number >= 0, said so (CLI::NonNegativeNumber prints the range of a double).
  const CLI::Validator task_index(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.size() <= 9 &&
                            value.find_first_not_of("0123456789") == std::string::npos;
        return digits ? std::string() : "'" + value.substr(0, 40) + "' is not a task index (a whole number >= 0)";
      },
      "INDEX");
  auto* task_opt = server->add_option("--task", task_arg, "This task's index in its job")->check(task_index);
  tessera::train::SecurityOptions security;
  server->add_option("--keys", security.key_file,
                     "This task's key pair (`tessera keygen --out PREFIX` writes PREFIX.key): encrypt all traffic "
                     "and admit only the keys of --cluster-keys");
  server->add_option("--cluster-keys", security.cluster_keys_file,
                     "The cluster's public keys, one '<Z85 key> <label>' a line: the label a task's host:port "
                     "(the key its server presents) or a client's name");
  server->add_flag("--insecure", security.insecure,
                   "Serve an address other hosts can reach without keys (unauthenticated, unencrypted)");
  // The master's bounds on the sessions clients leave open (ServerOptions::session_idle_timeout and
  // max_sessions), each refused with what it must be.
  const tessera::train::ServerOptions server_defaults;
  double idle_timeout_s = std::chrono::duration<double>(server_defaults.session_idle_timeout).count();
  const CLI::Validator idle_seconds(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double s = value.empty() ? -1 : std::strtod(value.c_str(), &end);
        const bool ok = errno == 0 && end != nullptr && *end == '\0' && std::isfinite(s) && s >= 0 && s <= 1e9;
        return ok ? std::string()
                  : "'" + value.substr(0, 40) + "' is not a number of seconds (0 to 1e9, such as 3600 or 0.5; 0: never)";
      },
      "SECONDS");
  server->add_option("--session-idle-timeout", idle_timeout_s,
                     "Close a session after SECONDS with no run or extend in flight (a client gone without closing "
                     "it; a run in flight is never cut short); 0: never")
      ->check(idle_seconds)
      ->capture_default_str();
  double partition_lease_s = std::chrono::duration<double>(server_defaults.partition_lease).count();
  server->add_option("--partition-lease", partition_lease_s,
                     "How long other tasks keep this master's partitions once they stop hearing from it (renewed "
                     "every SECONDS/4 while a session is open; at least 0.1); 0: until its session closes")
      ->check(idle_seconds)
      ->capture_default_str();
  int64_t max_sessions = server_defaults.max_sessions;
  const CLI::Validator session_count(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.size() <= 18 &&
                            value.find_first_not_of("0123456789") == std::string::npos &&
                            value.find_first_not_of('0') != std::string::npos;
        return digits ? std::string() : "'" + value.substr(0, 40) + "' is not a session count (a whole number > 0)";
      },
      "N");
  server->add_option("--max-sessions", max_sessions,
                     "Most sessions open at once on this task's master: creating one more fails with "
                     "ResourceExhausted")
      ->check(session_count)
      ->capture_default_str();
  int64_t busy_poll_us = server_defaults.busy_poll.count();
  const CLI::Validator busy_poll_range(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.size() <= 5 &&
                            value.find_first_not_of("0123456789") == std::string::npos && std::stoi(value) <= 10000;
        return digits ? std::string()
                      : "'" + value.substr(0, 40) + "' is not a busy-polling time (whole microseconds, 0 to 10000)";
      },
      "US");
  int exit_with_parent = 0;
  server->add_option("--exit-with-parent", exit_with_parent,
                     "Stop (as on SIGTERM) once process PID, which started this task, is gone, even killed with "
                     "-9: for launchers that must not leave tasks behind (train::ServerProcess passes its own pid)")
      ->check(CLI::PositiveNumber)
      ->type_name("PID");
  server->add_option("--busy-poll", busy_poll_us,
                     "After receiving requests, keep looking for more for US microseconds before sleeping, and "
                     "as long for replies from other tasks (ServerOptions::busy_poll: fewer wake-ups for a "
                     "stream of small calls, at the price of up to US of CPU after each burst); 0: off")
      ->check(busy_poll_range)
      ->capture_default_str();
  auto* keygen = app.add_subcommand(
      "keygen", "Make a CURVE key pair for a task or client of an authenticated cluster: PREFIX.key (JSON, mode "
                "0600) and PREFIX.pub (the public key, for the cluster keys file)");
  std::string keygen_out;
  bool keygen_force = false;
  keygen->add_option("--out", keygen_out, "Path prefix of the two files")->required();
  keygen->add_flag("--force", keygen_force, "Replace existing files");

  // An unknown option before any command: CLI11 would only say that a command is required.
  if (argc > 1 && argv[1][0] == '-' && std::string(argv[1]) != "--help" && std::string(argv[1]) != "-h" &&
      std::string(argv[1]) != "--version") {
    std::cerr << "tessera: unknown option '" << std::string(argv[1]).substr(0, 80)
              << "' (commands: demo, digits, devices, server, keygen; `tessera --help` lists them)\n";
    return 106;  // CLI11's code for an argument it does not know
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return run_demo(steps, trace_file, log_placement, demo_logdir);
    if (*devices) return list_devices();
    if (*digits && (dist_cluster->count() > 0 || dist.from_env)) {
      return run_distributed_digits(dist, digits_options);
    }
    if (*digits) {
      digits_options.log_every = std::max(1, digits_options.steps / 10);
      const auto r = tessera::examples::digits(std::cout, digits_options);
      if (r.test_accuracy < digits_expect) {
        std::cerr << "tessera digits: test accuracy " << r.test_accuracy << " is below the expected " << digits_expect
                  << "\n";
        return 1;
      }
      if (digits_options.moving_average_decay > 0 && r.average_accuracy < digits_expect) {
        std::cerr << "tessera digits: test accuracy with the moving averages " << r.average_accuracy
                  << " is below the expected " << digits_expect << "\n";
        return 1;
      }
      return 0;
    }
    if (*server) {
      // Before any thread starts: run again with glibc's malloc settings for a server (returns
      // where they do not apply, or are in effect already).
      const std::string malloc_said = tessera::train::apply_server_malloc_settings(argv);
      if (malloc_said.rfind("exec ", 0) == 0) {
        std::cerr << "tessera server: warning: glibc's per-thread malloc caches stay on (" << malloc_said << ")\n";
      }
      auto given = [](CLI::Option* o, const auto& value) {
        using T = std::decay_t<decltype(value)>;
        return o->count() > 0 ? std::optional<T>(value) : std::nullopt;
      };
      tessera::train::ServerOptions options;
      options.security = security;
      // Rounded up: a positive timeout never becomes 0, which means never.
      options.session_idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(idle_timeout_s * 1000)));
      options.max_sessions = max_sessions;
      options.partition_lease = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(partition_lease_s * 1000)));
      options.busy_poll = std::chrono::microseconds(busy_poll_us);
      return run_server(given(cluster_opt, cluster_arg), given(job_opt, job_arg), given(task_opt, task_arg), options,
                        static_cast<pid_t>(exit_with_parent));
    }
    if (*keygen) return run_keygen(keygen_out, keygen_force);
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << tessera::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}
