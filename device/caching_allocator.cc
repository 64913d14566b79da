#include "device/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/logging.h"
#include "core/stream.h"

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
// * Memory is cached per stream, as PyTorch's allocator does: a chunk belongs to the stream it was
//   allocated for (nullptr: none named), and only allocations for that stream take it,
//   so a freed chunk is reused at once, behind every queued use, by stream order alone. A chunk
//   another stream used too (record_stream) waits, pending, until an event recorded on each such
//   stream at its free has completed. Neighbours merge only within one stream's cache. Out of
//   backing memory, an allocation borrows a chunk cached for another stream: the borrower waits
//   on an event of the owner recorded then (stream order, no host wait). See Note [Stream-ordered
//   memory] in device/sim_kernels.cc (the SIM device uses this allocator too).
// All state is under one mutex; backing calls are made under it too, which keeps the backing
// simple (it need not be thread-safe). Events are recorded outside it.

namespace {

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
  // Pending chunks wait on events of streams that must have drained before now (a device destroys
  // its streams first); a callback still to come would find the allocator gone.
  TESSERA_CHECK(stats_.pending_chunks == 0);
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
  return raw_allocate_for(bytes, alignment, nullptr);
}

void* CachingAllocator::raw_allocate_for(std::size_t bytes, std::size_t alignment, Stream* stream) {
  // What the chunk must hold: the bytes, plus room to align inside it when asked for more than
  // every chunk has anyway.
  std::size_t want = bytes;
  if (alignment > options_.chunk_alignment) want += alignment - options_.chunk_alignment;
  const std::size_t size = std::max(round_up(want, options_.chunk_alignment), options_.chunk_alignment);
  if (size < bytes) return nullptr;  // overflow
  std::lock_guard<std::mutex> lock(mu_);
  auto taken = take_chunk(size, stream);
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

void CachingAllocator::record_stream(void* ptr, Stream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours (a view of host memory), or already freed
  Chunk* chunk = it->second;
  if (stream == nullptr || stream == chunk->stream) return;  // no stream: nothing to wait for
  if (std::find(chunk->uses.begin(), chunk->uses.end(), stream) == chunk->uses.end()) chunk->uses.push_back(stream);
}

void CachingAllocator::raw_deallocate(void* ptr, std::size_t) {
  std::vector<Stream*> uses;
  Chunk* chunk = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      TESSERA_LOG(kError, "allocator {} asked to free {}, which it did not allocate", name_, fmt::ptr(ptr));
      std::abort();
    }
    chunk = it->second;
    live_.erase(it);
    chunk->in_use = false;
    stats_.bytes_in_use -= static_cast<int64_t>(chunk->size);
    if (chunk->uses.empty()) {
      // Used on its own stream only: work enqueued there from now on comes after every use.
      cache(chunk);
      return;
    }
    // Other streams may still have queued work on it: cached again once each has passed this
    // point (Note [Stream-ordered memory] in device/sim_kernels.cc).
    uses.swap(chunk->uses);
    chunk->pending = true;
    ++stats_.pending_chunks;
    stats_.bytes_pending += static_cast<int64_t>(chunk->size);
  }
  // Outside the lock: an event may complete at once, and its callback takes the lock.
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(uses.size()));
  for (Stream* use : uses) {
    Event passed;
    Status recorded = use->record(passed);  // a fresh event: cannot fail
    TESSERA_CHECK(recorded.ok());
    passed.on_completed([this, chunk, left](Status) {
      // On error too: a stream in error runs nothing more, so nothing queued there reads it.
      if (left->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      std::lock_guard<std::mutex> lock(mu_);
      chunk->pending = false;
      --stats_.pending_chunks;
      stats_.bytes_pending -= static_cast<int64_t>(chunk->size);
      cache(chunk);
    });
  }
}

void CachingAllocator::cache(Chunk* chunk) {
  FreeSet& pool = free_[chunk->stream];
  if (chunk->prev != nullptr && is_free(chunk->prev) && chunk->prev->stream == chunk->stream) {
    pool.erase(chunk->prev);
    chunk = merge(chunk->prev, chunk);
  }
  if (chunk->next != nullptr && is_free(chunk->next) && chunk->next->stream == chunk->stream) {
    pool.erase(chunk->next);
    chunk = merge(chunk, chunk->next);
  }
  pool.insert(chunk);
}

StatusOr<CachingAllocator::Chunk*> CachingAllocator::take_chunk(std::size_t size, Stream* stream) {
  Chunk probe;
  probe.size = size;
  Chunk* chunk = nullptr;
  FreeSet& pool = free_[stream];
  auto it = pool.lower_bound(&probe);
  if (it != pool.end()) {
    chunk = *it;
    pool.erase(it);
    ++stats_.cache_hits;
  } else {
    auto grown = grow(size, stream);
    if (!grown.ok() && release_unused_regions() > 0) {
      // Out of backing memory: whatever was cached whole went back; try once more.
      grown = grow(size, stream);
    }
    if (!grown.ok()) {
      // Still none: lend this stream a chunk cached for another one, in stream order.
      chunk = lend(size, stream);
      if (chunk == nullptr) return grown.status();
      return chunk;
    }
    chunk = grown.value();
  }
  split(chunk, size);
  chunk->in_use = true;
  return chunk;
}

CachingAllocator::Chunk* CachingAllocator::lend(std::size_t size, Stream* stream) {
  if (stream == nullptr) return nullptr;  // no stream to order the reuse on
  Chunk probe;
  probe.size = size;
  Chunk* best = nullptr;
  for (auto& [owner, pool] : free_) {
    if (owner == nullptr || owner == stream) continue;
    auto it = pool.lower_bound(&probe);
    if (it != pool.end() && (best == nullptr || (*it)->size < best->size)) best = *it;
  }
  if (best == nullptr) return nullptr;
  // Every use of the chunk on its stream was enqueued before its free, so an event recorded
  // there now covers them; the borrowing stream's later work waits for it.
  Event passed;
  if (!best->stream->record(passed).ok() || !stream->wait(passed).ok()) return nullptr;
  free_[best->stream].erase(best);
  split(best, size);  // the rest stays cached for the owner
  best->stream = stream;
  best->in_use = true;
  ++stats_.lent_chunks;
  return best;
}

StatusOr<CachingAllocator::Chunk*> CachingAllocator::grow(std::size_t size, Stream* stream) {
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
  chunk->stream = stream;
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
  tail->stream = chunk->stream;
  tail->prev = chunk;
  tail->next = chunk->next;
  if (chunk->next != nullptr) chunk->next->prev = tail;
  chunk->next = tail;
  chunk->size = size;
  // The tail's right neighbour is not a free chunk of the same stream: it would have been merged
  // with this chunk when either was cached.
  free_[tail->stream].insert(tail);
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
    if (!is_free(only) || only->size != region->size) {
      ++it;
      continue;
    }
    free_[only->stream].erase(only);
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
  for (const auto& [stream, pool] : free_) {
    if (!pool.empty()) s.largest_free_chunk = std::max(s.largest_free_chunk, static_cast<int64_t>((*pool.rbegin())->size));
  }
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
