#include "core/direct_session.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>


#include <fmt/format.h>

#include "core/device_factory.h"
#include "core/device_name.h"
#include "core/host_blocks.h"
#include "core/op_registry.h"
#include "core/session_factory.h"
#include "core/tensor_buffer.h"
#include "core/timer.h"

namespace tessera {
namespace internal {

// Note [Session fast path]
// Many threads calling run() on one session must not serialize on shared cache lines. A repeated
// run touches no lock or counter that another thread's run also touches: the plan comes from a
// one-entry per-thread cache (keyed by session serial, signature and graph version), the step's
// arrays from a per-thread spare (Plan::acquire_arrays), step ids are drawn in per-thread
// blocks, constants are read in place, and the registry of steps in flight is sharded by thread.
// From 1 to 8 threads on 2 cores this took c = a + b from 2.2M to 1.0M runs/s (slower) to
// 2.4M to 4.1M runs/s. A shard's first step in flight registers in its `solo` slot with one
// compare-and-swap, no lock; a second one, while the first runs, goes to the shard's locked list.
// close() and cancel_step() hold a solo step by swapping in kCancellingSolo while they cancel it,
// so it cannot unregister (and be destroyed) under them; a step that finds its slot held waits on
// the shard's cv for it. The hot thread-locals are initial-exec (a direct TLS access, as
// tls_small_blocks in core/tensor.cc), the library being loaded at start-up.

// A thread's reusable step of one callable (Note [Callables]): only that thread touches it.
// Outside the anonymous namespace: SessionImpl::DirectCallable holds them.
struct alignas(64) CallableScratch {
  bool in_use = false;               // a call of this thread is running in it (a nested call makes its own)
  std::shared_ptr<const Plan> plan;  // rs's plan, kept alive for rs's destructor
  std::unique_ptr<RunState> rs;      // completed, ready to restart(); or null
};

namespace {

constexpr uint64_t kSeparator = ~0ull;

std::atomic<uint64_t> next_session_serial{1};
std::atomic<int> next_shard{0};
std::atomic<int64_t> next_step_block{0};
constexpr int64_t kStepBlock = 1 << 16;

// A step's signature as prepare_step reads it, in vectors a thread reuses: a step whose plan is
// cached allocates nothing for it (prepare_step never runs inside another on one thread).
struct SignatureScratch {
  std::vector<uint64_t> key;
  std::vector<Endpoint> feeds;
  std::vector<Endpoint> fetches;
  std::vector<const Node*> targets;
};

// A thread's last plan. `plan` is not owned: it is valid while the session with `session_serial`
// lives (the session keeps every plan it made), and serials are never reused, so a stale entry
// is never dereferenced. Holding no reference also means the cache keeps no memory alive.
struct PlanCacheEntry {
  uint64_t session_serial = 0;
  uint64_t graph_version = 0;
  std::vector<uint64_t> key;
  const StepPlan* plan = nullptr;
  SignatureScratch signature;  // beside the cache: one thread-local lookup per step
};
__attribute__((tls_model("initial-exec"))) thread_local PlanCacheEntry tls_plan;

// The Scratches of the callables a thread called lately. Trivial: no initialization guard.
struct ScratchCache {
  static constexpr int kEntries = 4;
  struct Entry {
    uint64_t callable = 0;               // the callable's serial
    CallableScratch* scratch = nullptr;  // not owned (the callable owns it); null: none to have
  };
  Entry entries[kEntries];
  int next_victim = 0;
};
__attribute__((tls_model("initial-exec"))) constinit thread_local ScratchCache tls_scratches{};
std::atomic<uint64_t> next_callable_serial{1};

// Cancellations in progress on this thread that hold a lock an asynchronous step's completion
// takes (a shard's, or an expiring step's): a step that ends inside one completes on the pool.
thread_local int cancelling_depth = 0;
struct Cancelling {
  Cancelling() { ++cancelling_depth; }
  ~Cancelling() { --cancelling_depth; }
  Cancelling(const Cancelling&) = delete;
  Cancelling& operator=(const Cancelling&) = delete;
};

// A thread's index (for shards) and block of step ids. Trivial, so an access needs no
// initialization guard.
struct ThreadSteps {
  int index = -1;
  int64_t next_step = 0;
  int64_t step_end = 0;
};
__attribute__((tls_model("initial-exec"))) constinit thread_local ThreadSteps tls_steps{};

int this_thread_shard(int shards) {
  ThreadSteps& t = tls_steps;
  if (t.index < 0) [[unlikely]] t.index = next_shard.fetch_add(1, std::memory_order_relaxed);
  return t.index % shards;
}

int64_t next_step_id() {
  ThreadSteps& t = tls_steps;
  if (t.next_step == t.step_end) [[unlikely]] {
    t.next_step = next_step_block.fetch_add(1, std::memory_order_relaxed) * kStepBlock + 1;
    t.step_end = t.next_step + kStepBlock - 1;
  }
  return t.next_step++;
}

// In a shard's solo slot while close() or cancel_step() cancels the step that was there.
RunState* const kCancellingSolo = reinterpret_cast<RunState*>(uintptr_t{1});

}  // namespace

std::size_t SessionImpl::KeyHash::operator()(const std::vector<uint64_t>& k) const noexcept {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : k) {
    h ^= v;
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h);
}

SessionImpl::SessionImpl(Graph& graph, SessionOptions options, ResourceMgr* shared,
                         std::shared_ptr<ResourceMgr> private_resources)
    : graph_(graph), g_(graph.impl()), options_(options),
      resources_(shared != nullptr ? shared : &own_resources_), private_resources_(std::move(private_resources)),
      serial_(next_session_serial.fetch_add(1, std::memory_order_relaxed)) {
  TESSERA_CHECK(options_.inter_op_threads >= 0);  // make() refuses it with the message
  if (options_.inter_op_threads > 0) {
    own_pool_ = std::make_unique<ThreadPool>(options_.inter_op_threads);
    pool_ = own_pool_.get();
  } else {
    pool_ = &ThreadPool::shared();
  }
  runner_ = [pool = pool_](std::function<void()> fn) { pool->schedule(std::move(fn)); };
  StatusOr<std::vector<Device*>> devices = local_devices();  // make() returned its error
  TESSERA_CHECK(devices.ok());
  devices_ = std::move(devices).value();  // the host CPU first
  for (Device* d : devices_) placement_devices_.push_back({d->name(), d->type(), d->cost_profile()});
}

StatusOr<std::unique_ptr<SessionImpl>> SessionImpl::make(Graph& graph, SessionOptions options, ResourceMgr* shared,
                                                         std::shared_ptr<ResourceMgr> private_resources) {
  if (options.inter_op_threads < 0) {
    return errors::invalid_argument("inter_op_threads must be >= 0, got {}", options.inter_op_threads);
  }
  TESSERA_RETURN_IF_ERROR(local_devices().status());
  tune_malloc_for_transport();  // for steps too: Note [Malloc settings for transport]
  return std::make_unique<SessionImpl>(graph, options, shared, std::move(private_resources));  // cannot fail now
}

SessionImpl::~SessionImpl() {
  close();
  // The pool (when owned) drains and joins before kernels and resources go away.
  own_pool_.reset();
}

void SessionImpl::close() {
  const Status reason(ErrorCode::kCancelled, "the session was closed");
  // A run registers (in the solo slot, or under its shard's lock) before checking closed_, both
  // sequentially consistent, so every run either sees closed_ or is found here.
  closed_.store(true, std::memory_order_seq_cst);
  for (RunShard& shard : shards_) {
    cancel_solo(shard, [&](RunState& rs) { rs.cancel(reason); });
    Cancelling scope;
    std::lock_guard<std::mutex> l(shard.mu);
    for (RunState* rs : shard.runs) rs->cancel(reason);
  }
  if (resources_ == &own_resources_) resources_->cancel_all(reason);
  for (RunShard& shard : shards_) {
    std::unique_lock<std::mutex> l(shard.mu);
    shard.cv.wait(l, [&] { return shard.runs.empty() && shard.solo.load(std::memory_order_seq_cst) == nullptr; });
  }
}

void SessionImpl::cancel_step(int64_t step_id, const Status& reason) {
  auto cancel_if_of_step = [&](RunState& rs) {
    if (rs.step_id() == step_id) rs.cancel(reason);
  };
  for (RunShard& shard : shards_) {
    cancel_solo(shard, cancel_if_of_step);
    Cancelling scope;
    std::lock_guard<std::mutex> l(shard.mu);
    for (RunState* rs : shard.runs) cancel_if_of_step(*rs);
  }
}

template <class Cancel>
void SessionImpl::cancel_solo(RunShard& shard, Cancel&& cancel) {
  RunState* rs = shard.solo.load(std::memory_order_seq_cst);
  while (rs != nullptr) {
    if (rs == kCancellingSolo) {  // another close() or cancel_step() holds it: wait for it
      std::unique_lock<std::mutex> l(shard.mu);
      shard.cv.wait(l, [&] { return (rs = shard.solo.load(std::memory_order_seq_cst)) != kCancellingSolo; });
      continue;
    }
    if (!shard.solo.compare_exchange_weak(rs, kCancellingSolo, std::memory_order_seq_cst)) continue;
    {
      Cancelling scope;  // the step may end now; if it is asynchronous, not on this thread
      cancel(*rs);
    }
    {
      std::lock_guard<std::mutex> l(shard.mu);
      shard.solo.store(rs, std::memory_order_seq_cst);
    }
    shard.cv.notify_all();
    return;
  }
}

Status SessionImpl::place_new_nodes() {
  const int total = g_.num_nodes_locked();
  if (placed_nodes_ == total) return Status();
  std::vector<const Node*> fresh;
  fresh.reserve(static_cast<std::size_t>(total - placed_nodes_));
  for (int id = placed_nodes_; id < total; ++id) fresh.push_back(g_.node_locked(id));
  PlacementOptions opts;
  opts.allow_soft_placement = options_.allow_soft_placement;
  opts.policy = policy_of(options_.placement_policy);
  auto placed = place_nodes(fresh, placement_devices_, opts, placement_);
  if (!placed.ok()) return placed.status();
  for (const std::string& line : placed.value().soft_placements) {
    // Every session of a graph that asks for a missing device says the same: a few lines per 10 s.
    static LogRateLimit soft_placements(std::chrono::seconds(10), 20);
    log_limited(soft_placements, LogLevel::kInfo, "soft placement: {}", line);
  }
  for (const Node* n : fresh) {
    const int d = placed.value().device_of.at(n);
    placement_[n] = d;
    g_.record_placement(n, devices_[static_cast<std::size_t>(d)]->name());
  }
  if (options_.log_device_placement) {
    TESSERA_LOG(kInfo, "{}", placement_table(fresh, placement_devices_, placed.value()));
  }
  placed_nodes_ = total;
  return Status();
}

StatusOr<OpKernel*> SessionImpl::kernel_for(const Node& node, Device* device) {
  std::lock_guard<std::mutex> l(kernels_mu_);
  auto it = kernels_.find(&node);
  if (it != kernels_.end()) return it->second.get();
  const std::string type = device == nullptr ? std::string("CPU") : device->type();
  auto kernel = OpRegistry::global().create_kernel(node, type);
  if (!kernel.ok()) return kernel.status();
  OpKernel* raw = kernel.value().get();
  kernels_.emplace(&node, std::move(kernel).value());
  return raw;
}

StatusOr<std::shared_ptr<const StepPlan>> SessionImpl::get_plan(const std::vector<uint64_t>& key,
                                                                const std::vector<Endpoint>& feeds,
                                                                const std::vector<Endpoint>& fetches,
                                                                const std::vector<const Node*>& targets) {
  const uint64_t version = g_.version();
  {
    std::shared_lock<std::shared_mutex> l(plans_mu_);
    auto it = plans_.find(key);
    if (it != plans_.end() && it->second->host->graph_version == version) return it->second;
  }
  StatusOr<std::shared_ptr<const StepPlan>> plan = Status(ErrorCode::kInternal, "unset");
  {
    // Placement reads the nodes' control inputs, so building a plan excludes graph mutation.
    std::unique_lock<std::shared_mutex> gl(g_.mutex());
    Status placed = place_new_nodes();
    if (!placed.ok()) return placed;
    auto device_of = [this](const Node& n) -> Device* {
      const int d = placement_.at(&n);
      return d == 0 ? nullptr : devices_[static_cast<std::size_t>(d)];
    };
    plan = build_step_plan(g_, feeds, fetches, targets, device_of,
                           [this](const Node& n, Device* d) { return kernel_for(n, d); }, options_.cuda_graphs,
                           options_.remapping ? &fused_ : nullptr);
  }
  if (!plan.ok()) return plan;
  std::unique_lock<std::shared_mutex> l(plans_mu_);
  auto& slot = plans_[key];
  // A replaced plan stays alive with the session: a thread's plan cache may still point at it.
  if (slot) retired_plans_.push_back(std::move(slot));
  slot = plan.value();
  return plan;
}

Status SessionImpl::prepare_step(const std::vector<Output>& fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets, const RunOptions& options, int64_t step_id,
                                 Rendezvous* remote, const StepPlan** plan_out, RunState::Options* ro) {
  // Signature: feeds (ordered by the map), fetches, targets -> cache key.
  PlanCacheEntry& cached = tls_plan;
  SignatureScratch& sig = cached.signature;
  std::vector<uint64_t>& key = sig.key;
  std::vector<Endpoint>& feed_eps = sig.feeds;
  std::vector<Endpoint>& fetch_eps = sig.fetches;
  std::vector<const Node*>& target_nodes = sig.targets;
  key.clear();
  feed_eps.clear();
  fetch_eps.clear();
  target_nodes.clear();
  for (const auto& [out, value] : feeds) {
    StatusOr<Node*> checked = checked_output(out, g_, "feed");
    if (!checked.ok()) return checked.status();
    Node* n = checked.value();
    if (value.is_null()) return errors::invalid_argument("feed '{}': null tensor", out.name());
    const DType want = n->output_dtypes[out.index()];
    const Shape& want_shape = n->output_shapes[out.index()];
    if (value.dtype() != want || !want_shape.compatible_with(value.shape())) {
      return errors::invalid_argument("{}: cannot feed a {} tensor of shape {} to '{}', which is {} {}",
                                      n->debug_name(), dtype_name(value.dtype()), value.shape().to_string(),
                                      out.name(), dtype_name(want), want_shape.to_string());
    }
    feed_eps.push_back({n, out.index()});
    key.push_back(endpoint_key(n, out.index()));
  }
  key.push_back(kSeparator);
  for (const auto& out : fetches) {
    StatusOr<Node*> checked = checked_output(out, g_, "fetch");
    if (!checked.ok()) return checked.status();
    Node* n = checked.value();
    fetch_eps.push_back({n, out.index()});
    key.push_back(endpoint_key(n, out.index()));
  }
  key.push_back(kSeparator);
  for (const auto& op : targets) {
    StatusOr<Node*> checked = checked_target(op, g_);
    if (!checked.ok()) return checked.status();
    Node* n = checked.value();
    target_nodes.push_back(n);
    key.push_back(endpoint_key(n, 0));
  }

  if (closed_.load(std::memory_order_acquire)) return errors::cancelled("attempted to use a closed session");
  if (cached.session_serial != serial_ || cached.graph_version != g_.version() || cached.key != key) {
    auto plan = get_plan(key, feed_eps, fetch_eps, target_nodes);
    if (!plan.ok()) return plan.status();
    cached.session_serial = serial_;
    cached.graph_version = plan.value()->host->graph_version;
    cached.key = key;
    cached.plan = plan.value().get();
  }
  *plan_out = cached.plan;
  return step_options(*cached.plan, options, step_id, remote, ro);
}

Status SessionImpl::step_options(const StepPlan& sp, const RunOptions& options, int64_t step_id, Rendezvous* remote,
                                 RunState::Options* ro) {
  for (const auto& dp : sp.devices) {  // a failed device fails its steps at once (Device::health)
    Status health = dp.device->health();
    if (!health.ok()) return health;
  }
  ro->plan = sp.host.get();
  ro->runner = &runner_;
  ro->resources = resources_;
  ro->private_resources = private_resources_.get();
  ro->step_id = step_id != 0 ? step_id : next_step_id();
  ro->timeout = options.timeout;
  ro->trace = options.trace;
  ro->rendezvous = remote;
  ro->allow_tf32 = options_.allow_tf32;
  return Status();
}

SessionImpl::RunTicket SessionImpl::register_run(RunState* rs) {
  RunTicket ticket{this_thread_shard(kRunShards), true};
  RunShard& s = shards_[ticket.shard];
  RunState* empty = nullptr;
  if (s.solo.compare_exchange_strong(empty, rs, std::memory_order_seq_cst)) {
    if (!closed_.load(std::memory_order_seq_cst)) return ticket;
    unregister_run(rs, ticket);
    return RunTicket{};
  }
  ticket.solo = false;
  std::lock_guard<std::mutex> l(s.mu);
  if (closed_.load(std::memory_order_seq_cst)) return RunTicket{};
  s.runs.push_back(rs);
  return ticket;
}

void SessionImpl::unregister_run(RunState* rs, RunTicket ticket) {
  RunShard& s = shards_[ticket.shard];
  if (ticket.solo) {
    RunState* expected = rs;
    if (s.solo.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst)) {
      if (closed_.load(std::memory_order_seq_cst)) {  // close() may wait for the shard to empty
        std::lock_guard<std::mutex> l(s.mu);
        s.cv.notify_all();
      }
      return;
    }
    // Held by a close() or cancel_step() (kCancellingSolo): it hands the step back when done.
    std::unique_lock<std::mutex> l(s.mu);
    s.cv.wait(l, [&] {
      expected = rs;
      return s.solo.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst);
    });
    s.cv.notify_all();
    return;
  }
  std::lock_guard<std::mutex> l(s.mu);
  auto it = std::find(s.runs.begin(), s.runs.end(), rs);
  *it = s.runs.back();
  s.runs.pop_back();
  if (s.runs.empty() && closed_.load(std::memory_order_relaxed)) s.cv.notify_all();
}

