// A pool of reusable host staging buffers for device copies. Copies between pageable host memory
// and a GPU go through page-locked ("pinned") buffers, which only the copy engines can read and
// write asynchronously, but which are slow to allocate (cudaHostAlloc takes milliseconds): so they
// are allocated once, in power-of-two sizes, and reused. Plain C++: the CUDA device backs the pool
// with cudaHostAlloc, tests with ordinary memory.
//
//   PinnedStagingPool pool("gpu:0", std::make_unique<CudaHostBacking>(),
//                          std::make_unique<HostStagingBacking>());
//   auto staging = pool.acquire(bytes).value();        // no wait, ever (see below)
//   std::memcpy(staging.data(), src, bytes);
//   ... cudaMemcpyAsync(dst, staging.data(), bytes, cudaMemcpyHostToDevice, stream) ...
//   staging.release();                                 // once the copy has completed
//
// When the pool is exhausted (its pinned buffers, in use or cached, reach max_pooled_bytes, or the
// pinned backing fails), acquire() does not wait: it first returns cached buffers of other sizes
// to the backing, and if that is not enough it falls back to an unpooled buffer from the fallback
// backing (ordinary host memory, pinned() == false), freed when released. Copies through such a
// buffer are correct but slower (the driver stages pageable memory itself, and the call may block
// the issuing thread). Waiting was rejected: the threads that would wait are the ones whose
// completions release buffers, so a wait could deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::internal {

// Where staging memory comes from. Called without the pool's lock: must be thread-safe.
class StagingBacking {
 public:
  virtual ~StagingBacking() = default;
  virtual StatusOr<void*> allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
};

// Ordinary host memory (aligned_alloc, 4 KiB aligned): the fallback, and the tests' backing.
// Thread-safe.
class HostStagingBacking final : public StagingBacking {
 public:
  StatusOr<void*> allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) override;
};

struct PinnedStagingOptions {
  // Bound on the pinned bytes the pool holds, in use and cached together.
  std::size_t max_pooled_bytes = std::size_t{512} << 20;
  // The smallest buffer; buffer sizes are powers of two from here.
  std::size_t min_buffer_bytes = std::size_t{64} << 10;
};

struct PinnedStagingStats {
  int64_t pooled_bytes = 0;        // pinned bytes held (in use + cached)
  int64_t in_use_bytes = 0;        // pinned bytes handed out
  int64_t cached_bytes = 0;        // pinned bytes free for reuse
  int64_t num_pinned_allocs = 0;   // pinned backing allocations, ever
  int64_t num_pinned_frees = 0;    // pinned buffers returned to the backing, ever
  int64_t reuses = 0;              // acquires served by a cached buffer
  int64_t fallbacks = 0;           // acquires served by the fallback backing
  int64_t fallbacks_in_use = 0;    // fallback buffers not yet released
};

// Thread-safe. The pool must outlive its buffers.
class PinnedStagingPool {
 public:
  // A staging buffer, returned to its pool by release() or the destructor. Move-only.
  class Buffer {
   public:
    Buffer() = default;
    ~Buffer() { release(); }
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    std::size_t size() const { return size_; }  // capacity: at least the bytes asked for
    bool pinned() const { return pinned_; }     // false: a fallback buffer
    explicit operator bool() const { return data_ != nullptr; }
    // Back to the pool (a fallback buffer is freed); the handle becomes empty. Never calls the
    // pinned backing, so it may run where CUDA calls may not.
    void release();

   private:
    friend class PinnedStagingPool;
    // A buffer of `pool`'s: what acquire() hands out.
    Buffer(PinnedStagingPool* pool, void* data, std::size_t size, bool pinned)
        : pool_(pool), data_(data), size_(size), pinned_(pinned) {}

    PinnedStagingPool* pool_ = nullptr;  // Not owned.
    void* data_ = nullptr;
    std::size_t size_ = 0;
    bool pinned_ = false;
  };

  PinnedStagingPool(std::string name, std::unique_ptr<StagingBacking> pinned,
                    std::unique_ptr<StagingBacking> fallback, PinnedStagingOptions options = {});
  // Frees the cached buffers; every buffer must have been released (checked).
  ~PinnedStagingPool();
  PinnedStagingPool(const PinnedStagingPool&) = delete;
  PinnedStagingPool& operator=(const PinnedStagingPool&) = delete;

  // A buffer of at least `bytes` (0 allowed). Never waits (see the file comment); ResourceExhausted
  // only when the fallback backing fails too.
  StatusOr<Buffer> acquire(std::size_t bytes);
  // Returns every cached pinned buffer to the backing; the bytes freed.
  std::size_t trim();
  PinnedStagingStats stats() const;
  const std::string& name() const { return name_; }

 private:
  std::size_t size_class(std::size_t bytes) const;
  void give_back(void* data, std::size_t size, bool pinned);
  StatusOr<Buffer> fallback(std::size_t bytes);

  const std::string name_;
  const PinnedStagingOptions options_;
  const std::unique_ptr<StagingBacking> pinned_;
  const std::unique_ptr<StagingBacking> fallback_;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> cached_;  // by size; guarded by mu_
  PinnedStagingStats stats_;                          // guarded by mu_
};

}  // namespace tessera::internal
