#include "device/cuda/cuda_device.h"

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/tensor_buffer.h"
#include "device/cuda/cuda_status.h"

namespace tessera::internal {

// Note [CUDA streams]
// ~~~~~~~~~~~~~~~~~~~
// CudaStream implements Note [Devices and streams] (core/device.cc) over a CUDA stream:
//
// * GPU work (kernels, cudaMemcpyAsync, cuBLAS) goes in through launch(fn): a host-side queue in
//   front of the CUDA stream hands fn the raw stream in order. Normally the queue is empty and fn
//   runs at once on the caller's thread, which only launches (it never waits for the GPU).
// * record(e) issues cudaEventRecord of a pooled CUDA event. The device's completion thread polls
//   the pending CUDA events of every stream in order (cudaEventQuery, with a short backoff while
//   the GPU is busy) and completes the tessera Event on that thread, with the stream's status or
//   the CUDA error. then(done) is a record, so `done` runs on the completion thread, a thread of
//   ours: it may launch more GPU work (the executor's continuations do), which a host function
//   run by cudaLaunchHostFunc must not, and no thread ever blocks on the GPU. Polling rather than
//   a host function per record also keeps the GPU from stalling at every record, and it notices a
//   failed context, where host functions are never called.
// * wait(e) parks the host-side queue until `e` completes (whichever device recorded it: SIM, CPU
//   or another GPU), then issues what came after it. A tessera Event carries no CUDA handle, so a
//   wait costs a round trip through the host (~ the polling latency) instead of a
//   cudaStreamWaitEvent; giving Event a native-handle slot would let same-process GPU streams wait
//   on the GPU.
// * enqueue(work) records a marker and parks; when the marker completes, `work` runs on the
//   completion thread and the queue resumes. Host work thus sees every earlier GPU result, later
//   GPU work waits for it, and it may call CUDA.
// * Errors: a launch that throws, a failed CUDA call and a failed waited-on event put the stream in
//   error (sticky): later launches and host work are skipped, events complete with the error. GPU
//   work already issued runs on.
// * Memory: a device tensor's last handle goes only after every GPU operation using it completed
//   (kernels keep inputs, temporaries and replaced values until their then(); copies keep source
//   and target until theirs), so the caching allocator may hand freed memory out again at once.
// * Teardown drains each stream (queue issued, every record delivered), stops the completion
//   thread, then destroys streams, events, cuBLAS, the staging pool and the memory.

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// cudaMalloc for the caching allocator.
class CudaMallocBacking final : public CachingAllocatorBacking {
 public:
  explicit CudaMallocBacking(int ordinal) : ordinal_(ordinal) {}
  StatusOr<void*> allocate(std::size_t bytes) override {
    TESSERA_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky: clear it
      return cuda_error(e, fmt::format("cudaMalloc of {} bytes on GPU {}", bytes, ordinal_));
    }
    return p;
  }
  void deallocate(void* ptr, std::size_t) override {
    (void)cudaSetDevice(ordinal_);
    (void)cudaFree(ptr);
  }

 private:
  const int ordinal_;
};

// cudaHostAlloc (portable: pinned for every GPU of the process) for the staging pool.
class CudaHostBacking final : public StagingBacking {
 public:
  StatusOr<void*> allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return cuda_error(e, fmt::format("cudaHostAlloc of {} bytes", bytes));
    }
    return p;
  }
  void deallocate(void* ptr, std::size_t) override { (void)cudaFreeHost(ptr); }
};

// The state of one copy, shared by its pieces' launches and completions.
struct CopyState {
  std::mutex mu;
  Status status;  // guarded by mu
  Tensor src;
  Tensor dst;
  void fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = s;
  }
  Status get() {
    std::lock_guard<std::mutex> lock(mu);
    return status;
  }
  // Ends the copy: `done` gets the first failure (the stream's, `stream_status`, else one recorded
  // with fail()), or the copied tensor.
  void deliver(const Status& stream_status, const std::function<void(StatusOr<Tensor>)>& done) {
    const Status failed = stream_status.ok() ? get() : stream_status;
    if (!failed.ok()) {
      done(failed);
    } else {
      done(std::move(dst));
    }
  }
};

}  // namespace