Status SessionImpl::finish_step(Status status, RunState& rs, MultiStep* multi, bool trace, RunMetadata* metadata,
                                std::vector<TraceRecord>* records, std::size_t num_fetches,
                                std::vector<Tensor>* outputs) {
  // The other partitions' failures are echoes of the first one (an aborted rendezvous, a
  // cancellation): the step reports the root cause. (Read after leaving the shard: a close()
  // writes it while holding the shard's lock; every other writer finished before the step did.)
  if (multi && !status.ok() && multi->aborting.load()) status = multi->root_cause;
  if ((metadata != nullptr || records != nullptr) && trace) {
    std::vector<TraceRecord> spans = rs.take_trace();
    if (multi) {
      for (auto& part : multi->parts) {
        for (auto& r : part->take_trace()) spans.push_back(std::move(r));
      }
    }
    if (metadata != nullptr) metadata->trace_json = trace_to_json(spans, rs.start_us());
    if (records != nullptr) *records = std::move(spans);
  }
  if (!status.ok()) return status;
  outputs->clear();
  outputs->reserve(num_fetches);
  for (std::size_t f = 0; f < num_fetches; ++f) {
    StatusOr<Tensor> t = rs.take_fetch(static_cast<int>(f));
    if (!t.ok()) [[unlikely]] {
      outputs->clear();
      return t.status();
    }
    outputs->push_back(std::move(t).value());
  }
  return status;
}

