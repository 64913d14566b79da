#include "device/cuda/cuda_completion_queue.h"

#include <sys/prctl.h>

#include <algorithm>

#include <cuda_runtime_api.h>

#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_status.h"

namespace tessera::internal {

CudaCompletionQueue::CudaCompletionQueue(int ordinal, int num_streams)
    : ordinal_(ordinal), pending_(static_cast<std::size_t>(num_streams)), thread_([this] { loop(); }) {}

CudaCompletionQueue::~CudaCompletionQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  thread_.join();
}

void CudaCompletionQueue::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back(std::move(fn));
  cv_.notify_one();
}

void CudaCompletionQueue::add(CudaStream* stream, int index, CUevent_st* cuda_event, Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_[static_cast<std::size_t>(index)].push_back(Pending{stream, cuda_event, std::move(event)});
  ++num_pending_;
  ++records_added_;
  last_activity_ = std::chrono::steady_clock::now();
  cv_.notify_one();
}

void CudaCompletionQueue::loop() {
  (void)cudaSetDevice(ordinal_);
  // Sleeps of this thread end within a microsecond of their time, not Linux's default 50 us
  // slack (which was most of a 256 MiB add's overhead on an H200).
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  // While records are pending: after activity (a completion, a new record), spin on
  // cudaEventQuery for kSpin, so that kernels of up to a millisecond complete with microseconds
  // of latency; then sleep between polls, twice as long each time up to kMaxSleep (a long kernel
  // costs some twenty thousand cheap wake-ups a second, and at most kMaxSleep of latency).
  using Clock = std::chrono::steady_clock;
  constexpr auto kSpin = std::chrono::microseconds(1000);
  constexpr auto kMinSleep = std::chrono::microseconds(10);
  constexpr auto kMaxSleep = std::chrono::microseconds(50);
  auto sleep = kMinSleep;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::deque<std::function<void()>> tasks;
    tasks.swap(tasks_);
    std::vector<Done> done;
    for (auto& queue : pending_) {
      while (!queue.empty()) {
        const cudaError_t e = cudaEventQuery(queue.front().cuda_event);
        if (e == cudaErrorNotReady) break;
        Status s;
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          s = cuda_error(e, "a stream operation failed on the GPU");
        }
        done.push_back(Done{std::move(queue.front()), std::move(s)});
        queue.pop_front();
        --num_pending_;
      }
    }
    if (!tasks.empty() || !done.empty()) {
      lock.unlock();
      for (auto& fn : tasks) fn();
      tasks.clear();
      for (Done& d : done) deliver(d);
      done.clear();
      lock.lock();
      last_activity_ = Clock::now();
      sleep = kMinSleep;
      continue;
    }
    if (num_pending_ > 0) {
      if (Clock::now() - last_activity_ < kSpin) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else {
        const uint64_t added = records_added_;
        cv_.wait_for(lock, sleep, [&] { return !tasks_.empty() || records_added_ != added; });
        sleep = std::min(sleep * 2, kMaxSleep);
      }
      continue;
    }
    if (stop_) return;
    cv_.wait(lock, [&] { return !tasks_.empty() || num_pending_ > 0 || stop_; });
    sleep = kMinSleep;
  }
}

void CudaCompletionQueue::deliver(Done& d) {
  CudaStream* stream = d.pending.stream;
  if (!d.status.ok()) stream->set_error(d.status);
  stream->device().give_event(d.pending.cuda_event);
  // A record's status is the stream's when the record was issued (an error then is never
  // issued: it completes at once), so only a failure seen on the GPU can change it.
  d.pending.event.complete(d.status);
  stream->delivered();
}

}  // namespace tessera::internal
