// The simulated accelerator: device type "SIM", host memory, but its own stream threads, copy
// streams, events and async completion path, the same as the CUDA device, so the bridging code
// runs on CPU-only machines.
//
//   export TESSERA_SIM_ACCELERATORS=2          // then, at session start (later):
//   register_sim_devices_from_env(DeviceRegistry::global()).value();   // /device:SIM:0 and :1
//   Device* sim = DeviceRegistry::global().find("/device:SIM:1").value();
//   sim->copy_to_device(host_tensor, sim->host_to_device_stream(),
//                       [](StatusOr<Tensor> t) { /* t.value().device() is SIM:1's name */ });
//
// See Note [Devices and streams] in core/stream.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace tessera::internal {

// The cost profile placement uses for SIM: arithmetic 4x the CPU default (200 GFLOP/s against
// 50), 100 GB/s device memory, and PCIe-3-like transfers of 12 GB/s with 10 us latency each way.
inline constexpr DeviceCostProfile kSimCostProfile{
    /*flops_per_second=*/200e9,
    /*memory_bandwidth=*/100e9,
    /*transfer_bandwidth=*/12e9,
    /*transfer_latency_seconds=*/10e-6,
    /*kernel_overhead_seconds=*/5e-6,
};

struct SimDeviceOptions {
  int num_compute_streams = 1;
  // Simulated transfer time of each copy: latency + bytes / bandwidth, slept on the copy stream.
  // 0 = no delay (tests stay fast); bandwidth 0 = latency only.
  double simulated_transfer_latency_seconds = 0;
  double simulated_transfer_bandwidth = 0;
};

// A stream with a dedicated thread that runs its queue in order. The destructor drains, then
// joins. Thread-safe.
class SimStream final : public QueuedStream {
 public:
  explicit SimStream(std::string name);
  ~SimStream() override;

 protected:
  void schedule_run() override;

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  bool run_requested_ = false;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  std::thread thread_;          // last: starts after the fields above exist
};

// The SIM device's memory (Note [Stream-ordered memory] in device/sim_kernels.cc): host memory
// handed out the way the GPU's is. What is allocated in enqueue order (kernel outputs, copy
// targets) comes from a CachingAllocator over host regions, cached per stream and reused at once,
// so only stream order (and record_stream) keeps a freed block from being overwritten while
// queued work still reads it, exactly as on the GPU. What stream work allocates itself (a kernel whose output shapes are known only once it
// runs) is fresh heap memory, freed in stream order: after everything already queued on the
// compute stream. Thread-safe.
class SimMemory final : public Allocator {
 public:
  explicit SimMemory(std::string name);
  ~SimMemory() override;
  std::string name() const override { return name_; }
  int64_t bytes_reserved() const override;
  void record_stream(void* ptr, Stream* stream) override;
  // Frees of stream-allocated memory go onto `free_stream` from now on, and regions the pool gives
  // back wait for every stream in `all` (nullptr and none: at once, for teardown once the streams
  // have drained).
  void set_streams(QueuedStream* free_stream, std::vector<QueuedStream*> all);
  // Frees a region of the pool once every stream has passed this point.
  void free_after_streams(void* region);
  // Marks the calling thread as one that runs SIM stream work (its allocations are fresh heap).
  static void mark_stream_thread();

 protected:
  void* raw_allocate(std::size_t bytes, std::size_t alignment) override;
  void* raw_allocate_for(std::size_t bytes, std::size_t alignment, Stream* stream) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  const std::string name_;
  std::unique_ptr<Allocator> pool_;  // a CachingAllocator
  mutable std::mutex mu_;
  std::unordered_map<void*, std::size_t> heap_;  // stream-allocated blocks; guarded by mu_
  int64_t heap_bytes_ = 0;                       // guarded by mu_
  QueuedStream* free_stream_ = nullptr;          // guarded by mu_
  std::vector<QueuedStream*> streams_;           // guarded by mu_
};