Status SessionImpl::run_step(const std::vector<Output>& fetches, const FeedMap& feeds,
                             const std::vector<Operation>& targets, const RunOptions& options, RunMetadata* metadata,
                             int64_t step_id, std::vector<TraceRecord>* records, std::vector<Tensor>* outputs,
                             Rendezvous* remote) {
  const StepPlan* sp = nullptr;
  RunState::Options ro;
  Status prepared = prepare_step(fetches, feeds, targets, options, step_id, remote, &sp, &ro);
  if (!prepared.ok()) return prepared;
  auto set_feeds = [&feeds](RunState& rs) {
    int i = 0;
    for (const auto& [out, value] : feeds) rs.set_feed(i++, value);
  };
  return run_prepared(*sp, ro, set_feeds, options, metadata, records, fetches.size(), outputs, remote);
}

template <class SetFeeds>
Status SessionImpl::run_prepared(const StepPlan& sp, RunState::Options& ro, SetFeeds&& set_feeds,
                                 const RunOptions& options, RunMetadata* metadata, std::vector<TraceRecord>* records,
                                 std::size_t num_fetches, std::vector<Tensor>* outputs, Rendezvous* remote) {
  std::unique_ptr<MultiStep> multi;  // only for a step that spans devices
  if (!sp.devices.empty()) multi = std::make_unique<MultiStep>(sp, ro, remote);
  RunState rs(ro);
  set_feeds(rs);
  return run_registered(rs, multi.get(), options, metadata, records, num_fetches, outputs);
}

