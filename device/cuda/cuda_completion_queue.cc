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
    std::unique_lock<std::mutex> lock(mu_);
    // The streams have drained, so their host functions are due; a faulted context never runs
    // them (nor any later), hence the bound.
    cv_.wait_for(lock, std::chrono::seconds(2), [&] { return wakes_in_flight_ == 0; });
    stop_ = true;
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
  pending_[static_cast<std::size_t>(index)].push_back(Pending{stream, cuda_event, std::move(event)});
  ++num_pending_;
  cv_.notify_one();
}

bool CudaCompletionQueue::wake_after(CUstream_st* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wakes_in_flight_;
  }
  if (cudaLaunchHostFunc(stream, &CudaCompletionQueue::host_wake, this) == cudaSuccess) return true;
  (void)cudaGetLastError();
  std::lock_guard<std::mutex> lock(mu_);
  --wakes_in_flight_;
  cv_.notify_all();
  return false;
}

void CudaCompletionQueue::host_wake(void* self) {
  auto* q = static_cast<CudaCompletionQueue*>(self);
  // The last touch of *q: the destructor waits for wakes_in_flight_ under mu_.
  std::lock_guard<std::mutex> lock(q->mu_);
  ++q->wakes_;
  --q->wakes_in_flight_;
  q->cv_.notify_all();
}

void CudaCompletionQueue::loop() {
  (void)cudaSetDevice(ordinal_);
  // Sleeps of this thread end within a microsecond of their time, not Linux's default 50 us
  // slack (which was most of a 256 MiB add's overhead on an H200).
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  // While records are pending the thread sleeps until a host function enqueued after a record
  // runs (wake_after), a task is posted, or kFallbackPoll passes: the GPU's progress wakes it, so
  // an idle or busy GPU costs no core. The fallback poll finds completions whose host function
  // never runs (a faulted context runs none) or could not be enqueued.
  constexpr auto kFallbackPoll = std::chrono::milliseconds(2);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Taken before polling: a host function that runs after the poll changes it, so the wait
    // below cannot miss its wake-up.
    const uint64_t wakes_seen = wakes_;
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
      continue;
    }
    if (num_pending_ > 0) {
      cv_.wait_for(lock, kFallbackPoll, [&] { return !tasks_.empty() || wakes_ != wakes_seen; });
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
