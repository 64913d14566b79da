// Kernels: the code that runs one op on one device type.
//
// A kernel object is created once per node per session (so it may keep state, e.g. a random
// generator) and its compute() may be called by several steps at once: it must be thread-safe.
// Synchronous kernels implement compute(); kernels that wait (queue ops) are asynchronous: they
// override compute_async() and call `done` later, from any thread, holding no thread while they
// wait (see Note [Async kernels] in core/executor.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/device.h"
#include "core/node.h"
#include "core/resource_mgr.h"
#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class Rendezvous;

// One span of a traced step: an op on a thread, a kernel on a stream, a copy on a copy stream.
struct TraceRecord {
  std::string name;      // op name
  std::string category;  // op type, or "copy"
  std::string device;    // full device name
  std::string lane;      // the stream's name, or "" for the executing thread
  uint64_t thread = 0;   // when lane is ""
  int64_t start_us = 0;  // now_micros() clock
  int64_t end_us = 0;
};

// Where kernels report spans when a step is traced. Thread-safe.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void add(TraceRecord record) = 0;
};

// What a kernel tells a step that is being captured. Thread-safe.
class StreamRecorder {
 public:
  virtual ~StreamRecorder() = default;
  // `node` issued `body` on its device's compute stream 0 (after issuing it as usual).
  virtual void record(const Node& node, ReplayableWork body) = 0;
  // Device memory the recorded work uses besides the node's inputs and outputs (temporaries):
  // the capture keeps it for the replays.
  virtual void retain(const Tensor& t) = 0;
  // `node`'s work cannot be replayed (it ran on the host, or its result needs a host-side check):
  // the partition is not captured.
  virtual void unreplayable(const Node& node, const char* why) = 0;
};

// The step side of stream-ordered kernels (Note [Stream-ordered kernels] in core/executor.cc): a
// kernel on a device with streams may enqueue its work and call `done` at once, before the work
// has run; its successors on the same stream then follow it in stream order. The step is over
// only when the device work it issued has run, and a failure that work finds later fails the step.
// The executor's RunState implements it. Thread-safe.
class StreamWork {
 public:
  virtual ~StreamWork() = default;
  // `node` enqueued work on `stream` of `device`: the step ends after the stream has run it. A
  // fault the stream reports then marks the device failed, naming the last op issued on it.
  virtual void issued(Device& device, Stream& stream, const Node& node) = 0;
  // As issued(), and `check` runs once the stream has run the work (on the completion thread, or
  // at once on a stream in error, with its status); its error fails the step. `check` must not
  // block.
  virtual void issued_then(Device& device, Stream& stream, const Node& node, std::function<Status(Status)> check) = 0;
  // A failure of an op's work found after its kernel was done (on the stream): fails the step.
  // `s` names the op (as OpKernelContext::status() does). Callable until the stream has run the
  // work.
  virtual void fail(const Status& s) = 0;
  // Non-null while the step is being captured: kernels record their stream work there.
  virtual StreamRecorder* recorder() { return nullptr; }
};

// Reports to `sink` a span of `node` from `start_us` (now_micros()) to now on `stream` of
// `device`, under `category` (the op's type when null): how work on a stream traces itself, also
// after its kernel's context is gone.
void trace_stream_span(TraceSink& sink, const Node& node, const Device& device, const Stream& stream,
                       int64_t start_us, const char* category = nullptr);

