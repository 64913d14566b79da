#include "device/cuda/cuda_device.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/host_blocks.h"
#include "core/op_kernel.h"
#include "core/tensor_buffer.h"
#include "device/cuda/cuda_completion_queue.h"
#include "device/cuda/cuda_staging_threads.h"
#include "device/cuda/cuda_status.h"

namespace tessera::internal {

// The device and its copies. Its streams are Note [CUDA streams] (cuda_stream.cc), its completion
// thread cuda_completion_queue.cc, its staging threads cuda_staging_threads.cc, and
// measure_cost_profile cuda_calibration.cc.

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

// Pins large host blocks for direct copies (Note [Pinned host blocks] in core/host_blocks.cc):
// registered portable, so every GPU of the process copies from them directly.
bool cuda_pin_host_block(void* block, std::size_t size) {
  if (cudaHostRegister(block, size, cudaHostRegisterPortable) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}
void cuda_unpin_host_block(void* block, std::size_t) {
  // Fails harmlessly at exit, once the runtime has unloaded.
  if (cudaHostUnregister(block) != cudaSuccess) (void)cudaGetLastError();
}

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

// The stream of `what` (copy_to_device, copy_to_host) of `t`: InvalidArgument when `stream` is not
// one of `device`'s or `t` is null.
StatusOr<CudaStream*> copy_stream(CudaDevice& device, Stream& stream, const Tensor& t, const char* what) {
  CudaStream* cs = device.as_cuda_stream(stream);
  if (cs == nullptr) {
    return errors::invalid_argument("{}: {} on stream {}, which is not one of this device's", device.name(), what,
                                    stream.name());
  }
  if (t.is_null()) return errors::invalid_argument("{}: cannot copy a null tensor", device.name());
  return cs;
}

// A copy of `src` into `device`'s memory: its target taken for `stream`, from that stream's own
// cache (whatever used the memory before is queued ahead on the stream or has passed it on the
// others: Note [Stream-ordered memory] in device/sim_kernels.cc). Source and target are held until
// the copy has run.
StatusOr<std::shared_ptr<CopyState>> copy_into(CudaDevice& device, const Tensor& src, Stream& stream) {
  auto dst = device.allocate_tensor(src.dtype(), src.shape(), &stream);
  if (!dst.ok()) return dst.status();
  auto state = std::make_shared<CopyState>();
  state->src = src;
  state->dst = std::move(dst).value();
  return state;
}

// The whole of state->src into state->dst as one copy on `stream` (`copy` issues it, `what` names
// it in errors); `done` gets the result once the stream has run it. Nothing is issued for 0 bytes.
template <class Copy>
void copy_whole(CudaStream& stream, std::shared_ptr<CopyState> state, const char* what, Copy copy,
                std::function<void(StatusOr<Tensor>)> done) {
  if (state->src.bytes() > 0) {
    stream.launch([state, what, copy](CUstream_st* s) {
      const cudaError_t e = copy(*state, s);
      if (e != cudaSuccess) state->fail(cuda_error(e, what));
    });
  }
  stream.then([state, done = std::move(done)](Status s) { state->deliver(s, done); });
}

// cudaMemcpyAsync of the whole tensor, `kind` host-to-device or device-to-host.
auto memcpy_whole(cudaMemcpyKind kind) {
  return [kind](CopyState& c, CUstream_st* s) {
    return cudaMemcpyAsync(c.dst.raw_mutable_data(), c.src.raw_data(), c.src.bytes(), kind, s);
  };
}

}  // namespace

// ----- CudaDevice -----

DeviceCostProfile cuda_cost_profile(int multiprocessor_count) {
  DeviceCostProfile p;
  // 128 FP32 lanes per SM, 2 flops per fused multiply-add, ~1.7 GHz.
  p.flops_per_second = std::max(1, multiprocessor_count) * 128.0 * 2.0 * 1.7e9;
  p.memory_bandwidth = 3e12;            // HBM3
  p.transfer_bandwidth = 20e9;          // staged PCIe copies
  p.transfer_latency_seconds = 15e-6;   // a launch, a record and the completion poll
  p.kernel_overhead_seconds = 8e-6;     // a launch; measure_cost_profile measures launches' pace
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
  if (options.pin_host_blocks) set_host_block_pinner({&cuda_pin_host_block, &cuda_unpin_host_block});
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
  auto checked = copy_stream(*this, stream, host, "copy_to_device");
  if (!checked.ok()) return done(checked.status());
  CudaStream* cs = checked.value();
  if (host.dtype() == DType::String) {  // placement keeps strings on the host: a bug if one gets here
    done(errors::internal("{}: copy_to_device of a string tensor (strings live in host memory only)", name()));
    return;
  }
  if (host.device() != kHostDeviceName) {
    done(errors::invalid_argument("{}: copy_to_device expects a tensor in {}, got one in {}", name(),
                                  kHostDeviceName, host.device()));
    return;
  }
  auto copy = copy_into(*this, host, stream);
  if (!copy.ok()) {
    done(copy.status());
    return;
  }
  std::shared_ptr<CopyState> state = std::move(copy).value();
  if (pin_host_tensor(host)) {  // one copy straight from the caller's pinned block
    return copy_whole(*cs, std::move(state), "cudaMemcpyAsync host to device", memcpy_whole(cudaMemcpyHostToDevice),
                      std::move(done));
  }
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

namespace {

// The StreamWork of a graph's capture: the first failure a body reports while it is issued.
class CaptureWork final : public StreamWork {
 public:
  void issued(Device&, Stream&, const Node&) override {}
  void issued_then(Device&, Stream&, const Node&, std::function<Status(Status)>) override {}
  void fail(const Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = s;
  }
  Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  Status status_;
};

class CudaGraph final : public Device::Graph {
 public:
  CudaGraph(CudaDevice& device, cudaGraph_t graph, cudaGraphExec_t exec) : device_(device), graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    (void)device_.make_current();
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
  }
  void launch(Stream& stream, StreamWork& work) override {
    CudaStream* cs = device_.as_cuda_stream(stream);
    if (cs == nullptr) return work.fail(errors::internal("{}: a graph launched on a foreign stream", device_.name()));
    cs->launch([exec = exec_, &work](CUstream_st* s) {
      const cudaError_t e = cudaGraphLaunch(exec, s);
      if (e != cudaSuccess) work.fail(cuda_error(e, "cudaGraphLaunch"));
    });
  }

 private:
  CudaDevice& device_;
  const cudaGraph_t graph_;
  const cudaGraphExec_t exec_;
};

}  // namespace

StatusOr<std::unique_ptr<Device::Graph>> CudaDevice::make_graph(std::vector<ReplayableWork> bodies) {
  TESSERA_RETURN_IF_ERROR(make_current());
  cudaStream_t stream = nullptr;
  TESSERA_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  CaptureWork work;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e == cudaSuccess) {
    for (const ReplayableWork& body : bodies) body(stream, work);
    e = cudaStreamEndCapture(stream, &graph);
  }
  (void)cudaStreamDestroy(stream);
  if (e != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    return cuda_error(e, "capturing a CUDA graph");
  }
  if (Status issued = work.status(); !issued.ok()) {
    (void)cudaGraphDestroy(graph);
    return issued;
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaGraphDestroy(graph);
    return cuda_error(e, "cudaGraphInstantiate");
  }
  return std::unique_ptr<Graph>(std::make_unique<CudaGraph>(*this, graph, exec));
}

