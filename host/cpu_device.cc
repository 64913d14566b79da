#include "host/cpu_device.h"

#include "host/thread_pool.h"

namespace tessera::internal {

namespace {

// Documented defaults for one socket of a current server core complex, used by placement to
// compare devices (only ratios matter): ~50 GFLOP/s of sustained float arithmetic across the
// inter-op pool, ~20 GB/s of memory bandwidth, and free "transfers" (host memory is the host's).
constexpr DeviceCostProfile kCpuCostProfile{
    /*flops_per_second=*/50e9,
    /*memory_bandwidth=*/20e9,
    /*transfer_bandwidth=*/0,
    /*transfer_latency_seconds=*/0,
    /*kernel_overhead_seconds=*/1e-6,
};

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

const DeviceCostProfile& CpuDevice::cost_profile() const { return kCpuCostProfile; }

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

Status register_cpu_device(DeviceRegistry& registry) { return registry.add(std::make_unique<CpuDevice>(0)); }

namespace {
[[maybe_unused]] const bool kCpuRegistered = [] {
  Status s = register_cpu_device(DeviceRegistry::global());
  TESSERA_CHECK(s.ok());
  return true;
}();
}  // namespace

}  // namespace tessera::internal