Status SessionImpl::run_registered(RunState& rs, MultiStep* multi, const RunOptions& options, RunMetadata* metadata,
                                   std::vector<TraceRecord>* records, std::size_t num_fetches,
                                   std::vector<Tensor>* outputs) {
  const RunTicket ticket = register_run(&rs);
  if (ticket.shard < 0) return errors::cancelled("attempted to use a closed session");
  Status status = multi ? multi->run(rs, options.timeout) : rs.run();
  if (multi) multi->end_captures();
  unregister_run(&rs, ticket);
  return finish_step(std::move(status), rs, multi, options.trace, metadata, records, num_fetches, outputs);
}

// Note [Callables]
// ~~~~~~~~~~~~~~~~
// A callable is run() with the signature's work done once: its feeds, fetches and targets are
// checked and keyed when it is made, and it keeps the plan it found (plans live as long as their
// session, so a raw pointer stays valid). A call checks only the values fed and whether the graph
// changed since that plan was made (then it asks for the plan again, as run() would). The plan
// and the graph version it was made at change together, as one Entry: a call never pairs a new
// version with an old plan.
//
// A step on the host alone also keeps its RunState: each thread that calls has a Scratch of its
// own, which the callable owns and the thread finds in a small thread-local cache (by callable
// serial, never reused, so a stale entry is never dereferenced), with no atomic operation. Its
// RunState, once its step completed, is restart()ed for the next call instead of being made
// again. A call thus allocates only the vector it returns and the kernels' outputs (Note [Session
// fast path] for the rest). A step that failed or was cancelled leaves no RunState to reuse. A
// callable makes at most kMaxScratches (threads that exited, or evicted a Scratch from their
// cache, leave theirs unused); past that, and in a nested call, a call makes a RunState of its
// own. The Scratch holds the RunState's host plan too: a Callable may be destroyed after its
// session, and the RunState's destructor reads its plan.
class SessionImpl::DirectCallable final : public CallableBackend {
 public:
  DirectCallable(SessionImpl& s, const std::vector<Output>& fetches, const std::vector<Output>& feeds,
                 const std::vector<Operation>& targets)
      : s_(s), num_fetches_(fetches.size()), serial_(next_callable_serial.fetch_add(1, std::memory_order_relaxed)) {
    for (const Output& o : feeds) {
      feeds_.push_back({o.node(), o.index()});
      key_.push_back(endpoint_key(o.node(), o.index()));
    }
    key_.push_back(kSeparator);
    for (const Output& o : fetches) {
      fetches_.push_back({o.node(), o.index()});
      key_.push_back(endpoint_key(o.node(), o.index()));
    }
    key_.push_back(kSeparator);
    for (const Operation& op : targets) {
      targets_.push_back(op.node());
      key_.push_back(endpoint_key(op.node(), 0));
    }
    plan().status().raise();  // a signature that cannot be planned (placed) fails now
  }

