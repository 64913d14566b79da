// core/host_blocks: the cache of large host blocks (Note [Large host blocks]) — reuse by size
// class, the limit, release, tensors of a MiB and more, many threads at once — the transport's
// malloc settings (Note [Malloc settings for transport]), and the streamed
// frames' building blocks in transport/rpc_stream (split, descriptor, assembly) without sockets.
#include "core/host_blocks.h"

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor_buffer.h"
#include "host/child_process.h"
#include "tessera/tensor.h"
#include "tessera/tessera.h"
#include "testing/fake_pinner.h"
#include "testing/test_util.h"
#include "transport/rpc_stream.h"

namespace tessera::internal {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

#if defined(__SANITIZE_ADDRESS__) || defined(TESSERA_TSAN)
constexpr std::size_t kBlockAlignment = kHostBlockAlignment;  // sanitizer builds use aligned_alloc
#else
constexpr std::size_t kBlockAlignment = 2 * kMiB;
#endif

// Sets the cache's limit for one test, empty, and puts the old limit back.
class HostBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    old_limit_ = set_host_block_cache_limit(64 * kMiB);
    release_host_block_cache();
  }
  void TearDown() override {
    release_host_block_cache();
    set_host_block_cache_limit(old_limit_);
  }
  uint64_t old_limit_ = 0;
};

TEST_F(HostBlocksTest, AFreedBlockIsReusedForTheSameSizeClassOnly) {
  const HostBlockCacheStats before = host_block_cache_stats();
  void* p = allocate_host_block(3 * kMiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kBlockAlignment, 0u);
  std::memset(p, 0x5a, 3 * kMiB);  // every byte is ours
  free_host_block(p, 3 * kMiB);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 3 * kMiB);
  // 3 MiB + 100 bytes is the next class (256 KiB steps between 2 and 4 MiB): a new block.
  void* other = allocate_host_block(3 * kMiB + 100);
  EXPECT_NE(other, p);
  // 3 MiB - 100 bytes rounds up to 3 MiB: the cached block, as its last owner left it.
  void* q = allocate_host_block(3 * kMiB - 100);
  EXPECT_EQ(q, p);
  EXPECT_EQ(static_cast<unsigned char*>(q)[3 * kMiB - 101], 0x5a);
  const HostBlockCacheStats after = host_block_cache_stats();
  EXPECT_EQ(after.allocations - before.allocations, 3u);
  EXPECT_EQ(after.reused - before.reused, 1u);
  EXPECT_EQ(after.cached_bytes, 0u);
  free_host_block(q, 3 * kMiB - 100);
  free_host_block(other, 3 * kMiB + 100);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 3 * kMiB + 3 * kMiB + 256 * 1024);
}

TEST_F(HostBlocksTest, TheLimitDropsTheOldestBlocksAndZeroCachesNothing) {
  set_host_block_cache_limit(8 * kMiB);
  void* a = allocate_host_block(3 * kMiB);
  void* b = allocate_host_block(3 * kMiB);
  void* c = allocate_host_block(3 * kMiB);
  const uint64_t released = host_block_cache_stats().released;
  free_host_block(a, 3 * kMiB);
  free_host_block(b, 3 * kMiB);
  free_host_block(c, 3 * kMiB);  // 9 MiB > 8 MiB: `a`, the oldest, goes back to the kernel
  HostBlockCacheStats s = host_block_cache_stats();
  EXPECT_EQ(s.cached_bytes, 6 * kMiB);
  EXPECT_EQ(s.limit_bytes, 8 * kMiB);
  EXPECT_EQ(s.released - released, 1u);
  // Newest first.
  void* first = allocate_host_block(3 * kMiB);
  void* second = allocate_host_block(3 * kMiB);
  EXPECT_EQ(first, c);
  EXPECT_EQ(second, b);
  free_host_block(first, 3 * kMiB);
  free_host_block(second, 3 * kMiB);
  // Lowering the limit trims at once; 0 turns caching off.
  EXPECT_EQ(set_host_block_cache_limit(0), 8 * kMiB);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0u);
  void* d = allocate_host_block(kMiB);
  free_host_block(d, kMiB);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0u);
}

