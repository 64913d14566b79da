// The CUDA device: device type "GPU", one per visible GPU. Its memory is a caching allocator over
// cudaMalloc, its streams are CUDA streams (compute, host-to-device, device-to-host), its events
// are CUDA events bridged to tessera Events, and its copies go through pinned staging buffers.
// This header includes no CUDA header (the handles are opaque), so anything may include it.
//
//   register_cuda_devices(DeviceRegistry::global()).value();      // /device:GPU:0 ... (or none)
//   auto* gpu = static_cast<CudaDevice*>(DeviceRegistry::global().find("/device:GPU:0").value());
//   gpu->copy_to_device(host_tensor, gpu->host_to_device_stream(), [](StatusOr<Tensor> t) { ... });
//   CudaStream& s = gpu->cuda_compute_stream();
//   s.launch([=](cudaStream_t raw) { my_kernel<<<blocks, threads, 0, raw>>>(...); });
//   s.then([](Status st) { /* on the device's completion thread, once the kernel has run */ });
//
// See Note [CUDA streams] in device/cuda/cuda_stream.cc, and Note [Devices and streams] in
// core/stream.cc for the model it implements. The definitions: cuda_stream.cc (CudaStream),
// cuda_device.cc (CudaDevice and its copies), cuda_calibration.cc (measure_cost_profile),
// cuda_completion_queue.{h,cc} and cuda_staging_threads.{h,cc} (the device's threads),
// cuda_device_factory.cc (register_cuda_devices).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "device/caching_allocator.h"
#include "device/pinned_staging.h"

