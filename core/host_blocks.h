// Large host memory blocks (tensor buffers of a MiB and more, received tensor frames): mapped
// straight from the kernel, 2 MiB aligned with transparent huge pages advised, and kept in a
// bounded cache when freed so that the next tensor of that size reuses pages that are already
// faulted in. See Note [Large host blocks] in host_blocks.cc.
//
//   void* p = allocate_host_block(64 << 20);   // nullptr only when memory is exhausted
//   ...
//   free_host_block(p, 64 << 20);              // the same size it was allocated with
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tessera::internal {

// Smallest allocation served here; smaller ones belong to malloc.
inline constexpr std::size_t kLargeHostBlockMin = std::size_t{1} << 20;
// The alignment every block has (in practice 2 MiB; sanitizer builds give exactly this).
inline constexpr std::size_t kHostBlockAlignment = 4096;

// A block of at least `bytes` (>= kLargeHostBlockMin), aligned to 2 MiB (kHostBlockAlignment in
// sanitizer builds); its contents are
// unspecified (a reused block holds what its last owner wrote). nullptr when the memory cannot be
// had even after the cache was emptied. Thread-safe.
void* allocate_host_block(std::size_t bytes);
// Gives back a block of allocate_host_block(bytes); it joins the cache (the least recently freed
// blocks leave when the cache is over its limit) or goes back to the kernel. Thread-safe.
void free_host_block(void* block, std::size_t bytes) noexcept;

struct HostBlockCacheStats {
  uint64_t allocations = 0;  // allocate_host_block calls
  uint64_t reused = 0;       // of those, served from the cache
  uint64_t cached_bytes = 0;  // now held by the cache
  uint64_t limit_bytes = 0;   // the cache's limit (0: caching is off)
  uint64_t released = 0;      // blocks the cache gave back to the kernel (over the limit, idle, flushed)
};
HostBlockCacheStats host_block_cache_stats();
// Gives every cached block back to the kernel.
void release_host_block_cache();
// Sets the cache's limit in bytes (0 turns caching off), trimming at once; returns the old limit.
// The default is TESSERA_HOST_BLOCK_CACHE_MB if set, else an eighth of physical memory, at most
// 1 GiB. Builds with AddressSanitizer or ThreadSanitizer start with 0, so that they see every
// allocation.
uint64_t set_host_block_cache_limit(uint64_t bytes);

// ---- Page-locked ("pinned") blocks, for device copies (Note [Pinned host blocks]) ----

// How blocks are page-locked: the CUDA device installs cudaHostRegister / cudaHostUnregister,
// tests a fake. Both are called without any lock held, from any thread; pin returns whether the
// block is now pinned. Plain function pointers: they must outlive every block (static storage).
struct HostBlockPinner {
  bool (*pin)(void* block, std::size_t size) = nullptr;
  void (*unpin)(void* block, std::size_t size) = nullptr;
};
// Installs `pinner` for blocks pinned from now on (blocks pinned before are unpinned by the pinner
// that pinned them); returns the previous one. An empty pinner turns pinning off.
HostBlockPinner set_host_block_pinner(HostBlockPinner pinner);
// Pins the block in use that holds [data, data + bytes), unless it already is. True when it is
// pinned on return; false when the memory is not in one block in use (malloc'd memory, say), no
// pinner is installed, the pinner failed, another thread is pinning the block right now, or the
// pinned total would pass the limit. A pinned block stays pinned while it is in use and while it
// waits in the cache; it is unpinned when it is unmapped. The block must stay in use meanwhile.
bool pin_host_memory(const void* data, std::size_t bytes);
// Whether [data, data + bytes) lies in a pinned block in use.
bool host_memory_pinned(const void* data, std::size_t bytes);

struct HostBlockPinStats {
  uint64_t pinned_bytes = 0;   // held pinned now (in use and cached)
  uint64_t pinned_blocks = 0;
  uint64_t pins = 0;           // blocks pinned, ever
  uint64_t unpins = 0;         // blocks unpinned, ever
  uint64_t refused = 0;        // pins refused for the limit
  uint64_t failures = 0;       // pins the pinner failed
  uint64_t limit_bytes = 0;
};
HostBlockPinStats host_block_pin_stats();
// Sets the bound on pinned bytes (blocks already pinned stay); returns the old one. The default is
// TESSERA_PINNED_HOST_MB if set, else a quarter of physical memory.
uint64_t set_pinned_host_limit(uint64_t bytes);

// glibc's malloc settings for a process that receives large messages (Note [Malloc settings for
// transport] in host_blocks.cc). The transport applies them once, when it makes its first socket.
struct MallocTuning {
  bool applied = false;
  std::string reason;               // why not, when not applied
  std::size_t mmap_threshold = 0;   // M_MMAP_THRESHOLD set, bytes (0: left alone)
  std::size_t trim_threshold = 0;   // M_TRIM_THRESHOLD set, bytes (0: left alone)
  std::size_t arena_max = 0;        // M_ARENA_MAX set (0: left alone)
};
// glibc's largest adaptive mmap threshold, set from the start, and a trim threshold that keeps a
// streamed transfer's chunks in the heap without holding a burst's memory for good (Note [Malloc
// settings for transport]).
inline constexpr std::size_t kTransportMmapThreshold = std::size_t{32} << 20;
inline constexpr std::size_t kTransportTrimThreshold = std::size_t{8} << 20;
// The arenas a transport process shares: max(2, cores).
std::size_t transport_arena_max();
// What tune_malloc_for_transport would do with this environment (`getenv` looks a name up; nullptr
// when unset), without doing it.
MallocTuning decide_malloc_tuning(const std::function<const char*(const char*)>& getenv);
// Applies the settings on the first call (thread-safe); every call returns that first outcome.
const MallocTuning& tune_malloc_for_transport();

// The GLIBC_TUNABLES value a serving process runs with (Note [Malloc settings for servers]):
// `getenv`'s own value with glibc's per-thread cache turned off added. Nullopt, with *reason,
// where that does not apply: tune_malloc_for_transport would stand down (its reasons), or
// GLIBC_TUNABLES already names a glibc.malloc.tcache tunable (the user's, or ours after the
// re-exec).
std::optional<std::string> server_glibc_tunables(const std::function<const char*(const char*)>& getenv,
                                                 std::string* reason);
inline constexpr const char* kServerTcacheTunable = "glibc.malloc.tcache_count=0";

}  // namespace tessera::internal