TEST_F(HostBlocksTest, ReleaseGivesEveryCachedBlockBack) {
  for (std::size_t mib : {1, 2, 5}) free_host_block(allocate_host_block(mib * kMiB), mib * kMiB);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 8 * kMiB);
  const uint64_t released = host_block_cache_stats().released;
  release_host_block_cache();
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0u);
  EXPECT_EQ(host_block_cache_stats().released - released, 3u);
}

TEST_F(HostBlocksTest, TensorsOfAMiBAndMoreLiveInCachedBlocks) {
  const HostBlockCacheStats before = host_block_cache_stats();
  const void* data = nullptr;
  {
    Tensor t(DType::Float32, Shape{1 << 20});  // 4 MiB
    data = t.raw_data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % Tensor::kAlignment, 0u);
    t.mutable_data<float>()[(1 << 20) - 1] = 3.5f;
  }
  {
    Tensor again(DType::Float32, Shape{1 << 20});
    EXPECT_EQ(again.raw_data(), data);  // the same pages
  }
  {
    Tensor small(DType::Float32, Shape{1000});  // malloc's
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % Tensor::kAlignment, 0u);
  }
  const HostBlockCacheStats after = host_block_cache_stats();
  EXPECT_EQ(after.allocations - before.allocations, 2u);
  EXPECT_EQ(after.reused - before.reused, 1u);
}

// ---- Pinning (Note [Pinned host blocks]) ----

using tessera::testing::FakePinner;

// Installs the fake pinner (with a 64 MiB limit) for one test; the cache is emptied after it, which
// unpins what it pinned.
class PinnedBlocksTest : public HostBlocksTest {
 protected:
  FakePinner::Scope pinning_{64 * kMiB};
};

TEST_F(PinnedBlocksTest, ALargeTensorIsPinnedOnceAndStaysPinnedThroughTheCache) {
  const void* data = nullptr;
  {
    Tensor t(DType::Float32, Shape{1 << 20});  // 4 MiB: one large block
    data = t.raw_data();
    EXPECT_FALSE(host_memory_pinned(t.raw_data(), t.bytes()));
    EXPECT_TRUE(pin_host_tensor(t));
    EXPECT_TRUE(pin_host_tensor(t)) << "already pinned";
    EXPECT_TRUE(host_memory_pinned(t.raw_data(), t.bytes()));
    ASSERT_EQ(FakePinner::pins(), 1u);
    // The whole block is pinned: it starts before the data (the buffer's header) and holds it all.
    const auto [block, size] = FakePinner::pinned[0];
    EXPECT_LE(static_cast<const char*>(block), static_cast<const char*>(data));
    EXPECT_GE(static_cast<const char*>(block) + size, static_cast<const char*>(data) + t.bytes());
    // A view of part of it is in the same pinned block.
    EXPECT_TRUE(host_memory_pinned(static_cast<const char*>(data) + 4096, 4096));
  }
  EXPECT_EQ(host_block_pin_stats().pinned_blocks, 1u) << "cached blocks stay pinned";
  {
    Tensor again(DType::Float32, Shape{1 << 20});  // the cached block
    EXPECT_EQ(again.raw_data(), data);
    EXPECT_TRUE(host_memory_pinned(again.raw_data(), again.bytes()));
    EXPECT_TRUE(pin_host_tensor(again));
  }
  EXPECT_EQ(FakePinner::pins(), 1u) << "a steady state pins nothing";
  EXPECT_EQ(FakePinner::unpins(), 0u);
  release_host_block_cache();
  ASSERT_EQ(FakePinner::unpins(), 1u) << "unpinned when unmapped";
  EXPECT_EQ(FakePinner::unpinned[0], FakePinner::pinned[0]);
  EXPECT_EQ(host_block_pin_stats().pinned_bytes, 0u);
}

