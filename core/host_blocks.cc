#include "core/host_blocks.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/env_util.h"

namespace tessera::internal {

// Note [Large host blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// glibc serves a block of 32 MiB or more (and smaller ones until its adaptive threshold has grown)
// with a fresh mmap and unmaps it on free: every large tensor then pays a page fault per 4 KiB page
// when it is first written, 16,384 of them for 64 MiB, which cost more than writing the data. A
// received 64 MiB tensor was measured at about 1.2 GiB/s through loopback TCP for that reason
// (benchmarks/README.md, "Transport"). So blocks of kLargeHostBlockMin and more come from here:
//   * mapped with mmap, 2 MiB aligned, with MADV_HUGEPAGE: where transparent huge pages are
//     enabled (always or madvise), a first touch faults 2 MiB at a time;
//   * freed blocks stay mapped in a cache, and a request of the same size class (sizes rounded up
//     by at most an eighth, to 64 KiB steps at least) takes the most recently freed one, whose pages
//     are faulted in and likely still in cache;
//   * the cache is bounded (set_host_block_cache_limit; an eighth of physical memory, at most 1 GiB,
//     by default): past the limit the least recently freed blocks are unmapped, and blocks idle for
//     kIdle are unmapped by the next call. A failed mmap empties the cache and tries once more.
// This is the CPU side of what TensorFlow's BFC allocator and PyTorch's caching allocators do for
// device memory, kept simpler: blocks are never split or merged, so an odd size costs at most an
// eighth more than asked, and memory held for one size is not lent to another.
// Sanitizer builds use aligned_alloc and free and cache nothing, so that every access is checked.

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(TESSERA_TSAN)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kMinStep = std::size_t{64} << 10;
constexpr std::chrono::seconds kIdle{30};

using Clock = std::chrono::steady_clock;

std::size_t size_class(std::size_t bytes) {
  const std::size_t step = std::max(kMinStep, std::bit_floor(bytes) / 8);
  return (bytes + step - 1) / step * step;
}

void* map_block(std::size_t size) {
  if (kSanitized) return std::aligned_alloc(kHostBlockAlignment, size);
  const std::size_t len = size + kHugePage;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) ::munmap(p, aligned - start);
  const std::uintptr_t end = start + len;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice: EINVAL without THP is fine
  return reinterpret_cast<void*>(aligned);
}

// Note [Pinned host blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A copy engine reads and writes only page-locked host memory asynchronously. From pageable memory
// a copy goes through pinned staging buffers (device/pinned_staging.h), at the cost of a CPU
// memcpy of every byte, which then bounds the copy's rate rather than the copy engine does. So a
// device copy of a tensor in a large block pins the block itself
// (cudaHostRegister) and copies straight from or into it: a fed tensor, and the host tensor a
// fetch lands in. Pinning costs about as much as touching the pages once, so it is kept:
//   * a pinned block stays pinned while it waits in the block cache, so the next tensor of its
//     size class (the next step's fetch, a refilled batch) is pinned already: in a loop, a steady
//     state pins nothing;
//   * blocks are unpinned when they are unmapped (over the cache's limit, idle, flushed), by the
//     pinner that pinned them;
//   * pinned bytes are bounded (set_pinned_host_limit, a quarter of physical memory by default:
//     page-locked memory cannot be swapped); past the bound a copy stages as before.
// Small tensors (< kLargeHostBlockMin, from malloc) share pages with other allocations, which
// cannot be registered twice, and stage cheaply: they are never pinned. TensorFlow uses a pinned
// allocator for the host side of its own copies; pinning the caller's block instead also covers
// the tensors a user feeds.

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

uint64_t default_pinned_limit() {
  return env_mebibytes("TESSERA_PINNED_HOST_MB").value_or(physical_memory_bytes() / 4);
}

// The pinned blocks and the pinner. Thread-safe; the pinner's calls run without the lock.
class PinnedBlocks {
 public:
  HostBlockPinner set_pinner(HostBlockPinner pinner) {
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(pinner_, pinner);
  }

