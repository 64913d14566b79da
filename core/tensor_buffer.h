// Internal names around TensorBuffer (defined in tessera/tensor.h so handle copies inline).
#pragma once

#include "tessera/tensor.h"

namespace tessera::internal {

inline constexpr const char* kHostDeviceName = "/job:localhost/replica:0/task:0/device:CPU:0";

}  // namespace tessera::internal
