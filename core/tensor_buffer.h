// Internal names around TensorBuffer (defined in tessera/tensor.h so handle copies inline).
#pragma once

#include "tessera/tensor.h"

namespace tessera::internal {

inline constexpr const char* kHostDeviceName = "/job:localhost/replica:0/task:0/device:CPU:0";

// A tensor over `t`'s memory that does not keep it alive: stream work runs on views, so its
// memory goes back to the device allocator when the last real handle goes, and stream order alone
// keeps the memory valid until the work has run (Note [Stream-ordered memory] in
// device/sim_kernels.cc). Same dtype, shape and device. Null for a null tensor.
Tensor unowned_view(const Tensor& t);

// Page-locks the memory of host tensor `t` for a device copy, when it is in a large host block
// (a MiB and more; Note [Pinned host blocks] in core/host_blocks.cc). True when its bytes are
// pinned on return (now or before): a device copies them directly, without staging.
bool pin_host_tensor(const Tensor& t);

}  // namespace tessera::internal
