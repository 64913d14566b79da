#include "core/device.h"

#include <algorithm>

#include <cstdlib>
#include <new>

#include "core/host_blocks.h"
#include "core/logging.h"
#include "core/op_registry.h"

namespace tessera::internal {

// Note [Devices and streams]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A device is memory (its Allocator) plus ordered queues of work (its Streams). The model is
// CUDA's, so that the simulated accelerator exercises the same bridging code as the GPU will:
//
// * A stream runs its work in enqueue order, one item at a time. Enqueueing never waits: the
//   caller hands the work over and goes on. Kernels, copies and host callbacks are all stream
//   work; a copy is just work on a copy stream (SimDevice has one host-to-device and one
//   device-to-host stream next to its compute streams, as a GPU has copy engines).
// * Order across streams is expressed with Events: record(e) on stream A marks a point in A's
//   order; wait(e) on stream B holds back B's later work until A has passed that point. An event
//   completes with A's status, and a failed event puts the waiting stream in error too, so an
//   error travels along the dependency instead of being silently lost.
// * The completion path is Stream::then(done): it records a fresh event and asks the event to run
//   `done` when it completes, on the thread that completes it. No CPU thread ever blocks waiting
//   for device work (the executor's threads stay free); the only blocking calls are
//   Event::wait_for and Stream::synchronize, meant for tests and teardown.
// * QueuedStream is the host-side engine for streams whose work host threads run: a queue plus
//   "at most one run in flight". A wait on an incomplete event ends the run and registers a
//   callback on the event that schedules the next run, so a run never blocks either. The CPU
//   device schedules runs on the shared inter-op ThreadPool; SimDevice gives each stream its own
//   thread. The CUDA device will map enqueue/record/wait to launches, cudaEventRecord and
//   cudaStreamWaitEvent, and complete tessera Events from a host callback, so then() is the same.
// * A work item that throws puts its stream in error (sticky, as in CUDA): later work is skipped,
//   and events and then() callbacks get the error. Copies report their own failures through their
//   callback instead, so an allocation failure does not poison a copy stream.
// * Teardown drains: a device's destructor runs everything already queued (waits included, which
//   always end because every stream drains), then joins its threads. Work enqueued afterwards is
//   dropped and its events complete Cancelled, so nothing waits forever.

// ----- DeviceCostProfile -----

double DeviceCostProfile::transfer_seconds(std::size_t bytes) const {
  double t = transfer_latency_seconds;
  if (transfer_bandwidth > 0) t += static_cast<double>(bytes) / transfer_bandwidth;
  return t;
}

double DeviceCostProfile::compute_seconds(double flops) const {
  return flops_per_second > 0 ? flops / flops_per_second : 0.0;
}

double DeviceCostProfile::kernel_seconds(double flops, double bytes) const {
  const double memory = memory_bandwidth > 0 ? bytes / memory_bandwidth : 0.0;
  return kernel_overhead_seconds + std::max(compute_seconds(flops), memory);
}

// ----- Allocator -----

namespace {

// A tensor buffer whose data comes from an Allocator: `release` finds it through the header.
struct AllocatorBuffer : TensorBuffer {
  Allocator* allocator = nullptr;  // Not owned.
  std::size_t allocated = 0;
};

void release_allocator_buffer(TensorBuffer* b) {
  auto* ab = static_cast<AllocatorBuffer*>(b);
  ab->allocator->deallocate(ab->data, ab->allocated);
  delete ab;
}

}  // namespace

StatusOr<void*> Allocator::allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment == 0) alignment = Tensor::kAlignment;
  if ((alignment & (alignment - 1)) != 0) {
    return errors::invalid_argument("allocator {}: alignment {} is not a power of two", name(), alignment);
  }
  void* p = raw_allocate(bytes, alignment);
  if (p == nullptr) {
    return errors::resource_exhausted("allocator {}: failed to allocate {} bytes", name(), bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in_use += static_cast<int64_t>(bytes);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  ++stats_.num_allocs;
  ++stats_.live_allocs;
  return p;
}

void Allocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in_use -= static_cast<int64_t>(bytes);
  --stats_.live_allocs;
}

AllocatorStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

