// CudaCompletionQueue: a CudaDevice's completion thread (device/cuda/ sources only). It is the
// thread Note [CUDA streams] (device/cuda/cuda_stream.cc) completes events and runs then() on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/stream.h"

struct CUevent_st;

namespace tessera::internal {

class CudaStream;

// The device's completion thread: delivers the completions of recorded CUDA events, in order per
// stream, and runs posted tasks. Thread-safe.
class CudaCompletionQueue {
 public:
  CudaCompletionQueue(int ordinal, int num_streams);
  // Delivers everything pending, then joins.
  ~CudaCompletionQueue();

  void post(std::function<void()> fn);

  // `cuda_event` was recorded on `stream` after everything `event` stands for.
  void add(CudaStream* stream, int index, CUevent_st* cuda_event, Event event);

  // How long the thread sleeps between polls of the pending events, `waited` after the oldest
  // was added (Note [Completion polling] in cuda_completion_queue.cc).
  static std::chrono::microseconds poll_interval(std::chrono::steady_clock::duration waited);

 private:
  struct Pending {
    CudaStream* stream;  // Not owned.
    CUevent_st* cuda_event;
    Event event;
    std::chrono::steady_clock::time_point added;
  };
  struct Done {
    Pending pending;
    Status status;  // the CUDA error, if any
  };

  void loop();
  static void deliver(Done& d);

  const int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;     // guarded by mu_
  std::vector<std::deque<Pending>> pending_;    // by stream index, in record order; guarded by mu_
  int64_t num_pending_ = 0;                     // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  std::thread thread_;                          // last: starts after the fields above exist
};

}  // namespace tessera::internal