  std::vector<Tensor> call(const std::vector<Tensor>& values) override {
    check_feed_count(feeds_.size(), values).raise();
    for (std::size_t i = 0; i < values.size(); ++i) check_feed(feeds_[i], values[i]).raise();
    if (s_.closed_.load(std::memory_order_acquire)) throw CancelledError("attempted to use a closed session");
    auto sp = plan();
    sp.status().raise();
    std::vector<Tensor> outputs;
    auto set_feeds = [&values](RunState& rs) {
      for (std::size_t i = 0; i < values.size(); ++i) rs.set_feed(static_cast<int>(i), values[i]);
    };
    if (sp.value()->devices.empty()) {
      run_on_host(*sp.value(), set_feeds, &outputs).raise();
      return outputs;
    }
    RunState::Options ro;
    s_.step_options(*sp.value(), RunOptions{}, 0, nullptr, &ro).raise();
    s_.run_prepared(*sp.value(), ro, set_feeds, RunOptions{}, nullptr, nullptr, num_fetches_, &outputs, nullptr)
        .raise();
    return outputs;
  }

 private:
  struct Entry {
    const StepPlan* plan;
    uint64_t graph_version;
  };
  static constexpr std::size_t kMaxScratches = 64;

  StatusOr<const StepPlan*> plan() {
    const Entry* e = current_.load(std::memory_order_acquire);
    if (e != nullptr && e->graph_version == s_.g_.version()) return e->plan;
    auto made = s_.get_plan(key_, feeds_, fetches_, targets_);
    if (!made.ok()) return made.status();
    std::lock_guard<std::mutex> l(mu_);
    entries_.push_back(std::make_unique<Entry>(Entry{made.value().get(), made.value()->host->graph_version}));
    current_.store(entries_.back().get(), std::memory_order_release);
    return made.value().get();
  }

