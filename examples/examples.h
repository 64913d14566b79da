// The examples that `tessera demo` runs. Each builds its own graph and session, prints what it
// does to `out`, and returns 0 on success (non-zero if its own checks fail). Each ends with where
// its ops ran (report_placement): one summary line, or with `log_placement` every op's device.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "tessera/tessera.h"

// The data set's path, which the build sets for tessera_cli (CMakeLists.txt).
#ifndef TESSERA_DIGITS_CSV
#define TESSERA_DIGITS_CSV "examples/data/digits.csv.gz"
#endif

namespace tessera::examples {

// The seed's first example, made correct: ten threads dequeue the results of c = a + b from a
// queue filled by a QueueRunner under a Coordinator.
int queue_add(std::ostream& out, bool log_placement = false);

// Linear regression by SGD: a QueueRunner makes noisy batches of y = 3x + 2, four threads
// update the shared variables w and b at once; the loss falls and w, b approach 3 and 2.
int linear_regression(std::ostream& out, int steps_per_thread = 300, bool log_placement = false);

// A two-layer network's step placed over the host and the accelerators (GPUs, or simulated
// ones): the same loss under the cost, gpu_first and cpu_only policies, with step times; writes a
// Chrome trace of the cost-placed step to `trace_file` unless it is empty.
int heterogeneous(std::ostream& out, const std::string& trace_file = "", bool log_placement = false);

// The seed's cluster example: two tasks of job "local" (servers in this process), y2 computed on
// task 1, y on task 0, ten threads running y through a session on task 0's target.
int seed_cluster(std::ostream& out, bool log_placement = false);

// The digits of scikit-learn (examples/data/digits.csv.gz) classified by an MLP or a small CNN
// trained with Adam on shuffled batches (examples/digits.cc).
struct DigitsOptions {
  std::string model = "mlp";  // "mlp", "cnn" or "layers" (digits_layers: the MLP of tessera::layers)
  std::string device;         // "" (placement decides), "/cpu:0", "/device:SIM:0", "/gpu:0"
  std::string data = TESSERA_DIGITS_CSV;
  int steps = 3000;
  int batch_size = 64;
  float learning_rate = 1e-3f;
  int log_every = 500;  // 0: no per-step lines
  bool log_placement = false;
  // TensorBoard: when set, a FileWriter there gets the graph, and every summary_every steps the
  // training loss, the test accuracy and a histogram of the first layer's weights.
  std::string logdir;
  int summary_every = 50;
  // When set, a Chrome trace (Perfetto) of the last training step is written there.
  std::string trace_file;
  // When > 0, every step also updates an ExponentialMovingAverage of the weights with this decay
  // (num_updates: the global step), and the test accuracy is measured again with the averages
  // copied into the weights.
  double moving_average_decay = 0;
};
struct DigitsResult {
  float first_loss = 0;
  float last_loss = 0;
  float test_accuracy = 0;
  float average_accuracy = 0;  // with the moving averages (moving_average_decay > 0)
  int64_t steps = 0;
  double seconds = 0;
};
DigitsResult digits(std::ostream& out, const DigitsOptions& options);

// Distributed training of the digits MLP as TensorFlow 1 jobs do it (examples/ps_digits.cc):
// between-graph replication, the variables over the ps tasks by replica_device_setter, each worker
// a MonitoredTrainingSession (worker 0 the chief, which initializes or restores and checkpoints),
// Adam updates asynchronous or, with `sync`, aggregated by a SyncReplicasOptimizer.
struct PsDigitsOptions {
  std::string model = "mlp";  // as DigitsOptions::model
  int steps = 600;  // the global step to train to (StopAtStepHook)
  int batch_size = 64;
  float learning_rate = 1e-3f;
  bool sync = false;
  std::string ps_strategy = "round_robin";  // or "greedy_bytes"
  std::string checkpoint_dir;               // the chief's; "" for none
  // TensorBoard: the chief's summaries (loss, test accuracy, a weight histogram, global_step/sec)
  // every summary_steps global steps, through its MonitoredTrainingSession; "" for none.
  std::string logdir;
  int summary_steps = 50;
  int save_checkpoint_steps = 100;
  std::chrono::milliseconds recovery_wait{60000};
  std::string data = TESSERA_DIGITS_CSV;
  int log_every = 100;  // a worker's lines: every N of its steps; 0 none
  bool report_placement = false;  // the chief reports where its ops ran (report_placement)
  bool log_placement = false;     // ... every op's device
  SessionOptions config;
};
struct PsDigitsResult {
  float first_loss = 0, last_loss = 0;
  int64_t local_steps = 0;    // this worker's runs
  int64_t final_step = 0;     // the global step its last run saw (the chief: read at the end)
  int sessions_created = 0;   // 1, plus one per recovery
  float test_accuracy = 0;    // the chief's, at the end
  double seconds = 0;
};
// One worker's loop through its task's `target` until the global step reaches options.steps;
// `on_step` (if set) sees the global step after each run.
PsDigitsResult ps_digits_worker(std::ostream& out, const train::ClusterSpec& cluster, int task_index,
                                const std::string& target, const PsDigitsOptions& options,
                                const std::function<void(int64_t)>& on_step = {});
// One task of such a job, as a scheduler starts it (`tessera digits --distributed`, with the
// cluster from TF_CONFIG or Slurm): a ps serves until every worker is done; a worker starts its
// server and trains. Returns 0 on success.
int ps_digits_task(std::ostream& out, const train::ClusterSpec& cluster, const train::TaskSpec& task,
                   const train::ServerOptions& server_options, const PsDigitsOptions& options);
// The demo's part: 2 ps and 2 workers as `tessera server` processes, a monitored session per
// worker in this process; ps 1 is killed (kill -9) and restarted mid-training and both sessions
// recover from the chief's latest checkpoint.
int ps_digits_demo(std::ostream& out, const std::string& tessera_binary, PsDigitsOptions options,
                   bool log_placement = false);

// A recurrent network (examples/sequence.cc): an LSTM through nn::dynamic_rnn learns the adding
// problem (the sum of the two marked values of a sequence), on batches the graph draws each step.
struct SequenceOptions {
  int steps = 600;
  int batch_size = 64;
  int time_steps = 12;
  int units = 32;
  float learning_rate = 1e-2f;
  int log_every = 150;
  uint64_t seed = 7;
  std::string device;  // "" (placement decides) or the scope the model is built under ("/cpu:0")
  bool log_placement = false;
};
struct SequenceResult {
  float first_loss = 0;
  float last_loss = 0;  // the running mean of the last batches' losses
  double seconds = 0;
};
SequenceResult sequence(std::ostream& out, const SequenceOptions& options);

// Where the sessions placed `g`'s ops (Operation::assigned_device), on `out`: one line, such as
// "placement: 14 ops on /cpu:0, 6 on /device:SIM:0, 3 copies", then, when `table` is set, every
// op's device, one line each. Copies count each tensor (or control edge) that crosses to another
// device once per device, as the partitioner sends it; ops no step ran are counted apart.
void report_placement(std::ostream& out, const Graph& g, bool table);
// A full device name as a reader wants it: "/cpu:0" for this process's
// "/job:localhost/replica:0/task:0/device:CPU:0", "/job:ps/task:0/cpu:0" for a cluster task's
// (TensorFlow's short forms for CPUs and GPUs; other types keep "/device:TYPE:N").
std::string short_device(std::string name);

}  // namespace tessera::examples
