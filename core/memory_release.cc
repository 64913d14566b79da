#include "core/memory_release.h"

#include <atomic>
#include <chrono>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/timer.h"

namespace tessera::internal {
namespace {

std::atomic<bool> release_scheduled{false};

}  // namespace

bool release_memory_now() {
#if defined(__GLIBC__)
  malloc_trim(0);  // every arena: whole free pages go back (madvise); the main heap's top is cut
  return true;
#else
  return false;
#endif
}

void request_memory_release() {
  if (release_scheduled.exchange(true, std::memory_order_acq_rel)) return;
  auto armed = TimerQueue::global().schedule(TimerQueue::Clock::now() + std::chrono::seconds(1), [] {
    release_scheduled.store(false, std::memory_order_release);  // frees from here on ask again
    release_memory_now();
  });
  if (!armed.ok()) release_scheduled.store(false, std::memory_order_release);  // no timer: next time
}

}  // namespace tessera::internal