TEST_F(PinnedBlocksTest, SmallTensorsAndForeignMemoryAreNeverPinned) {
  Tensor small(DType::Float32, Shape{1000});  // malloc's: shares pages with other allocations
  EXPECT_FALSE(pin_host_tensor(small));
  std::vector<char> heap(4 * kMiB);
  EXPECT_FALSE(pin_host_memory(heap.data(), heap.size()));
  Tensor big(DType::Float32, Shape{1 << 20});
  // A range running past the end of its block is not in one block.
  EXPECT_FALSE(pin_host_memory(big.raw_data(), 64 * kMiB));
  EXPECT_EQ(FakePinner::pins(), 0u);
}

TEST_F(PinnedBlocksTest, TheLimitAndAFailingPinnerLeaveMemoryUnpinned) {
  set_pinned_host_limit(5 * kMiB);
  Tensor a(DType::Float32, Shape{1 << 20});  // a 4 MiB block
  Tensor b(DType::Float32, Shape{1 << 20});
  EXPECT_TRUE(pin_host_tensor(a));
  EXPECT_FALSE(pin_host_tensor(b)) << "8 MiB would pass the 5 MiB limit";
  EXPECT_EQ(host_block_pin_stats().refused, 1u);
  set_pinned_host_limit(64 * kMiB);
  FakePinner::fail = true;
  EXPECT_FALSE(pin_host_tensor(b));
  EXPECT_EQ(host_block_pin_stats().failures, 1u);
  EXPECT_FALSE(host_memory_pinned(b.raw_data(), b.bytes()));
  FakePinner::fail = false;
  EXPECT_TRUE(pin_host_tensor(b));
  // Without a pinner nothing is pinned (and what was pinned stays so until unmapped).
  set_host_block_pinner({});
  Tensor c(DType::Float32, Shape{3 << 20});
  EXPECT_FALSE(pin_host_tensor(c));
  EXPECT_TRUE(host_memory_pinned(a.raw_data(), a.bytes()));
}

