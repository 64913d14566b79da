// A caching allocator for device memory: large regions come from a backing (cudaMalloc on the
// GPU, anything in tests), and allocations are chunks carved out of them best-fit, split on
// allocation and coalesced with free neighbours on free. Freed chunks stay cached for reuse;
// regions go back to the backing only on empty_cache() or destruction. Plain C++: the CUDA device
// gives it a cudaMalloc backing, tests a fake one.
//
//   CachingAllocator gpu_memory("gpu:0", std::make_unique<CudaMallocBacking>(0));
//   void* p = gpu_memory.allocate(1 << 20).value();   // first use: one 2 MiB region
//   gpu_memory.deallocate(p, 1 << 20);                // cached, not returned
//   void* q = gpu_memory.allocate(4096).value();      // a cache hit: no backing call
//   gpu_memory.caching_stats().bytes_reserved;        // 2 MiB
//
// See Note [Caching allocator] in device/caching_allocator.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/status.h"

namespace tessera::internal {

// x rounded up to a multiple of `multiple` (> 0): chunk and region sizes, aligned host blocks.
inline std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// Where a CachingAllocator's regions come from. allocate() may fail (ResourceExhausted for no
// memory; the message should say why, e.g. the CUDA error name and string); the pointers it
// returns must be aligned to at least CachingAllocatorOptions::chunk_alignment. Must be
// thread-safe only as far as the allocator calls it: always under the allocator's lock.
class CachingAllocatorBacking {
 public:
  virtual ~CachingAllocatorBacking() = default;
  virtual StatusOr<void*> allocate(std::size_t bytes) = 0;
  // `bytes` is the size passed to allocate().
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
};

struct CachingAllocatorOptions {
  // Regions are at least this large and a multiple of it (so small allocations share regions).
  std::size_t region_granularity = std::size_t{2} << 20;  // 2 MiB
  // Chunk sizes and offsets are multiples of this (a power of two; the backing's alignment).
  std::size_t chunk_alignment = 256;
  // A chunk is split only when what remains is at least this large; else the slack stays with the
  // allocation (counted in bytes_in_use).
  std::size_t min_split_remainder = 256;
  // When > 0, the allocator never holds more than this from the backing (allocations that would
  // need more fail with ResourceExhausted, after returning unused cached regions).
  std::size_t max_reserved_bytes = 0;
};

struct CachingAllocatorStats {
  int64_t bytes_in_use = 0;         // bytes of the chunks handed out (rounded to chunk_alignment)
  int64_t peak_bytes_in_use = 0;    // high-water mark of bytes_in_use
  int64_t bytes_reserved = 0;       // bytes of the regions held from the backing
  int64_t peak_bytes_reserved = 0;  // high-water mark of bytes_reserved
  int64_t num_regions = 0;          // regions held now
  int64_t num_allocs = 0;           // successful allocations
  int64_t cache_hits = 0;           // allocations served from cached memory (no backing call)
  int64_t num_backing_allocs = 0;   // successful backing allocations, ever
  int64_t num_backing_frees = 0;    // regions returned to the backing, ever
  int64_t num_backing_failures = 0; // backing allocations that failed
  int64_t largest_free_chunk = 0;   // bytes of the largest cached chunk
  int64_t lent_chunks = 0;          // chunks of one stream's cache lent to another (out of memory)
  int64_t pending_chunks = 0;       // freed chunks waiting for other streams to pass their free
  int64_t bytes_pending = 0;        // their bytes
};

// An Allocator over a CachingAllocatorBacking (Note [Caching allocator]). Allocations are served
// best-fit from the chunks cached for their stream; when none fits, a new region of
// round_up(bytes, granularity) is taken from the backing; when the backing fails, cached regions
// with nothing in use are returned and the backing is tried once more before ResourceExhausted.
// A chunk another stream used too (record_stream) is cached again only once that stream has
// passed its free. Tensors allocated here must not outlive the allocator, and the streams named
// must outlive their pending chunks (a device drains its streams before its memory goes).
// Thread-safe.
class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(std::string name, std::unique_ptr<CachingAllocatorBacking> backing,
                   CachingAllocatorOptions options = {});
  // Returns every region to the backing (chunks still in use included: a caller bug, reported on
  // stderr).
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  std::string name() const override { return name_; }
  void record_stream(void* ptr, Stream* stream) override;

  // Returns every region with nothing in use to the backing; the bytes returned.
  std::size_t empty_cache();
  CachingAllocatorStats caching_stats() const;
  int64_t bytes_reserved() const override { return caching_stats().bytes_reserved; }
  // The usable size of the chunk behind `ptr` (an allocation of this allocator), for tests.
  std::size_t chunk_size(const void* ptr) const;
  // Why the backing last failed (OK when it never did): allocate() reports only ResourceExhausted.
  Status last_backing_error() const;

 protected:
  void* raw_allocate(std::size_t bytes, std::size_t alignment) override;
  void* raw_allocate_for(std::size_t bytes, std::size_t alignment, Stream* stream) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  struct Region;
  struct Chunk {
    char* ptr = nullptr;
    std::size_t size = 0;
    bool in_use = false;
    bool pending = false;     // freed, waiting for the streams in `uses` to pass the free
    Stream* stream = nullptr;  // the stream it is cached for (nullptr: none named)
    std::vector<Stream*> uses;  // other streams that used it while in use
    Chunk* prev = nullptr;  // neighbours in the region, by address
    Chunk* next = nullptr;
    Region* region = nullptr;
  };
  struct Region {
    char* base = nullptr;
    std::size_t size = 0;
    Chunk* first = nullptr;  // the chunk at `base` (merges keep the left chunk, so it stays)
  };
  // The free set orders by (size, address): lower_bound of the wanted size is the best fit.
  struct BySizeThenAddress {
    bool operator()(const Chunk* a, const Chunk* b) const {
      return a->size != b->size ? a->size < b->size : std::less<const char*>()(a->ptr, b->ptr);
    }
  };

  using FreeSet = std::set<Chunk*, BySizeThenAddress>;
  StatusOr<Chunk*> take_chunk(std::size_t size, Stream* stream);  // mu_ held
  StatusOr<Chunk*> grow(std::size_t size, Stream* stream);  // mu_ held: a new region, as one free chunk
  std::size_t release_unused_regions();            // mu_ held
  void split(Chunk* chunk, std::size_t size);      // mu_ held: chunk is not in a free set
  Chunk* merge(Chunk* left, Chunk* right);         // mu_ held: neither is in a free set
  // Out of memory: the best-fitting chunk cached for another stream, now `stream`'s (in use),
  // which waits on an event of the owner; nullptr when there is none.
  Chunk* lend(std::size_t size, Stream* stream);   // mu_ held
  // Caches a chunk that is neither in use nor pending, merged with free neighbours of its stream.
  void cache(Chunk* chunk);                        // mu_ held
  bool is_free(const Chunk* c) const { return !c->in_use && !c->pending; }

  const std::string name_;
  const CachingAllocatorOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<CachingAllocatorBacking> backing_;  // guarded by mu_
  std::map<Stream*, FreeSet> free_;                   // cached chunks by stream; guarded by mu_
  std::unordered_map<const void*, Chunk*> live_;      // user pointer -> chunk; guarded by mu_
  std::vector<std::unique_ptr<Region>> regions_;      // guarded by mu_
  CachingAllocatorStats stats_;                       // guarded by mu_
  Status last_backing_error_;                         // guarded by mu_
};

}  // namespace tessera::internal
