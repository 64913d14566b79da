// The public view of this process's devices (include/tessera/device.h).
#include "core/device.h"
#include "core/device_factory.h"
#include "tessera/device.h"

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera {

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  for (const internal::Device* d : internal::local_devices().value_or_raise()) {
    DeviceInfo info;
    info.name = d->name();
    info.type = d->type();
    info.memory_bytes = d->memory_limit_bytes();
    info.description = d->description();
    info.flops_per_second = d->cost_profile().flops_per_second;
    info.transfer_bandwidth = d->cost_profile().transfer_bandwidth;
    info.transfer_latency_seconds = d->cost_profile().transfer_latency_seconds;
    out.push_back(std::move(info));
  }
  return out;
}

MemoryStats memory_stats(const std::string& device) {
  internal::local_devices().status().raise();
  internal::Device* d = internal::DeviceRegistry::global().find(device).value_or_raise();
  const internal::AllocatorStats stats = d->allocator().stats();
  MemoryStats out;
  out.in_use_bytes = stats.bytes_in_use;
  out.peak_bytes = stats.peak_bytes_in_use;
  out.reserved_bytes = d->allocator().bytes_reserved();
  out.limit_bytes = stats.limit_bytes > 0 ? stats.limit_bytes : d->memory_limit_bytes();
  return out;
}

void set_memory_limit(const std::string& device, int64_t bytes) {
  if (bytes < 0) throw InvalidArgumentError(fmt::format("set_memory_limit({}): bytes must be >= 0, got {}", device, bytes));
  internal::local_devices().status().raise();
  internal::Device* d = internal::DeviceRegistry::global().find(device).value_or_raise();
  d->allocator().set_limit(bytes);
}

}  // namespace tessera
