#include "host/cpu_device.h"

#include <unistd.h>

#include <thread>

#include <fmt/format.h>

#include "core/calibration.h"
#include "core/device_factory.h"
#include "core/thread_pool.h"

namespace tessera::internal {

namespace {

// Same buffer, delivered in stream order through the completion path.
void hand_over(const Tensor& t, Stream& stream, std::function<void(StatusOr<Tensor>)> done) {
  if (t.is_null()) {
    done(errors::invalid_argument("cannot copy a null tensor"));
    return;
  }
  stream.then([t, done = std::move(done)](Status s) {
    if (s.ok()) {
      done(t);
    } else {
      done(s);
    }
  });
}

}  // namespace

void CpuStream::schedule_run() {
  ThreadPool::shared().schedule([this] { run_pending(); });
}

CpuDevice::CpuDevice(int id)
    : Device("CPU", id),
      allocator_("cpu"),
      compute_(std::make_unique<CpuStream>(name() + "/stream:compute:0")),
      h2d_(std::make_unique<CpuStream>(name() + "/stream:host_to_device")),
      d2h_(std::make_unique<CpuStream>(name() + "/stream:device_to_host")) {}

CpuDevice::~CpuDevice() = default;  // the streams drain as they go

// Measured (or read from the cache) on first use, not at load: see core/calibration.h.
const DeviceCostProfile& CpuDevice::cost_profile() const {
  static const DeviceCostProfile profile = calibrated_cpu_profile();  // thread-safe, lazy
  return profile;
}

Stream& CpuDevice::compute_stream(int index) {
  TESSERA_CHECK(index == 0);
  return *compute_;
}

void CpuDevice::copy_to_device(const Tensor& host, Stream& stream,
                               std::function<void(StatusOr<Tensor>)> done) {
  hand_over(host, stream, std::move(done));
}

void CpuDevice::copy_to_host(const Tensor& on_device, Stream& stream,
                             std::function<void(StatusOr<Tensor>)> done) {
  hand_over(on_device, stream, std::move(done));
}

int64_t CpuDevice::memory_limit_bytes() const {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

std::string CpuDevice::description() const {
  return fmt::format("host CPU, {} hardware threads", std::thread::hardware_concurrency());
}

Status register_cpu_device(DeviceRegistry& registry) { return registry.add(std::make_unique<CpuDevice>(0)); }

namespace {
// /device:CPU:0, first of the process's devices.
class CpuDeviceFactory final : public DeviceFactory {
 public:
  Status create_devices(std::vector<std::unique_ptr<Device>>* devices) override {
    devices->push_back(std::make_unique<CpuDevice>(0));
    return Status::ok_status();
  }
};
TESSERA_REGISTER_DEVICE_FACTORY("CPU", 0, CpuDeviceFactory);
}  // namespace

}  // namespace tessera::internal