// ----- CudaStagingThreads -----

// Helpers of copy_to_device and copy_to_host: run the closures they are given (each stages pieces
// of one copy until none are left, or copies one piece out of staging), first come first served.
// Threads of their own rather than host/thread_pool.h's: each makes the GPU current once, as the
// launches it issues need. The destructor runs what is queued, then joins.
class CudaStagingThreads {
 public:
  CudaStagingThreads(int ordinal, int n) {
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
  ~CudaStagingThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

// ----- CudaCompletionQueue -----

// The device's completion thread: delivers the completions of recorded CUDA events, in order per
// stream, and runs posted tasks. Thread-safe.
class CudaCompletionQueue {
 public:
  CudaCompletionQueue(int ordinal, int num_streams)
      : ordinal_(ordinal), pending_(static_cast<std::size_t>(num_streams)), thread_([this] { loop(); }) {}
  // Delivers everything pending, then joins.
  ~CudaCompletionQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    thread_.join();
  }

  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    cv_.notify_one();
  }

  // `cuda_event` was recorded on `stream` after everything `event` stands for.
  void add(CudaStream* stream, int index, CUevent_st* cuda_event, Event event) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[static_cast<std::size_t>(index)].push_back(Pending{stream, cuda_event, std::move(event)});
    ++num_pending_;
    ++records_added_;
    last_activity_ = std::chrono::steady_clock::now();
    cv_.notify_one();
  }

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

  void loop() {
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

  static void deliver(Done& d) {
    CudaStream* stream = d.pending.stream;
    if (!d.status.ok()) stream->set_error(d.status);
    stream->device().give_event(d.pending.cuda_event);
    // A record's status is the stream's when the record was issued (an error then is never
    // issued: it completes at once), so only a failure seen on the GPU can change it.
    d.pending.event.complete(d.status);
    stream->delivered();
  }

  const int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;     // guarded by mu_
  std::vector<std::deque<Pending>> pending_;    // by stream index, in record order; guarded by mu_
  int64_t num_pending_ = 0;                     // guarded by mu_
  uint64_t records_added_ = 0;                  // guarded by mu_
  std::chrono::steady_clock::time_point last_activity_;  // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  std::thread thread_;                          // last: starts after the fields above exist
};

