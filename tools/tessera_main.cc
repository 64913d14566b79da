// The tessera command line: `tessera demo`, `tessera devices`, `tessera --version`.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <cstdio>
#include <iostream>
#include <thread>

#include "core/device.h"
#include "device/default_devices.h"
#include "device/sim_device.h"
#include "examples/examples.h"
#include "tessera/tessera.h"

namespace {

int run_demo(int steps, const std::string& trace_file) {
  std::cout << "== tessera demo 1/3: ten threads dequeue c = a + b through a QueueRunner ==\n";
  int rc = tessera::examples::queue_add(std::cout);
  std::cout << "\n== tessera demo 2/3: linear regression, 4 training threads on shared variables ==\n";
  rc |= tessera::examples::linear_regression(std::cout, steps);
  std::cout << "\n== tessera demo 3/3: a two-layer network placed over the host and accelerators ==\n";
  tessera::internal::register_default_devices().raise();
  auto& registry = tessera::internal::DeviceRegistry::global();
  if (registry.devices().size() == 1) {
    // No GPU and no TESSERA_SIM_ACCELERATORS: simulate one, so placement has a choice to make.
    tessera::internal::register_sim_devices(1, registry).raise();
    std::cout << "no accelerator found: simulating one (/device:SIM:0; TESSERA_SIM_ACCELERATORS=N sets more)\n";
  }
  rc |= tessera::examples::heterogeneous(std::cout, trace_file);
  std::cout << (rc == 0 ? "\ndemo: OK\n" : "\ndemo: FAILED\n");
  return rc;
}

// Lists the devices sessions place ops on: the CPU, the simulated accelerators
// TESSERA_SIM_ACCELERATORS asks for, and the GPUs of a CUDA build.
int list_devices() {
  auto& registry = tessera::internal::DeviceRegistry::global();
  tessera::Status registered = tessera::internal::register_default_devices();
  if (!registered.ok()) {
    std::fprintf(stderr, "tessera: %s\n", registered.to_string().c_str());
    return 2;
  }
  std::printf("build %s, %u hardware threads\n", TESSERA_WITH_CUDA ? "cuda" : "cpu-only",
              std::thread::hardware_concurrency());
  for (tessera::internal::Device* d : registry.devices()) {
    const auto& cost = d->cost_profile();
    std::string transfer = "host memory";
    if (cost.transfer_bandwidth > 0) {
      transfer = fmt::format("transfer {:.1f} GB/s + {:.0f} us", cost.transfer_bandwidth / 1e9,
                             cost.transfer_latency_seconds * 1e6);
    }
    std::printf("%s  type %s  %.0f GFLOP/s  %s\n", d->name().c_str(), d->type().c_str(),
                cost.flops_per_second / 1e9, transfer.c_str());
  }
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
  auto* devices = app.add_subcommand("devices", "List the devices this process can run ops on");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return run_demo(steps, trace_file);
    if (*devices) return list_devices();
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << tessera::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}
