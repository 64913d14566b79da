// The devices of this process, as sessions see them: the CPU, the GPUs of a CUDA build, and the
// simulated accelerators TESSERA_SIM_ACCELERATORS=N asks for.
//
//   for (const tessera::DeviceInfo& d : tessera::list_devices()) std::cout << d.name << "\n";
//   tessera::MemoryStats m = tessera::memory_stats("/device:GPU:0");
//
// A CUDA build on a machine without a usable GPU lists only the CPU (and SIM devices when asked
// for) and says so once. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct DeviceInfo {
  std::string name;          // "/job:localhost/replica:0/task:0/device:GPU:0"
  std::string type;          // "CPU", "GPU", "SIM", or a backend's own type
  int64_t memory_bytes = 0;  // the device's memory (0 when unknown)
  std::string description;   // "NVIDIA H200", "host CPU, 16 hardware threads", ...
  // What placement assumes of it (measured once per machine and cached: README, Devices).
  double flops_per_second = 0;
  double transfer_bandwidth = 0;  // bytes/s to or from host memory; 0 for host memory
  double transfer_latency_seconds = 0;
};

// This process's devices, the host CPU first. Makes them on first use, as a session would;
// InvalidArgumentError for a malformed TESSERA_SIM_ACCELERATORS.
std::vector<DeviceInfo> list_devices();

struct MemoryStats {
  int64_t in_use_bytes = 0;    // live allocations
  int64_t peak_bytes = 0;      // high-water mark of in_use_bytes
  int64_t reserved_bytes = 0;  // held from the system (a caching allocator's regions)
  int64_t limit_bytes = 0;     // set_memory_limit's cap when set, else the device's memory (0: unknown)
};

// The memory of the device `device` names (full or partial: "/device:GPU:0", "/cpu:0").
// NotFoundError when no device matches, InvalidArgumentError for a malformed name.
MemoryStats memory_stats(const std::string& device);

// Caps what this process allocates on `device` (as memory_stats names it) at `bytes`; 0 lifts the
// cap. Past it an op fails with ResourceExhaustedError naming the op, the bytes asked for, in use
// and reserved, as when the memory itself runs out (TensorFlow's per-process GPU memory limit).
// Lowering the cap frees nothing already allocated. NotFoundError / InvalidArgumentError as
// memory_stats; InvalidArgumentError for bytes < 0.
void set_memory_limit(const std::string& device, int64_t bytes);

// Adds `n` simulated accelerators (/device:SIM:k onward, after those already there) to this
// process, for programs that want to exercise placement on a machine with no accelerator (as
// TESSERA_SIM_ACCELERATORS=N does at start). Returns their names. Sessions made before keep
// their devices; InvalidArgumentError for n < 1 or more than 64 in all.
std::vector<std::string> add_simulated_accelerators(int n);

}  // namespace tessera