// ----- CudaStream -----

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
          Event event = *item.event;
          device_.post([this, event, error]() mutable {
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

// ----- CudaDevice -----

DeviceCostProfile cuda_cost_profile(int multiprocessor_count) {
  DeviceCostProfile p;
  // 128 FP32 lanes per SM, 2 flops per fused multiply-add, ~1.7 GHz.
  p.flops_per_second = std::max(1, multiprocessor_count) * 128.0 * 2.0 * 1.7e9;
  p.memory_bandwidth = 3e12;            // HBM3
  p.transfer_bandwidth = 20e9;          // staged PCIe copies
  p.transfer_latency_seconds = 15e-6;   // a launch, a record and the completion poll
  p.kernel_overhead_seconds = 8e-6;     // a launch plus the completion poll
  return p;
}

CudaDevice::CudaDevice(int ordinal, CudaDeviceOptions options)
    : Device("GPU", ordinal), ordinal_(ordinal), options_(std::move(options)) {}

StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::create(int ordinal, CudaDeviceOptions options) {
  if (options.num_compute_streams < 1) {
    return errors::invalid_argument("a GPU needs at least one compute stream, got {}", options.num_compute_streams);
  }
  if (options.copy_piece_bytes == 0) options.copy_piece_bytes = 2 * kMiB;
  TESSERA_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal), fmt::format("cudaSetDevice({})", ordinal)));
  cudaDeviceProp prop{};
  TESSERA_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  // Create the context now, so that a GPU that cannot be used fails here rather than in a kernel.
  TESSERA_RETURN_IF_ERROR(cuda_status(cudaFree(nullptr), "creating the CUDA context"));

  std::unique_ptr<CudaDevice> d(new CudaDevice(ordinal, options));
  d->gpu_name_ = prop.name;
  d->multiprocessors_ = prop.multiProcessorCount;
  d->total_memory_ = prop.totalGlobalMem;
  d->cost_profile_ = cuda_cost_profile(prop.multiProcessorCount);
  const std::string id = "gpu:" + std::to_string(ordinal);
  d->allocator_ = std::make_unique<CachingAllocator>(id, std::make_unique<CudaMallocBacking>(ordinal), options.memory);
  d->staging_ = std::make_unique<PinnedStagingPool>(id + "/staging", std::make_unique<CudaHostBacking>(),
                                                    std::make_unique<HostStagingBacking>(), options.staging);
  int stagers = options.staging_threads;
  if (stagers < 0) stagers = std::min(8, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  if (stagers > 0) d->stagers_ = std::make_unique<CudaStagingThreads>(ordinal, stagers);
  const int n = options.num_compute_streams;
  d->completions_ = std::make_unique<CudaCompletionQueue>(ordinal, n + 2);
  auto make_stream = [&](int index, const std::string& suffix) -> StatusOr<std::unique_ptr<CudaStream>> {
    cudaStream_t raw = nullptr;
    TESSERA_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    return std::make_unique<CudaStream>(*d, index, d->name() + "/stream:" + suffix, raw);
  };
  for (int i = 0; i < n; ++i) {
    auto s = make_stream(i, "compute:" + std::to_string(i));
    if (!s.ok()) return s.status();
    d->compute_.push_back(std::move(s).value());
  }
  auto h2d = make_stream(n, "host_to_device");
  if (!h2d.ok()) return h2d.status();
  d->h2d_ = std::move(h2d).value();
  auto d2h = make_stream(n + 1, "device_to_host");
  if (!d2h.ok()) return d2h.status();
  d->d2h_ = std::move(d2h).value();
  return d;
}

CudaDevice::~CudaDevice() {
  // Drain every stream (a wait on another stream ends: that stream drains too), then stop the
  // completion thread once it has delivered everything, then free the GPU resources. The staging
  // threads stop between the two: draining may hand them copies out of staging, and what they
  // run posts to the completion thread.
  for (auto& s : compute_) s->shutdown();
  if (h2d_) h2d_->shutdown();
  if (d2h_) d2h_->shutdown();
  stagers_.reset();
  completions_.reset();
  compute_.clear();
  h2d_.reset();
  d2h_.reset();
  (void)cudaSetDevice(ordinal_);
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    for (CUevent_st* e : free_events_) (void)cudaEventDestroy(e);
    free_events_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(cublas_mu_);
    if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
    cublas_ = nullptr;
  }
  staging_.reset();
  allocator_.reset();
}

CudaStream& CudaDevice::cuda_compute_stream(int index) {
  TESSERA_CHECK(index >= 0 && index < num_compute_streams());
  return *compute_[static_cast<std::size_t>(index)];
}

CudaStream* CudaDevice::as_cuda_stream(Stream& stream) {
  for (auto& s : compute_) {
    if (s.get() == &stream) return s.get();
  }
  if (h2d_.get() == &stream) return h2d_.get();
  if (d2h_.get() == &stream) return d2h_.get();
  return nullptr;
}

Status CudaDevice::make_current() const {
  return cuda_status(cudaSetDevice(ordinal_), fmt::format("cudaSetDevice({})", ordinal_));
}

Status CudaDevice::with_cublas(CUstream_st* stream, const std::function<Status(cublasContext*)>& fn) {
  std::lock_guard<std::mutex> lock(cublas_mu_);
  TESSERA_RETURN_IF_ERROR(make_current());
  if (cublas_ == nullptr) TESSERA_RETURN_IF_ERROR(cublas_status(cublasCreate(&cublas_), "cublasCreate"));
  TESSERA_RETURN_IF_ERROR(cublas_status(cublasSetStream(cublas_, stream), "cublasSetStream"));
  return fn(cublas_);
}

