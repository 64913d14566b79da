// CudaStagingThreads: the threads that stage a CudaDevice's copies (device/cuda/ sources only).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::internal {

// Helpers of copy_to_device and copy_to_host: run the closures they are given (each stages pieces
// of one copy until none are left, or copies one piece out of staging), first come first served.
// Threads of their own rather than core/thread_pool.h's: each makes the GPU current once, as the
// launches it issues need. The destructor runs what is queued, then joins. Thread-safe.
class CudaStagingThreads {
 public:
  CudaStagingThreads(int ordinal, int n);
  ~CudaStagingThreads();
  int size() const { return static_cast<int>(threads_.size()); }
  void post(std::function<void()> fn);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace tessera::internal
