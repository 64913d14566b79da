#include "device/sim_device.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "core/denormals.h"
#include "core/device_factory.h"
#include "core/tensor_buffer.h"
#include "device/caching_allocator.h"
#include "tessera/device.h"
#include "tessera/errors.h"

namespace tessera::internal {

// ----- SimMemory -----

namespace {

thread_local bool tls_sim_stream_thread = false;

constexpr std::size_t kSimChunkAlignment = 256;

// Host regions for the SIM pool. A region goes back (empty_cache, or the pool out of memory)
// only once every stream of the device has passed that point: queued work may still use its
// chunks, as cudaFree waits for the GPU.
class HostRegions final : public CachingAllocatorBacking {
 public:
  explicit HostRegions(SimMemory& memory) : memory_(memory) {}
  StatusOr<void*> allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(kSimChunkAlignment, bytes);  // bytes: a multiple of 2 MiB
    if (p == nullptr) return errors::resource_exhausted("host memory: no {} bytes", bytes);
    return p;
  }
  void deallocate(void* ptr, std::size_t) override { memory_.free_after_streams(ptr); }

 private:
  SimMemory& memory_;
};

}  // namespace

SimMemory::SimMemory(std::string name)
    : name_(std::move(name)),
      pool_(std::make_unique<CachingAllocator>(name_ + "/pool", std::make_unique<HostRegions>(*this))) {}

SimMemory::~SimMemory() {
  pool_.reset();  // first: its regions go back through free_after_streams, which takes mu_
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [p, bytes] : heap_) std::free(p);  // only after a leak elsewhere: tensors outlived the device
}

void SimMemory::mark_stream_thread() { tls_sim_stream_thread = true; }

void SimMemory::set_streams(QueuedStream* free_stream, std::vector<QueuedStream*> all) {
  std::lock_guard<std::mutex> lock(mu_);
  free_stream_ = free_stream;
  streams_ = std::move(all);
}

void SimMemory::free_after_streams(void* region) {
  std::vector<QueuedStream*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  if (streams.empty()) return std::free(region);  // teardown: the streams have drained
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(streams.size()));
  for (QueuedStream* stream : streams) {
    Event passed;
    (void)stream->record(passed);  // fresh: cannot fail (a closed stream completes it at once)
    passed.on_completed([region, left](Status) {
      if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) std::free(region);
    });
  }
}

int64_t SimMemory::bytes_reserved() const {
  // The pool's lock is never taken under mu_ (the pool calls free_after_streams under its own).
  const int64_t pool = pool_->bytes_reserved();
  std::lock_guard<std::mutex> lock(mu_);
  return pool + heap_bytes_;
}

void SimMemory::record_stream(void* ptr, Stream* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (heap_.count(ptr) != 0) return;  // freed in stream order anyway
  }
  pool_->record_stream(ptr, stream);
}

void* SimMemory::raw_allocate(std::size_t bytes, std::size_t alignment) {
  return raw_allocate_for(bytes, alignment, nullptr);
}

void* SimMemory::raw_allocate_for(std::size_t bytes, std::size_t alignment, Stream* stream) {
  if (!tls_sim_stream_thread) {
    auto p = pool_->allocate(bytes, alignment, stream);
    return p.ok() ? p.value() : nullptr;
  }
  const std::size_t align = std::max(alignment, kSimChunkAlignment);
  void* p = std::aligned_alloc(align, round_up(std::max<std::size_t>(bytes, 1), align));
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  heap_.emplace(p, bytes);
  heap_bytes_ += static_cast<int64_t>(bytes);
  return p;
}

void SimMemory::raw_deallocate(void* ptr, std::size_t bytes) {
  std::function<void()> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = heap_.find(ptr);
    if (it != heap_.end()) {
      heap_.erase(it);
      heap_bytes_ -= static_cast<int64_t>(bytes);
      // Heap memory: freed after everything already queued, which may still read it.
      release = [ptr] { std::free(ptr); };
      if (free_stream_ != nullptr && free_stream_->enqueue_unless_closed(release)) return;
    }
  }
  if (release) return release();
  // Pool memory (outside mu_: the pool's lock is never taken under it), cached for its stream.
  pool_->deallocate(ptr, bytes);
}