void CudaDevice::post(std::function<void()> fn) { completions_->post(std::move(fn)); }

StatusOr<CUevent_st*> CudaDevice::take_event() {
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (!free_events_.empty()) {
      CUevent_st* e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  TESSERA_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  return e;
}

void CudaDevice::give_event(CUevent_st* event) {
  std::lock_guard<std::mutex> lock(events_mu_);
  free_events_.push_back(event);
}

void CudaDevice::copy_to_device(const Tensor& host, Stream& stream, std::function<void(StatusOr<Tensor>)> done) {
  CudaStream* cs = as_cuda_stream(stream);
  if (cs == nullptr) {
    done(errors::invalid_argument("{}: copy_to_device on stream {}, which is not one of this device's", name(),
                                  stream.name()));
    return;
  }
  if (host.is_null()) {
    done(errors::invalid_argument("{}: cannot copy a null tensor", name()));
    return;
  }
  if (host.device() != kHostDeviceName) {
    done(errors::invalid_argument("{}: copy_to_device expects a tensor in {}, got one in {}", name(),
                                  kHostDeviceName, host.device()));
    return;
  }
  auto dst = allocate_tensor(host.dtype(), host.shape());
  if (!dst.ok()) {
    done(dst.status());
    return;
  }
  auto state = std::make_shared<CopyState>();
  state->src = host;
  state->dst = std::move(dst).value();
  // The pieces, staged by whichever thread takes each next: this one and, for a copy of several
  // pieces, the staging threads. Each piece's transfer starts as soon as it is staged, while
  // other pieces are still being staged. The source is a host tensor, immutable, so the staging
  // needs no stream order.
  struct Pieces {
    const char* src;
    char* target;
    std::size_t bytes;
    std::size_t piece;
    std::size_t count;
    std::atomic<std::size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    std::size_t issued = 0;  // guarded by mu: pieces staged and issued (or abandoned after a failure)
  };
  auto pieces = std::make_shared<Pieces>();
  pieces->src = static_cast<const char*>(host.raw_data());
  pieces->target = static_cast<char*>(state->dst.raw_mutable_data());
  pieces->bytes = host.bytes();
  pieces->piece = options_.copy_piece_bytes;
  pieces->count = (pieces->bytes + pieces->piece - 1) / pieces->piece;
  auto stage = [this, cs, state, pieces] {
    std::size_t i;
    while ((i = pieces->next.fetch_add(1)) < pieces->count) {
      const std::size_t offset = i * pieces->piece;
      const std::size_t n = std::min(pieces->piece, pieces->bytes - offset);
      auto staged = state->get().ok() ? staging_->acquire(n) : StatusOr<PinnedStagingPool::Buffer>(state->get());
      if (!staged.ok()) {
        state->fail(staged.status());
      } else {
        auto buffer = std::make_shared<PinnedStagingPool::Buffer>(std::move(staged).value());
        std::memcpy(buffer->data(), pieces->src + offset, n);
        cs->launch([state, buffer, to = pieces->target + offset, n](CUstream_st* s) {
          const cudaError_t e = cudaMemcpyAsync(to, buffer->data(), n, cudaMemcpyHostToDevice, s);
          if (e != cudaSuccess) state->fail(cuda_error(e, "cudaMemcpyAsync host to device"));
        });
        cs->then([buffer](Status) { buffer->release(); });
      }
      std::lock_guard<std::mutex> lock(pieces->mu);
      if (++pieces->issued == pieces->count) pieces->cv.notify_all();
    }
  };
  if (stagers_ != nullptr && pieces->count > 1) {
    const auto helpers = std::min<std::size_t>(static_cast<std::size_t>(stagers_->size()), pieces->count - 1);
    for (std::size_t h = 0; h < helpers; ++h) stagers_->post(stage);
  }
  stage();
  {
    // Every piece issued before `done`'s then(), so that it runs after all of them.
    std::unique_lock<std::mutex> lock(pieces->mu);
    pieces->cv.wait(lock, [&] { return pieces->issued == pieces->count; });
  }
  cs->then([state, done = std::move(done)](Status s) { state->deliver(s, done); });
}

void CudaDevice::copy_to_host(const Tensor& on_device, Stream& stream, std::function<void(StatusOr<Tensor>)> done) {
  CudaStream* cs = as_cuda_stream(stream);
  if (cs == nullptr) {
    done(errors::invalid_argument("{}: copy_to_host on stream {}, which is not one of this device's", name(),
                                  stream.name()));
    return;
  }
  if (on_device.is_null()) {
    done(errors::invalid_argument("{}: cannot copy a null tensor", name()));
    return;
  }
  if (on_device.device() != name()) {
    done(errors::invalid_argument("{}: copy_to_host expects a tensor in {}, got one in {}", name(), name(),
                                  on_device.device()));
    return;
  }
  auto state = std::make_shared<CopyState>();
  state->src = on_device;
  try {
    state->dst = Tensor(on_device.dtype(), on_device.shape());
  } catch (...) {
    done(status_from_current_exception());
    return;
  }
  // Each piece lands in a staging buffer; once it has (a then() on the completion thread), a staging
  // thread (or, without them, the completion thread) copies it out into the tensor, while later
  // pieces transfer. `done` runs on the completion thread once every piece is out: the last of the
  // arrivals below (each piece's copy-out, the stream's final then(), this thread's own hold) posts it.
  struct Finish {
    std::atomic<int> remaining{1};  // this thread's hold
    std::shared_ptr<CopyState> state;
    std::function<void(StatusOr<Tensor>)> done;
  };
  auto finish = std::make_shared<Finish>();
  finish->state = state;
  finish->done = std::move(done);
  auto arrive = [this](const std::shared_ptr<Finish>& f) {
    if (f->remaining.fetch_sub(1) != 1) return;
    post([f] { f->state->deliver(Status(), f->done); });
  };
  const auto* src = static_cast<const char*>(on_device.raw_data());
  auto* target = static_cast<char*>(state->dst.raw_mutable_data());
  const std::size_t bytes = on_device.bytes();
  for (std::size_t offset = 0; offset < bytes; offset += options_.copy_piece_bytes) {
    const std::size_t n = std::min(options_.copy_piece_bytes, bytes - offset);
    auto staged = staging_->acquire(n);
    if (!staged.ok()) {
      state->fail(staged.status());
      break;
    }
    auto buffer = std::make_shared<PinnedStagingPool::Buffer>(std::move(staged).value());
    cs->launch([state, buffer, from = src + offset, n](CUstream_st* s) {
      const cudaError_t e = cudaMemcpyAsync(buffer->data(), from, n, cudaMemcpyDeviceToHost, s);
      if (e != cudaSuccess) state->fail(cuda_error(e, "cudaMemcpyAsync device to host"));
    });
    finish->remaining.fetch_add(1);
    cs->then([this, state, finish, arrive, buffer, to = target + offset, n](Status s) {
      if (!s.ok()) state->fail(s);
      auto copy_out = [state, finish, arrive, buffer, to, n] {
        if (state->get().ok()) std::memcpy(to, buffer->data(), n);
        buffer->release();
        arrive(finish);
      };
      if (stagers_ != nullptr) {
        stagers_->post(std::move(copy_out));
      } else {
        copy_out();
      }
    });
  }
  finish->remaining.fetch_add(1);
  cs->then([state, finish, arrive](Status s) {
    if (!s.ok()) state->fail(s);
    arrive(finish);
  });
  arrive(finish);
}

// ----- Calibration -----

DeviceCostProfile CudaDevice::measure_cost_profile() {
  DeviceCostProfile p = cost_profile_;
  if (!make_current().ok()) return p;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    return p;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  (void)cudaEventCreate(&start);
  (void)cudaEventCreate(&stop);
  // The best of `reps` timed runs of `issue` (after one warm-up) on `stream`, in seconds; 0 on error.
  auto best_of = [&](int reps, const std::function<bool()>& issue) {
    double best = 0;
    for (int rep = 0; rep <= reps; ++rep) {
      if (cudaEventRecord(start, stream) != cudaSuccess || !issue() || cudaEventRecord(stop, stream) != cudaSuccess ||
          cudaEventSynchronize(stop) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;
      }
      float ms = 0;
      (void)cudaEventElapsedTime(&ms, start, stop);
      if (rep > 0 && (best == 0 || ms < best)) best = ms;
    }
    return best / 1e3;
  };
  auto usable = [](double v) { return std::isfinite(v) && v > 0; };

  // Arithmetic: 2048^3 float32 through cuBLAS (default math mode, as the MatMul kernel).
  {
    constexpr int n = 2048;
    const std::size_t bytes = std::size_t{n} * n * sizeof(float);
    void* a = nullptr;
    void* c = nullptr;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&c, bytes) == cudaSuccess &&
        cudaMemsetAsync(a, 0x3c, bytes, stream) == cudaSuccess) {  // every float 0.0115
      const double t = best_of(3, [&] {
        return with_cublas(stream, [&](cublasContext* h) -> Status {
                 const float one = 1, zero = 0;
                 const auto* m = static_cast<const float*>(a);
                 const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, m, n, m, n, &zero,
                                                       static_cast<float*>(c), n);
                 return st == CUBLAS_STATUS_SUCCESS ? Status() : errors::internal("cublasSgemm failed");
               }).ok();
      });
      if (usable(t)) p.flops_per_second = 2.0 * n * n * static_cast<double>(n) / t;
    }
    (void)cudaGetLastError();
    if (a != nullptr) (void)cudaFree(a);
    if (c != nullptr) (void)cudaFree(c);
  }
  // Memory: a 64 MiB copy within the GPU, bytes read plus written (as op_bytes counts them).
  {
    const std::size_t bytes = std::size_t{64} << 20;
    void* src = nullptr;
    void* dst = nullptr;
    if (cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&dst, bytes) == cudaSuccess) {
      const double t = best_of(3, [&] {
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
      });
      if (usable(t)) p.memory_bandwidth = 2.0 * static_cast<double>(bytes) / t;
    }
    (void)cudaGetLastError();
    if (src != nullptr) (void)cudaFree(src);
    if (dst != nullptr) (void)cudaFree(dst);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaStreamDestroy(stream);

  // Transfers, through the copy path the executor uses: the time of one copy_to_device, waited for.
  auto copy_seconds = [&](const Tensor& host) -> double {
    std::promise<bool> ok;
    auto done = ok.get_future();
    const auto t0 = std::chrono::steady_clock::now();
    copy_to_device(host, host_to_device_stream(), [&ok](StatusOr<Tensor> r) { ok.set_value(r.ok()); });
    const bool copied = done.get();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return copied ? t : 0.0;
  };
  try {
    Tensor big(DType::Float32, Shape{int64_t{8} << 20});  // 32 MiB
    std::memset(big.raw_mutable_data(), 1, big.bytes());
    double best = 0;
    for (int rep = 0; rep < 4; ++rep) {
      const double t = copy_seconds(big);
      if (t <= 0) {
        best = 0;
        break;
      }
      if (rep > 0 && (best == 0 || t < best)) best = t;
    }
    Tensor one(DType::Float32, Shape{1});
    std::vector<double> small;
    for (int rep = 0; rep < 22; ++rep) {
      const double t = copy_seconds(one);
      if (t <= 0) break;
      if (rep >= 2) small.push_back(t);
    }
    if (small.size() == 20) {
      std::sort(small.begin(), small.end());
      p.transfer_latency_seconds = small[small.size() / 2];
    }
    // The bandwidth net of that latency.
    if (usable(best - p.transfer_latency_seconds)) {
      p.transfer_bandwidth = static_cast<double>(big.bytes()) / (best - p.transfer_latency_seconds);
    }
  } catch (...) {
    // Out of host memory: keep the defaults.
  }
  return p;
}

}  // namespace tessera::internal
