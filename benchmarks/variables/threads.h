// Shared by both impls of the variables workload.
#pragma once

#include <thread>
#include <vector>

namespace variables_bench {

inline constexpr int kCheckThreads = 8;
inline constexpr int kCheckUpdatesPerThread = 1000;

// Runs body() `per_thread` times on each of `threads` threads and joins them.
template <class F>
void hammer(int threads, int per_thread, F body) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) body();
    });
  }
  for (auto& t : ts) t.join();
}

}  // namespace variables_bench

// Thread counts: 1, 2, 4, 8, registered as ->Threads(1)->Threads(2)->Threads(4)->Threads(8)
// ->UseRealTime(): Time is wall time / total updates (all threads together); items_per_second is
// total updates per second.
