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
    stop_ = true;  // the loop returns once nothing is pending
    cv_.notify_all();
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
  pending_[static_cast<std::size_t>(index)].push_back(
      Pending{stream, cuda_event, std::move(event), std::chrono::steady_clock::now()});
  ++num_pending_;
  cv_.notify_one();
}

// Note [Completion polling]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// While events are pending the thread polls them (cudaEventQuery) and sleeps between polls, for a
// sixteenth of the time the oldest has been pending, at least 5 us and at most 200 us: a completion
// is seen within about 6% of the work's own time, and a long kernel costs a few dozen wake-ups.
// TensorFlow's EventMgr polls the same way (every 10 us). Two designs before were worse: a spin
// of 1 ms after activity held a core; a host function enqueued after each record to wake the
// thread (cudaLaunchHostFunc) let it sleep, but a host function holds its stream until CUDA's
// callback thread has run it, so every record stalled the GPU. On an H200 (benchmarks/results/
// gpu-h200-2026-12-04.md) polling took a 256 MiB add from 0.28-0.31 ms to 0.221 ms (the spin:
// 0.206), 0.93x the device-to-device copy's rate, and the digits training steps on the GPU from
// 0.90-1.45 ms to 0.76-1.03 ms. The thread's timer slack is 1 us (Linux's default 50 us would
// dwarf the short sleeps).
std::chrono::microseconds CudaCompletionQueue::poll_interval(std::chrono::steady_clock::duration waited) {
  using std::chrono::microseconds;
  return std::clamp(std::chrono::duration_cast<microseconds>(waited) / 16, microseconds(5), microseconds(200));
}

void CudaCompletionQueue::loop() {
  (void)cudaSetDevice(ordinal_);
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // Note [Completion polling]
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::deque<std::function<void()>> tasks;
    tasks.swap(tasks_);
    std::vector<Done> done;
    auto oldest = std::chrono::steady_clock::time_point::max();
    for (auto& queue : pending_) {
      while (!queue.empty()) {
        const cudaError_t e = cudaEventQuery(queue.front().cuda_event);
        if (e == cudaErrorNotReady) {
          oldest = std::min(oldest, queue.front().added);
          break;
        }
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
      continue;
    }
    if (num_pending_ > 0) {
      cv_.wait_for(lock, poll_interval(std::chrono::steady_clock::now() - oldest), [&] { return !tasks_.empty(); });
      continue;
    }
    if (stop_) return;
    cv_.wait(lock, [&] { return !tasks_.empty() || num_pending_ > 0 || stop_; });
  }
}

void CudaCompletionQueue::deliver(Done& d) {
  CudaStream* stream = d.pending.stream;
  if (!d.status.ok()) stream->set_error(d.status);
  // A record's status is the stream's when the record was issued (an error then is never
  // issued: it completes at once), so only a failure seen on the GPU can change it. Completed
  // before the CUDA event goes back to the pool: until then a stream may wait on it natively.
  d.pending.event.complete(d.status);
  stream->device().give_event(d.pending.cuda_event);
  stream->delivered();
}

}  // namespace tessera::internal
