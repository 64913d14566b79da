// The CPU device's inter-op thread pool: a fixed set of workers, each with its own queue, that
// steal from each other when idle.
//
//   tessera::internal::ThreadPool pool(4);
//   pool.schedule([] { ... });
//
// schedule() may be called from any thread, including pool workers (which then push to their own
// queue, keeping a producer's follow-up work warm in its cache). The destructor runs every closure
// already scheduled, then joins. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::internal {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void schedule(std::function<void()> fn);
  int num_threads() const { return static_cast<int>(workers_.size()); }
  // True on a thread of this pool.
  bool on_pool_thread() const;

  // The process-wide pool (one thread per hardware thread, at least 2), created on first use.
  static ThreadPool& shared();

  // How long a worker with nothing to do keeps looking before it sleeps (Note [Spinning before
  // sleeping] in thread_pool.cc).
  static constexpr std::chrono::microseconds kSpinBeforeSleep{200};

 private:
  struct Worker {
    std::mutex mu;
    std::deque<std::function<void()>> queue;  // guarded by mu
  };
  void worker_loop(int index);
  bool try_pop(int index, std::function<void()>* fn);

  std::vector<std::unique_ptr<Worker>> queues_;
  std::vector<std::thread> workers_;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::atomic<int64_t> pending_{0};   // closures scheduled and not yet taken
  std::atomic<int> sleepers_{0};
  std::atomic<unsigned> next_queue_{0};
  bool stopping_ = false;             // guarded by wake_mu_
};

// Work that must not hold up its caller (closing a session waits for its runs) on a detached
// thread of its own. A process at its thread limit makes std::thread throw, which must not
// terminate a server:
// Runs `fn` on a detached thread; false (and `fn` not run) when no thread can be made, so that the
// caller answers with an error instead.
bool try_run_detached(std::function<void()> fn);
// Runs `fn` on a detached thread, or on the caller's thread when no thread can be made.
void run_detached_or_inline(std::function<void()> fn);

}  // namespace tessera::internal
