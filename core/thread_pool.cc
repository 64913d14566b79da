#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/denormals.h"

namespace tessera::internal {

namespace {
thread_local const ThreadPool* tls_pool = nullptr;
thread_local int tls_index = -1;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::max(1, num_threads);
  for (int i = 0; i < num_threads; ++i) queues_.push_back(std::make_unique<Worker>());
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::shared() {
  // Leaked on purpose: sessions may still schedule from static destructors.
  static ThreadPool* pool =
      new ThreadPool(std::max(2, static_cast<int>(std::thread::hardware_concurrency())));
  return *pool;
}

bool ThreadPool::on_pool_thread() const { return tls_pool == this; }

// Note [Scheduling touches nothing after the push]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Once `fn` is in a queue a worker may run it at once, and what it runs may end the pool's owner:
// a step's last closure, scheduled from a device's stream thread on a session's own pool, lets
// the session close and delete the pool while that thread is still in schedule() (TSan saw
// schedule's read of sleepers_ race with the pool's delete). So schedule counts the work and wakes
// a sleeper first, and pushes last: after the queue's unlock it touches the pool no more. A worker
// woken before the push sees pending_ > 0, finds nothing yet, and spins until the push lands
// (worker_loop never sleeps while pending_ > 0), so no wake-up is lost.
void ThreadPool::schedule(std::function<void()> fn) {
  int index = on_pool_thread() ? tls_index
                               : static_cast<int>(next_queue_.fetch_add(1, std::memory_order_relaxed) %
                                                  queues_.size());
  pending_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    // Taking the lock orders this notify after a sleeper's check of pending_.
    std::lock_guard<std::mutex> l(wake_mu_);
    wake_cv_.notify_one();
  }
  std::lock_guard<std::mutex> l(queues_[index]->mu);
  queues_[index]->queue.push_back(std::move(fn));
}

bool ThreadPool::try_pop(int index, std::function<void()>* fn) {
  const int n = static_cast<int>(queues_.size());
  // Own queue first (LIFO keeps the freshest work hot), then steal FIFO from the others.
  {
    auto& q = *queues_[index];
    std::lock_guard<std::mutex> l(q.mu);
    if (!q.queue.empty()) {
      *fn = std::move(q.queue.back());
      q.queue.pop_back();
      return true;
    }
  }
  for (int k = 1; k < n; ++k) {
    auto& q = *queues_[(index + k) % n];
    std::lock_guard<std::mutex> l(q.mu);
    if (!q.queue.empty()) {
      *fn = std::move(q.queue.front());
      q.queue.pop_front();
      return true;
    }
  }
  return false;
}

// Note [Spinning before sleeping]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A worker that runs out of work keeps looking, yielding its core between looks, for
// kSpinBeforeSleep before it sleeps on the condition variable. Waking a sleeping worker costs a
// step more than the futex: when every core is busy at the wake (the caller's thread running ops
// inline, the other worker finishing one), the scheduler queues the woken thread behind its waker
// and, as it ran less than half a millisecond ago, does not move it when the other core goes idle.
// `perf sched timehist` of the digits CNN's training step showed such waits of 1-4 ms with a core
// idle beside them. A training step hands over work every few hundred microseconds, so a worker
// that spins that long is still on its core when the next op or shard comes (figures:
// benchmarks/README.md, "The pool's spin"). TensorFlow's pools spin likewise (Eigen's thread pool
// looks some thousands of times before it sleeps). The price: an idle pool yields for 200 us
// after its last closure.
void ThreadPool::worker_loop(int index) {
  tls_pool = this;
  tls_index = index;
  flush_denormals_on_this_thread();  // kernels' shards run here (Note [Denormals flushed])
  std::function<void()> fn;
  for (;;) {
    if (pending_.load(std::memory_order_seq_cst) > 0) {
      if (try_pop(index, &fn)) {
        pending_.fetch_sub(1, std::memory_order_seq_cst);
        fn();
        fn = nullptr;
        continue;
      }
      // Counted but not pushed yet (Note [Scheduling touches nothing after the push]), or taken.
      std::this_thread::yield();
    }
    // Look again for a while before sleeping (Note [Spinning before sleeping]).
    bool found = false;
    const auto spin_end = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    for (int spin = 0; !found && (spin < 64 || std::chrono::steady_clock::now() < spin_end); ++spin) {
      if (pending_.load(std::memory_order_relaxed) > 0) found = true;
      else std::this_thread::yield();
    }
    if (found) continue;
    std::unique_lock<std::mutex> l(wake_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_cv_.wait(l, [&] { return stopping_ || pending_.load(std::memory_order_seq_cst) > 0; });
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (stopping_ && pending_.load(std::memory_order_seq_cst) == 0) return;
  }
}

bool try_run_detached(std::function<void()> fn) {
  try {
    std::thread(std::move(fn)).detach();
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

void run_detached_or_inline(std::function<void()> fn) {
  // Shared: when std::thread throws, the copy it was given is gone and this one does the work.
  auto shared = std::make_shared<std::function<void()>>(std::move(fn));
  if (!try_run_detached([shared] { (*shared)(); })) (*shared)();
}

}  // namespace tessera::internal
