// Gives the memory the allocator holds free back to the operating system, soon after a burst of
// frees (sessions of vanished clients closed, their partitions dropped): without it glibc's malloc
// keeps what a burst freed as the process's resident memory for good.
//
//   request_memory_release();   // cheap; the release runs once, a second after the first request
#pragma once

namespace tessera::internal {

// Schedules one release (malloc_trim on glibc; nothing elsewhere) on the process's timer a second
// from now, unless one is scheduled already: a burst of requests costs one release after the
// frees, and a request after that release schedules the next.
void request_memory_release();
// Releases now (for tests); true where the allocator supports it.
bool release_memory_now();

}  // namespace tessera::internal
