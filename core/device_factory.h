// Device backends plug in here: each registers a DeviceFactory for its device type, and the
// process's devices are made from the factories the first time a session or server asks for them.
// Nothing outside a backend's own files names it (TensorFlow's DeviceFactory is the model).
//
//   class TpuFactory final : public DeviceFactory {
//    public:
//     Status create_devices(std::vector<std::unique_ptr<Device>>* out) override {
//       out->push_back(std::make_unique<TpuDevice>(0));
//       return Status::ok_status();
//     }
//   };
//   TESSERA_REGISTER_DEVICE_FACTORY("TPU", 300, TpuFactory);
//
//   StatusOr<std::vector<Device*>> devices = local_devices();   // CPU:0 first, then by priority
//
// The backends of this tree: CPU (priority 0, host/cpu_device.cc), SIM (100,
// device/sim_device.cc: TESSERA_SIM_ACCELERATORS=N), GPU (200, device/cuda/cuda_device_factory.cc,
// CUDA builds only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"

namespace tessera::internal {

// Makes the devices of one device type. Thread-compatible: create_devices runs once, under the
// factories' lock.
class DeviceFactory {
 public:
  virtual ~DeviceFactory() = default;
  // Appends this backend's devices to `devices` (none is fine: a CUDA build on a machine without
  // a GPU). An error fails every later add_devices() with the same status.
  [[nodiscard]] virtual Status create_devices(std::vector<std::unique_ptr<Device>>* devices) = 0;

  // Registers `factory` for devices of `type` ("CPU", "SIM", "GPU", ...). Factories run in
  // increasing `priority` (then registration order). A factory registered after the devices were
  // made runs at the next add_devices(). AlreadyExists when `type` has a factory. Thread-safe.
  [[nodiscard]] static Status register_factory(const std::string& type, int priority,
                                               std::unique_ptr<DeviceFactory> factory);
  // Runs every registered factory that has not run yet and adds its devices to `registry`
  // (registry.add: AlreadyExists for a name registered by hand before). Returns the first failure of
  // any factory, now or on an earlier call. Thread-safe; cheap once everything ran.
  [[nodiscard]] static Status add_devices(DeviceRegistry& registry);
  // The device types with a factory, in the order their factories run.
  static std::vector<std::string> registered_types();
};

// The devices of this process (DeviceRegistry::global() after add_devices), the host CPU first.
StatusOr<std::vector<Device*>> local_devices();

struct DeviceFactoryRegistrar {
  DeviceFactoryRegistrar(const std::string& type, int priority, std::unique_ptr<DeviceFactory> factory);
};

// At static initialization: registers a default-constructed `Class` for device type `type`.
#define TESSERA_REGISTER_DEVICE_FACTORY(type, priority, Class)                                              \
  static ::tessera::internal::DeviceFactoryRegistrar TESSERA_DEVICE_FACTORY_CONCAT(tessera_device_factory_, \
                                                                                   __COUNTER__)(            \
      type, priority, std::make_unique<Class>())
#define TESSERA_DEVICE_FACTORY_CONCAT_INNER(a, b) a##b
#define TESSERA_DEVICE_FACTORY_CONCAT(a, b) TESSERA_DEVICE_FACTORY_CONCAT_INNER(a, b)

}  // namespace tessera::internal
