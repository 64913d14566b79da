#include "core/device_factory.h"

#include <algorithm>
#include <mutex>

#include "core/tensor_buffer.h"

namespace tessera::internal {

namespace {

struct Entry {
  std::string type;
  int priority = 0;
  std::unique_ptr<DeviceFactory> factory;
  bool ran = false;
};

// The registered factories, in the order they run. Leaked on purpose: registrations happen during
// static initialization, and sessions may make devices while static destructors run.
struct Factories {
  std::mutex mu;
  std::vector<Entry> entries;  // guarded by mu; sorted by priority, stable
  Status failure;              // guarded by mu: the first factory error, sticky
};

Factories& factories() {
  static Factories* f = new Factories();
  return *f;
}

}  // namespace

Status DeviceFactory::register_factory(const std::string& type, int priority, std::unique_ptr<DeviceFactory> factory) {
  if (factory == nullptr) return errors::invalid_argument("device factory for '{}' is null", type);
  if (type.empty()) return errors::invalid_argument("a device factory needs a device type");
  Factories& f = factories();
  std::lock_guard<std::mutex> l(f.mu);
  for (const Entry& e : f.entries) {
    if (e.type == type) return errors::already_exists("a device factory for type '{}' is already registered", type);
  }
  auto at = std::upper_bound(f.entries.begin(), f.entries.end(), priority,
                             [](int p, const Entry& e) { return p < e.priority; });
  f.entries.insert(at, Entry{type, priority, std::move(factory), false});
  return Status::ok_status();
}

Status DeviceFactory::add_devices(DeviceRegistry& registry) {
  Factories& f = factories();
  std::lock_guard<std::mutex> l(f.mu);
  for (Entry& e : f.entries) {
    if (e.ran || !f.failure.ok()) continue;
    e.ran = true;
    std::vector<std::unique_ptr<Device>> made;
    Status st = e.factory->create_devices(&made);
    for (auto& d : made) {
      if (!st.ok()) break;
      st = registry.add(std::move(d));
    }
    if (!st.ok()) f.failure = st;
  }
  return f.failure;
}

std::vector<std::string> DeviceFactory::registered_types() {
  Factories& f = factories();
  std::lock_guard<std::mutex> l(f.mu);
  std::vector<std::string> out;
  for (const Entry& e : f.entries) out.push_back(e.type);
  return out;
}

StatusOr<std::vector<Device*>> local_devices() {
  DeviceRegistry& registry = DeviceRegistry::global();
  TESSERA_RETURN_IF_ERROR(DeviceFactory::add_devices(registry));
  std::vector<Device*> devices = registry.devices();
  auto host = std::find_if(devices.begin(), devices.end(), [](Device* d) { return d->name() == kHostDeviceName; });
  if (host == devices.end()) return errors::internal("no device {} among this process's devices", kHostDeviceName);
  std::rotate(devices.begin(), host, host + 1);
  return devices;
}

DeviceFactoryRegistrar::DeviceFactoryRegistrar(const std::string& type, int priority,
                                               std::unique_ptr<DeviceFactory> factory) {
  Status st = DeviceFactory::register_factory(type, priority, std::move(factory));
  TESSERA_CHECK(st.ok());
}

}  // namespace tessera::internal