  // This thread's Scratch (see the Note); null past kMaxScratches.
  CallableScratch* thread_scratch() {
    ScratchCache& cache = tls_scratches;
    for (const ScratchCache::Entry& e : cache.entries) {
      if (e.callable == serial_) return e.scratch;
    }
    CallableScratch* made = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (scratches_.size() < kMaxScratches) made = scratches_.emplace_back(std::make_unique<CallableScratch>()).get();
    }
    ScratchCache::Entry& e = cache.entries[cache.next_victim];
    cache.next_victim = (cache.next_victim + 1) % ScratchCache::kEntries;
    e = {serial_, made};
    return made;
  }

  // The step of host-only plan `sp`, in this thread's Scratch when it has one that is not in use.
  template <class SetFeeds>
  Status run_on_host(const StepPlan& sp, SetFeeds&& set_feeds, std::vector<Tensor>* outputs) {
    CallableScratch* scratch = thread_scratch();
    const bool mine = scratch != nullptr && !scratch->in_use;
    RunState* rs = nullptr;
    std::unique_ptr<RunState> fresh;
    if (mine && scratch->rs != nullptr && scratch->plan == sp.host) {
      rs = scratch->rs.get();
      rs->restart(next_step_id());
    } else {
      RunState::Options ro;
      s_.step_options(sp, RunOptions{}, 0, nullptr, &ro).ignore();  // fails only for a device's health
      fresh = std::make_unique<RunState>(ro);
      rs = fresh.get();
    }
    set_feeds(*rs);
    if (mine) scratch->in_use = true;
    Status status = s_.run_registered(*rs, nullptr, RunOptions{}, nullptr, nullptr, num_fetches_, outputs);
    if (mine) {
      if (fresh != nullptr && fresh->completed()) {
        scratch->plan = sp.host;
        scratch->rs = std::move(fresh);
      } else if (!rs->completed()) {
        scratch->rs.reset();
        scratch->plan.reset();
      }
      scratch->in_use = false;
    }
    return status;
  }

  static Status check_feed(const Endpoint& e, const Tensor& value) {
    const DType want = e.node->output_dtypes[static_cast<std::size_t>(e.index)];
    const Shape& want_shape = e.node->output_shapes[static_cast<std::size_t>(e.index)];
    if (value.dtype() != want || !want_shape.compatible_with(value.shape())) {
      return errors::invalid_argument("{}: cannot feed a {} tensor of shape {} to '{}:{}', which is {} {}",
                                      e.node->debug_name(), dtype_name(value.dtype()), value.shape().to_string(),
                                      e.node->name, e.index, dtype_name(want), want_shape.to_string());
    }
    return Status();
  }

  SessionImpl& s_;
  const std::size_t num_fetches_;
  std::vector<uint64_t> key_;
  std::vector<Endpoint> feeds_;
  std::vector<Endpoint> fetches_;
  std::vector<const Node*> targets_;
  std::atomic<const Entry*> current_{nullptr};
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;  // guarded by mu_; every entry made, so none dangles
  const uint64_t serial_;                        // unique in this process (keys tls_scratches)
  std::vector<std::unique_ptr<CallableScratch>> scratches_;  // guarded by mu_; each used by one thread
};

std::shared_ptr<CallableBackend> SessionImpl::make_callable(const std::vector<Output>& fetches,
                                                            const std::vector<Output>& feeds,
                                                            const std::vector<Operation>& targets) {
  check_callable_signature(g_, fetches, feeds, targets).raise();
  if (closed_.load(std::memory_order_acquire)) throw CancelledError("attempted to use a closed session");
  return std::make_shared<DirectCallable>(*this, fetches, feeds, targets);
}

