#include "device/default_devices.h"

#include <mutex>
#include <vector>

#include "core/device.h"
#include "device/sim_device.h"
#include "host/calibration.h"
#include "tessera/config.h"
#if TESSERA_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace tessera::internal {

Status register_default_devices() {
  static std::once_flag once;
  static Status* status = new Status();  // leaked: read during static exit
  std::call_once(once, [] {
    DeviceRegistry& registry = DeviceRegistry::global();
    auto sims = register_sim_devices_from_env(registry);
    if (!sims.ok()) {
      *status = sims.status();
      return;
    }
#if TESSERA_WITH_CUDA
    auto gpus = register_cuda_devices(registry);
    if (!gpus.ok()) {
      *status = gpus.status();
      return;
    }
    // Each GPU's profile, measured once per machine and cached (host/calibration.h).
    auto found = registry.find_all("/device:GPU:*");
    for (Device* d : found.ok() ? found.value() : std::vector<Device*>{}) {
      if (auto* gpu = dynamic_cast<CudaDevice*>(d)) {
        gpu->set_cost_profile(calibrate_gpu_profile(gpu->ordinal(), gpu->gpu_name(), gpu->cost_profile(),
                                                    [gpu] { return gpu->measure_cost_profile(); }));
      }
    }
#endif
  });
  return *status;
}

}  // namespace tessera::internal