// Thread-safe.
class SimDevice final : public Device {
 public:
  explicit SimDevice(int id, SimDeviceOptions options = {});
  ~SimDevice() override;

  Allocator& allocator() override { return allocator_; }
  const DeviceCostProfile& cost_profile() const override { return kSimCostProfile; }
  std::string description() const override { return "simulated accelerator (host memory)"; }
  int num_compute_streams() const override { return static_cast<int>(compute_.size()); }
  Stream& compute_stream(int index = 0) override;
  Stream& host_to_device_stream() override { return *h2d_; }
  Stream& device_to_host_stream() override { return *d2h_; }
  // The copy runs as work on `stream` into a fresh buffer of the target memory; `done` runs on the
  // stream's thread. InvalidArgument (through `done`) for a null tensor or one in the wrong memory.
  // The host side is pinned where the GPU's would be (Note [Pinned host blocks] in
  // core/host_blocks.cc: a large block, a pinner installed) and counted in transfer_stats(): the
  // copy itself is a memcpy either way.
  void copy_to_device(const Tensor& host, Stream& stream,
                      std::function<void(StatusOr<Tensor>)> done) override;
  void copy_to_host(const Tensor& on_device, Stream& stream,
                    std::function<void(StatusOr<Tensor>)> done) override;
  // Replays are one work item on the stream running the recorded bodies in order (Note [Captured
  // partitions] in core/captured_partition.cc); copy_within is a memcpy on the stream.
  bool supports_graphs() const override { return true; }
  StatusOr<std::unique_ptr<Graph>> make_graph(std::vector<ReplayableWork> bodies) override;
  Status copy_within(const Tensor& src, const Tensor& dst, Stream& stream) override;
  struct TransferStats {
    int64_t direct_to_device = 0;  // copies from a pinned host tensor
    int64_t direct_to_host = 0;    // copies into a pinned host tensor
    int64_t staged = 0;            // host copies whose host side is not pinned
  };
  TransferStats transfer_stats() const;
  // Another SIM device's memory is host memory too: copied directly, as GPUs copy peer to peer.
  bool can_copy_from_peer(const Device& peer) const override { return peer.type() == "SIM" && &peer != this; }
  void copy_from_peer(const Tensor& src, Device& peer, Stream& stream,
                      std::function<void(StatusOr<Tensor>)> done) override;

 private:
  enum class CopyKind { kToDevice, kToHost, kFromPeer };
  void copy(const Tensor& src, CopyKind kind, Stream& stream, std::function<void(StatusOr<Tensor>)> done);
  void simulate_transfer(std::size_t bytes) const;
  void count_host_side(bool pinned, std::atomic<int64_t>& direct);

  const SimDeviceOptions options_;
  std::atomic<int64_t> direct_to_device_{0};
  std::atomic<int64_t> direct_to_host_{0};
  std::atomic<int64_t> staged_{0};
  SimMemory allocator_;
  std::vector<std::unique_ptr<SimStream>> compute_;
  std::unique_ptr<SimStream> h2d_;
  std::unique_ptr<SimStream> d2h_;
};

// Parses TESSERA_SIM_ACCELERATORS' value: unset or empty = 0; else a decimal integer in
// [0, kMaxSimDevices]; InvalidArgument naming the variable otherwise.
inline constexpr int kMaxSimDevices = 64;
StatusOr<int> parse_sim_accelerator_count(const char* value);
// Registers /device:SIM:first..first+n-1 in `registry`. InvalidArgument for a bad n or first (at
// most kMaxSimDevices in all), AlreadyExists when one is registered already (nothing is
// registered then).
[[nodiscard]] Status register_sim_devices(int n, DeviceRegistry& registry, SimDeviceOptions options = {},
                                          int first = 0);
// Reads TESSERA_SIM_ACCELERATORS and registers that many SIM devices; returns how many.
StatusOr<int> register_sim_devices_from_env(DeviceRegistry& registry);

}  // namespace tessera::internal