// ----- SimStream -----

SimStream::SimStream(std::string name) : QueuedStream(std::move(name)), thread_([this] { loop(); }) {}

SimStream::~SimStream() {
  shutdown();  // drain first: runs need the thread
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  thread_.join();
}

void SimStream::schedule_run() {
  std::lock_guard<std::mutex> lock(mu_);
  run_requested_ = true;
  cv_.notify_one();  // under the lock: the stream may be destroyed once the run is done
}

void SimStream::loop() {
  SimMemory::mark_stream_thread();
  flush_denormals_on_this_thread();  // kernels run here (Note [Denormals flushed] in core/denormals.h)
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return run_requested_ || stop_; });
      if (!run_requested_) return;  // stop_ and nothing left to run
      run_requested_ = false;
    }
    run_pending();
  }
}

// ----- SimDevice -----

SimDevice::SimDevice(int id, SimDeviceOptions options)
    : Device("SIM", id), options_(options), allocator_("sim:" + std::to_string(id)) {
  TESSERA_CHECK(options_.num_compute_streams >= 1);
  for (int i = 0; i < options_.num_compute_streams; ++i) {
    compute_.push_back(std::make_unique<SimStream>(name() + "/stream:compute:" + std::to_string(i)));
  }
  h2d_ = std::make_unique<SimStream>(name() + "/stream:host_to_device");
  d2h_ = std::make_unique<SimStream>(name() + "/stream:device_to_host");
  std::vector<QueuedStream*> all;
  for (auto& c : compute_) all.push_back(c.get());
  all.push_back(h2d_.get());
  all.push_back(d2h_.get());
  allocator_.set_streams(compute_.front().get(), std::move(all));
}

SimDevice::~SimDevice() {
  // Drain every stream while all still exist (a wait on another stream ends: that one drains
  // too), then let memory go at once from here on, then stop the threads. Work enqueued on a
  // stream already gone is dropped (Note [Devices and streams]).
  for (auto& stream : compute_) (void)stream->synchronize();
  (void)h2d_->synchronize();
  (void)d2h_->synchronize();
  allocator_.set_streams(nullptr, {});
  h2d_.reset();
  d2h_.reset();
  compute_.clear();
}

Stream& SimDevice::compute_stream(int index) {
  TESSERA_CHECK(index >= 0 && index < num_compute_streams());
  return *compute_[static_cast<std::size_t>(index)];
}