class OpKernelContext {
 public:
  struct Params {
    const Node* node = nullptr;
    const Tensor* const* inputs = nullptr;  // Not owned: valid until the kernel is done.
    // The node's output dtypes (a copy kept next to the executor's data). Not owned.
    const DType* output_dtypes = nullptr;
    int num_inputs = 0;
    ResourceMgr* resources = nullptr;          // Not owned.
    // Where resources without a shared name live (Note [Private resources] in distributed/worker.cc):
    // the client session's own on a cluster task; null: `resources`. Not owned.
    ResourceMgr* private_resources = nullptr;
    CancellationManager* cancellation = nullptr;  // Not owned.
    int64_t step_id = 0;
    // Schedules a closure on the session's inter-op pool.
    const std::function<void(std::function<void()>)>* runner = nullptr;
    // The device the node runs on (nullptr = the host CPU): outputs are allocated in its memory.
    Device* device = nullptr;
    // The step's exchange for Send/Recv between partitions (nullptr when the step has one).
    Rendezvous* rendezvous = nullptr;
    // Non-null when the step is traced.
    TraceSink* trace = nullptr;
    // Non-null when a kernel may finish at enqueue (Note [Stream-ordered kernels]); null (the
    // kernel test harness, a direct compute()) means `done` must wait for the device work.
    StreamWork* stream_work = nullptr;
    // SessionOptions::allow_tf32: float32 MatMuls may use TF32 tensor cores.
    bool allow_tf32 = false;
    // Where the outputs go: the caller's array of the node's outputs, all null to begin with (the
    // executor passes the step's slots, so an output is stored once, where its consumers read
    // it). Null: the context keeps them. Not owned.
    Tensor* outputs = nullptr;
    // Bit j set: input j is this node's last read of a value in the step's own storage, which
    // forward_input_or_allocate_output may take over (Note [Forwarded inputs]). Only the
    // executor sets bits; inputs[j] must then point to a Tensor the executor owns.
    uint32_t forwardable_inputs = 0;
  };
  // Keeps a copy of `p`.
  explicit OpKernelContext(const Params& p)
      : owned_step_(p),
        step_(&*owned_step_),
        node_(p.node),
        inputs_(p.inputs),
        output_dtypes_(p.output_dtypes),
        num_inputs_(p.num_inputs),
        forwardable_inputs_(p.forwardable_inputs) {
    init_outputs(p.outputs, static_cast<int>(p.node->output_dtypes.size()));
  }
  // The executor's form, for the per-node hot path: `step` holds what every node of a step shares
  // and is read where it is (not copied: it must outlive the context), and the node's own fields
  // come as arguments (`step`'s node, inputs, num_inputs, output_dtypes, outputs and
  // forwardable_inputs are ignored). `num_outputs` must be the node's output count: passing it
  // spares a read of the Node.
  OpKernelContext(const Params& step, const Node* node, const Tensor* const* inputs, int num_inputs,
                  const DType* output_dtypes, Tensor* outputs, int num_outputs,
                  uint32_t forwardable_inputs = 0)
      : step_(&step),
        node_(node),
        inputs_(inputs),
        output_dtypes_(output_dtypes),
        num_inputs_(num_inputs),
        forwardable_inputs_(forwardable_inputs) {
    init_outputs(outputs, num_outputs);
  }
  OpKernelContext(const OpKernelContext&) = delete;
  OpKernelContext& operator=(const OpKernelContext&) = delete;

  const Node& node() const { return *node_; }
  const std::string& op_name() const { return node_->name; }
  int num_inputs() const { return num_inputs_; }
  const Tensor& input(int i) const { return *inputs_[i]; }
  int num_outputs() const { return num_outputs_; }
  void set_output(int i, Tensor t) { outputs_[i] = std::move(t); }
  // Allocates output i with the node's dtype for that output, in the device's memory. Throws
  // ResourceExhaustedError when the device is out of memory.
  Tensor& allocate_output(int i, const Shape& shape) {
    outputs_[i] = allocate_temp(output_dtype(i), shape);
    return outputs_[i];
  }
  DType output_dtype(int i) const { return output_dtypes_ ? output_dtypes_[i] : node_->output_dtypes[i]; }
  // Output i over the buffer of the first of `candidates` (input indices) that may be forwarded
  // (Note [Forwarded inputs]) and has output i's dtype and exactly `shape`, else allocate_output(i,
  // shape). A forwarded input reads as a null tensor afterwards, so take its data pointer first;
  // the kernel then writes the output over its input's elements, so only a kernel whose output
  // element k depends on that input's element k alone may forward (TensorFlow's
  // forward_input_or_allocate_output).
  Tensor& forward_input_or_allocate_output(std::initializer_list<int> candidates, int i, const Shape& shape) {
    for (int j : candidates) {
      if ((forwardable_inputs_ >> j & 1u) == 0) continue;
      // The executor sets the bit only for inputs in its own (mutable) slots.
      auto& in = const_cast<Tensor&>(*inputs_[j]);
      // (`shape` is often the input's own: no comparison then.)
      if (in.dtype() == output_dtype(i) && (&in.shape() == &shape || in.shape() == shape) &&
          is_sole_owner_of_host_buffer(in)) {
        outputs_[i] = std::move(in);
        return outputs_[i];
      }
    }
    return allocate_output(i, shape);
  }
  // A tensor in the device's memory (host memory on the CPU).
  Tensor allocate_temp(DType dtype, const Shape& shape) {
    if (step_->device == nullptr || step_->device->type() == "CPU") return Tensor(dtype, shape);
    auto t = step_->device->allocate_tensor(dtype, shape);
    t.status().raise();
    return std::move(t).value();
  }
  Device* device() const { return step_->device; }
  Rendezvous* rendezvous() const { return step_->rendezvous; }
  TraceSink* trace() const { return step_->trace; }
  StreamWork* stream_work() const { return step_->stream_work; }
  bool allow_tf32() const { return step_->allow_tf32; }
  // What this context was made with (the node's own fields included), e.g. to make a context for
  // stream work that outlives this one.
  Params params() const {
    Params p = *step_;
    p.node = node_;
    p.inputs = inputs_;
    p.num_inputs = num_inputs_;
    p.output_dtypes = output_dtypes_;
    p.outputs = owned_outputs_ ? nullptr : outputs_;
    p.forwardable_inputs = forwardable_inputs_;
    return p;
  }
  // When the step is traced: reports a span of this node from `start_us` (now_micros()) to now on
  // `stream` of `device`, under `category` (the op's type when null). A kernel on a stream or a
  // copy on a copy stream traces itself this way.
  void trace_on_stream(const Device& device, const Stream& stream, int64_t start_us,
                       const char* category = nullptr) const;
  Tensor& output(int i) { return outputs_[i]; }
  ResourceMgr& resources() const { return *step_->resources; }
  // Resources an op makes without a shared name (queues, accumulators, readers, epoch counters):
  // private to the client's session, as TensorFlow's (Note [Private resources]).
  ResourceMgr& private_resources() const {
    return step_->private_resources != nullptr ? *step_->private_resources : *step_->resources;
  }
  CancellationManager& cancellation() const { return *step_->cancellation; }
  int64_t step_id() const { return step_->step_id; }
  void schedule(std::function<void()> fn) const { (*step_->runner)(std::move(fn)); }
  // Intra-op parallelism (core/parallel_for.h): fn over shards of [0, total), each of at least
  // `min_shard`, on this thread and idle threads of the session's pool. Only a host CPU kernel
  // shards; elsewhere (a simulated device's stream, the kernel harness) it all runs here.
  void parallel_for(int64_t total, int64_t min_shard, const std::function<void(int64_t, int64_t)>& fn) const;

