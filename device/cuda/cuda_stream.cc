#include "device/cuda/cuda_device.h"

#include <utility>

#include <cuda_runtime_api.h>

#include "device/cuda/cuda_completion_queue.h"
#include "device/cuda/cuda_status.h"

namespace tessera::internal {

namespace {
// The owner tag of the CUDA events attached to tessera Events (Event::set_native): one for every
// GPU of the process, since a stream may wait on any GPU's event.
const char kCudaEventOwner = 0;
}  // namespace

// Note [CUDA streams]
// ~~~~~~~~~~~~~~~~~~~
// CudaStream implements Note [Devices and streams] (core/stream.cc) over a CUDA stream:
//
// * GPU work (kernels, cudaMemcpyAsync, cuBLAS) goes in through launch(fn): a host-side queue in
//   front of the CUDA stream hands fn the raw stream in order. Normally the queue is empty and fn
//   runs at once on the caller's thread, which only launches (it never waits for the GPU).
// * record(e) issues cudaEventRecord of a pooled CUDA event and hands it to the device's
//   completion thread, which polls the pending events of every stream in order (cudaEventQuery,
//   with short sleeps between polls: Note [Completion polling] in cuda_completion_queue.cc; no
//   host function in the stream, which would hold it) and completes the tessera Event there, with
//   the stream's status or the CUDA error. then(done) is a record, so `done` runs on that thread,
//   ours: it may launch GPU work. Records are few: stream-ordered kernels record nothing of their
//   own.
// * wait(e) on an event a GPU recorded (this one or another) is a cudaStreamWaitEvent on the CUDA
//   event the record attached to `e` (Event::set_native; the event goes back to its pool only
//   after `e` completes), so copies wait for kernels on the GPU. An event of another kind of
//   device (SIM, CPU) parks the host-side queue until `e` completes, then issues what follows.
// * enqueue(work) records a marker and parks; when the marker completes, `work` runs on the
//   completion thread and the queue resumes. Host work thus sees every earlier GPU result, later
//   GPU work waits for it, and it may call CUDA.
// * Errors: a launch that throws, a failed CUDA call and a failed waited-on event put the stream in
//   error (sticky): later launches and host work are skipped, events complete with the error. GPU
//   work already issued runs on.
// * Memory: kernels hold nothing once launched; the caching allocator reuses freed memory at once,
//   safe by stream order (Note [Stream-ordered memory] in device/sim_kernels.cc). On a stream in
//   error, events complete only after cudaStreamSynchronize: error paths release nothing early.
// * Teardown drains each stream (queue issued, every record delivered), stops the completion
//   thread, then destroys streams, events, cuBLAS, the staging pool and the memory.

CudaStream::CudaStream(CudaDevice& device, int index, std::string name, CUstream_st* stream)
    : device_(device), index_(index), name_(std::move(name)), stream_(stream) {}

CudaStream::~CudaStream() {
  shutdown();
  (void)cudaSetDevice(device_.ordinal());
  (void)cudaStreamDestroy(stream_);
}

Status CudaStream::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void CudaStream::set_error(const Status& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok() && !error.ok()) error_ = error;
}

void CudaStream::enqueue(std::function<void()> work) {
  Item item{Item::kWork, nullptr, std::move(work), std::nullopt};
  push(std::move(item));
}

void CudaStream::launch(std::function<void(CUstream_st*)> fn) {
  Item item{Item::kLaunch, std::move(fn), nullptr, std::nullopt};
  push(std::move(item));
}

Status CudaStream::record(Event& event) {
  TESSERA_RETURN_IF_ERROR(event.mark_recorded());
  push(Item{Item::kRecord, nullptr, nullptr, event});
  return Status::ok_status();
}

Status CudaStream::wait(const Event& event) {
  if (!event.recorded()) {
    return errors::failed_precondition("stream {} asked to wait on an event that was never recorded", name_);
  }
  push(Item{Item::kWait, nullptr, nullptr, event});
  return Status::ok_status();
}

void CudaStream::push(Item item) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) {
    lock.unlock();
    if (item.kind == Item::kRecord) item.event->complete(errors::cancelled("stream {} is shut down", name_));
    return;
  }
  items_.push_back(std::move(item));
  if (issuing_ || parked_) return;  // whoever issues, or the resumption, will get to it
  issuing_ = true;
  lock.unlock();
  issue();
}

