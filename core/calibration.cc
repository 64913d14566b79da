#include "core/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <cblas.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace tessera::internal {

namespace {

// 2: a GPU's kernel_overhead_seconds is measured (the pace of stream-ordered launches); caches of
// version 1 hold the old default, so they are measured again.
constexpr int kFormatVersion = 2;
constexpr int kGemmSize = 256;
constexpr std::size_t kCopyBytes = std::size_t{32} << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool usable(double v) { return std::isfinite(v) && v > 0; }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// A positive finite number from the environment; nullopt (with a warning for a bad value) else.
std::optional<double> env_number(const char* name) {
  const std::string s = env(name);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !usable(v)) {
    TESSERA_LOG(kWarning, "ignoring {}='{}': expected a positive number", name, s);
    return std::nullopt;
  }
  return v;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

// The JSON object in `path` when it is one of this format's version; nullopt otherwise (missing,
// unreadable, corrupt, another version).
std::optional<nlohmann::json> read_json_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  StatusOr<std::string> text = read_small_file(path, "calibration cache", std::size_t{1} << 20);
  if (!text.ok()) return std::nullopt;
  StatusOr<nlohmann::json> parsed = parse_json_bounded(text.value(), "calibration cache");
  if (!parsed.ok()) return std::nullopt;
  nlohmann::json j = std::move(parsed).value();
  if (!j.is_object()) return std::nullopt;
  if (auto v = j.find("version"); v == j.end() || !v->is_number_integer() || v->get<int>() != kFormatVersion) {
    return std::nullopt;
  }
  return j;
}

// Writes `j` to `path` (creating its folder): beside the target, then renamed, so that readers in
// other processes see the old file or the new. False on any failure.
bool write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << j.dump(2) << "\n";
    if (!out.flush()) {
      out.close();
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace

std::string calibration_file_path() {
  if (std::string p = env("TESSERA_CALIBRATION_FILE"); !p.empty()) return p;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/tessera/calibration.json";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/tessera/calibration.json";
  return "";
}

DeviceCostProfile measure_cpu_profile() {
  DeviceCostProfile p = kCpuCostProfile;

  // Arithmetic: 256x256x256 products (OpenBLAS starts its threads on the first call).
  {
    const int n = kGemmSize;
    std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
    for (int i = 0; i < n * n; ++i) {
      a[i] = static_cast<float>(i % 7) * 0.25f;
      b[i] = static_cast<float>(i % 5) * 0.5f;
    }
    // The best of up to 20 runs (after two warm-ups) or 30 ms: on a shared machine single runs
    // vary by 2x.
    double best = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 22 && (rep < 4 || seconds_since(start) < 0.03); ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                  c.data(), n);
      const double t = seconds_since(t0);
      if (rep >= 2 && (best == 0 || t < best)) best = t;
    }
    volatile float sink = c[n * n / 2];
    (void)sink;
    const double flops = 2.0 * n * n * static_cast<double>(n);
    if (usable(best)) p.flops_per_second = flops / best;
  }

  // Memory: the best of a few 32 MiB copies; bytes read plus bytes written.
  {
    std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      src[rep] = static_cast<char>(rep);
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), src.data(), kCopyBytes);
      const double t = seconds_since(t0);
      if (best == 0 || t < best) best = t;
    }
    volatile char sink = dst[kCopyBytes / 2];
    (void)sink;
    if (usable(best)) p.memory_bandwidth = 2.0 * static_cast<double>(kCopyBytes) / best;
  }
  return p;
}

std::optional<DeviceCostProfile> read_calibration_file(const std::string& path) {
  const std::optional<nlohmann::json> file = read_json_file(path);
  if (!file) return std::nullopt;
  const nlohmann::json& j = *file;
  auto number = [](const nlohmann::json& o, const char* key) -> std::optional<double> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    const double v = it->get<double>();
    return usable(v) ? std::optional<double>(v) : std::nullopt;
  };
  // Measured elsewhere (a home folder shared between machines): measure again.
  if (auto h = j.find("host"); h != j.end() && (!h->is_string() || h->get<std::string>() != host_name())) {
    return std::nullopt;
  }
  auto cpu = j.find("cpu");
  if (cpu == j.end() || !cpu->is_object()) return std::nullopt;
  auto flops = number(*cpu, "flops_per_second");
  auto bandwidth = number(*cpu, "memory_bandwidth");
  if (!flops || !bandwidth) return std::nullopt;
  DeviceCostProfile p = kCpuCostProfile;
  p.flops_per_second = *flops;
  p.memory_bandwidth = *bandwidth;
  if (auto it = cpu->find("kernel_overhead_seconds"); it != cpu->end() && it->is_number()) {
    const double v = it->get<double>();
    if (std::isfinite(v) && v >= 0) p.kernel_overhead_seconds = v;
  }
  return p;
}