  bool pin(void* block, std::size_t size) {
    HostBlockPinner pinner;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pinned_.count(block)) return true;
      if (pinner_.pin == nullptr || pinning_.count(block)) return false;
      if (stats_.pinned_bytes + size > stats_.limit_bytes) {
        ++stats_.refused;
        return false;
      }
      pinner = pinner_;
      pinning_.insert(block);
      stats_.pinned_bytes += size;  // reserved while the pinner runs
    }
    const bool ok = pinner.pin(block, size);
    std::lock_guard<std::mutex> l(mu_);
    pinning_.erase(block);
    if (!ok) {
      stats_.pinned_bytes -= size;
      ++stats_.failures;
      return false;
    }
    pinned_.emplace(block, Pinned{size, pinner.unpin});
    ++stats_.pins;
    ++stats_.pinned_blocks;
    return true;
  }

  bool pinned(const void* block) {
    std::lock_guard<std::mutex> l(mu_);
    return pinned_.count(const_cast<void*>(block)) > 0;
  }

  // Before `block` is unmapped: unpins it if it is pinned.
  void forget(void* block) {
    Pinned p{};
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = pinned_.find(block);
      if (it == pinned_.end()) return;
      p = it->second;
      pinned_.erase(it);
      stats_.pinned_bytes -= p.size;
      --stats_.pinned_blocks;
      ++stats_.unpins;
    }
    if (p.unpin != nullptr) p.unpin(block, p.size);
  }

  HostBlockPinStats stats() {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }

  uint64_t set_limit(uint64_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(stats_.limit_bytes, bytes);
  }

 private:
  struct Pinned {
    std::size_t size;
    void (*unpin)(void*, std::size_t);
  };
  std::mutex mu_;
  HostBlockPinner pinner_;                        // guarded by mu_
  std::unordered_map<void*, Pinned> pinned_;      // guarded by mu_
  std::unordered_set<void*> pinning_;             // guarded by mu_: pins in progress
  HostBlockPinStats stats_{.limit_bytes = default_pinned_limit()};  // guarded by mu_
};

// Leaked, as the cache below: blocks are unmapped (and unpinned) until the very end.
PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* p = new PinnedBlocks();
  return *p;
}

void unmap_block(void* block, std::size_t size) {
  pinned_blocks().forget(block);
  if (kSanitized) {
    std::free(block);
  } else {
    ::munmap(block, size);
  }
}

uint64_t default_limit() {
  if (kSanitized) return 0;
  return env_mebibytes("TESSERA_HOST_BLOCK_CACHE_MB")
      .value_or(std::min<uint64_t>(uint64_t{1} << 30, physical_memory_bytes() / 8));
}

struct Cached {
  void* block;
  std::size_t size;
  Clock::time_point freed;
};

class BlockCache {
 public:
  void* allocate(std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    std::vector<Cached> drop;
    void* found = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      ++allocations_;
      // Newest first: its pages are the likeliest to be in the CPU's caches.
      for (std::size_t i = cached_.size(); i-- > 0;) {
        if (cached_[i].size == size) {
          found = cached_[i].block;
          cached_bytes_ -= size;
          cached_.erase(cached_.begin() + static_cast<std::ptrdiff_t>(i));
          ++reused_;
          break;
        }
      }
      trim_locked(Clock::now(), &drop);
    }
    unmap_all(drop);
    if (found == nullptr) found = map_block(size);
    if (found == nullptr) {
      release_all();
      found = map_block(size);
    }
    if (found != nullptr) {
      std::lock_guard<std::mutex> l(mu_);
      live_.emplace(reinterpret_cast<std::uintptr_t>(found), size);
    }
    return found;
  }

  // The block in use that holds [data, data + bytes), with its size.
  std::optional<Cached> find_live(const void* data, std::size_t bytes) {
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.upper_bound(begin);
    if (it == live_.begin()) return std::nullopt;
    --it;
    if (begin + bytes > it->first + it->second) return std::nullopt;
    return Cached{reinterpret_cast<void*>(it->first), it->second, {}};
  }

  void free(void* block, std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    std::vector<Cached> drop;
    {
      std::lock_guard<std::mutex> l(mu_);
      live_.erase(reinterpret_cast<std::uintptr_t>(block));
      if (size <= limit_) {
        cached_.push_back(Cached{block, size, Clock::now()});
        cached_bytes_ += size;
        block = nullptr;
      } else {
        ++released_;
      }
      trim_locked(Clock::now(), &drop);
    }
    if (block != nullptr) unmap_block(block, size);
    unmap_all(drop);
  }

  HostBlockCacheStats stats() {
    std::lock_guard<std::mutex> l(mu_);
    return HostBlockCacheStats{allocations_, reused_, cached_bytes_, limit_, released_};
  }

  void release_all() {
    std::vector<Cached> drop;
    {
      std::lock_guard<std::mutex> l(mu_);
      drop.swap(cached_);
      cached_bytes_ = 0;
      released_ += drop.size();
    }
    unmap_all(drop);
  }

  uint64_t set_limit(uint64_t bytes) {
    std::vector<Cached> drop;
    uint64_t old;
    {
      std::lock_guard<std::mutex> l(mu_);
      old = limit_;
      limit_ = bytes;
      trim_locked(Clock::now(), &drop);
    }
    unmap_all(drop);
    return old;
  }

 private:
  // Moves to *drop the oldest blocks while the cache is over its limit, and those idle for kIdle.
  void trim_locked(Clock::time_point now, std::vector<Cached>* drop) {
    std::size_t n = 0;
    while (n < cached_.size() && (cached_bytes_ > limit_ || now - cached_[n].freed > kIdle)) {
      cached_bytes_ -= cached_[n].size;
      ++n;
    }
    if (n == 0) return;
    drop->insert(drop->end(), cached_.begin(), cached_.begin() + static_cast<std::ptrdiff_t>(n));
    cached_.erase(cached_.begin(), cached_.begin() + static_cast<std::ptrdiff_t>(n));
    released_ += n;
  }

  static void unmap_all(const std::vector<Cached>& blocks) {
    for (const Cached& c : blocks) unmap_block(c.block, c.size);
  }

  std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> live_;  // guarded by mu_: blocks in use, by address
  std::vector<Cached> cached_;  // guarded by mu_; oldest first
  uint64_t cached_bytes_ = 0;   // guarded by mu_
  uint64_t limit_ = default_limit();
  uint64_t allocations_ = 0, reused_ = 0, released_ = 0;  // guarded by mu_
};

