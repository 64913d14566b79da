// The devices a process has besides its CPU, registered once in DeviceRegistry::global() before
// the first session places anything:
//   - TESSERA_SIM_ACCELERATORS=N simulated accelerators /device:SIM:0..N-1;
//   - in a CUDA build, every usable GPU as /device:GPU:i (none, with one log line, when the
//     machine has no GPU or no driver).
#pragma once

#include "core/status.h"

namespace tessera::internal {

// Idempotent and thread-safe: the first call registers, later calls return its status (an
// InvalidArgument for a malformed TESSERA_SIM_ACCELERATORS).
Status register_default_devices();

}  // namespace tessera::internal