StatusOr<Tensor> Allocator::allocate_tensor(DType dtype, const Shape& shape,
                                            const std::string& device_name) {
  if (!shape.fully_defined()) {
    return errors::invalid_argument("cannot allocate a tensor of partial shape {} on {}",
                                    shape.to_string(), device_name);
  }
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  auto mem = allocate(bytes, Tensor::kAlignment);
  if (!mem.ok()) return mem.status();
  auto* b = new AllocatorBuffer();
  b->data = mem.value();
  b->bytes = bytes;
  b->release = &release_allocator_buffer;
  b->device = device_name;
  b->allocator = this;
  b->allocated = bytes;
  return adopt_buffer(b, dtype, shape);
}

void* HostMemoryAllocator::raw_allocate(std::size_t bytes, std::size_t alignment) {
  // Large blocks come from the cache of mapped, 2 MiB aligned pages: Note [Large host blocks].
  // (No caller asks for more than Tensor::kAlignment; a larger request than blocks guarantee fails.)
  if (bytes >= kLargeHostBlockMin) return alignment <= kHostBlockAlignment ? allocate_host_block(bytes) : nullptr;
  // aligned_alloc wants a size that is a multiple of the alignment; zero bytes still get a block so
  // that every allocation is a distinct pointer.
  std::size_t rounded = ((bytes + alignment - 1) / alignment) * alignment;
  if (rounded == 0) rounded = alignment;
  return std::aligned_alloc(alignment, rounded);
}

void HostMemoryAllocator::raw_deallocate(void* ptr, std::size_t bytes) {
  if (bytes >= kLargeHostBlockMin) {
    free_host_block(ptr, bytes);
  } else {
    std::free(ptr);
  }
}

// ----- Event -----

struct Event::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool recorded = false;   // guarded by mu
  bool completed = false;  // guarded by mu
  Status status;           // guarded by mu
  std::vector<std::function<void(Status)>> callbacks;  // guarded by mu
};

Event::Event() : state_(std::make_shared<State>()) {}

bool Event::recorded() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->recorded;
}

bool Event::completed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->completed;
}

Status Event::status() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

namespace {
void run_callback(const std::function<void(Status)>& fn, const Status& s) {
  try {
    fn(s);
  } catch (const std::exception& e) {
    TESSERA_LOG(kError, "a stream completion callback threw: {}", e.what());
    std::abort();
  }
}
}  // namespace

void Event::on_completed(std::function<void(Status)> fn) const {
  Status s;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->completed) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
    s = state_->status;
  }
  run_callback(fn, s);
}

bool Event::wait_for(std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, limit, [&] { return state_->completed; });
}

Status Event::mark_recorded() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->recorded) return errors::failed_precondition("event recorded twice (events are one-shot)");
  state_->recorded = true;
  return Status::ok_status();
}

void Event::complete(const Status& status) {
  std::vector<std::function<void(Status)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->completed) return;
    state_->completed = true;
    state_->status = status;
    callbacks.swap(state_->callbacks);
    state_->cv.notify_all();
  }
  for (auto& fn : callbacks) run_callback(fn, status);
}

// ----- Stream -----

void Stream::then(std::function<void(Status)> done) {
  Event e;
  Status s = record(e);
  TESSERA_CHECK(s.ok());  // a fresh event cannot have been recorded
  e.on_completed(std::move(done));
}

Status Stream::synchronize(std::chrono::milliseconds limit) {
  Event e;
  TESSERA_RETURN_IF_ERROR(record(e));
  if (!e.wait_for(limit)) {
    return errors::deadline_exceeded("stream {} did not finish its work within {} ms", name(), limit.count());
  }
  return e.status();
}

// ----- QueuedStream -----

void QueuedStream::push(Item item) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) {
      items_.push_back(std::move(item));
      if (!running_ && !blocked_) {
        running_ = true;
        schedule = true;
      }
      item.kind = Item::kWork;  // moved from: nothing left to drop below
    }
  }
  if (schedule) {
    schedule_run();
  } else if (item.kind == Item::kRecord) {
    // Shut down: the event would never complete otherwise.
    item.event->complete(errors::cancelled("stream {} is shut down", name_));
  }
}

void QueuedStream::enqueue(std::function<void()> work) { push(Item{Item::kWork, std::move(work), std::nullopt}); }

Status QueuedStream::record(Event& event) {
  TESSERA_RETURN_IF_ERROR(event.mark_recorded());
  push(Item{Item::kRecord, nullptr, event});
  return Status::ok_status();
}