TEST_F(PinnedBlocksTest, ConcurrentPinsOfOneBlockPinItOnce) {
  Tensor t(DType::Float32, Shape{1 << 20});
  std::vector<std::thread> threads;
  std::atomic<int> pinned_now{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      // A thread may find another one pinning and get false; afterwards everyone sees it pinned.
      if (pin_host_tensor(t)) pinned_now.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GE(pinned_now.load(), 1);
  EXPECT_EQ(FakePinner::pins(), 1u);
  EXPECT_TRUE(pin_host_tensor(t));
}

TEST_F(HostBlocksTest, ManyThreadsAllocateWriteAndFree) {
  set_host_block_cache_limit(32 * kMiB);
  const HostBlockCacheStats before = host_block_cache_stats();
  constexpr int kThreads = 8, kRounds = 100;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kRounds; ++i) {
        const std::size_t bytes = kMiB + rng() % (5 * kMiB);
        auto* p = static_cast<unsigned char*>(allocate_host_block(bytes));
        if (p == nullptr) {
          ++corrupted;
          continue;
        }
        const auto mark = static_cast<unsigned char>(t * 31 + i);
        p[0] = mark;
        p[bytes / 2] = mark;
        p[bytes - 1] = mark;
        std::this_thread::yield();
        if (p[0] != mark || p[bytes / 2] != mark || p[bytes - 1] != mark) ++corrupted;  // shared with another
        free_host_block(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  const HostBlockCacheStats after = host_block_cache_stats();
  EXPECT_EQ(after.allocations - before.allocations, uint64_t{kThreads * kRounds});
  EXPECT_LE(after.cached_bytes, 32 * kMiB);
}

// ---- Note [Malloc settings for transport] ----

// An environment of `vars` (name, value) pairs for decide_malloc_tuning.
std::function<const char*(const char*)> env_of(std::vector<std::pair<std::string, std::string>> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    for (const auto& [k, v] : vars) {
      if (k == name) return v.c_str();
    }
    return nullptr;
  };
}

#if TESSERA_TEST_MALLOC_TUNING
TEST(MallocTuningTest, AppliedByDefaultAndNotWhenTheUserOptsOutOrChoseTheirOwn) {
  const MallocTuning plain = decide_malloc_tuning(env_of({}));
  EXPECT_TRUE(plain.applied) << plain.reason;
  EXPECT_EQ(plain.mmap_threshold, kTransportMmapThreshold);
  EXPECT_EQ(plain.trim_threshold, kTransportTrimThreshold);
  EXPECT_EQ(plain.arena_max, transport_arena_max());
  EXPECT_GE(plain.arena_max, 2u);
  EXPECT_TRUE(decide_malloc_tuning(env_of({{"TESSERA_MALLOC_TUNING", "1"}})).applied);
  EXPECT_TRUE(decide_malloc_tuning(env_of({{"GLIBC_TUNABLES", "glibc.pthread.rseq=0"}})).applied);

  const std::vector<std::pair<std::string, std::string>> refusals = {
      {"TESSERA_MALLOC_TUNING", "0"},
      {"MALLOC_MMAP_THRESHOLD_", "131072"},
      {"MALLOC_TRIM_THRESHOLD_", "0"},
      {"MALLOC_TOP_PAD_", "0"},
      {"MALLOC_ARENA_MAX", "8"},
      {"GLIBC_TUNABLES", "glibc.pthread.rseq=0:glibc.malloc.trim_threshold=1"},
      {"GLIBC_TUNABLES", "glibc.malloc.arena_max=1"},
      {"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536"},
  };
  for (const auto& var : refusals) {
    const MallocTuning t = decide_malloc_tuning(env_of({var}));
    EXPECT_FALSE(t.applied) << var.first;
    EXPECT_EQ(t.mmap_threshold, 0u) << var.first;
    EXPECT_EQ(t.trim_threshold, 0u) << var.first;
    EXPECT_EQ(t.arena_max, 0u) << var.first;
    EXPECT_NE(t.reason.find(var.first), std::string::npos) << var.first << ": " << t.reason;
  }
}

// Note [Malloc settings for servers]: the tcache tunable is added to what GLIBC_TUNABLES holds,
// once, and not where the user chose settings of their own; a tcache tunable leaves mallopt's
// settings free to apply (after the re-exec, the transport still sets them).
TEST(MallocTuningTest, AServerAddsTheTcacheTunableOnceAndOnlyWhereTheTuningApplies) {
  std::string reason;
  EXPECT_EQ(server_glibc_tunables(env_of({}), &reason), std::optional<std::string>("glibc.malloc.tcache_count=0"));
  EXPECT_EQ(server_glibc_tunables(env_of({{"GLIBC_TUNABLES", "glibc.pthread.rseq=0"}}), &reason),
            std::optional<std::string>("glibc.pthread.rseq=0:glibc.malloc.tcache_count=0"));
  EXPECT_EQ(server_glibc_tunables(env_of({{"GLIBC_TUNABLES", ""}}), &reason),
            std::optional<std::string>("glibc.malloc.tcache_count=0"));

  EXPECT_FALSE(server_glibc_tunables(env_of({{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"}}), &reason));
  EXPECT_EQ(reason, "in effect");
  EXPECT_FALSE(server_glibc_tunables(env_of({{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=3"}}), &reason));
  EXPECT_EQ(reason, "GLIBC_TUNABLES sets glibc.malloc.tcache");
  EXPECT_FALSE(server_glibc_tunables(env_of({{"GLIBC_TUNABLES", "glibc.malloc.tcache_max=64"}}), &reason));
  EXPECT_EQ(reason, "GLIBC_TUNABLES sets glibc.malloc.tcache");
  for (const auto& var : std::vector<std::pair<std::string, std::string>>{
           {"TESSERA_MALLOC_TUNING", "0"}, {"MALLOC_ARENA_MAX", "8"}, {"GLIBC_TUNABLES", "glibc.malloc.arena_max=4"}}) {
    EXPECT_FALSE(server_glibc_tunables(env_of({var}), &reason)) << var.first;
    EXPECT_NE(reason.find(var.first == "GLIBC_TUNABLES" ? "glibc.malloc.arena_max" : var.first), std::string::npos)
        << reason;
  }
  EXPECT_TRUE(decide_malloc_tuning(env_of({{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"}})).applied);
}

// A process in which apply_server_malloc_settings ran (run by the test below with an environment
// of its choosing): prints GLIBC_TUNABLES, whether a freed small block went to the arena's fast
// bins (tcache off) or stayed in the thread's cache (mallinfo2 counts the tcache's blocks as in
// use), and what the call said when it returned.
TEST(MallocTuningTest, DISABLED_ServerMallocProbe) {
  std::ifstream in("/proc/self/cmdline");
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string said = train::apply_server_malloc_settings(argv.data());
  static void* volatile block;  // volatile: the compiler may not drop the malloc and free
  block = std::malloc(40);
  const std::size_t before = mallinfo2().fsmblks;
  std::free(block);
  const bool tcache_off = mallinfo2().fsmblks > before;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::printf("probe: [%s] tcache %s, said '%s'\n", tunables != nullptr ? tunables : "unset", tcache_off ? "off" : "on",
              said.c_str());
  std::fflush(stdout);
}

// Note [Malloc settings for servers] in effect: the process runs again with the tcache off and the
// tunable added to the user's, unless the user chose otherwise.
TEST(MallocTuningTest, AServerProcessRunsAgainWithTheTcacheOffUnlessTheUserChoseOtherwise) {
  const std::vector<std::string> base = tessera::testing::environment_without_malloc_settings();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "probe: [glibc.malloc.tcache_count=0] tcache off, said 'in effect'"},
      {"GLIBC_TUNABLES=glibc.pthread.rseq=1",
       "probe: [glibc.pthread.rseq=1:glibc.malloc.tcache_count=0] tcache off, said 'in effect'"},
      {"GLIBC_TUNABLES=glibc.malloc.tcache_count=3",
       "probe: [glibc.malloc.tcache_count=3] tcache on, said 'GLIBC_TUNABLES sets glibc.malloc.tcache'"},
      {"TESSERA_MALLOC_TUNING=0", "probe: [unset] tcache on, said 'TESSERA_MALLOC_TUNING=0'"},
  };
  for (const auto& [extra, want] : cases) {
    std::vector<std::string> env = base;
    if (!extra.empty()) env.push_back(extra);
    tessera::internal::ChildProcess probe({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                           "--gtest_filter=MallocTuningTest.DISABLED_ServerMallocProbe"},
                                          env);
    const std::optional<std::string> line = tessera::testing::probe_line(probe);
    EXPECT_EQ(line.value_or("(nothing)"), want) << extra << ": " << probe.stderr_text();
    EXPECT_TRUE(probe.wait_exit(std::chrono::seconds(30)).has_value()) << extra;
  }
}

// The settings take effect: a 3 MiB malloc comes from a heap, not a fresh mapping (glibc's default
// threshold is 128 KiB, and ctest runs this test in a process of its own), and freeing it at the
// top of the heap gives nothing back to the kernel (the default trim threshold is 128 KiB).
TEST(MallocTuningTest, AMallocUnderTheThresholdComesFromTheHeapAndStaysThere) {
  const MallocTuning& t = tune_malloc_for_transport();
  if (!t.applied) GTEST_SKIP() << "not applied here: " << t.reason;
  EXPECT_EQ(&t, &tune_malloc_for_transport());  // once per process
  constexpr std::size_t kBytes = 3 * kMiB;
  static_assert(kBytes < kTransportMmapThreshold);
  const struct mallinfo2 before = mallinfo2();
  auto* p = static_cast<volatile char*>(std::malloc(kBytes));
  ASSERT_NE(p, nullptr);
  for (std::size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "a 3 MiB block was mapped on its own";
  EXPECT_GE(held.uordblks, before.uordblks + kBytes);
  std::free(const_cast<char*>(p));
  EXPECT_EQ(mallinfo2().arena, held.arena) << "the heap was trimmed";
}

// Threads share the transport's arenas: sixteen threads that malloc at once make no more heaps than
// transport_arena_max() (glibc's default makes one per thread, up to 8 per core). malloc_info
// lists the heaps; this test runs in a process of its own.
TEST(MallocTuningTest, ThreadsShareAtMostTheTransportsArenas) {
  const MallocTuning& t = tune_malloc_for_transport();
  if (!t.applied) GTEST_SKIP() << "not applied here: " << t.reason;
  if (t.arena_max >= 16) GTEST_SKIP() << "16 threads fit in " << t.arena_max << " arenas anyway";
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      ready++;
      while (ready.load() < 16) std::this_thread::yield();  // all of them malloc together
      for (int k = 0; k < 1000; ++k) std::free(std::malloc(64 + k));
    });
  }
  for (auto& th : threads) th.join();
  char* text = nullptr;
  std::size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(malloc_info(0, out), 0);
  std::fclose(out);
  const std::string info(text, size);
  std::free(text);
  int heaps = 0;
  for (std::size_t at = info.find("<heap nr="); at != std::string::npos; at = info.find("<heap nr=", at + 1)) ++heaps;
  EXPECT_GE(heaps, 1);
  EXPECT_LE(heaps, static_cast<int>(t.arena_max)) << info.substr(0, 400);
}

// A process that runs steps and opens no socket gets them too, from its first session (ctest runs
// this test in a process of its own: nothing applied them before). Without them a 20 MiB malloc
// is a mapping of its own: glibc's threshold starts at 128 KiB and grows only as mapped blocks
// are freed.
TEST(MallocTuningTest, MakingASessionAppliesThem) {
  const MallocTuning wanted = decide_malloc_tuning([](const char* name) -> const char* { return std::getenv(name); });
  if (!wanted.applied) GTEST_SKIP() << "not applied here: " << wanted.reason;
  Graph g;
  auto c = ops::constant(g, 2.0f);
  Session session(g);
  EXPECT_FLOAT_EQ(session.run(c).scalar<float>(), 2.0f);
  constexpr std::size_t kBytes = 20 * kMiB;
  static_assert(kBytes < kTransportMmapThreshold);
  const struct mallinfo2 before = mallinfo2();
  void* p = std::malloc(kBytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(mallinfo2().hblkhd, before.hblkhd) << "a 20 MiB block was mapped on its own";
  std::free(p);
}
#elif !defined(__GLIBC__) || defined(__SANITIZE_ADDRESS__) || defined(TESSERA_TSAN)
TEST(MallocTuningTest, NotAppliedWithoutGlibcOrUnderASanitizer) {
  const MallocTuning t = decide_malloc_tuning(env_of({}));
  EXPECT_FALSE(t.applied);
  EXPECT_FALSE(t.reason.empty());
  EXPECT_FALSE(tune_malloc_for_transport().applied);
  std::string reason;
  EXPECT_FALSE(server_glibc_tunables(env_of({}), &reason));
  EXPECT_EQ(reason, t.reason);
}
#endif

// ---- transport/rpc_stream ----

void no_free(void*, void*) {}

TEST(RpcStreamUnitTest, SplitLeavesPlaceholdersAndChunksReferenceTheFrames) {
  std::vector<char> big(kStreamMinBytes + 5);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::vector<zmq::message_t> frames;
  frames.emplace_back("header", 6);
  frames.emplace_back(big.data(), big.size(), &no_free, nullptr);
  frames.emplace_back("tail", 4);
  std::optional<ChunkedFrames> s = split_for_streaming(&frames);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(frames[0].to_string(), "header");
  EXPECT_EQ(frames[1].size(), 0u);
  EXPECT_EQ(frames[2].to_string(), "tail");
  ASSERT_EQ(s->descriptor.size(), 12u);
  ASSERT_EQ(s->chunks.size(), 3u);  // 1 MiB, 1 MiB, 5 bytes
#if defined(TESSERA_TSAN)
  // Under TSan the chunks reference a copy (frame_to_send in rpc_stream.cc).
  EXPECT_NE(s->chunks[0].data(), big.data());
#else
  EXPECT_EQ(s->chunks[0].data(), big.data());
#endif
  EXPECT_EQ(s->chunks[2].size(), 5u);

  // The receiving side rebuilds the frame from the chunks.
  StatusOr<Assembly> a = Assembly::start(s->descriptor, std::move(frames), -1);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a.value().missing_bytes(), big.size());
  for (const zmq::message_t& c : s->chunks) {
    EXPECT_FALSE(a.value().complete());
    ASSERT_TRUE(a.value().add(c).ok());
  }
  ASSERT_TRUE(a.value().complete());
  EXPECT_FALSE(a.value().add(s->chunks[2]).ok());  // nothing is missing any more
  std::vector<zmq::message_t> got = a.value().take();
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(got[1].size(), big.size());
  EXPECT_EQ(std::memcmp(got[1].data(), big.data(), big.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got[1].data()) % kBlockAlignment, 0u);

  // Small frames stay where they are.
  std::vector<zmq::message_t> small;
  small.emplace_back("h", 1);
  small.emplace_back(big.data(), kStreamMinBytes - 1, &no_free, nullptr);
  EXPECT_FALSE(split_for_streaming(&small).has_value());
  EXPECT_EQ(small[1].size(), kStreamMinBytes - 1);
}

TEST(RpcStreamUnitTest, AHugeFrameTakesAtMostMaxChunksOfWholeSteps) {
  // The chunks only reference the memory; nothing here reads it.
  static char dummy[1];
  const std::size_t huge = (std::size_t{3} << 30) + 12345;  // 3 GiB and a bit
  std::vector<zmq::message_t> frames;
  frames.emplace_back("h", 1);
  frames.emplace_back(dummy, huge, &no_free, nullptr);
  std::optional<ChunkedFrames> s = split_for_streaming(&frames);
  ASSERT_TRUE(s.has_value());
  EXPECT_LE(s->chunks.size(), kStreamMaxChunks);
  std::size_t total = 0;
  for (std::size_t i = 0; i < s->chunks.size(); ++i) {
    if (i + 1 < s->chunks.size()) {
      EXPECT_EQ(s->chunks[i].size() % (64 * 1024), 0u);
    }
    total += s->chunks[i].size();
  }
  EXPECT_EQ(total, huge);
}

TEST(RpcStreamUnitTest, AssemblyChecksTheDescriptorAndTheLimitBeforeAllocating) {
  auto frames = [] {
    std::vector<zmq::message_t> f;
    f.emplace_back("h", 1);
    f.emplace_back();
    return f;
  };
  auto entry = [](uint32_t index, uint64_t size) {
    zmq::message_t d(12);
    auto* p = static_cast<unsigned char*>(d.data());
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(index >> (8 * i));
    for (int i = 0; i < 8; ++i) p[4 + i] = static_cast<unsigned char>(size >> (8 * i));
    return d;
  };
  EXPECT_EQ(Assembly::start(zmq::message_t(5), frames(), -1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Assembly::start(entry(2, 10), frames(), -1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Assembly::start(entry(0, 10), frames(), -1).status().code(), ErrorCode::kInvalidArgument);  // not empty
  EXPECT_EQ(Assembly::start(entry(1, 0), frames(), -1).status().code(), ErrorCode::kInvalidArgument);
  // 2^63 bytes: refused by the overflow check, never allocated.
  EXPECT_EQ(Assembly::start(entry(1, uint64_t{1} << 63), frames(), -1).status().code(), ErrorCode::kInvalidArgument);
  StatusOr<Assembly> over = Assembly::start(entry(1, 100), frames(), 50);
  EXPECT_EQ(over.status().code(), ErrorCode::kResourceExhausted);
  StatusOr<Assembly> ok = Assembly::start(entry(1, 100), frames(), 101);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_FALSE(ok.value().add(zmq::message_t()).ok());     // an empty chunk
  EXPECT_FALSE(ok.value().add(zmq::message_t(101)).ok());  // longer than the frame lacks
  EXPECT_TRUE(ok.value().add(zmq::message_t(100)).ok());
  EXPECT_TRUE(ok.value().complete());
}

}  // namespace
}  // namespace tessera::internal
