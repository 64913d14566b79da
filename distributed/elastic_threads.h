// ElasticThreads: the worker's threads for runs that may block for long (Note [Worker] in
// worker.cc).
//
//   ElasticThreads threads;
//   threads.run([] { session.run(...); });   // never waits for a thread; may outlive `threads`
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace tessera::internal {

// Threads for runs that may block for long: a run never waits for a thread (a new one starts
// when none is idle, so runs that wait on each other cannot deadlock), and in steady state no
// thread is created per run (idle threads wait for the next one; a thread idle for 10 s exits).
// The threads share the queue's state, so the pool may be destroyed from one of its own runs.
class ElasticThreads {
 public:
  // Starts a thread running `body` (detached); throws std::system_error when it cannot.
  using Spawn = std::function<void(std::function<void()> body)>;
  static void spawn_thread(std::function<void()> body) { std::thread(std::move(body)).detach(); }

  explicit ElasticThreads(Spawn spawn = &spawn_thread) : core_(std::make_shared<Core>()), spawn_(std::move(spawn)) {}
  ElasticThreads(const ElasticThreads&) = delete;
  ElasticThreads& operator=(const ElasticThreads&) = delete;
  ~ElasticThreads() {
    std::lock_guard<std::mutex> l(core_->mu);
    core_->stopping = true;  // idle threads leave; busy ones finish the queue first
    core_->cv.notify_all();
  }

  // Runs `fn` on an idle thread or a new one. False, with `fn` not run (and destroyed), when no
  // thread can be made (the process's thread or memory limit): the caller answers with an error.
  [[nodiscard]] bool run(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(core_->mu);
    core_->work.push_back(std::move(fn));
    if (core_->idle >= static_cast<int>(core_->work.size())) {
      core_->cv.notify_one();
      return true;
    }
    try {
      spawn_([core = core_] { loop(*core); });
    } catch (const std::system_error&) {
      // Not left queued: the busy threads may be blocked for as long as their runs (a queue).
      core_->work.pop_back();
      return false;
    }
    return true;
  }

 private:
  struct Core {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> work;  // guarded by mu
    int idle = 0;                            // guarded by mu
    bool stopping = false;                   // guarded by mu
  };
  static void loop(Core& c) {
    std::unique_lock<std::mutex> l(c.mu);
    for (;;) {
      if (!c.work.empty()) {
        auto fn = std::move(c.work.front());
        c.work.pop_front();
        l.unlock();
        fn();
        fn = nullptr;  // destroyed outside the lock
        l.lock();
        continue;
      }
      if (c.stopping) return;
      ++c.idle;
      const bool woken = c.cv.wait_for(l, std::chrono::seconds(10), [&] { return c.stopping || !c.work.empty(); });
      --c.idle;
      if (!woken) return;  // idle too long
    }
  }
  std::shared_ptr<Core> core_;
  const Spawn spawn_;
};

}  // namespace tessera::internal
