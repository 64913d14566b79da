#include "core/timer.h"

#include <system_error>

#include "core/map_util.h"

namespace tessera::internal {

TimerQueue& TimerQueue::global() {
  static TimerQueue* timer = new TimerQueue();  // never destroyed: see the header
  return *timer;
}

TimerQueue::~TimerQueue() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

StatusOr<TimerQueue::Id> TimerQueue::schedule(Clock::time_point at, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  if (!started_) {
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (const std::system_error& e) {
      return errors::resource_exhausted("no thread for the timer ({}): the process's thread limit", e.what());
    }
    started_ = true;
  }
  const Id id = next_id_++;
  const bool earliest = due_.empty() || at < due_.begin()->first.first;
  due_.emplace(std::make_pair(at, id), std::move(fn));
  deadline_of_.emplace(id, at);
  if (earliest) cv_.notify_all();
  return id;
}

bool TimerQueue::cancel(Id id) {
  std::function<void()> dropped;  // destroyed outside the lock: it may own anything
  std::lock_guard<std::mutex> l(mu_);
  auto it = deadline_of_.find(id);
  if (it == deadline_of_.end()) return false;
  auto entry = due_.find({it->second, id});
  dropped = std::move(entry->second);
  due_.erase(entry);
  deadline_of_.erase(it);
  shrink_if_sparse(deadline_of_);
  return true;
}

std::size_t TimerQueue::pending() {
  std::lock_guard<std::mutex> l(mu_);
  return due_.size();
}

void TimerQueue::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(l);
      continue;
    }
    auto first = due_.begin();
    const Clock::time_point at = first->first.first;  // a copy: cancel() may erase the entry while we wait
    if (Clock::now() < at) {
      cv_.wait_until(l, at);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    deadline_of_.erase(first->first.second);
    due_.erase(first);
    shrink_if_sparse(deadline_of_);
    l.unlock();
    fn();
    fn = nullptr;  // destroyed outside the lock
    l.lock();
  }
  auto dropped = std::move(due_);  // destroyed outside the lock
  deadline_of_.clear();
  l.unlock();
}

}  // namespace tessera::internal
