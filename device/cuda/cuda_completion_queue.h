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
struct CUstream_st;

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

  // Enqueues on `stream`, after a record, a host function that wakes this thread when the GPU
  // gets there: the thread sleeps while the GPU works instead of polling. False when CUDA refused
  // it (the thread then finds the completion by its fallback poll).
  bool wake_after(CUstream_st* stream);

 private:
  struct Pending {
    CudaStream* stream;  // Not owned.
    CUevent_st* cuda_event;
    Event event;
  };
  struct Done {
    Pending pending;
    Status status;  // the CUDA error, if any
  };

  void loop();
  static void deliver(Done& d);
  static void host_wake(void* self);  // a CUDA host function: no CUDA calls in it

  const int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;     // guarded by mu_
  std::vector<std::deque<Pending>> pending_;    // by stream index, in record order; guarded by mu_
  int64_t num_pending_ = 0;                     // guarded by mu_
  uint64_t wakes_ = 0;                          // host functions run; guarded by mu_
  int64_t wakes_in_flight_ = 0;                 // host functions enqueued, not yet run; guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  std::thread thread_;                          // last: starts after the fields above exist
};

}  // namespace tessera::internal
