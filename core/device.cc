#include "core/device.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/logging.h"
#include "core/op_registry.h"

namespace tessera::internal {

// The model of devices and their streams is Note [Devices and streams] in core/stream.cc.

// ----- DeviceCostProfile -----

double DeviceCostProfile::transfer_seconds(std::size_t bytes) const {
  double t = transfer_latency_seconds;
  if (transfer_bandwidth > 0) t += static_cast<double>(bytes) / transfer_bandwidth;
  return t;
}

double DeviceCostProfile::compute_seconds(double flops) const {
  return flops_per_second > 0 ? flops / flops_per_second : 0.0;
}

double DeviceCostProfile::kernel_seconds(double flops, double bytes) const {
  const double memory = memory_bandwidth > 0 ? bytes / memory_bandwidth : 0.0;
  return kernel_overhead_seconds + std::max(compute_seconds(flops), memory);
}

// ----- Device -----

Device::Device(std::string type, int id)
    : type_(std::move(type)),
      id_(id),
      name_("/job:localhost/replica:0/task:0/device:" + type_ + ":" + std::to_string(id)) {
  auto parsed = DeviceSpec::parse(name_);
  TESSERA_CHECK(parsed.ok());
  spec_ = parsed.value();
}

bool Device::has_kernel(const std::string& op_type) const {
  return OpRegistry::global().has_kernel(op_type, type_);
}

namespace {
// The stream an allocation is for: nullptr means compute stream 0, where every kernel runs.
Stream* stream_tag(Device& device, Stream* stream) { return stream != nullptr ? stream : &device.compute_stream(0); }
}  // namespace

void Device::record_stream(const Tensor& t, Stream& stream) {
  if (t.is_null() || t.device() != name_) return;
  allocator().record_stream(const_cast<void*>(t.raw_data()), stream_tag(*this, &stream));
}

StatusOr<Tensor> Device::allocate_tensor(DType dtype, const Shape& shape, Stream* stream) {
  return allocator().allocate_tensor(dtype, shape, name_, stream_tag(*this, stream));
}

void Device::mark_failed(const Status& reason) {
  std::lock_guard<std::mutex> l(failure_mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  failure_ = reason.ok() ? errors::internal("{} failed", name_) : reason;
  failed_.store(true, std::memory_order_release);
  TESSERA_LOG(kError, "{} is marked failed: {}", name_, failure_.to_string());
}

Status Device::fail_after(const std::string& op, const Status& error) {
  Status reason = error.with_prefix(fmt::format("{}, after {}: ", name_, op));
  mark_failed(reason);
  return reason;
}

Status Device::health() const {
  if (!failed_.load(std::memory_order_acquire)) return Status();
  std::lock_guard<std::mutex> l(failure_mu_);
  return failure_;
}

// ----- DeviceRegistry -----

DeviceRegistry::~DeviceRegistry() {
  std::vector<std::unique_ptr<Device>> devices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices.swap(devices_);
  }
  // Without the lock: draining work may look devices up.
  while (!devices.empty()) devices.pop_back();
}

DeviceRegistry& DeviceRegistry::global() {
  // Leaked on purpose: device threads may still run work while static destructors do.
  static DeviceRegistry* registry = new DeviceRegistry();
  return *registry;
}

Status DeviceRegistry::add(std::unique_ptr<Device> device) {
  TESSERA_CHECK(device != nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& d : devices_) {
    if (d->name() == device->name()) return errors::already_exists("device {} is already registered", d->name());
  }
  devices_.push_back(std::move(device));
  return Status::ok_status();
}

std::vector<Device*> DeviceRegistry::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

StatusOr<std::vector<Device*>> DeviceRegistry::find_all(const std::string& spec) const {
  auto parsed = DeviceSpec::parse(spec);
  if (!parsed.ok()) return parsed.status();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Device*> out;
  for (const auto& d : devices_) {
    if (parsed.value().matches(d->spec())) out.push_back(d.get());
  }
  return out;
}

StatusOr<Device*> DeviceRegistry::find(const std::string& spec) const {
  auto all = find_all(spec);
  if (!all.ok()) return all.status();
  if (all.value().empty()) {
    std::string known;
    for (Device* d : devices()) known += (known.empty() ? "" : ", ") + d->name();
    return errors::not_found("no device matches '{}' (devices: {})", spec, known.empty() ? "none" : known);
  }
  return all.value().front();
}

}  // namespace tessera::internal