Status QueuedStream::wait(const Event& event) {
  if (!event.recorded()) {
    return errors::failed_precondition("stream {} asked to wait on an event that was never recorded", name_);
  }
  push(Item{Item::kWait, nullptr, event});
  return Status::ok_status();
}

void QueuedStream::on_event_ready() {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocked_ = false;
    if (!items_.empty()) {
      running_ = true;
      schedule = true;
    } else {
      idle_cv_.notify_all();
    }
  }
  if (schedule) schedule_run();
}

void QueuedStream::run_pending() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (items_.empty()) {
      running_ = false;
      idle_cv_.notify_all();  // under the lock: shutdown() may destroy us right after
      return;
    }
    Item& head = items_.front();
    if (head.kind == Item::kWait) {
      if (!head.event->completed()) {
        // Park until the event completes; its callback schedules the next run. Registering may run
        // the callback at once (the event completed meanwhile), so do it without the lock.
        Event event = *head.event;
        blocked_ = true;
        running_ = false;
        lock.unlock();
        event.on_completed([this](Status) { on_event_ready(); });
        return;
      }
      Status s = head.event->status();
      if (!s.ok() && error_.ok()) error_ = s.with_prefix("waited-on event failed: ");
      items_.pop_front();
      continue;
    }
    Item item = std::move(head);
    items_.pop_front();
    Status error = error_;
    lock.unlock();
    if (item.kind == Item::kRecord) {
      item.event->complete(error);
    } else if (error.ok()) {
      Status failed;
      try {
        item.work();
      } catch (...) {
        failed = status_from_current_exception();
      }
      if (!failed.ok()) {
        lock.lock();
        if (error_.ok()) error_ = failed;
        lock.unlock();
      }
    }
    item = Item{};  // destroy captured state before taking the lock again
    lock.lock();
  }
}

void QueuedStream::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return items_.empty() && !running_ && !blocked_; });
  closed_ = true;
}

// ----- Device -----

Device::Device(std::string type, int id)
    : type_(std::move(type)),
      id_(id),
      name_("/job:localhost/replica:0/task:0/device:" + type_ + ":" + std::to_string(id)) {
  auto parsed = DeviceSpec::parse(name_);
  TESSERA_CHECK(parsed.ok());
  spec_ = parsed.value();
}

bool Device::has_kernel(const std::string& op_type) const {
  return OpRegistry::global().has_kernel(op_type, type_);
}

StatusOr<Tensor> Device::allocate_tensor(DType dtype, const Shape& shape) {
  return allocator().allocate_tensor(dtype, shape, name_);
}

// ----- DeviceRegistry -----

DeviceRegistry::~DeviceRegistry() {
  std::vector<std::unique_ptr<Device>> devices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices.swap(devices_);
  }
  // Without the lock: draining work may look devices up.
  while (!devices.empty()) devices.pop_back();
}

DeviceRegistry& DeviceRegistry::global() {
  // Leaked on purpose: device threads may still run work while static destructors do.
  static DeviceRegistry* registry = new DeviceRegistry();
  return *registry;
}

Status DeviceRegistry::add(std::unique_ptr<Device> device) {
  TESSERA_CHECK(device != nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& d : devices_) {
    if (d->name() == device->name()) return errors::already_exists("device {} is already registered", d->name());
  }
  devices_.push_back(std::move(device));
  return Status::ok_status();
}

std::vector<Device*> DeviceRegistry::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

StatusOr<std::vector<Device*>> DeviceRegistry::find_all(const std::string& spec) const {
  auto parsed = DeviceSpec::parse(spec);
  if (!parsed.ok()) return parsed.status();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Device*> out;
  for (const auto& d : devices_) {
    if (parsed.value().matches(d->spec())) out.push_back(d.get());
  }
  return out;
}

StatusOr<Device*> DeviceRegistry::find(const std::string& spec) const {
  auto all = find_all(spec);
  if (!all.ok()) return all.status();
  if (all.value().empty()) {
    std::string known;
    for (Device* d : devices()) known += (known.empty() ? "" : ", ") + d->name();
    return errors::not_found("no device matches '{}' (devices: {})", spec, known.empty() ? "none" : known);
  }
  return all.value().front();
}

}  // namespace tessera::internal
