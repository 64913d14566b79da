// A one-shot latch with a bounded wait, like Python's threading.Event: for callbacks that arrive
// on other threads and for work a test holds until it decides. Header-only and free of gtest
// (benchmarks may include it, through kernel_runner.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tessera::testing {

class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Bounded, so that a broken test fails instead of hanging; whether the latch opened in time.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return open_; });
  }
  bool is_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace tessera::testing
