// The CPU device: host memory and the core runtime's inter-op thread pool.
//
//   Device* cpu = DeviceRegistry::global().find("/device:CPU:0").value();
//   cpu->compute_stream().enqueue([] { ... });   // runs on ThreadPool::shared(), in order
//
// The CPU's DeviceFactory (core/device_factory.h) makes /device:CPU:0, first of the process's devices.
#pragma once

#include <memory>

#include "core/device.h"

namespace tessera::internal {

// A stream of the CPU device: its runs go to ThreadPool::shared(), one at a time, and park
// instead of blocking a pool thread when they reach a wait on an incomplete event (Note [Devices
// and streams] in core/stream.cc). The destructor drains. Thread-safe.
class CpuStream final : public QueuedStream {
 public:
  explicit CpuStream(std::string name) : QueuedStream(std::move(name)) {}
  ~CpuStream() override { shutdown(); }

 protected:
  void schedule_run() override;
};

// Host memory is device memory, so copies hand back the same buffer (no copy), in stream order.
// The cost profile is documented defaults (see kCpuCostProfile in cpu_device.cc), not measured.
// Thread-safe.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int id = 0);
  ~CpuDevice() override;

  Allocator& allocator() override { return allocator_; }
  const DeviceCostProfile& cost_profile() const override;
  int64_t memory_limit_bytes() const override;  // the machine's physical memory
  std::string description() const override;     // "host CPU, N hardware threads"
  int num_compute_streams() const override { return 1; }
  Stream& compute_stream(int index = 0) override;
  Stream& host_to_device_stream() override { return *h2d_; }
  Stream& device_to_host_stream() override { return *d2h_; }
  void copy_to_device(const Tensor& host, Stream& stream,
                      std::function<void(StatusOr<Tensor>)> done) override;
  void copy_to_host(const Tensor& on_device, Stream& stream,
                    std::function<void(StatusOr<Tensor>)> done) override;

 private:
  HostMemoryAllocator allocator_;
  std::unique_ptr<CpuStream> compute_;
  std::unique_ptr<CpuStream> h2d_;
  std::unique_ptr<CpuStream> d2h_;
};

// Registers a CpuDevice as /device:CPU:0 in `registry` (the global one does this by itself).
[[nodiscard]] Status register_cpu_device(DeviceRegistry& registry);

}  // namespace tessera::internal