Status CudaDevice::copy_within(const Tensor& src, const Tensor& dst, Stream& stream) {
  CudaStream* cs = as_cuda_stream(stream);
  if (cs == nullptr || src.device() != name() || dst.device() != name() || src.bytes() != dst.bytes()) {
    return errors::invalid_argument("{}: copy_within of {} bytes in {} into {} bytes in {}", name(), src.bytes(),
                                    src.device(), dst.bytes(), dst.device());
  }
  if (src.bytes() == 0) return Status();
  cs->launch([from = src.raw_data(), to = const_cast<void*>(dst.raw_data()), n = src.bytes()](CUstream_st* s) {
    // Two live allocations of this GPU, of equal size: the call has nothing to refuse.
    (void)cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToDevice, s);
  });
  return Status();
}

bool CudaDevice::can_copy_from_peer(const Device& peer) const {
  const auto* gpu = dynamic_cast<const CudaDevice*>(&peer);
  if (gpu == nullptr || gpu == this) return false;
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto it = peers_.find(gpu->ordinal_);
  if (it != peers_.end()) return it->second;
  int can = 0;
  bool usable = make_current().ok() && cudaDeviceCanAccessPeer(&can, ordinal_, gpu->ordinal_) == cudaSuccess && can;
  if (usable) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(gpu->ordinal_, 0);
    usable = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
  }
  (void)cudaGetLastError();
  peers_[gpu->ordinal_] = usable;
  return usable;
}

void CudaDevice::copy_from_peer(const Tensor& src, Device& peer, Stream& stream,
                                std::function<void(StatusOr<Tensor>)> done) {
  CudaStream* cs = as_cuda_stream(stream);
  const auto* gpu = dynamic_cast<const CudaDevice*>(&peer);
  if (cs == nullptr || gpu == nullptr || !can_copy_from_peer(peer) || src.is_null() || src.device() != peer.name()) {
    done(errors::invalid_argument("{}: copy_from_peer of a tensor in {} from {} on stream {}", name(),
                                  src.is_null() ? "nothing" : src.device(), peer.name(), stream.name()));
    return;
  }
  auto copy = copy_into(*this, src, stream);
  if (!copy.ok()) {
    done(copy.status());
    return;
  }
  copy_whole(*cs, std::move(copy).value(), "cudaMemcpyPeerAsync",
             [to = ordinal_, from = gpu->ordinal_](CopyState& c, CUstream_st* s) {
               return cudaMemcpyPeerAsync(c.dst.raw_mutable_data(), to, c.src.raw_data(), from, c.src.bytes(), s);
             },
             std::move(done));
}

void CudaDevice::copy_to_host(const Tensor& on_device, Stream& stream, std::function<void(StatusOr<Tensor>)> done) {
  auto checked = copy_stream(*this, stream, on_device, "copy_to_host");
  if (!checked.ok()) return done(checked.status());
  CudaStream* cs = checked.value();
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
  if (pin_host_tensor(state->dst)) {  // one copy straight into a pinned block
    return copy_whole(*cs, std::move(state), "cudaMemcpyAsync device to host", memcpy_whole(cudaMemcpyDeviceToHost),
                      std::move(done));
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

}  // namespace tessera::internal