// Note [Asynchronous steps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// run_step_async is the cluster worker's way to run a partition: a step blocked on a queue or on
// another task holds no thread (Issue: 3,000 blocked remote dequeues once held 3,015 threads). The
// step is prepared and started on the session's pool; from then on it lives in an AsyncStep that
// its parts' completions own: the host partition and each device partition run with
// RunState::run_async, and the last one to finish completes the step. The run's timeout is a
// TimerQueue entry (core/timer.h) that cancels the step with DeadlineExceeded, as run() does
// while it waits; the entry is removed when the step ends first. The timer holds the step weakly,
// takes it under the step's lock, and cancels outside that lock. The step completes (unregisters,
// fetches, calls `done`) on the thread that ends its last part, except inside a cancellation that
// holds a lock the completion takes (close() and cancel_step() cancel under their shard's lock,
// an expiry makes the completion wait): then on the pool.
struct SessionImpl::AsyncStep : std::enable_shared_from_this<SessionImpl::AsyncStep> {
  SessionImpl* session = nullptr;
  std::unique_ptr<MultiStep> multi;
  std::unique_ptr<RunState> rs;
  RunState::Options ro;
  RunTicket ticket;
  std::size_t num_fetches = 0;
  bool trace = false;
  bool want_records = false;
  StepDone done;

  std::mutex mu;
  bool finished = false;                  // guarded by mu
  std::optional<TimerQueue::Id> timer;    // guarded by mu
  bool expiring = false;                  // guarded by mu: expire() is cancelling the parts
  std::condition_variable expired_cv;     // signalled when `expiring` clears
  int parts_left = 0;                     // guarded by mu: partitions (host included) still running
  Status first_error;                     // guarded by mu: of the device partitions

  void part_done(int part, Status s);
  void complete(Status host_status);
  void expire();
};

void SessionImpl::AsyncStep::part_done(int part, Status s) {
  Status host_status;
  {
    std::lock_guard<std::mutex> l(mu);
    if (part >= 0) {
      multi->part_status[static_cast<std::size_t>(part)] = s;
      if (!s.ok() && first_error.ok()) first_error = s;
    } else {
      host_status = s;
      if (!s.ok()) first_error = s;  // the host's own failure comes first, as in MultiStep::run
    }
    if (--parts_left > 0) return;
    finished = true;
    host_status = first_error;
  }
  if (cancelling_depth == 0) return complete(std::move(host_status));
  // Inside a cancellation that holds a lock the completion takes: on the pool instead.
  session->runner_([self = shared_from_this(), st = std::move(host_status)]() mutable { self->complete(std::move(st)); });
}

void SessionImpl::AsyncStep::complete(Status status) {
  std::optional<TimerQueue::Id> armed;
  {
    std::unique_lock<std::mutex> l(mu);
    expired_cv.wait(l, [&] { return !expiring; });  // an expiry in progress still uses the parts
    armed = timer;
    timer.reset();
  }
  if (armed) TimerQueue::global().cancel(*armed);
  if (multi) multi->end_captures();
  session->unregister_run(rs.get(), ticket);
  std::vector<Tensor> outputs;
  std::vector<TraceRecord> records;
  status = session->finish_step(std::move(status), *rs, multi.get(), trace, nullptr, want_records ? &records : nullptr,
                                num_fetches, &outputs);
  // The parts use the session's plans and kernels: they go before `done`, after which the session
  // may be destroyed.
  rs.reset();
  multi.reset();
  auto d = std::move(done);
  d(std::move(status), std::move(outputs), std::move(records));
}

void SessionImpl::AsyncStep::expire() {
  {
    std::lock_guard<std::mutex> l(mu);
    if (finished) return;
    timer.reset();
    expiring = true;
  }
  const Status reason(ErrorCode::kDeadlineExceeded,
                      fmt::format("the run exceeded its timeout of {} ms", ro.timeout.count()));
  {
    Cancelling scope;  // a completion waits for `expiring` to clear: not on this thread
    if (multi) multi->abort(reason);
    rs->cancel(reason);
  }
  std::lock_guard<std::mutex> l(mu);
  expiring = false;
  expired_cv.notify_all();
}

