// The CPU cost profile's calibration: the cache file, the environment overrides, and what a
// corrupt, stale or unwritable cache does (nothing fails).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/calibration.h"
#include "host/cpu_device.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

namespace fs = std::filesystem;

using testing::ScopedEnv;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// Each test gets its own folder (ctest runs tests in parallel processes) and a clean environment.
class CalibrationTest : public tessera::testing::TempDirTest {
 protected:
  CalibrationTest() : TempDirTest("tessera_calibration") {}
  void SetUp() override {
    TempDirTest::SetUp();
    file_ = dir_ / "calibration.json";
    file_env_.emplace("TESSERA_CALIBRATION_FILE", file_.string());
  }
  void TearDown() override {
    file_env_.reset();
    TempDirTest::TearDown();
  }

  // A cache file with known numbers (no "host": valid on any machine).
  void write_cache(double flops, double bandwidth) {
    write_text(file_, "{\"version\": 2, \"cpu\": {\"flops_per_second\": " + std::to_string(flops) +
                          ", \"memory_bandwidth\": " + std::to_string(bandwidth) +
                          ", \"kernel_overhead_seconds\": 2e-6}}");
  }

  fs::path file_;
  ScopedEnv calibrate_{"TESSERA_CALIBRATE", std::nullopt};
  ScopedEnv flops_{"TESSERA_CPU_FLOPS", std::nullopt};
  ScopedEnv bandwidth_{"TESSERA_CPU_MEMORY_BANDWIDTH", std::nullopt};
  std::optional<ScopedEnv> file_env_;
};

TEST_F(CalibrationTest, CacheFileIsReadInsteadOfMeasuring) {
  write_cache(1.25e9, 3.5e9);
  const std::string before = read_text(file_);
  DeviceCostProfile p = calibrate_cpu_profile();
  EXPECT_DOUBLE_EQ(p.flops_per_second, 1.25e9);
  EXPECT_DOUBLE_EQ(p.memory_bandwidth, 3.5e9);
  EXPECT_DOUBLE_EQ(p.kernel_overhead_seconds, 2e-6);
  EXPECT_EQ(p.transfer_bandwidth, 0.0);  // host memory: no transfers
  EXPECT_EQ(read_text(file_), before);   // reused, not rewritten
}

TEST_F(CalibrationTest, MissingCacheIsMeasuredThenWrittenAndReused) {
  file_env_.reset();
  const fs::path nested = dir_ / "a" / "b" / "calibration.json";  // folders created on write
  ScopedEnv env("TESSERA_CALIBRATION_FILE", nested.string());
  const auto t0 = std::chrono::steady_clock::now();
  DeviceCostProfile measured = calibrate_cpu_profile();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(measured.flops_per_second, 1e8);
  EXPECT_GT(measured.memory_bandwidth, 1e8);
  EXPECT_EQ(measured.kernel_overhead_seconds, kCpuCostProfile.kernel_overhead_seconds);
  EXPECT_LT(seconds, 5.0);  // meant to be well under 0.1 s; generous for loaded CI machines
  ASSERT_TRUE(fs::exists(nested));
  auto cached = read_calibration_file(nested.string());
  ASSERT_TRUE(cached.has_value());
  EXPECT_DOUBLE_EQ(cached->flops_per_second, measured.flops_per_second);
  EXPECT_DOUBLE_EQ(cached->memory_bandwidth, measured.memory_bandwidth);
  // The second calibration reads the file: the same numbers exactly.
  DeviceCostProfile again = calibrate_cpu_profile();
  EXPECT_DOUBLE_EQ(again.flops_per_second, measured.flops_per_second);
  EXPECT_DOUBLE_EQ(again.memory_bandwidth, measured.memory_bandwidth);
}

TEST_F(CalibrationTest, EnvironmentOverridesReplaceCachedValues) {
  write_cache(1.25e9, 3.5e9);
  {
    ScopedEnv flops("TESSERA_CPU_FLOPS", "7e10");
    DeviceCostProfile p = calibrate_cpu_profile();
    EXPECT_DOUBLE_EQ(p.flops_per_second, 7e10);
    EXPECT_DOUBLE_EQ(p.memory_bandwidth, 3.5e9);
  }
  {
    ScopedEnv bandwidth("TESSERA_CPU_MEMORY_BANDWIDTH", "4.5e10");
    DeviceCostProfile p = calibrate_cpu_profile();
    EXPECT_DOUBLE_EQ(p.flops_per_second, 1.25e9);
    EXPECT_DOUBLE_EQ(p.memory_bandwidth, 4.5e10);
  }
}

TEST_F(CalibrationTest, MalformedOverridesAreIgnored) {
  write_cache(1.25e9, 3.5e9);
  for (const char* bad : {"fast", "-5e9", "0", "1e9x", "inf"}) {
    ScopedEnv flops("TESSERA_CPU_FLOPS", bad);
    EXPECT_DOUBLE_EQ(calibrate_cpu_profile().flops_per_second, 1.25e9) << bad;
  }
}

