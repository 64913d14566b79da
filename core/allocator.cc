#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "core/host_blocks.h"

namespace tessera::internal {

namespace {

// A tensor buffer whose data comes from an Allocator: `release` finds it through the header.
struct AllocatorBuffer : TensorBuffer {
  Allocator* allocator = nullptr;  // Not owned.
  std::size_t allocated = 0;
};

void release_allocator_buffer(TensorBuffer* b) {
  auto* ab = static_cast<AllocatorBuffer*>(b);
  ab->allocator->deallocate(ab->data, ab->allocated);
  delete ab;
}

}  // namespace

StatusOr<void*> Allocator::allocate(std::size_t bytes, std::size_t alignment, Stream* stream) {
  if (alignment == 0) alignment = Tensor::kAlignment;
  if ((alignment & (alignment - 1)) != 0) {
    return errors::invalid_argument("allocator {}: alignment {} is not a power of two", name(), alignment);
  }
  bool over_limit = false;
  {
    // The cap is checked, then the memory taken without the lock: allocations racing each other
    // may pass it together, by at most their own sizes.
    std::lock_guard<std::mutex> lock(mu_);
    over_limit = stats_.limit_bytes > 0 && stats_.bytes_in_use + static_cast<int64_t>(bytes) > stats_.limit_bytes;
  }
  if (over_limit) return out_of_memory(bytes);
  void* p = raw_allocate_for(bytes, alignment, stream);
  if (p == nullptr) return out_of_memory(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in_use += static_cast<int64_t>(bytes);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  ++stats_.num_allocs;
  ++stats_.live_allocs;
  return p;
}

void Allocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in_use -= static_cast<int64_t>(bytes);
  --stats_.live_allocs;
}

Status Allocator::out_of_memory(std::size_t bytes) const {
  const AllocatorStats now = stats();
  const int64_t reserved = bytes_reserved();
  const int64_t cap = now.limit_bytes;
  return errors::resource_exhausted("out of memory in {}: {} bytes asked for, {} in use, {} reserved, {}", name(),
                                    bytes, now.bytes_in_use, reserved,
                                    cap > 0 ? fmt::format("limit {}", cap) : std::string("no limit set"));
}

void Allocator::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.limit_bytes = bytes < 0 ? 0 : bytes;
}

AllocatorStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

StatusOr<Tensor> Allocator::allocate_tensor(DType dtype, const Shape& shape, const std::string& device_name,
                                            Stream* stream) {
  if (!shape.fully_defined()) {
    return errors::invalid_argument("cannot allocate a tensor of partial shape {} on {}",
                                    shape.to_string(), device_name);
  }
  if (dtype == DType::String) {  // its elements are constructed objects: Tensor(dtype, shape) on the host
    return errors::invalid_argument("cannot allocate a string tensor on {}: strings live in host memory only",
                                    device_name);
  }
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  auto mem = allocate(bytes, Tensor::kAlignment, stream);
  if (!mem.ok()) return mem.status().with_prefix(fmt::format("{}: ", device_name));
  auto* b = new AllocatorBuffer();
  b->data = mem.value();
  b->bytes = bytes;
  b->release = &release_allocator_buffer;
  b->device = device_name;
  b->allocator = this;
  b->allocated = bytes;
  return adopt_buffer(b, dtype, shape);
}

void* HostMemoryAllocator::raw_allocate(std::size_t bytes, std::size_t alignment) {
  // Large blocks come from the cache of mapped, 2 MiB aligned pages: Note [Large host blocks].
  // (No caller asks for more than Tensor::kAlignment; a larger request than blocks guarantee fails.)
  if (bytes >= kLargeHostBlockMin) return alignment <= kHostBlockAlignment ? allocate_host_block(bytes) : nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment; zero bytes still get a block so
  // that every allocation is a distinct pointer.
  std::size_t rounded = ((bytes + alignment - 1) / alignment) * alignment;
  if (rounded == 0) rounded = alignment;
  return std::aligned_alloc(alignment, rounded);
}

void HostMemoryAllocator::raw_deallocate(void* ptr, std::size_t bytes) {
  if (bytes >= kLargeHostBlockMin) {
    free_host_block(ptr, bytes);
  } else {
    std::free(ptr);
  }
}

}  // namespace tessera::internal