void SessionImpl::run_step_async(std::vector<Output> fetches, FeedMap feeds, std::vector<Operation> targets,
                                 const RunOptions& options, int64_t step_id, bool want_records, Rendezvous* remote,
                                 StepDone done) {
  runner_([this, fetches = std::move(fetches), feeds = std::move(feeds), targets = std::move(targets), options,
           step_id, want_records, remote, done = std::move(done)]() mutable {
    auto step = std::make_shared<AsyncStep>();
    step->session = this;
    const StepPlan* sp = nullptr;
    Status prepared = prepare_step(fetches, feeds, targets, options, step_id, remote, &sp, &step->ro);
    if (!prepared.ok()) return done(std::move(prepared), {}, {});
    if (!sp->devices.empty()) step->multi = std::make_unique<MultiStep>(*sp, step->ro, remote);
    step->rs = std::make_unique<RunState>(step->ro);
    int i = 0;
    for (const auto& [out, value] : feeds) step->rs->set_feed(i++, value);
    step->num_fetches = fetches.size();
    step->trace = options.trace;
    step->want_records = want_records;
    step->done = std::move(done);
    step->ticket = register_run(step->rs.get());
    if (step->ticket.shard < 0) {
      auto d = std::move(step->done);
      return d(errors::cancelled("attempted to use a closed session"), {}, {});
    }
    step->parts_left = 1 + (step->multi ? static_cast<int>(step->multi->parts.size()) : 0);
    if (options.timeout.count() > 0) {
      auto armed = TimerQueue::global().schedule(TimerQueue::Clock::now() + options.timeout,
                                                 [weak = std::weak_ptr<AsyncStep>(step)] {
                                                   if (auto s = weak.lock()) s->expire();
                                                 });
      if (!armed.ok()) {
        unregister_run(step->rs.get(), step->ticket);
        auto d = std::move(step->done);
        return d(armed.status(), {}, {});
      }
      std::lock_guard<std::mutex> l(step->mu);
      step->timer = armed.value();
    }
    if (step->multi) {
      step->multi->ran = true;
      for (std::size_t p = 0; p < step->multi->parts.size(); ++p) {
        step->multi->parts[p]->run_async([step, p](Status s) { step->part_done(static_cast<int>(p), std::move(s)); });
      }
    }
    step->rs->run_async([step](Status s) { step->part_done(-1, std::move(s)); });
  });
}

std::vector<Tensor> SessionImpl::run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                     const std::vector<Operation>& targets, const RunOptions& options,
                                     RunMetadata* metadata) {
  std::vector<Tensor> outputs;
  run_step(fetches, feeds, targets, options, metadata, 0, nullptr, &outputs).raise();
  return outputs;
}

SessionImpl::MultiStep::MultiStep(const StepPlan& sp, RunState::Options& host_options, Rendezvous* remote)
    : rendezvous(sp.num_keys, remote), remote(remote) {
  abort = [this](const Status& reason) {
    if (aborting.exchange(true)) return;
    root_cause = reason;
    rendezvous.abort(reason);
    if (this->remote != nullptr) this->remote->abort(reason);  // ends this task's pulls too
    for (auto& part : parts) part->cancel(reason);
  };
  host_options.rendezvous = &rendezvous;
  host_options.on_abort = &abort;
  parts.reserve(sp.devices.size());
  for (const auto& dp : sp.devices) {
    RunState::Options po = host_options;
    po.plan = dp.plan.get();
    po.device = dp.device;
    po.timeout = std::chrono::milliseconds(0);
    captured.push_back(dp.captured.get());
    capture_steps.push_back({});
    if (dp.captured != nullptr) {  // Note [Captured partitions] in core/captured_partition.cc
      capture_steps.back() = dp.captured->begin(host_options.trace);
      po.plan = capture_steps.back().plan;
      po.capture = capture_steps.back().capture;
    }
    parts.push_back(std::make_unique<RunState>(po));
  }
  part_status.resize(parts.size());
}

SessionImpl::MultiStep::~MultiStep() {
  if (ended) return;
  for (Status& s : part_status) {
    if (!ran) s = errors::cancelled("the step did not run");
  }
  end_captures();
}

void SessionImpl::MultiStep::end_captures() {
  ended = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (captured[i] != nullptr) captured[i]->end(capture_steps[i], part_status[i]);
  }
}

Status SessionImpl::MultiStep::run(RunState& host, std::chrono::milliseconds timeout) {
  // The device partitions start first (their roots are mostly _Recv and device kernels, which
  // only enqueue), then this thread runs the host partition, then waits for the others. The
  // first failure anywhere aborts the rendezvous and cancels every partition (`abort`), so no
  // partition waits for a tensor that will never come.
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    int left = 0;
    Status first_error;
  } pending;
  pending.left = static_cast<int>(parts.size());
  ran = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    parts[i]->run_async([this, i, &pending](Status s) {
      std::lock_guard<std::mutex> l(pending.mu);
      part_status[i] = s;
      if (!s.ok() && pending.first_error.ok()) pending.first_error = s;
      if (--pending.left == 0) pending.cv.notify_all();
    });
  }
  Status status = host.run();
  std::unique_lock<std::mutex> l(pending.mu);
  if (timeout.count() > 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!pending.cv.wait_until(l, deadline, [&] { return pending.left == 0; })) {
      l.unlock();
      abort(Status(ErrorCode::kDeadlineExceeded,
                              fmt::format("the run exceeded its timeout of {} ms", timeout.count())));
      l.lock();
    }
  }
  pending.cv.wait(l, [&] { return pending.left == 0; });
  return status.ok() ? pending.first_error : status;
}

// ---- The in-process session's factory: targets "" and "local" ----

namespace {

class DirectSessionFactory final : public SessionFactory {
 public:
  std::unique_ptr<SessionBackend> create(Graph& graph, const std::string& target,
                                         const SessionOptions& options) override {
    return SessionImpl::make(graph, options, nullptr).value_or_raise();
  }
};
TESSERA_REGISTER_SESSION_FACTORY(DirectSessionFactory, "", "local");

}  // namespace

}  // namespace internal
}  // namespace tessera
