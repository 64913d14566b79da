// The CUDA backend's registration: every usable GPU becomes /device:GPU:<ordinal>, with its cost
// profile calibrated once per machine (core/calibration.h), through the GPU DeviceFactory.
#include <cstdio>
#include <mutex>
#include <string>

#include <cuda_runtime.h>

#include "core/calibration.h"
#include "core/device_factory.h"
#include "device/cuda/cuda_device.h"

namespace tessera::internal {

namespace {

void log_no_gpu(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    TESSERA_LOG(kWarning, "CUDA build, but no GPU is usable ({}): running on the CPU", why);
  });
}

// Every usable GPU, in ordinal order (none, with one log line, without a GPU or a driver).
StatusOr<std::vector<std::unique_ptr<CudaDevice>>> create_cuda_devices(const CudaDeviceOptions& options) {
  std::vector<std::unique_ptr<CudaDevice>> out;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    log_no_gpu(e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device is visible");
    return out;
  }
  std::string last_error;
  for (int i = 0; i < count; ++i) {
    auto device = CudaDevice::create(i, options);
    if (!device.ok()) {
      last_error = device.status().message();
      TESSERA_LOG(kWarning, "GPU {} is not usable ({}): skipped", i, last_error);
      continue;
    }
    out.push_back(std::move(device).value());
  }
  if (out.empty()) log_no_gpu(last_error);
  return out;
}

// The GPUs of this machine, each with its calibrated cost profile.
class CudaDeviceFactory final : public DeviceFactory {
 public:
  Status create_devices(std::vector<std::unique_ptr<Device>>* devices) override {
    try {
      auto gpus = create_cuda_devices(CudaDeviceOptions{});
      if (!gpus.ok()) return gpus.status();
      for (auto& gpu : gpus.value()) {
        CudaDevice* raw = gpu.get();
        raw->set_cost_profile(calibrate_gpu_profile(raw->ordinal(), raw->gpu_name(), raw->cost_profile(),
                                                    [raw] { return raw->measure_cost_profile(); }));
        devices->push_back(std::move(gpu));
      }
      return Status::ok_status();
    } catch (...) {
      return status_from_current_exception();
    }
  }
};
TESSERA_REGISTER_DEVICE_FACTORY("GPU", 200, CudaDeviceFactory);

}  // namespace

StatusOr<int> register_cuda_devices(DeviceRegistry& registry, CudaDeviceOptions options) {
  try {
    auto gpus = create_cuda_devices(options);
    if (!gpus.ok()) return gpus.status();
    for (const auto& gpu : gpus.value()) {  // all or nothing
      auto existing = registry.find_all(gpu->name());
      if (existing.ok() && !existing.value().empty()) {
        return errors::already_exists("{} is already registered", existing.value().front()->name());
      }
    }
    int added = 0;
    for (auto& gpu : gpus.value()) {
      TESSERA_RETURN_IF_ERROR(registry.add(std::move(gpu)));
      ++added;
    }
    return added;
  } catch (...) {  // the CUDA runtime and Thrust report some failures by throwing
    return status_from_current_exception();
  }
}

}  // namespace tessera::internal