// Leaked: tensors in static objects may be freed after any destructor would have run.
BlockCache& cache() {
  static BlockCache* c = new BlockCache();
  return *c;
}

}  // namespace

void* allocate_host_block(std::size_t bytes) { return cache().allocate(std::max(bytes, kLargeHostBlockMin)); }

void free_host_block(void* block, std::size_t bytes) noexcept {
  if (block != nullptr) cache().free(block, std::max(bytes, kLargeHostBlockMin));
}

HostBlockCacheStats host_block_cache_stats() { return cache().stats(); }

void release_host_block_cache() { cache().release_all(); }

uint64_t set_host_block_cache_limit(uint64_t bytes) { return cache().set_limit(bytes); }

HostBlockPinner set_host_block_pinner(HostBlockPinner pinner) { return pinned_blocks().set_pinner(pinner); }

bool pin_host_memory(const void* data, std::size_t bytes) {
  if (data == nullptr || bytes == 0) return false;
  const std::optional<Cached> block = cache().find_live(data, bytes);
  return block.has_value() && pinned_blocks().pin(block->block, block->size);
}

bool host_memory_pinned(const void* data, std::size_t bytes) {
  if (data == nullptr || bytes == 0) return false;
  const std::optional<Cached> block = cache().find_live(data, bytes);
  return block.has_value() && pinned_blocks().pinned(block->block);
}

HostBlockPinStats host_block_pin_stats() { return pinned_blocks().stats(); }

uint64_t set_pinned_host_limit(uint64_t bytes) { return pinned_blocks().set_limit(bytes); }

// Note [Malloc settings for transport]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// libzmq mallocs every message it receives over 8 KiB and frees it once read: a streamed 16 MiB
// tensor is sixteen 1 MiB chunks per transfer (Note [Streamed frames]). glibc's defaults give that
// memory back between transfers (its mmap threshold starts at 128 KiB, and it trims a heap whose
// free top exceeds twice that), so the next chunks fault their pages in again: 745-1,343 minor
// faults per 16 MiB transfer on loopback (benchmarks/transport/chunk_probe.cc, `streamed`), 89% of
// the receiver's faults. With an mmap threshold of 32 MiB (glibc's adaptive ceiling) and a trim
// threshold of 8 MiB from the start (kTransportMmapThreshold, kTransportTrimThreshold) the probe's
// faults fall to 0-114; 64 MiB gives 0-58, 4 MiB up to 618, 2 MiB 328-1,266. A larger top is not
// free: malloc_trim cuts only the main heap's top, so each arena keeps that much after a burst.
// Arenas: glibc makes up to 8 per core, one per thread as threads appear, and a burst served by
// many threads leaves each arena's pages pinned by the few blocks that outlive it. The soak's
// server (tests/cluster_soak_test.cc, six rounds of 10,000 vanished sessions, beside a build) kept
// 21.8-22.9 MiB after each round with max(2, cores) arenas, and 31-46 MiB, still growing, with
// glibc's default (idle 20.4 and 22.5). With two cores, two threads malloc at once at most.
// Steps want the same: tensors under kLargeHostBlockMin come from malloc, and with glibc's adaptive
// thresholds the 512 KiB activations of the digits CNN at batch 64, freed each step, were mapped
// and faulted in again by the next (122-179 steps/s; 188-348 with these settings, alternated).
// So the transport sets these (mallopt) when it makes its first socket, and SessionImpl::make
// when it makes a session, unless
//   * TESSERA_MALLOC_TUNING=0 (opt out);
//   * the user chose malloc settings of their own (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
//     MALLOC_TOP_PAD_, MALLOC_ARENA_MAX or GLIBC_TUNABLES' glibc.malloc tunable of one): theirs stand;
//   * the C library is not glibc, or a sanitizer replaces malloc.
// Setting the thresholds stops glibc adapting them further, which it would not do past these
// values anyway; arenas made before the first socket stay. MPI libraries go further for the same
// reason: Open MPI and MVAPICH turn trimming off. Tensors of a MiB and more do not come from
// malloc at all (Note [Large host blocks]).