bool write_calibration_file(const std::string& path, const DeviceCostProfile& profile) {
  nlohmann::json j;
  j["version"] = kFormatVersion;
  j["host"] = host_name();
  j["cpu"] = {
      {"flops_per_second", profile.flops_per_second},
      {"memory_bandwidth", profile.memory_bandwidth},
      {"kernel_overhead_seconds", profile.kernel_overhead_seconds},
  };
  return write_json_file(path, j);
}

DeviceCostProfile calibrate_cpu_profile() {
  DeviceCostProfile p = kCpuCostProfile;
  if (env("TESSERA_CALIBRATE") != "0") {
    const std::string path = calibration_file_path();
    if (auto cached = read_calibration_file(path)) {
      p = *cached;
    } else {
      p = measure_cpu_profile();
      write_calibration_file(path, p);  // best effort: an unwritable cache only costs a re-measure
    }
  }
  if (auto v = env_number("TESSERA_CPU_FLOPS")) p.flops_per_second = *v;
  if (auto v = env_number("TESSERA_CPU_MEMORY_BANDWIDTH")) p.memory_bandwidth = *v;
  return p;
}

std::string gpu_calibration_file_path(int ordinal) {
  std::string path = calibration_file_path();
  if (path.empty()) return path;
  const std::string suffix = ".json";
  if (path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    path.resize(path.size() - suffix.size());
  }
  return path + ".gpu" + std::to_string(ordinal) + ".json";
}

namespace {

constexpr const char* kGpuFields[] = {"flops_per_second", "memory_bandwidth", "transfer_bandwidth",
                                      "transfer_latency_seconds", "kernel_overhead_seconds"};

double& field(DeviceCostProfile& p, int i) {
  switch (i) {
    case 0: return p.flops_per_second;
    case 1: return p.memory_bandwidth;
    case 2: return p.transfer_bandwidth;
    case 3: return p.transfer_latency_seconds;
    default: return p.kernel_overhead_seconds;
  }
}

// A GPU's cached profile: this host's, for a GPU of this name, every field a positive number.
std::optional<DeviceCostProfile> read_gpu_file(const std::string& path, const std::string& gpu_name,
                                               const DeviceCostProfile& defaults) {
  const std::optional<nlohmann::json> file = read_json_file(path);
  if (!file) return std::nullopt;
  const nlohmann::json& j = *file;
  if (auto h = j.find("host"); h == j.end() || !h->is_string() || h->get<std::string>() != host_name()) {
    return std::nullopt;
  }
  auto gpu = j.find("gpu");
  if (gpu == j.end() || !gpu->is_object()) return std::nullopt;
  if (auto n = gpu->find("name"); n == gpu->end() || !n->is_string() || n->get<std::string>() != gpu_name) {
    return std::nullopt;
  }
  DeviceCostProfile p = defaults;
  for (int i = 0; i < 5; ++i) {
    auto it = gpu->find(kGpuFields[i]);
    if (it == gpu->end() || !it->is_number() || !usable(it->get<double>())) return std::nullopt;
    field(p, i) = it->get<double>();
  }
  return p;
}

bool write_gpu_file(const std::string& path, const std::string& gpu_name, DeviceCostProfile profile) {
  nlohmann::json j;
  j["version"] = kFormatVersion;
  j["host"] = host_name();
  j["gpu"] = {{"name", gpu_name}};
  for (int i = 0; i < 5; ++i) j["gpu"][kGpuFields[i]] = field(profile, i);
  return write_json_file(path, j);
}

}  // namespace

DeviceCostProfile calibrate_gpu_profile(int ordinal, const std::string& gpu_name, const DeviceCostProfile& defaults,
                                        const std::function<DeviceCostProfile()>& measure) {
  DeviceCostProfile p = defaults;
  if (env("TESSERA_CALIBRATE") != "0") {
    const std::string path = gpu_calibration_file_path(ordinal);
    if (auto cached = read_gpu_file(path, gpu_name, defaults)) {
      p = *cached;
    } else {
      p = measure();
      DeviceCostProfile fallback = defaults;
      for (int i = 0; i < 5; ++i) {
        if (!usable(field(p, i))) field(p, i) = field(fallback, i);
      }
      write_gpu_file(path, gpu_name, p);  // best effort, as the CPU's
    }
  }
  if (auto v = env_number("TESSERA_GPU_FLOPS")) p.flops_per_second = *v;
  if (auto v = env_number("TESSERA_GPU_MEMORY_BANDWIDTH")) p.memory_bandwidth = *v;
  if (auto v = env_number("TESSERA_GPU_TRANSFER_BANDWIDTH")) p.transfer_bandwidth = *v;
  if (auto v = env_number("TESSERA_GPU_TRANSFER_LATENCY")) p.transfer_latency_seconds = *v;
  return p;
}

DeviceCostProfile calibrated_cpu_profile() {
  static std::once_flag once;
  static DeviceCostProfile profile;
  std::call_once(once, [] { profile = calibrate_cpu_profile(); });
  return profile;
}

}  // namespace tessera::internal
