// The CPU's cost profile (and the GPUs', calibrate_gpu_profile), measured once per machine and
// cached, so that placement compares the host with the accelerators using this machine's numbers
// rather than a guess.
//
//   const DeviceCostProfile& p = CpuDevice(0).cost_profile();   // calibrated_cpu_profile(), once
//
//   TESSERA_CALIBRATE=0                    skip measuring: the documented defaults (kCpuCostProfile)
//   TESSERA_CPU_FLOPS=4e10                 override the measured arithmetic rate (FLOP/s)
//   TESSERA_CPU_MEMORY_BANDWIDTH=1.5e10    override the measured memory bandwidth (bytes/s)
//   TESSERA_CALIBRATION_FILE=/path.json    where the measurement is cached; default
//                                          $XDG_CACHE_HOME/tessera/calibration.json, else
//                                          $HOME/.cache/tessera/calibration.json
//
// The measurement (well under 100 ms) is one 256x256 cblas_sgemm for the arithmetic rate and a
// 32 MiB memcpy for the memory bandwidth (bytes read plus written, as op_bytes counts them); the
// kernel overhead keeps its default. A missing, stale (another host), corrupt or unwritable cache
// never fails anything: the profile is measured again, or the defaults are used.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/device.h"

namespace tessera::internal {

// Documented defaults for one socket of a current server core complex, used by placement to
// compare devices (only ratios matter): ~50 GFLOP/s of sustained float arithmetic across the
// inter-op pool, ~20 GB/s of memory bandwidth, and free "transfers" (host memory is the host's).
inline constexpr DeviceCostProfile kCpuCostProfile{
    /*flops_per_second=*/50e9,
    /*memory_bandwidth=*/20e9,
    /*transfer_bandwidth=*/0,
    /*transfer_latency_seconds=*/0,
    /*kernel_overhead_seconds=*/1e-6,
};

// The process's CPU profile: computed by calibrate_cpu_profile() on the first call, then the same
// value. Thread-safe.
DeviceCostProfile calibrated_cpu_profile();

// One full calibration, uncached in memory: TESSERA_CALIBRATE, the cache file (read, or measured
// and written), then the TESSERA_CPU_* overrides. For tests and tools; thread-compatible.
DeviceCostProfile calibrate_cpu_profile();

// The cache file's path from the environment ("" when no variable gives one).
std::string calibration_file_path();

// A GPU's profile, calibrated as the CPU's is: `measure` runs once per machine and GPU, its result
// cached beside the CPU's (calibration.json -> calibration.gpu<ordinal>.json, which names the GPU:
// another GPU in that slot is measured again). TESSERA_CALIBRATE=0 keeps `defaults` unmeasured.
// Overrides: TESSERA_GPU_FLOPS, TESSERA_GPU_MEMORY_BANDWIDTH, TESSERA_GPU_TRANSFER_BANDWIDTH
// (bytes/s, host to device) and TESSERA_GPU_TRANSFER_LATENCY (seconds). Thread-compatible.
DeviceCostProfile calibrate_gpu_profile(int ordinal, const std::string& gpu_name, const DeviceCostProfile& defaults,
                                        const std::function<DeviceCostProfile()>& measure);
// calibrate_gpu_profile's cache file for GPU `ordinal` ("" when calibration_file_path() is "").
std::string gpu_calibration_file_path(int ordinal);

// Runs the microbenchmark: kCpuCostProfile with measured flops_per_second and memory_bandwidth.
DeviceCostProfile measure_cpu_profile();

// The profile cached in `path`; nullopt when the file is missing, unreadable, corrupt, holds
// non-positive numbers or was measured on another host.
std::optional<DeviceCostProfile> read_calibration_file(const std::string& path);
// Writes `profile` to `path` (creating its folder, replacing the file atomically); false on any
// failure.
bool write_calibration_file(const std::string& path, const DeviceCostProfile& profile);

}  // namespace tessera::internal
