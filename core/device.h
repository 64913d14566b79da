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
// core/device.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/device_name.h"
#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

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

struct AllocatorStats {
  int64_t bytes_in_use = 0;        // requested bytes of live allocations
  int64_t peak_bytes_in_use = 0;   // high-water mark of bytes_in_use
  int64_t num_allocs = 0;          // allocations ever made
  int64_t live_allocs = 0;         // allocations not yet freed
};

// A device's memory. Subclasses provide raw allocation; this class keeps the statistics and wraps
// allocations into Tensors. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string name() const = 0;

  // `alignment` is a power of two (0 = Tensor::kAlignment). Zero bytes yield a valid, unique
  // pointer. ResourceExhausted when the memory is not there.
  StatusOr<void*> allocate(std::size_t bytes, std::size_t alignment = 0);
  // `bytes` must be the size passed to allocate().
  void deallocate(void* ptr, std::size_t bytes);
  AllocatorStats stats() const;
  // Bytes held from the system, in use or cached (a caching allocator holds more than it hands
  // out); `stats().bytes_in_use` for allocators that cache nothing.
  virtual int64_t bytes_reserved() const { return stats().bytes_in_use; }

  // An uninitialized tensor whose buffer comes from this allocator and is freed through it when
  // the last handle goes; Tensor::device() reports `device_name`. The allocator must outlive the
  // tensor. InvalidArgument for a partial shape.
  StatusOr<Tensor> allocate_tensor(DType dtype, const Shape& shape, const std::string& device_name);

 protected:
  virtual void* raw_allocate(std::size_t bytes, std::size_t alignment) = 0;  // nullptr = no memory
  virtual void raw_deallocate(void* ptr, std::size_t bytes) = 0;

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;  // guarded by mu_
};

// Host memory through aligned_alloc: the CPU device's memory and the simulated accelerator's.
// Thread-safe.
class HostMemoryAllocator final : public Allocator {
 public:
  explicit HostMemoryAllocator(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

 protected:
  void* raw_allocate(std::size_t bytes, std::size_t alignment) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  const std::string name_;
};

// A point in a stream's order. A Stream records it; it completes (with that stream's status) when
// everything enqueued before the record has run. Copying an Event copies a handle to the same
// event. One-shot: an event is recorded at most once. Thread-safe.
class Event {
 public:
  Event();

  bool recorded() const;
  bool completed() const;
  // The recording stream's status at completion (OK until completed).
  Status status() const;
  // Runs `fn(status)` once the event completes: right now on this thread when it already has,
  // else on the thread that completes it. `fn` must not throw and must not block for long.
  void on_completed(std::function<void(Status)> fn) const;
  // Blocks up to `limit`; true when completed. For tests and teardown, never inside stream work.
  bool wait_for(std::chrono::milliseconds limit) const;

  // For Stream implementations: marks the event recorded (FailedPrecondition when it already
  // was), then completes it and runs the callbacks.
  [[nodiscard]] Status mark_recorded();
  void complete(const Status& status);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// An ordered queue of asynchronous work on a device. Work runs in enqueue order, one item at a
// time; a wait() holds back later work until an event completes; a work item that throws puts
// the stream in error (later work is skipped, recorded events and then() callbacks get the error).
// Thread-safe: any thread may enqueue.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;

  virtual void enqueue(std::function<void()> work) = 0;
  // FailedPrecondition when `event` was already recorded.
  [[nodiscard]] virtual Status record(Event& event) = 0;
  // Later work waits for `event`. FailedPrecondition when it was never recorded.
  [[nodiscard]] virtual Status wait(const Event& event) = 0;

  // The async completion path: `done(status)` runs once everything enqueued so far has run, on the
  // thread that finished it. Nothing blocks waiting. `done` must not throw.
  void then(std::function<void(Status)> done);
  // Blocks until everything enqueued so far has run; its status. For tests and teardown.
  Status synchronize(std::chrono::milliseconds limit = std::chrono::minutes(10));
};

// A Stream whose work host threads run: subclasses say which thread runs the queue by
// implementing schedule_run(), and call shutdown() first thing in their destructor.
// See Note [Devices and streams]. Thread-safe.
class QueuedStream : public Stream {
 public:
  explicit QueuedStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void enqueue(std::function<void()> work) override;
  [[nodiscard]] Status record(Event& event) override;
  [[nodiscard]] Status wait(const Event& event) override;

 protected:
  // Arrange for run_pending() to be called soon, on some thread. Called without locks held,
  // never while a run is scheduled or in progress.
  virtual void schedule_run() = 0;
  // Runs queued items in order until the queue is empty or the head waits on an incomplete event
  // (which then reschedules the run when it completes). Never blocks.
  void run_pending();
  // Runs everything queued (drain), then refuses new work: later work is dropped, later events
  // complete Cancelled. Blocks until drained.
  void shutdown();

 private:
  struct Item {
    enum Kind { kWork, kRecord, kWait } kind;
    std::function<void()> work;
    std::optional<Event> event;  // kRecord, kWait (work items allocate no event state)
  };
  void push(Item item);
  void on_event_ready();

  const std::string name_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Item> items_;  // guarded by mu_
  bool running_ = false;    // a run is scheduled or in progress; guarded by mu_
  bool blocked_ = false;    // the head waits on an event; guarded by mu_
  bool closed_ = false;     // guarded by mu_
  Status error_;            // sticky; guarded by mu_
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

  // True when a kernel for `op_type` is registered for this device's type.
  bool has_kernel(const std::string& op_type) const;
  // allocator().allocate_tensor with this device's name.
  StatusOr<Tensor> allocate_tensor(DType dtype, const Shape& shape);

 private:
  const std::string type_;
  const int id_;
  const std::string name_;
  DeviceSpec spec_;
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
