// The thread harness both impls of the queue workload share: N producer threads each put
// kItems / N elements, N consumer threads each take kItems / N and sum them; the time from
// releasing the (already started, waiting) threads to the last one ending is the iteration time.
#pragma once

#include <chrono>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

namespace queue_bench {

inline constexpr int kCapacity = 1000;
inline constexpr int kItems = 20000;  // per iteration, all producers together (divisible by 1, 4)

struct Result {
  double seconds = 0;
  int64_t sum = 0;  // of every dequeued element (each producer puts 1s: must equal kItems)
};

// Elements per call in the batched variants (enqueue_many / dequeue_many and their mutex twins).
inline constexpr int kBatch = 50;  // divides kItems / 4

// produce() puts `batch` elements of value 1; consume() takes `batch` elements and returns their
// sum.
template <class Produce, class Consume>
Result run_threads(int n, Produce produce, Consume consume, int batch = 1) {
  std::latch ready(2 * n + 1);
  std::latch go(1);
  std::vector<int64_t> sums(n, 0);
  std::vector<std::thread> threads;
  const int per_thread = kItems / n / batch;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, per_thread] {
      ready.count_down();
      go.wait();
      for (int i = 0; i < per_thread; ++i) produce();
    });
    threads.emplace_back([&, t, per_thread] {
      ready.count_down();
      go.wait();
      int64_t sum = 0;
      for (int i = 0; i < per_thread; ++i) sum += consume();
      sums[t] = sum;
    });
  }
  ready.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int64_t s : sums) r.sum += s;
  return r;
}

}  // namespace queue_bench