  // Records a failure; the message gets the "name (Type): " prefix.
  void fail(const Status& s) {
    if (status_.ok() && !s.ok()) status_ = s.with_prefix(node_->debug_name() + ": ");
  }
  template <class... Args>
  void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
    fail(Status(code, fmt::format(f, std::forward<Args>(args)...)));
  }
  const Status& status() const { return status_; }
  // In a step with conditionals: whether this node's input is dead (an untaken branch of a cond,
  // Note [Dead tensors] in core/executor.cc). The executor runs a node with a dead input only
  // when it hands deadness on (a _Send); every other kernel never sees one.
  bool dead_input() const { return dead_input_; }
  void set_dead_input() { dead_input_ = true; }

 private:
  void init_outputs(Tensor* outputs, int num_outputs) {
    num_outputs_ = num_outputs;
    outputs_ = outputs;
    if (outputs_ == nullptr && num_outputs > 0) {
      owned_outputs_ = std::make_unique<Tensor[]>(num_outputs);
      outputs_ = owned_outputs_.get();
    }
  }

  // What the step shares: the caller's (the executor's form) or owned_step_. The node's own fields
  // are members, so that the executor's per-node context copies no Params (Params is trivially
  // destructible, and so is the empty optional).
  std::optional<Params> owned_step_;
  const Params* step_;
  const Node* node_;
  const Tensor* const* inputs_;   // Not owned: valid until the kernel is done.
  const DType* output_dtypes_;    // Not owned; null: the node's
  int num_inputs_;
  uint32_t forwardable_inputs_;   // Params::forwardable_inputs
  int num_outputs_ = 0;
  bool dead_input_ = false;
  Tensor* outputs_ = nullptr;  // the caller's (Params::outputs), or owned_outputs_
  std::unique_ptr<Tensor[]> owned_outputs_;
  Status status_;
};

class OpKernel {
 public:
  explicit OpKernel(const Node& node) : node_(node) {}
  virtual ~OpKernel() = default;

  // Synchronous kernels compute here; record failures with ctx.fail().
  virtual void compute(OpKernelContext& ctx) = 0;
  // Asynchronous kernels: true, and override compute_async.
  virtual bool is_async() const { return false; }
  // Must eventually call `done` exactly once (on any thread). `ctx` stays alive until then.
  virtual void compute_async(OpKernelContext& ctx, std::function<void()> done) {
    compute(ctx);
    done();
  }
  // Expensive kernels are handed to the pool; cheap ones run inline on the thread that made
  // them ready. The default looks at the output size the graph inferred.
  virtual bool is_expensive() const;

  const Node& node() const { return node_; }
  const std::string& name() const { return node_.name; }

 private:
  const Node& node_;  // Not owned: nodes outlive every session of their graph.
};

}  // namespace tessera::internal