void CudaStream::issue() {
  const Status current = device_.make_current();
  std::unique_lock<std::mutex> lock(mu_);
  if (!current.ok() && error_.ok()) error_ = current;
  while (true) {
    if (items_.empty()) {
      issuing_ = false;
      idle_cv_.notify_all();  // under the lock: shutdown() may destroy us right after
      return;
    }
    Item item = std::move(items_.front());
    items_.pop_front();
    switch (item.kind) {
      case Item::kWait: {
        Event event = *item.event;
        if (event.completed()) {
          const Status s = event.status();
          if (!s.ok() && error_.ok()) error_ = s.with_prefix("waited-on event failed: ");
          break;
        }
        // An event of a GPU (this one or another: cudaStreamWaitEvent takes either): the GPU waits
        // for it, the host does not.
        cudaError_t native_error = cudaSuccess;
        if (event.with_native(&kCudaEventOwner, [&](void* handle) {
              native_error = cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(handle), 0);
            })) {
          if (native_error == cudaSuccess) break;
          (void)cudaGetLastError();  // not sticky: wait through the host instead
        }
        // Park until the event completes; resume on the completion thread (the event may complete
        // on any thread, inside anyone's callback: resuming there could issue GPU work from a
        // thread that must not, or take locks its caller holds).
        parked_ = true;
        issuing_ = false;
        lock.unlock();
        event.on_completed([this](Status s) { device_.post([this, s] { resume(s); }); });
        return;
      }
      case Item::kRecord: {
        const Status error = error_;
        ++undelivered_;
        lock.unlock();
        if (error.ok()) {
          issue_record(*item.event);
        } else {
          // A stream in error: GPU work issued before the error may still run, so nothing the
          // event's callbacks release (inputs, staging buffers, copy targets) is released before
          // the stream has drained (a faulted context returns at once).
          Event event = *item.event;
          device_.post([this, event, error]() mutable {
            (void)cudaStreamSynchronize(stream_);
            event.complete(error);
            delivered();
          });
        }
        item = Item{};
        lock.lock();
        break;
      }
      case Item::kLaunch: {
        if (!error_.ok()) break;  // skipped: the stream is in error
        lock.unlock();
        Status failed;
        try {
          item.launch(stream_);
        } catch (...) {
          failed = status_from_current_exception();
        }
        item = Item{};  // destroy captured state before taking the lock again
        lock.lock();
        if (!failed.ok() && error_.ok()) error_ = failed;
        break;
      }
      case Item::kWork: {
        if (!error_.ok()) break;
        // A marker: the work runs once the GPU has passed it, and the queue waits for the work.
        ++undelivered_;
        parked_ = true;
        issuing_ = false;
        lock.unlock();
        Event marker;
        (void)marker.mark_recorded();  // fresh: cannot fail
        marker.on_completed([this, work = std::move(item.work)](Status s) {
          device_.post([this, s, work] {
            if (s.ok() && status().ok()) {
              try {
                work();
              } catch (...) {
                set_error(status_from_current_exception());
              }
            }
            resume(Status());
          });
        });
        issue_record(marker);
        return;
      }
    }
  }
}

void CudaStream::resume(const Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!status.ok() && error_.ok()) error_ = status.with_prefix("waited-on event failed: ");
  parked_ = false;
  if (items_.empty()) {
    idle_cv_.notify_all();
    return;
  }
  issuing_ = true;
  lock.unlock();
  issue();
}

void CudaStream::issue_record(const Event& event) {
  auto fail = [&](const Status& s) {
    set_error(s);
    Event e = event;
    device_.post([this, e, s]() mutable {
      e.complete(s);
      delivered();
    });
  };
  auto cuda_event = device_.take_event();
  if (!cuda_event.ok()) return fail(cuda_event.status());
  const cudaError_t e = cudaEventRecord(cuda_event.value(), stream_);
  if (e != cudaSuccess) {
    device_.give_event(cuda_event.value());
    return fail(cuda_error(e, fmt::format("cudaEventRecord on {}", name_)));
  }
  Event recorded = event;
  recorded.set_native(&kCudaEventOwner, cuda_event.value());  // before the completion thread sees it
  device_.completions_->add(this, index_, cuda_event.value(), event);
}

void CudaStream::delivered() {
  std::lock_guard<std::mutex> lock(mu_);
  --undelivered_;
  idle_cv_.notify_all();
}

void CudaStream::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return items_.empty() && !issuing_ && !parked_ && undelivered_ == 0; });
  closed_ = true;
}

}  // namespace tessera::internal