TEST_F(CalibrationTest, CalibrateZeroUsesTheDocumentedDefaults) {
  write_cache(1.25e9, 3.5e9);  // not even read
  ScopedEnv off("TESSERA_CALIBRATE", "0");
  DeviceCostProfile p = calibrate_cpu_profile();
  EXPECT_EQ(p.flops_per_second, kCpuCostProfile.flops_per_second);
  EXPECT_EQ(p.memory_bandwidth, kCpuCostProfile.memory_bandwidth);
  EXPECT_EQ(p.kernel_overhead_seconds, kCpuCostProfile.kernel_overhead_seconds);
  ScopedEnv bandwidth("TESSERA_CPU_MEMORY_BANDWIDTH", "5e9");  // overrides still apply
  EXPECT_EQ(calibrate_cpu_profile().memory_bandwidth, 5e9);
}

TEST_F(CalibrationTest, CorruptCacheIsIgnoredAndReplaced) {
  for (const std::string& corrupt :
       {std::string("{\"version\": 1, \"cpu\": {\"flops"), std::string("not json at all"), std::string(""),
        std::string("[1, 2, 3]"), std::string("{\"version\": 1, \"cpu\": {\"flops_per_second\": \"fast\"}}"),
        std::string("{\"version\": 1, \"cpu\": {\"flops_per_second\": -1, \"memory_bandwidth\": 1e9}}"),
        std::string("{\"version\": 99, \"cpu\": {\"flops_per_second\": 1e9, \"memory_bandwidth\": 1e9}}")}) {
    write_text(file_, corrupt);
    EXPECT_FALSE(read_calibration_file(file_.string()).has_value()) << corrupt;
    DeviceCostProfile p = calibrate_cpu_profile();
    EXPECT_GT(p.flops_per_second, 1e8) << corrupt;
    EXPECT_GT(p.memory_bandwidth, 1e8) << corrupt;
    auto rewritten = read_calibration_file(file_.string());
    ASSERT_TRUE(rewritten.has_value()) << corrupt;
    EXPECT_DOUBLE_EQ(rewritten->flops_per_second, p.flops_per_second);
  }
}

TEST_F(CalibrationTest, CacheFromAnotherHostIsMeasuredAgain) {
  write_text(file_, "{\"version\": 1, \"host\": \"some-other-machine-\\u0001\", \"cpu\": "
                    "{\"flops_per_second\": 1.25e9, \"memory_bandwidth\": 3.5e9}}");
  EXPECT_FALSE(read_calibration_file(file_.string()).has_value());
  // What this machine writes carries its own host name and is read back.
  ASSERT_TRUE(write_calibration_file(file_.string(), kCpuCostProfile));
  EXPECT_NE(read_text(file_).find("\"host\""), std::string::npos);
  auto back = read_calibration_file(file_.string());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->flops_per_second, kCpuCostProfile.flops_per_second);
}

TEST_F(CalibrationTest, UnwritableCacheDoesNotFail) {
  file_env_.reset();
  // A path under a regular file cannot be created.
  write_text(dir_ / "plain_file", "x");
  const fs::path impossible = dir_ / "plain_file" / "calibration.json";
  ScopedEnv env("TESSERA_CALIBRATION_FILE", impossible.string());
  EXPECT_FALSE(write_calibration_file(impossible.string(), kCpuCostProfile));
  DeviceCostProfile p = calibrate_cpu_profile();
  EXPECT_GT(p.flops_per_second, 1e8);
  EXPECT_GT(p.memory_bandwidth, 1e8);
}

TEST_F(CalibrationTest, PathFromTheEnvironment) {
  EXPECT_EQ(calibration_file_path(), file_.string());
  file_env_.reset();
  ScopedEnv no_file("TESSERA_CALIBRATION_FILE", std::nullopt);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    EXPECT_EQ(calibration_file_path(), "/x/cache/tessera/calibration.json");
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", "/home/someone");
  EXPECT_EQ(calibration_file_path(), "/home/someone/.cache/tessera/calibration.json");
}

TEST_F(CalibrationTest, TheCpuDeviceUsesTheProcessProfile) {
  write_cache(1.25e9, 3.5e9);
  // The process computes its profile once (on the first call anywhere in this process).
  const DeviceCostProfile first = calibrated_cpu_profile();
  EXPECT_GT(first.flops_per_second, 0);
  write_cache(9e9, 9e9);
  EXPECT_EQ(calibrated_cpu_profile().flops_per_second, first.flops_per_second);
  CpuDevice cpu(7);
  EXPECT_EQ(cpu.cost_profile().flops_per_second, first.flops_per_second);
  EXPECT_EQ(cpu.cost_profile().memory_bandwidth, first.memory_bandwidth);
}

// ---- GPUs: calibrate_gpu_profile with a stand-in measurement (the real one needs a GPU) ----

DeviceCostProfile gpu_defaults() { return DeviceCostProfile{5e13, 3e12, 2e10, 15e-6, 8e-6}; }

