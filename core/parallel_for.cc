#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace tessera::internal {
namespace {

// Shared by the caller and its helpers (Note [Intra-op parallelism from the inter-op pool]).
struct Shards {
  int64_t total = 0;
  int64_t size = 0;   // elements per shard
  int64_t count = 0;  // shards
  const std::function<void(int64_t, int64_t)>* fn = nullptr;  // valid while a shard is unfinished
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::exception_ptr error;  // guarded by mu

  // Runs shards until none is left.
  void work() {
    for (int64_t s = next.fetch_add(1, std::memory_order_relaxed); s < count;
         s = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t begin = s * size;
      try {
        (*fn)(begin, std::min(total, begin + size));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == count) done.notify_all();
    }
  }
};

int hardware_threads() {
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return n;
}

}  // namespace

void parallel_for(const Runner* runner, int64_t total, int64_t min_shard,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  const int64_t most = std::max<int64_t>(1, total / std::max<int64_t>(1, min_shard));
  const int64_t count = runner == nullptr ? 1 : std::min<int64_t>(most, hardware_threads());
  if (count <= 1) {
    fn(0, total);
    return;
  }
  auto shards = std::make_shared<Shards>();
  shards->total = total;
  shards->size = (total + count - 1) / count;
  shards->count = (total + shards->size - 1) / shards->size;
  shards->fn = &fn;
  for (int64_t i = 1; i < shards->count; ++i) (*runner)([shards] { shards->work(); });
  shards->work();
  for (int64_t d = shards->done.load(std::memory_order_acquire); d < shards->count;
       d = shards->done.load(std::memory_order_acquire)) {
    shards->done.wait(d, std::memory_order_acquire);
  }
  if (shards->error) std::rethrow_exception(shards->error);
}

}  // namespace tessera::internal
