// TimerQueue: runs short functions at deadlines on one thread (a step's deadline, an idle session's
// reclamation), so that waiting for a deadline holds no thread of its own.
//
//   auto id = TimerQueue::global().schedule(steady_clock::now() + 5s, [w] { if (auto s = w.lock()) s->expire(); });
//   if (id.ok()) ... TimerQueue::global().cancel(id.value());   // true: removed before it ran
//
// A function runs on the timer's thread, after its deadline, at most once, and must not block:
// cancel a step, queue work elsewhere. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/status.h"

namespace tessera::internal {

// The longest delay the process's clocks take: a century stands for never (longer ones would
// overflow the deadlines made from them). Timeouts and leases are clamped to it.
inline constexpr std::chrono::milliseconds kLongestDelay = std::chrono::hours(24 * 365 * 100);

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  // The process's timer: started on first use, never destroyed (functions scheduled when the
  // process exits are dropped unrun).
  static TimerQueue& global();

  TimerQueue() = default;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;
  ~TimerQueue();  // drops what has not run and joins the thread

  // Runs `fn` at or after `at`. ResourceExhausted when the timer's thread cannot be started (the
  // process's thread limit); it is tried again by the next call.
  [[nodiscard]] StatusOr<Id> schedule(Clock::time_point at, std::function<void()> fn);
  // Removes `id`'s function: true when it had not started (it never will), false when it ran,
  // is running or was cancelled already. Does not wait for a running function.
  bool cancel(Id id);
  // Functions waiting (for tests).
  std::size_t pending();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  Id next_id_ = 1;         // guarded by mu_
  // By deadline, then by id (the order of scheduling); and each id's deadline, for cancel().
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> due_;  // guarded by mu_
  std::unordered_map<Id, Clock::time_point> deadline_of_;                  // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera::internal
