// The simulated accelerator of a test program: /device:SIM:0 of the process's registry, registered
// on first use (before any session places an op, when called from a test environment's SetUp).
//
//   const auto* const kSim = ::testing::AddGlobalTestEnvironment(new tessera::testing::SimEnvironment);
#pragma once

#include <gtest/gtest.h>

#include "core/device.h"
#include "device/sim_device.h"

namespace tessera::testing {

inline internal::SimDevice* sim_device() {
  static internal::SimDevice* device = [] {
    auto& registry = internal::DeviceRegistry::global();
    auto existing = registry.find_all("/device:SIM:*");
    if (!existing.ok() || existing.value().empty()) internal::register_sim_devices(1, registry).raise();
    return dynamic_cast<internal::SimDevice*>(registry.find("/device:SIM:0").value_or_raise());
  }();
  return device;
}

// Registers the SIM device before the program's first test.
class SimEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_NE(sim_device(), nullptr); }
};

}  // namespace tessera::testing
