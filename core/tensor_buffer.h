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

// Copies n elements of src, from element src_index on, over dst's from dst_index on (same dtype,
// host memory, distinct buffers or disjoint ranges): the bytes, or for strings std::string copies.
// Every copy of tensor elements on the host goes through this (a memcpy of strings would alias
// their heap memory).
void copy_elements(Tensor& dst, int64_t dst_index, const Tensor& src, int64_t src_index, int64_t n);

// Page-locks the memory of host tensor `t` for a device copy, when it is in a large host block
// (a MiB and more; Note [Pinned host blocks] in core/host_blocks.cc). True when its bytes are
// pinned on return (now or before): a device copies them directly, without staging.
bool pin_host_tensor(const Tensor& t);

}  // namespace tessera::internal