std::size_t transport_arena_max() {
  return std::max<std::size_t>(2, std::thread::hardware_concurrency());
}

MallocTuning decide_malloc_tuning(const std::function<const char*(const char*)>& getenv) {
  MallocTuning t;
#if !defined(__GLIBC__)
  (void)getenv;
  t.reason = "the C library is not glibc";
  return t;
#else
  if (kSanitized) {
    t.reason = "a sanitizer replaces malloc";
    return t;
  }
  if (const char* v = getenv("TESSERA_MALLOC_TUNING"); v != nullptr && std::strcmp(v, "0") == 0) {
    t.reason = "TESSERA_MALLOC_TUNING=0";
    return t;
  }
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX"}) {
    if (const char* v = getenv(name); v != nullptr) {
      t.reason = std::string(name) + " is set";
      return t;
    }
  }
  // The tunables of what mallopt sets here; others (the tcache's, say) leave these free to set.
  if (const char* v = getenv("GLIBC_TUNABLES"); v != nullptr) {
    for (const char* knob : {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.top_pad",
                             "glibc.malloc.arena_max", "glibc.malloc.arena_test"}) {
      if (std::strstr(v, knob) != nullptr) {
        t.reason = std::string("GLIBC_TUNABLES sets ") + knob;
        return t;
      }
    }
  }
  t.applied = true;
  t.mmap_threshold = kTransportMmapThreshold;
  t.trim_threshold = kTransportTrimThreshold;
  t.arena_max = transport_arena_max();
  return t;
#endif
}

// Note [Malloc settings for servers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// glibc gives each thread a cache of freed small blocks (the tcache: up to 7 of each size up to
// 1 KiB) that malloc_trim cannot reach: to the arena those blocks are in use. After a burst (the
// soak's 10,000 sessions of vanished clients, tests/cluster_soak_test.cc) a server's threads hold
// such blocks spread over the pages the burst freed, and each pins its page: the soak's server
// settled at +10.7%, +12.4% and +15.5% of its idle resident memory after three rounds, every page
// of the growth anonymous (3.4 MiB; the main heap alone 2.9 -> 5.6 MiB). With the tcache off
// (GLIBC_TUNABLES=glibc.malloc.tcache_count=0, beside the transport's settings): +0.0%, +2.5%,
// +1.1%. mallopt has no tcache knob and glibc reads tunables once, at start, so a serving process
// re-executes itself with the tunable added (train::apply_server_malloc_settings, called first by
// `tessera server`): same pid, arguments and environment otherwise. Where the user chose malloc
// settings of their own, opted out (TESSERA_MALLOC_TUNING=0) or named a tcache tunable, nothing
// happens. Small blocks then come from the arenas' fast bins, under the arena's lock: at most
// max(2, cores) threads contend for one (Note [Malloc settings for transport]).
std::optional<std::string> server_glibc_tunables(const std::function<const char*(const char*)>& getenv,
                                                 std::string* reason) {
  const MallocTuning t = decide_malloc_tuning(getenv);
  if (!t.applied) {
    *reason = t.reason;
    return std::nullopt;
  }
  const char* v = getenv("GLIBC_TUNABLES");
  if (v != nullptr && std::strstr(v, "glibc.malloc.tcache") != nullptr) {
    *reason = std::strstr(v, kServerTcacheTunable) != nullptr ? "in effect" : "GLIBC_TUNABLES sets glibc.malloc.tcache";
    return std::nullopt;
  }
  return v != nullptr && *v != '\0' ? std::string(v) + ":" + kServerTcacheTunable : std::string(kServerTcacheTunable);
}

const MallocTuning& tune_malloc_for_transport() {
  static const MallocTuning tuning = [] {
    MallocTuning t = decide_malloc_tuning([](const char* name) -> const char* { return std::getenv(name); });
#if defined(__GLIBC__)
    if (t.applied && (mallopt(M_MMAP_THRESHOLD, static_cast<int>(t.mmap_threshold)) != 1 ||
                      mallopt(M_TRIM_THRESHOLD, static_cast<int>(t.trim_threshold)) != 1 ||
                      mallopt(M_ARENA_MAX, static_cast<int>(t.arena_max)) != 1)) {
      t = MallocTuning{false, "mallopt refused the settings", 0, 0, 0};
    }
#endif
    return t;
  }();
  return tuning;
}

}  // namespace tessera::internal