void SimDevice::simulate_transfer(std::size_t bytes) const {
  double seconds = options_.simulated_transfer_latency_seconds;
  if (options_.simulated_transfer_bandwidth > 0) {
    seconds += static_cast<double>(bytes) / options_.simulated_transfer_bandwidth;
  }
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void SimDevice::copy(const Tensor& src, CopyKind kind, Stream& stream,
                     std::function<void(StatusOr<Tensor>)> done) {
  const bool to_device = kind != CopyKind::kToHost;
  const char* what = kind == CopyKind::kToDevice ? "copy_to_device"
                     : kind == CopyKind::kToHost ? "copy_to_host"
                                                 : "copy_from_peer";
  if (src.is_null()) {
    done(errors::invalid_argument("{}: cannot copy a null tensor", name()));
    return;
  }
  const std::string where = src.device();
  if (src.dtype() == DType::String) {  // placement keeps strings on the host: a bug if one gets here
    done(errors::internal("{}: {} of a string tensor (strings live in host memory only)", name(), what));
    return;
  }
  if (kind != CopyKind::kFromPeer) {
    const std::string want = to_device ? std::string(kHostDeviceName) : name();
    if (where != want) {
      done(errors::invalid_argument("{}: {} expects a tensor in {}, got one in {}", name(), what, want, where));
      return;
    }
  }
  // The copy reports its own failure through `done` rather than throwing, which would put the copy
  // stream in error for every later copy.
  struct Result {
    Status status;
    Tensor tensor;
  };
  auto result = std::make_shared<Result>();
  Tensor target;
  if (to_device) {
    // The target is taken now, in enqueue order, from the copy stream's own cache (Note
    // [Stream-ordered memory] in sim_kernels.cc): whatever used that memory before is queued
    // ahead on this stream, or has passed it on the others.
    auto t = allocate_tensor(src.dtype(), src.shape(), &stream);
    if (!t.ok()) {
      done(t.status());
      return;
    }
    target = std::move(t).value();
  }
  if (kind == CopyKind::kToDevice) count_host_side(pin_host_tensor(src), direct_to_device_);
  stream.enqueue([this, src, kind, to_device, result, target = std::move(target)]() mutable {
    simulate_transfer(src.bytes());
    Tensor dst;
    if (to_device) {
      dst = std::move(target);
    } else {
      try {
        dst = Tensor(src.dtype(), src.shape());
      } catch (...) {
        result->status = status_from_current_exception();
        return;
      }
      if (kind == CopyKind::kToHost) count_host_side(pin_host_tensor(dst), direct_to_host_);
    }
    if (src.bytes() > 0) std::memcpy(dst.raw_mutable_data(), src.raw_data(), src.bytes());
    result->tensor = std::move(dst);
  });
  // The event behind then() orders the write of *result above before the read below.
  stream.then([this, result, to_device, done = std::move(done)](Status s) {
    if (!s.ok()) {
      // The copy stream is in error (a fault on it, or on the compute stream it waited for): the
      // device is done for, as after a kernel's fault.
      mark_failed(s.with_prefix(fmt::format("{}, in a copy {} the device: ", name(), to_device ? "to" : "from")));
      done(s);
    } else if (!result->status.ok()) {
      done(result->status);
    } else {
      done(std::move(result->tensor));
    }
  });
}

void SimDevice::count_host_side(bool pinned, std::atomic<int64_t>& direct) {
  (pinned ? direct : staged_).fetch_add(1, std::memory_order_relaxed);
}

SimDevice::TransferStats SimDevice::transfer_stats() const {
  return TransferStats{direct_to_device_.load(), direct_to_host_.load(), staged_.load()};
}

namespace {
class SimGraph final : public Device::Graph {
 public:
  explicit SimGraph(std::vector<ReplayableWork> bodies) : bodies_(std::move(bodies)) {}
  void launch(Stream& stream, StreamWork& work) override {
    // The graph outlives its launches (its partition's plan does), the step its work.
    stream.enqueue([this, &work] {
      for (const ReplayableWork& body : bodies_) body(nullptr, work);
    });
  }

 private:
  const std::vector<ReplayableWork> bodies_;
};
}  // namespace

StatusOr<std::unique_ptr<Device::Graph>> SimDevice::make_graph(std::vector<ReplayableWork> bodies) {
  return std::unique_ptr<Graph>(std::make_unique<SimGraph>(std::move(bodies)));
}

Status SimDevice::copy_within(const Tensor& src, const Tensor& dst, Stream& stream) {
  if (src.device() != name() || dst.device() != name() || src.bytes() != dst.bytes()) {
    return errors::invalid_argument("{}: copy_within of {} bytes in {} into {} bytes in {}", name(), src.bytes(),
                                    src.device(), dst.bytes(), dst.device());
  }
  stream.enqueue([from = unowned_view(src), to = unowned_view(dst)]() mutable {
    if (from.bytes() > 0) std::memcpy(to.raw_mutable_data(), from.raw_data(), from.bytes());
  });
  return Status();
}

void SimDevice::copy_to_device(const Tensor& host, Stream& stream,
                               std::function<void(StatusOr<Tensor>)> done) {
  copy(host, CopyKind::kToDevice, stream, std::move(done));
}

void SimDevice::copy_to_host(const Tensor& on_device, Stream& stream,
                             std::function<void(StatusOr<Tensor>)> done) {
  copy(on_device, CopyKind::kToHost, stream, std::move(done));
}

void SimDevice::copy_from_peer(const Tensor& src, Device& peer, Stream& stream,
                               std::function<void(StatusOr<Tensor>)> done) {
  if (!can_copy_from_peer(peer) || src.device() != peer.name()) {
    done(errors::invalid_argument("{}: copy_from_peer of a tensor in {} from {}", name(), src.device(), peer.name()));
    return;
  }
  copy(src, CopyKind::kFromPeer, stream, std::move(done));
}

// ----- Registration -----

StatusOr<int> parse_sim_accelerator_count(const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  std::string_view v(value);
  int n = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 0 || n > kMaxSimDevices) {
    return errors::invalid_argument(
        "TESSERA_SIM_ACCELERATORS must be a whole number of simulated accelerators from 0 to {}, got '{}'",
        kMaxSimDevices, v);
  }
  return n;
}