// CUDA's handle types, declared exactly as the CUDA headers declare them (cudaStream_t is
// CUstream_st*, cudaEvent_t is CUevent_st*, cublasHandle_t is cublasContext*).
struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace tessera::internal {

class CudaDevice;
class CudaCompletionQueue;
class CudaStagingThreads;

struct CudaDeviceOptions {
  int num_compute_streams = 1;
  CachingAllocatorOptions memory;
  PinnedStagingOptions staging;
  // Copies are cut into pieces of this size, each staged and transferred on its own, so that the
  // host-side memcpy of one piece overlaps the transfer of others.
  std::size_t copy_piece_bytes = std::size_t{2} << 20;
  // Threads that copy pieces into staging (host to device, alongside the calling thread) and out
  // of it (device to host, instead of the completion thread): one thread's memcpy into pinned
  // memory falls far short of a GPU's copy engine (figures: benchmarks/README.md, "Figures behind
  // the CUDA device's comments"). -1: half the hardware threads, at most 8; 0: none.
  int staging_threads = -1;
  // Copies of host tensors in large blocks (a MiB and more) pin the block and go straight to or
  // from it (Note [Pinned host blocks] in core/host_blocks.cc); false: every copy stages.
  bool pin_host_blocks = true;
};

// A CUDA stream with tessera's Stream semantics (Note [CUDA streams]). GPU work is issued with
// launch(); host work (enqueue) runs on the device's completion thread once the GPU work before it
// has run, and later work waits for it; record() and wait() order streams through events (any
// tessera Event, whichever device recorded it). Work issued after an error is skipped (host work,
// launches) or completes with the error (events, then()). Thread-safe.
class CudaStream final : public Stream {
 public:
  // `stream` is owned (destroyed with this object). `index` is the stream's slot in the device's
  // completion queue.
  CudaStream(CudaDevice& device, int index, std::string name, CUstream_st* stream);
  ~CudaStream() override;  // drains, then destroys the CUDA stream
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  const std::string& name() const override { return name_; }
  void enqueue(std::function<void()> work) override;
  [[nodiscard]] Status record(Event& event) override;
  [[nodiscard]] Status wait(const Event& event) override;

  // Issues asynchronous GPU work in stream order: `fn(raw stream)` launches kernels, copies or
  // library calls on it and must not block. It runs on some host thread with this device current
  // (the caller's, when nothing is queued ahead of it). A throw puts the stream in error.
  void launch(std::function<void(CUstream_st*)> fn);

  CUstream_st* native() const { return stream_; }
  CudaDevice& device() const { return device_; }
  // The stream's sticky error (OK while none).
  Status status() const;
  // For the completion queue: records a failure seen on the GPU.
  void set_error(const Status& error);

  // Runs everything queued, waits for the GPU to finish it and for every completion to be
  // delivered, then refuses new work (dropped; its events complete Cancelled). Blocks.
  void shutdown();

 private:
  friend class CudaCompletionQueue;
  struct Item {
    enum Kind { kLaunch, kWork, kRecord, kWait } kind;
    std::function<void(CUstream_st*)> launch;
    std::function<void()> work;
    std::optional<Event> event;
  };
  void push(Item item);
  // Issues queued items until the queue is empty or parks on an event. Call with issuing_ set
  // (by the caller, under mu_), without mu_ held.
  void issue();
  // After a park ends (on the completion thread): `status` is the awaited event's.
  void resume(const Status& status);
  // cudaEventRecord + completion notification for `event` (issuing thread, without mu_).
  void issue_record(const Event& event);
  void delivered();  // a record's completion was delivered

  CudaDevice& device_;
  const int index_;
  const std::string name_;
  CUstream_st* const stream_;  // Owned.
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Item> items_;  // host-side queue, not yet issued; guarded by mu_
  bool issuing_ = false;    // some thread is issuing items; guarded by mu_
  bool parked_ = false;     // the queue waits for an event; guarded by mu_
  bool closed_ = false;     // guarded by mu_
  int undelivered_ = 0;     // records issued whose completion is not yet delivered; guarded by mu_
  Status error_;            // sticky; guarded by mu_
};

// The cost profile placement uses for a GPU: documented estimates, not measurements (the SM count
// comes from the device; the rest are typical of a current data-centre GPU on PCIe).
DeviceCostProfile cuda_cost_profile(int multiprocessor_count);

// One GPU. Thread-safe.
class CudaDevice final : public Device {
 public:
  // Sets up GPU `ordinal` (streams, events, allocators); the CUDA error when it cannot.
  static StatusOr<std::unique_ptr<CudaDevice>> create(int ordinal, CudaDeviceOptions options = {});
  ~CudaDevice() override;

  Allocator& allocator() override { return *allocator_; }
  CachingAllocator& caching_allocator() { return *allocator_; }
  PinnedStagingPool& staging() { return *staging_; }
  const DeviceCostProfile& cost_profile() const override { return cost_profile_; }
  // Replaces the profile placement uses (register_default_devices sets the calibrated one, before
  // any session sees the device: not synchronized with readers).
  void set_cost_profile(const DeviceCostProfile& profile) { cost_profile_ = profile; }
  // Measures this GPU (a few hundred milliseconds, most of it cuBLAS's start): a 2048^3 float32
  // MatMul through cuBLAS, a 64 MiB copy within the GPU (bytes read plus written), a 32 MiB
  // copy_to_device (its block pinned by a first, untimed copy) and the median time of a 4-byte one
  // (the latency). Fields
  // it cannot measure keep their current value. For calibrate_gpu_profile; call it while the
  // device is otherwise idle.
  DeviceCostProfile measure_cost_profile();
  int num_compute_streams() const override { return static_cast<int>(compute_.size()); }
  Stream& compute_stream(int index = 0) override { return cuda_compute_stream(index); }
  Stream& host_to_device_stream() override { return *h2d_; }
  Stream& device_to_host_stream() override { return *d2h_; }
  CudaStream& cuda_compute_stream(int index = 0);
  CudaStream& cuda_host_to_device_stream() { return *h2d_; }
  CudaStream& cuda_device_to_host_stream() { return *d2h_; }
  // The raw CUDA stream behind compute stream `index` (a cudaStream_t), for kernels. Work issued on
  // it directly bypasses the stream's host-side queue: prefer CudaStream::launch.
  CUstream_st* cuda_stream(int index = 0) { return cuda_compute_stream(index).native(); }
  // `stream` as one of this device's CUDA streams; nullptr when it is not.
  CudaStream* as_cuda_stream(Stream& stream);

  // A host tensor in a pinned block (or one it pins: options.pin_host_blocks) is copied with one
  // cudaMemcpyAsync on `stream`, straight from or into its memory; copy_to_host's result is then a
  // fresh large block, pinned. Otherwise the copy is cut into pieces staged through pinned
  // buffers, each a cudaMemcpyAsync on `stream`
  // (one of this device's streams); the host-side memcpy into staging happens on the calling
  // thread and the staging threads (copy_to_device returns once every piece is staged and issued),
  // the one out of staging on the staging threads (the completion thread where there are none).
  // `done` runs on the completion thread.
  // InvalidArgument (through `done`) for a null tensor, one in the wrong memory or a foreign
  // stream; ResourceExhausted when memory runs out; the CUDA error when a transfer fails.
  void copy_to_device(const Tensor& host, Stream& stream, std::function<void(StatusOr<Tensor>)> done) override;
  void copy_to_host(const Tensor& on_device, Stream& stream, std::function<void(StatusOr<Tensor>)> done) override;
  // Another GPU whose memory this one can reach (cudaDeviceCanAccessPeer; peer access enabled on
  // first use): copies go peer to peer, one cudaMemcpyPeerAsync on `stream`.
  bool can_copy_from_peer(const Device& peer) const override;
  void copy_from_peer(const Tensor& src, Device& peer, Stream& stream,
                      std::function<void(StatusOr<Tensor>)> done) override;

  // A CUDA graph of the recorded bodies (Note [Captured partitions] in
  // core/captured_partition.cc): each is issued once on a private stream under
  // cudaStreamBeginCapture (thread-local mode: other threads' work is unaffected), then the graph
  // is instantiated; a launch is one cudaGraphLaunch on the stream. copy_within is a
  // cudaMemcpyAsync within the GPU.
  bool supports_graphs() const override { return true; }
  StatusOr<std::unique_ptr<Graph>> make_graph(std::vector<ReplayableWork> bodies) override;
  Status copy_within(const Tensor& src, const Tensor& dst, Stream& stream) override;

  int ordinal() const { return ordinal_; }
  const std::string& gpu_name() const { return gpu_name_; }  // "NVIDIA H200"
  int64_t memory_limit_bytes() const override { return static_cast<int64_t>(total_memory_); }
  std::string description() const override { return gpu_name_; }
  int multiprocessor_count() const { return multiprocessors_; }
  std::size_t total_memory() const { return total_memory_; }

  // Makes this GPU current on the calling thread.
  [[nodiscard]] Status make_current() const;
  // Runs fn(handle) with the device's cuBLAS handle bound to `stream`, under the lock that
  // serializes the handle's users (created on first use).
  [[nodiscard]] Status with_cublas(CUstream_st* stream, const std::function<Status(cublasContext*)>& fn);
  // Runs `fn` on the device's completion thread (never inline).
  void post(std::function<void()> fn);
  // An event for stream ordering (from a pool); give it back when done.
  StatusOr<CUevent_st*> take_event();
  void give_event(CUevent_st* event);

 private:
  friend class CudaStream;
  CudaDevice(int ordinal, CudaDeviceOptions options);

  const int ordinal_;
  const CudaDeviceOptions options_;
  std::string gpu_name_;
  int multiprocessors_ = 0;
  std::size_t total_memory_ = 0;
  DeviceCostProfile cost_profile_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<PinnedStagingPool> staging_;
  std::unique_ptr<CudaCompletionQueue> completions_;  // before the streams: they use it
  std::unique_ptr<CudaStagingThreads> stagers_;       // null when options_.staging_threads is 0
  std::vector<std::unique_ptr<CudaStream>> compute_;
  std::unique_ptr<CudaStream> h2d_;
  std::unique_ptr<CudaStream> d2h_;
  std::mutex events_mu_;
  std::vector<CUevent_st*> free_events_;  // guarded by events_mu_
  std::mutex cublas_mu_;
  cublasContext* cublas_ = nullptr;  // guarded by cublas_mu_; created on first use
  mutable std::mutex peers_mu_;
  mutable std::map<int, bool> peers_;  // ordinal -> peer access usable; guarded by peers_mu_
};

// Registers every usable GPU as /device:GPU:<ordinal> in `registry`; returns how many. With no GPU
// or no driver it registers none, prints one line to stderr (once per process) and returns 0; a
// GPU that fails to initialize is skipped with a line of its own. AlreadyExists when a GPU device
// is registered already. Never throws.
StatusOr<int> register_cuda_devices(DeviceRegistry& registry, CudaDeviceOptions options = {});

}  // namespace tessera::internal
