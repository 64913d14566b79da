// The examples that `tessera demo` runs. Each builds its own graph and session, prints what it
// does to `out`, and returns 0 on success (non-zero if its own checks fail). Each ends with where
// its ops ran (report_placement): one summary line, or with `log_placement` every op's device.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "tessera/graph.h"

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

// Parameter-server training over processes: starts one `ps` and `workers` worker tasks as
// `tessera_binary server` processes on loopback ports, then trains y = 3x + 2 from every worker at
// once (each with its own graph, session and QueueRunner pipeline) on variables that live on the
// ps; prints worker 0's placement, the falling loss and the steps per second, and stops the tasks.
int ps_training(std::ostream& out, const std::string& tessera_binary, int workers = 2, int steps = 200,
                bool log_placement = false);

// The digits of scikit-learn (examples/data/digits.csv.gz) classified by an MLP or a small CNN
// trained with Adam on shuffled batches (examples/digits.cc).
struct DigitsOptions {
  std::string model = "mlp";  // "mlp" or "cnn"
  std::string device;         // "" (placement decides), "/cpu:0", "/device:SIM:0", "/gpu:0"
  std::string data = TESSERA_DIGITS_CSV;
  int steps = 3000;
  int batch_size = 64;
  float learning_rate = 1e-3f;
  int log_every = 500;  // 0: no per-step lines
  bool log_placement = false;
};
struct DigitsResult {
  float first_loss = 0;
  float last_loss = 0;
  float test_accuracy = 0;
  int64_t steps = 0;
  double seconds = 0;
};
DigitsResult digits(std::ostream& out, const DigitsOptions& options);

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