Status register_sim_devices(int n, DeviceRegistry& registry, SimDeviceOptions options, int first) {
  if (first < 0 || first > kMaxSimDevices) {
    return errors::invalid_argument("the first simulated accelerator's index must be from 0 to {}, got {}",
                                    kMaxSimDevices, first);
  }
  if (n < 0 || n > kMaxSimDevices - first) {
    return errors::invalid_argument("number of simulated accelerators must be from 0 to {}, got {}",
                                    kMaxSimDevices - first, n);
  }
  if (options.num_compute_streams < 1) {
    return errors::invalid_argument("a simulated accelerator needs at least one compute stream, got {}",
                                    options.num_compute_streams);
  }
  for (int i = first; i < first + n; ++i) {
    auto existing = registry.find_all("/device:SIM:" + std::to_string(i));
    if (existing.ok() && !existing.value().empty()) {
      return errors::already_exists("{} is already registered", existing.value().front()->name());
    }
  }
  for (int i = first; i < first + n; ++i) {
    TESSERA_RETURN_IF_ERROR(registry.add(std::make_unique<SimDevice>(i, options)));
  }
  return Status::ok_status();
}

namespace {
// TESSERA_SIM_ACCELERATORS=N: /device:SIM:0..N-1 (none when unset).
class SimDeviceFactory final : public DeviceFactory {
 public:
  Status create_devices(std::vector<std::unique_ptr<Device>>* devices) override {
    auto n = parse_sim_accelerator_count(std::getenv("TESSERA_SIM_ACCELERATORS"));
    if (!n.ok()) return n.status();
    for (int i = 0; i < n.value(); ++i) devices->push_back(std::make_unique<SimDevice>(i));
    return Status::ok_status();
  }
};
TESSERA_REGISTER_DEVICE_FACTORY("SIM", 100, SimDeviceFactory);
}  // namespace

StatusOr<int> register_sim_devices_from_env(DeviceRegistry& registry) {
  auto n = parse_sim_accelerator_count(std::getenv("TESSERA_SIM_ACCELERATORS"));
  if (!n.ok()) return n.status();
  Status s = register_sim_devices(n.value(), registry);
  if (!s.ok()) return s;
  return n.value();
}

}  // namespace tessera::internal

namespace tessera {

std::vector<std::string> add_simulated_accelerators(int n) {
  using internal::kMaxSimDevices;
  internal::local_devices().status().raise();  // TESSERA_SIM_ACCELERATORS' devices come first
  internal::DeviceRegistry& registry = internal::DeviceRegistry::global();
  const int have = static_cast<int>(registry.find_all("/device:SIM:*").value_or_raise().size());
  if (n < 1 || have + n > kMaxSimDevices) {
    throw InvalidArgumentError(fmt::format("add_simulated_accelerators: n must be from 1 to {} (this process has {}), got {}",
                                           kMaxSimDevices - have, have, n));
  }
  internal::register_sim_devices(n, registry, {}, /*first=*/have).raise();
  std::vector<std::string> names;
  for (int i = have; i < have + n; ++i) {
    names.push_back(registry.find("/device:SIM:" + std::to_string(i)).value_or_raise()->name());
  }
  return names;
}

}  // namespace tessera
