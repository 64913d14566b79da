// The tessera command line: `tessera demo`, `tessera devices`, `tessera --version`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <thread>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace {

int run_demo(int steps) {
  std::cout << "== tessera demo 1/2: ten threads dequeue c = a + b through a QueueRunner ==\n";
  int rc = tessera::examples::queue_add(std::cout);
  std::cout << "\n== tessera demo 2/2: linear regression, 4 training threads on shared variables ==\n";
  rc |= tessera::examples::linear_regression(std::cout, steps);
  std::cout << (rc == 0 ? "\ndemo: OK\n" : "\ndemo: FAILED\n");
  return rc;
}

void list_devices() {
  // In-process sessions run on this process's CPU device (accelerators come with the device
  // layer; a CPU-only build lists only the CPU).
  std::printf("/job:localhost/replica:0/task:0/device:CPU:0  type CPU  threads %u  build %s\n",
              std::thread::hardware_concurrency(), TESSERA_WITH_CUDA ? "cuda" : "cpu-only");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera: a dataflow runtime in the spirit of TensorFlow 1's engine"};
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  app.require_subcommand(1);

  int steps = 300;
  auto* demo = app.add_subcommand("demo", "Run the README's main job: the seed's queue example and multithreaded SGD");
  demo->add_option("--steps", steps, "SGD steps per training thread")->check(CLI::Range(1, 1000000));
  auto* devices = app.add_subcommand("devices", "List the devices this process can run ops on");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return run_demo(steps);
    if (*devices) {
      list_devices();
      return 0;
    }
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << tessera::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}
