// Devices: where tensors live and kernels run. A Device has a full name, a type ("CPU", "SIM",
// "GPU"), an Allocator for its memory, and ordered Streams of asynchronous work; Events order work
// across streams. Backends register their devices in a DeviceRegistry; nothing here knows CUDA.
//
//   Device* sim = DeviceRegistry::global().find("/device:SIM:0").value();
//   Stream& s = sim->compute_stream();
//   s.enqueue([&] { run_kernel(); });
//   Event done;
//   s.record(done).ignore();                       // fresh event: cannot fail
//   other.wait(done).ignore();                     // later work on `other` follows run_kernel()
//   s.then([](Status st) { /* host callback, runs when everything above has run */ });
//
// The model (streams, events, the completion path, copies) is Note [Devices and streams] in
// core/stream.cc. Memory is core/allocator.h, streams and events core/stream.h; this header
// includes both so that a Device's user needs only this one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device_name.h"
#include "core/status.h"
#include "core/stream.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class StreamWork;  // core/op_kernel.h

// The body of one piece of stream work a kernel issued, which a captured partition issues again
// with the same buffers (Note [Captured partitions] in core/captured_partition.cc): `native` is
// the raw stream to issue on (a cudaStream_t being captured into a CUDA graph; nullptr on SIM,
// whose work runs on its stream's thread), `work` the step that replays it (failures go there).
using ReplayableWork = std::function<void(void* native, StreamWork& work)>;

// What placement needs to know about a device's speed. Rates are per second; "transfer" is
// between this device's memory and host memory (each direction), modelled as
// latency + bytes / bandwidth.
struct DeviceCostProfile {
  double flops_per_second = 0;            // sustained arithmetic rate
  double memory_bandwidth = 0;            // bytes/s within the device's own memory
  double transfer_bandwidth = 0;          // bytes/s to or from host memory
  double transfer_latency_seconds = 0;    // fixed cost of one transfer
  double kernel_overhead_seconds = 0;     // fixed cost of launching one kernel

  // Seconds one kernel costs: overhead + the larger of its arithmetic and memory time.
  double kernel_seconds(double flops, double bytes) const;

  // Seconds one transfer of `bytes` costs (0 bandwidth = free, as for host memory).
  double transfer_seconds(std::size_t bytes) const;
  // Seconds a kernel of `flops` arithmetic operations costs.
  double compute_seconds(double flops) const;
};

// A place where tensors live and kernels run. Subclasses: CpuDevice (host/), SimDevice and the
// CUDA device (device/). Thread-safe.
class Device {
 public:
  Device(std::string type, int id);
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "/job:localhost/replica:0/task:0/device:SIM:0"
  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  int id() const { return id_; }
  const DeviceSpec& spec() const { return spec_; }

  virtual Allocator& allocator() = 0;
  virtual const DeviceCostProfile& cost_profile() const = 0;
  // The memory this device has, in bytes (0 when unknown), and one line saying what it is
  // ("NVIDIA H200"): tessera::list_devices() reports both.
  virtual int64_t memory_limit_bytes() const { return 0; }
  virtual std::string description() const { return type_; }
  virtual int num_compute_streams() const = 0;
  virtual Stream& compute_stream(int index = 0) = 0;
  virtual Stream& host_to_device_stream() = 0;
  virtual Stream& device_to_host_stream() = 0;

  // Enqueue on `stream` a copy of a host tensor into this device's memory (or of one of this
  // device's tensors into host memory); `done` gets the new tensor or the error, through the
  // stream's then() path. Order with other streams through events.
  virtual void copy_to_device(const Tensor& host, Stream& stream,
                              std::function<void(StatusOr<Tensor>)> done) = 0;
  virtual void copy_to_host(const Tensor& on_device, Stream& stream,
                            std::function<void(StatusOr<Tensor>)> done) = 0;
  // Whether this device copies from `peer`'s memory directly (peer to peer), not through host
  // memory. Default: no.
  virtual bool can_copy_from_peer(const Device& peer) const {
    (void)peer;
    return false;
  }
  // Enqueue on `stream` (one of this device's) a copy of `src`, a tensor in `peer`'s memory, into
  // this device's memory; only when can_copy_from_peer(peer). `done` as copy_to_device. Order
  // after `peer`'s work through events.
  virtual void copy_from_peer(const Tensor& src, Device& peer, Stream& stream,
                              std::function<void(StatusOr<Tensor>)> done) {
    (void)src;
    (void)peer;
    (void)stream;
    done(errors::unimplemented("{} copies from no peer", name_));
  }