TEST_F(CalibrationTest, AGpuIsMeasuredOnceThenReadFromItsOwnCacheFile) {
  int measured = 0;
  auto measure = [&] {
    ++measured;
    return DeviceCostProfile{4.8e13, 3.9e12, 4.2e10, 22e-6, 8e-6};
  };
  const DeviceCostProfile first = calibrate_gpu_profile(0, "NVIDIA H200", gpu_defaults(), measure);
  EXPECT_EQ(measured, 1);
  EXPECT_DOUBLE_EQ(first.flops_per_second, 4.8e13);
  EXPECT_DOUBLE_EQ(first.transfer_bandwidth, 4.2e10);
  EXPECT_DOUBLE_EQ(first.transfer_latency_seconds, 22e-6);
  EXPECT_EQ(gpu_calibration_file_path(0), (dir_ / "calibration.gpu0.json").string());
  EXPECT_TRUE(fs::exists(dir_ / "calibration.gpu0.json"));
  EXPECT_FALSE(fs::exists(file_));  // the CPU's cache is not touched
  const DeviceCostProfile again = calibrate_gpu_profile(0, "NVIDIA H200", gpu_defaults(), measure);
  EXPECT_EQ(measured, 1);
  EXPECT_DOUBLE_EQ(again.memory_bandwidth, 3.9e12);
  EXPECT_DOUBLE_EQ(again.transfer_latency_seconds, 22e-6);
  // Another GPU in that slot, or another slot: measured again.
  calibrate_gpu_profile(0, "NVIDIA H100", gpu_defaults(), measure);
  EXPECT_EQ(measured, 2);
  calibrate_gpu_profile(1, "NVIDIA H200", gpu_defaults(), measure);
  EXPECT_EQ(measured, 3);
}

TEST_F(CalibrationTest, AGpuMeasurementThatFailsKeepsTheDefaultsOfThoseFields) {
  const DeviceCostProfile p = calibrate_gpu_profile(
      0, "gpu", gpu_defaults(), [] { return DeviceCostProfile{6e13, 0, -1, 2e-5, 8e-6}; });
  EXPECT_DOUBLE_EQ(p.flops_per_second, 6e13);
  EXPECT_DOUBLE_EQ(p.memory_bandwidth, 3e12);
  EXPECT_DOUBLE_EQ(p.transfer_bandwidth, 2e10);
  EXPECT_DOUBLE_EQ(p.transfer_latency_seconds, 2e-5);
}

TEST_F(CalibrationTest, AGpuCacheOfAnotherHostOrCorruptIsMeasuredAgain) {
  int measured = 0;
  auto measure = [&] {
    ++measured;
    return gpu_defaults();
  };
  const fs::path gpu_file = dir_ / "calibration.gpu0.json";
  write_text(gpu_file, R"({"version": 2, "host": "elsewhere", "gpu": {"name": "g", "flops_per_second": 1,
    "memory_bandwidth": 1, "transfer_bandwidth": 1, "transfer_latency_seconds": 1, "kernel_overhead_seconds": 1}})");
  calibrate_gpu_profile(0, "g", gpu_defaults(), measure);
  EXPECT_EQ(measured, 1);
  // A cache of the format before launch overheads were measured: measured again.
  const std::string fresh = read_text(gpu_file);
  std::string old_format = fresh;
  const auto at = old_format.find("\"version\": 2");
  ASSERT_NE(at, std::string::npos) << fresh;
  old_format.replace(at, std::string("\"version\": 2").size(), "\"version\": 1");
  write_text(gpu_file, old_format);
  calibrate_gpu_profile(0, "g", gpu_defaults(), measure);
  EXPECT_EQ(measured, 2);
  measured = 1;
  write_text(gpu_file, "{not json");
  calibrate_gpu_profile(0, "g", gpu_defaults(), measure);
  EXPECT_EQ(measured, 2);
  calibrate_gpu_profile(0, "g", gpu_defaults(), measure);  // the rewritten cache serves
  EXPECT_EQ(measured, 2);
}

TEST_F(CalibrationTest, AGpuWithoutCalibrationKeepsItsDefaultsAndTakesOverrides) {
  ScopedEnv off("TESSERA_CALIBRATE", "0");
  ScopedEnv flops("TESSERA_GPU_FLOPS", "1e14");
  ScopedEnv latency("TESSERA_GPU_TRANSFER_LATENCY", "3e-5");
  ScopedEnv bad("TESSERA_GPU_TRANSFER_BANDWIDTH", "fast");
  bool measured = false;
  const DeviceCostProfile p = calibrate_gpu_profile(0, "g", gpu_defaults(), [&] {
    measured = true;
    return gpu_defaults();
  });
  EXPECT_FALSE(measured);
  EXPECT_DOUBLE_EQ(p.flops_per_second, 1e14);
  EXPECT_DOUBLE_EQ(p.transfer_latency_seconds, 3e-5);
  EXPECT_DOUBLE_EQ(p.transfer_bandwidth, 2e10);  // a malformed override is ignored
  EXPECT_DOUBLE_EQ(p.memory_bandwidth, 3e12);
  EXPECT_FALSE(fs::exists(dir_ / "calibration.gpu0.json"));
}

}  // namespace
}  // namespace tessera::internal
