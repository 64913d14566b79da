#include "device/caching_allocator.h"

#include <algorithm>
#include <cstdlib>

#include "core/logging.h"

namespace tessera::internal {

// Note [Caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Device allocation calls (cudaMalloc, cudaFree) are slow and cudaFree synchronizes the whole
// device, so device memory is taken from the backing in large regions and handed out as chunks:
//
// * Regions are round_up(size, region_granularity) bytes (2 MiB by default), so many small
//   tensors share one region and a large one gets a region of its own size.
// * A region is a list of chunks by address. Allocation takes the smallest free chunk that fits
//   (best fit: a set ordered by size, then address) and splits off the rest when the rest is
//   worth keeping (min_split_remainder). Freeing merges the chunk with free neighbours in the same
//   region, so two freed neighbours serve one allocation of their joint size.
// * Nothing is returned to the backing while the allocator lives, except by empty_cache() and when
//   the backing runs out: then every region with nothing in use is returned and the backing is
//   asked once more, before the allocation fails with ResourceExhausted.
// * Chunk sizes and offsets are multiples of chunk_alignment (256, as cudaMalloc aligns), which
//   covers Tensor::kAlignment; a larger alignment is met by over-allocating and handing out an
//   aligned pointer inside the chunk (the chunk is found again through a pointer map).
//
// Reusing freed memory right away is safe because allocation follows stream order: kernels take
// memory on the host in enqueue order and all run on one compute stream, and a copy into device
// memory waits on that stream after taking its target (Note [Stream-ordered memory] in
// device/sim_kernels.cc; the SIM device uses this allocator over host regions). All state is under one mutex; backing calls are made under it too,
// which keeps the backing simple (it need not be thread-safe).

namespace {

std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

bool is_power_of_two(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

CachingAllocator::CachingAllocator(std::string name, std::unique_ptr<CachingAllocatorBacking> backing,
                                   CachingAllocatorOptions options)
    : name_(std::move(name)), options_(options), backing_(std::move(backing)) {
  TESSERA_CHECK(backing_ != nullptr);
  TESSERA_CHECK(is_power_of_two(options_.chunk_alignment));
  TESSERA_CHECK(options_.region_granularity > 0 && options_.region_granularity % options_.chunk_alignment == 0);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_.empty()) {
    TESSERA_LOG(kWarning, "allocator {} destroyed with {} allocations ({} bytes) still in use", name_, live_.size(),
                static_cast<long long>(stats_.bytes_in_use));
  }
  for (auto& region : regions_) {
    for (Chunk* c = region->first; c != nullptr;) {
      Chunk* next = c->next;
      delete c;
      c = next;
    }
    backing_->deallocate(region->base, region->size);
  }
  regions_.clear();
  free_.clear();
  live_.clear();
}

void* CachingAllocator::raw_allocate(std::size_t bytes, std::size_t alignment) {
  // What the chunk must hold: the bytes, plus room to align inside it when asked for more than
  // every chunk has anyway.
  std::size_t want = bytes;
  if (alignment > options_.chunk_alignment) want += alignment - options_.chunk_alignment;
  const std::size_t size = std::max(round_up(want, options_.chunk_alignment), options_.chunk_alignment);
  if (size < bytes) return nullptr;  // overflow
  std::lock_guard<std::mutex> lock(mu_);
  auto taken = take_chunk(size);
  if (!taken.ok()) {
    last_backing_error_ = taken.status();
    return nullptr;
  }
  Chunk* chunk = taken.value();
  auto address = reinterpret_cast<std::uintptr_t>(chunk->ptr);
  if (alignment > options_.chunk_alignment) address = round_up(address, alignment);
  void* user = reinterpret_cast<void*>(address);
  live_[user] = chunk;
  ++stats_.num_allocs;
  stats_.bytes_in_use += static_cast<int64_t>(chunk->size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return user;
}

void CachingAllocator::raw_deallocate(void* ptr, std::size_t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    TESSERA_LOG(kError, "allocator {} asked to free {}, which it did not allocate", name_, fmt::ptr(ptr));
    std::abort();
  }
  Chunk* chunk = it->second;
  live_.erase(it);
  chunk->in_use = false;
  stats_.bytes_in_use -= static_cast<int64_t>(chunk->size);
  if (chunk->prev != nullptr && !chunk->prev->in_use) {
    free_.erase(chunk->prev);
    chunk = merge(chunk->prev, chunk);
  }
  if (chunk->next != nullptr && !chunk->next->in_use) {
    free_.erase(chunk->next);
    chunk = merge(chunk, chunk->next);
  }
  free_.insert(chunk);
}

StatusOr<CachingAllocator::Chunk*> CachingAllocator::take_chunk(std::size_t size) {
  Chunk probe;
  probe.size = size;
  Chunk* chunk = nullptr;
  auto it = free_.lower_bound(&probe);
  if (it != free_.end()) {
    chunk = *it;
    free_.erase(it);
    ++stats_.cache_hits;
  } else {
    auto grown = grow(size);
    if (!grown.ok()) {
      // Out of backing memory: hand back whatever is cached whole, and try once more.
      if (release_unused_regions() == 0) return grown.status();
      grown = grow(size);
      if (!grown.ok()) return grown.status();
    }
    chunk = grown.value();
  }
  split(chunk, size);
  chunk->in_use = true;
  return chunk;
}

StatusOr<CachingAllocator::Chunk*> CachingAllocator::grow(std::size_t size) {
  const std::size_t region_size = round_up(size, options_.region_granularity);
  if (region_size < size) return errors::resource_exhausted("allocator {}: {} bytes is too large", name_, size);
  if (options_.max_reserved_bytes > 0 &&
      static_cast<std::size_t>(stats_.bytes_reserved) + region_size > options_.max_reserved_bytes) {
    ++stats_.num_backing_failures;
    return errors::resource_exhausted(
        "allocator {}: a region of {} bytes would exceed the limit of {} bytes ({} reserved)", name_,
        region_size, options_.max_reserved_bytes, stats_.bytes_reserved);
  }
  auto memory = backing_->allocate(region_size);
  if (!memory.ok() || memory.value() == nullptr) {
    ++stats_.num_backing_failures;
    if (!memory.ok()) return memory.status();
    return errors::resource_exhausted("allocator {}: the backing has no {} bytes", name_, region_size);
  }
  auto region = std::make_unique<Region>();
  region->base = static_cast<char*>(memory.value());
  region->size = region_size;
  auto* chunk = new Chunk();
  chunk->ptr = region->base;
  chunk->size = region_size;
  chunk->region = region.get();
  region->first = chunk;
  regions_.push_back(std::move(region));
  ++stats_.num_backing_allocs;
  ++stats_.num_regions;
  stats_.bytes_reserved += static_cast<int64_t>(region_size);
  stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  return chunk;
}

void CachingAllocator::split(Chunk* chunk, std::size_t size) {
  const std::size_t rest = chunk->size - size;
  if (rest < std::max(options_.min_split_remainder, options_.chunk_alignment)) return;
  auto* tail = new Chunk();
  tail->ptr = chunk->ptr + size;
  tail->size = rest;
  tail->region = chunk->region;
  tail->prev = chunk;
  tail->next = chunk->next;
  if (chunk->next != nullptr) chunk->next->prev = tail;
  chunk->next = tail;
  chunk->size = size;
  // The tail's right neighbour cannot be free: it would have been merged with this chunk when
  // either was freed.
  free_.insert(tail);
}

CachingAllocator::Chunk* CachingAllocator::merge(Chunk* left, Chunk* right) {
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  delete right;
  return left;
}

std::size_t CachingAllocator::release_unused_regions() {
  std::size_t released = 0;
  for (auto it = regions_.begin(); it != regions_.end();) {
    Region* region = it->get();
    Chunk* only = region->first;
    if (only->in_use || only->size != region->size) {
      ++it;
      continue;
    }
    free_.erase(only);
    delete only;
    backing_->deallocate(region->base, region->size);
    released += region->size;
    stats_.bytes_reserved -= static_cast<int64_t>(region->size);
    --stats_.num_regions;
    ++stats_.num_backing_frees;
    it = regions_.erase(it);
  }
  return released;
}

std::size_t CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_unused_regions();
}

CachingAllocatorStats CachingAllocator::caching_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CachingAllocatorStats s = stats_;
  s.largest_free_chunk = free_.empty() ? 0 : static_cast<int64_t>((*free_.rbegin())->size);
  return s;
}

std::size_t CachingAllocator::chunk_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

Status CachingAllocator::last_backing_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_backing_error_;
}

}  // namespace tessera::internal