  // ---- Captured work (Note [Captured partitions] in core/captured_partition.cc) ----
  // Work recorded from kernels, made one launchable unit: a CUDA graph on a GPU, one stream work
  // item on SIM. Unimplemented on devices that cannot replay work.
  class Graph {
   public:
    virtual ~Graph() = default;
    // Enqueues the whole recorded work on `stream`, in recording order; failures go to `work`.
    virtual void launch(Stream& stream, StreamWork& work) = 0;
  };
  virtual bool supports_graphs() const { return false; }
  virtual StatusOr<std::unique_ptr<Graph>> make_graph(std::vector<ReplayableWork> bodies) {
    (void)bodies;
    return errors::unimplemented("{} cannot replay recorded work", name_);
  }
  // Enqueues on `stream` a copy of `src` into `dst`, both in this device's memory, of the same
  // size. Both must stay valid until the stream has run it (stream-ordered memory keeps them).
  virtual Status copy_within(const Tensor& src, const Tensor& dst, Stream& stream) {
    (void)src;
    (void)dst;
    (void)stream;
    return errors::unimplemented("{} has no copy within its memory", name_);
  }

  // True when a kernel for `op_type` is registered for this device's type.
  bool has_kernel(const std::string& op_type) const;
  // allocator().allocate_tensor with this device's name, for work on `stream` (nullptr: compute
  // stream 0, which every kernel runs on). See Note [Stream-ordered memory] in
  // device/sim_kernels.cc.
  StatusOr<Tensor> allocate_tensor(DType dtype, const Shape& shape, Stream* stream = nullptr);
  // Work on `stream` uses `t` (a tensor in this device's memory) besides the stream it was
  // allocated for: freed, its memory is reused only after `stream` has passed the free.
  void record_stream(const Tensor& t, Stream& stream);

  // A device whose work failed asynchronously (a CUDA fault, a stream in error: its later work is
  // skipped) is failed for good: steps that need it fail at once with `reason`, which should name
  // the op whose work the failure followed. The first reason wins; work on other devices goes on.
  void mark_failed(const Status& reason);
  // mark_failed with `error`, a stream's, found after the work of op `op` ("name (Type)"): the
  // reason is "<device>, after <op>: <error>", which it returns.
  Status fail_after(const std::string& op, const Status& error);
  // OK, or why the device failed. One atomic load while it is healthy.
  Status health() const;

 private:
  const std::string type_;
  const int id_;
  const std::string name_;
  DeviceSpec spec_;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  Status failure_;  // guarded by failure_mu_
};

// The devices of this process. Owns them; destroys them (draining their streams) in reverse
// order of registration. Thread-safe.
class DeviceRegistry {
 public:
  DeviceRegistry() = default;
  ~DeviceRegistry();
  DeviceRegistry(const DeviceRegistry&) = delete;
  DeviceRegistry& operator=(const DeviceRegistry&) = delete;

  // The process-wide registry (never destroyed); /device:CPU:0 registers itself at load.
  static DeviceRegistry& global();

  // AlreadyExists when a device of that name is registered.
  [[nodiscard]] Status add(std::unique_ptr<Device> device);
  std::vector<Device*> devices() const;  // in registration order
  // Every device `spec` (full, partial or legacy "/gpu:0") matches; InvalidArgument if malformed.
  StatusOr<std::vector<Device*>> find_all(const std::string& spec) const;
  // The first match; NotFound (listing the devices) when none.
  StatusOr<Device*> find(const std::string& spec) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Device>> devices_;  // guarded by mu_
};

}  // namespace tessera::internal
