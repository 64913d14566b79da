// The refcounted storage behind Tensor. Host buffers are one aligned allocation: this header in
// the first 64 bytes, the data after it. Other allocators (devices, pinned memory, received
// frames) set `release` to free their memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

namespace tessera::internal {

inline constexpr const char* kHostDeviceName = "/job:localhost/replica:0/task:0/device:CPU:0";

struct TensorBuffer {
  std::atomic<int> refs{1};
  void* data = nullptr;
  std::size_t bytes = 0;
  // Frees the buffer (including this header) when set; else std::free of the header.
  void (*release)(TensorBuffer*) = nullptr;
  // Name of the device holding the data; "" = host memory.
  std::string device;

  static TensorBuffer* allocate(std::size_t bytes);
};

}  // namespace tessera::internal
