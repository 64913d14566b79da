#include "device/cuda/cuda_staging_threads.h"

#include <cuda_runtime_api.h>

namespace tessera::internal {

CudaStagingThreads::CudaStagingThreads(int ordinal, int n) {
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this, ordinal] {
      (void)cudaSetDevice(ordinal);
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        auto fn = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        fn();
        lock.lock();
      }
    });
  }
}

CudaStagingThreads::~CudaStagingThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CudaStagingThreads::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

}  // namespace tessera::internal
