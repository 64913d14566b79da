// A device's memory: Allocator keeps the statistics every device reports and wraps raw allocations
// into Tensors; subclasses provide the raw memory (host here, CUDA and pinned in device/).
//
//   HostMemoryAllocator alloc("sim_memory");
//   Tensor t = alloc.allocate_tensor(DType::Float32, Shape{2, 3}, "/device:SIM:0").value();
//   alloc.stats().bytes_in_use;                    // 24 until the last handle to t goes
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class Stream;

struct AllocatorStats {
  int64_t bytes_in_use = 0;        // requested bytes of live allocations
  int64_t peak_bytes_in_use = 0;   // high-water mark of bytes_in_use
  int64_t num_allocs = 0;          // allocations ever made
  int64_t live_allocs = 0;         // allocations not yet freed
  int64_t limit_bytes = 0;         // set_limit's cap (0: none)
};

// A device's memory. Subclasses provide raw allocation; this class keeps the statistics and wraps
// allocations into Tensors. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string name() const = 0;

  // `alignment` is a power of two (0 = Tensor::kAlignment). Zero bytes yield a valid, unique
  // pointer. ResourceExhausted when the memory is not there. `stream`: the stream whose work uses
  // the memory (Note [Stream-ordered memory] in device/sim_kernels.cc; Device::allocate_tensor
  // names the compute stream when its caller names none). Allocators of memory without streams
  // ignore it.
  StatusOr<void*> allocate(std::size_t bytes, std::size_t alignment = 0, Stream* stream = nullptr);
  // `bytes` must be the size passed to allocate().
  void deallocate(void* ptr, std::size_t bytes);
  // Work on `stream` uses the allocation at `ptr` besides the stream it was allocated for: once
  // freed, it is reused only after `stream` has passed the free. Nothing for memory without
  // streams.
  virtual void record_stream(void* ptr, Stream* stream) {
    (void)ptr;
    (void)stream;
  }
  AllocatorStats stats() const;
  // Bytes held from the system, in use or cached (a caching allocator holds more than it hands
  // out); `stats().bytes_in_use` for allocators that cache nothing.
  virtual int64_t bytes_reserved() const { return stats().bytes_in_use; }
  // A cap on bytes_in_use (0 = none, the default): an allocation that would pass it fails
  // ResourceExhausted as if the memory were not there. Lowering it below what is in use frees
  // nothing; later allocations fail until enough is freed.
  void set_limit(int64_t bytes);

  // An uninitialized tensor whose buffer comes from this allocator and is freed through it when
  // the last handle goes; Tensor::device() reports `device_name`. The allocator must outlive the
  // tensor. InvalidArgument for a partial shape; ResourceExhausted naming `device_name`, the bytes
  // asked for, in use, reserved and the limit when the memory is not there.
  StatusOr<Tensor> allocate_tensor(DType dtype, const Shape& shape, const std::string& device_name,
                                   Stream* stream = nullptr);

 protected:
  virtual void* raw_allocate(std::size_t bytes, std::size_t alignment) = 0;  // nullptr = no memory
  // For `stream`'s work; allocators with streams override it.
  virtual void* raw_allocate_for(std::size_t bytes, std::size_t alignment, Stream* stream) {
    (void)stream;
    return raw_allocate(bytes, alignment);
  }
  virtual void raw_deallocate(void* ptr, std::size_t bytes) = 0;

 private:
  // ResourceExhausted for `bytes` that could not be had, with the allocator's figures.
  Status out_of_memory(std::size_t bytes) const;

  mutable std::mutex mu_;
  AllocatorStats stats_;  // guarded by mu_
};

// Host memory through aligned_alloc: the CPU device's memory and the simulated accelerator's.
// Thread-safe.
class HostMemoryAllocator final : public Allocator {
 public:
  explicit HostMemoryAllocator(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

 protected:
  void* raw_allocate(std::size_t bytes, std::size_t alignment) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  const std::string name_;
};

}  // namespace tessera::internal
