// The dataflow executor: runs a pruned, sorted subgraph (a Plan) for one step.
//
// A Plan is built once per (feeds, fetches, targets) signature and cached by the session, so a
// repeated run does no graph analysis: it takes the per-step state (output slots, pending counts)
// from a per-thread spare and starts the root nodes. See Note [Executor scheduling] in executor.cc.
//
// Plans are immutable and shared by concurrent steps; a RunState belongs to one step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/remapper.h"
#include "core/resource_mgr.h"
#include "core/rendezvous.h"
#include "core/status.h"

namespace tessera::internal {

using Runner = std::function<void(std::function<void()>)>;

struct PlanNode {
  const Node* node = nullptr;  // Not owned.
  OpKernel* kernel = nullptr;  // Not owned: the session's kernel cache owns it.
  int first_input = 0;         // into Plan::inputs
  int num_inputs = 0;
  int first_output = 0;        // into Plan::output_dtypes and output_uses
  int first_output_slot = 0;   // stored in slots [first_output_slot, first_output_slot + num_outputs)
  int num_outputs = 0;
  int first_successor = 0;     // into Plan::successors
  int num_successors = 0;
  int initial_pending = 0;     // distinct predecessors in the plan
  // How the executor runs it: kAsync, an async kernel; kFlow, in a plan with control flow (the
  // path that looks for dead inputs first, Note [Dead tensors] in executor.cc). One byte, so that
  // a plain synchronous node costs one test.
  enum Run : uint8_t { kSync = 0, kAsync = 1, kFlow = 2 };
  uint8_t run = kSync;
  bool is_async() const { return (run & kAsync) != 0; }
  bool expensive = false;
  bool some_output_unused = false;  // an output no one reads: released as soon as it is made
  // A synchronous node with one output that no one reads: the kernel writes it to a scratch
  // tensor of the running loop, not to the step's slots (Note [Slot reuse]).
  bool discard_output = false;
  // Bit j: input j (of the first 32) is the last read of a value in a slot (PlanInput::kLastUse),
  // which the kernel may take over as an output (Note [Forwarded inputs]).
  uint32_t forwardable_inputs = 0;
};

// One input of a node: the slot it reads, and what becomes of the value there after the read.
struct PlanInput {
  enum Release : uint32_t {
    kLastUse = 0,  // the value's only use (not fetched): released after the read
    kCounted = 1,  // one of several uses: the last one releases it (Plan::counted_slots)
    kPinned = 2,   // a hoisted constant: never released
  };
  uint32_t slot;     // kPinned: the index into Plan::constants
  uint32_t release;  // a Release (a plain word: no bit-field to unpack on the per-op path)
};

// The per-step arrays of a plan, reused across steps by each thread (allocating and constructing
// them is most of a large step's fixed cost).
struct StepArrays {
  std::unique_ptr<Tensor[]> slots;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::unique_ptr<std::atomic<int>[]> slot_uses;
  // Per Plan::inputs, the tensor that input reads: a slot above, or a constant of the plan. A
  // node's inputs are a run of it, which its kernel's context reads in place.
  std::unique_ptr<const Tensor*[]> inputs;
  // Per node, in a plan with control flow: 1 when the node is dead (Note [Dead tensors]).
  std::unique_ptr<uint8_t[]> dead;
};

struct Plan {
  std::vector<PlanNode> nodes;     // topological order
  std::vector<PlanInput> inputs;   // per node input
  std::vector<int> successors;     // per node: plan indices of distinct successors
  std::vector<int> roots;          // nodes with no pending predecessors
  // Per node output: the dtype its kernel must deliver, and its uses (consumers, +1 when fetched;
  // 0: released as soon as it is made).
  std::vector<DType> output_dtypes;
  std::vector<int> output_uses;
  // A step's slots: node outputs (outputs whose lifetimes cannot overlap share one, Note [Slot
  // reuse] in executor.cc), then one per feed, then one per hoisted constant.
  int num_slots = 0;
  std::vector<int> feed_slots;     // parallel to the signature's feeds
  std::vector<int> fetch_slots;    // parallel to the signature's fetches
  std::vector<char> fetch_moves;   // per fetch: RunState::take_fetch moves the value out
  // Hoisted Const ops: slot, value. Their slots are the last ones, [first_constant_slot,
  // num_slots), in this order; a step reads them in place (it neither copies them nor touches
  // their refcounts, a cache line every thread would share).
  std::vector<std::pair<int, Tensor>> constants;
  int first_constant_slot = 0;
  // The only entries of a step's counters that are ever read: nodes with two or more
  // predecessors (pending) and slots whose value has two or more uses (slot_uses; slot, uses). A
  // node with one predecessor, or a value with one use, involves no other thread and is never
  // counted; so a step resets just these, not an array entry per node and per slot.
  std::vector<int> counted_nodes;
  std::vector<std::pair<int, int>> counted_slots;
  // The slots a step that ran to completion leaves set: feeds and fetches (every other value is
  // released by its last consumer, or never stored).
  std::vector<int> kept_slots;
  uint64_t graph_version = 0;
  uint64_t serial = 0;  // unique per plan in this process
  // Whether a node may see a dead input (the graph has a cond: Note [Dead tensors] in
  // executor.cc). Then node i's flow is flows[i] and its control predecessors are
  // control_preds[control_pred_begin[i] .. control_pred_begin[i + 1]) (plan indices); all three
  // are empty otherwise.
  bool control_flow = false;
  // What each node does with dead tensors (with control flow only; a byte of its own, not a field
  // of PlanNode, whose 56 bytes every step reads).
  enum Flow : uint8_t {
    kPlain = 0,      // dead when an input or a control predecessor is: not run, its outputs dead
    kMerge = 1,      // dead only when every input (or a control predecessor) is; else runs
    kSend = 2,       // always runs: hands a dead input on as dead (OpKernelContext::dead_input)
    kMakesDead = 3,  // kPlain, and may itself leave outputs unset, which are dead (Switch, _Recv)
  };
  std::vector<uint8_t> flows;
  std::vector<int> control_pred_begin;
  std::vector<int> control_preds;
  std::vector<std::string> fetch_names;  // "op:0" per fetch, with control flow only (messages)

  // Arrays for a step of this plan (a per-thread spare when there is one), every slot null.
  // Thread-safe.
  std::unique_ptr<StepArrays> acquire_arrays() const;
  // Gives them back; `completed`: the step ran every node to completion, so only kept_slots
  // can be set (else every slot is cleared).
  void release_arrays(std::unique_ptr<StepArrays> arrays, bool completed) const;
};

// A copy of `plan` computing the same values (slots, feeds, fetches) with other kernels and more
// order: kernels[i], when non-null, replaces node i's kernel, and each (from, to) of `edges` makes
// node `to` wait for node `from` too (neither may make a cycle). A new serial. For a partition
// replayed from its capture (core/captured_partition.h).
std::shared_ptr<const Plan> plan_variant(const Plan& plan, const std::vector<OpKernel*>& kernels,
                                         const std::vector<std::pair<int, int>>& edges);

// The nodes the fetches and targets need (a fed output cuts its edge), in discovery order, each
// edge read through `remap` (core/remapper.h).
std::vector<const Node*> prune_nodes(const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& fetches,
                                     const std::vector<const Node*>& targets, const Remap& remap = Remap::none());

// Builds a plan: prunes to what the fetches and targets need (a fed output cuts its edge), sorts
// topologically (a cycle is InvalidArgumentError naming an op in it). `make_kernel` returns the
// session's kernel for a node (or an error, e.g. no kernel for the device). The plan reads every
// endpoint (inputs and fetches) through `remap`: fused chains (core/remapper.h).
StatusOr<std::shared_ptr<const Plan>> build_plan(
    const GraphImpl& graph, const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& fetches,
    const std::vector<const Node*>& targets,
    const std::function<StatusOr<OpKernel*>(const Node&)>& make_kernel, const Remap& remap = Remap::none());

// A step being captured (Note [Captured partitions] in core/captured_partition.cc): the kernels'
// recorder, told also of every node as it completes, with its inputs and outputs. Thread-safe.
class StepCapture : public StreamRecorder {
 public:
  virtual void completed(int node_index, const Tensor* const* inputs, int num_inputs, const Tensor* outputs,
                         int num_outputs) = 0;
};

// One step of one plan (one partition of a step, when the step spans devices). Create, then call
// run() (or run_async()); it is over when every started op has finished.
class RunState final : public TraceSink, public StreamWork {
 public:
  struct Options {
    const Plan* plan = nullptr;      // Not owned.
    const Runner* runner = nullptr;  // Not owned.
    ResourceMgr* resources = nullptr;  // Not owned.
    ResourceMgr* private_resources = nullptr;  // Not owned; null: `resources` (OpKernelContext)
    int64_t step_id = 0;
    std::chrono::milliseconds timeout{0};  // run() only
    bool trace = false;
    // The device the plan's kernels run on; nullptr = the host CPU. Not owned.
    Device* device = nullptr;
    // The step's exchange between partitions, nullptr for a one-partition step. Not owned.
    Rendezvous* rendezvous = nullptr;
    // Called once, with the reason, when this partition fails or is cancelled (so the session
    // can abort the step's other partitions). May be null. Not owned.
    const std::function<void(const Status&)>* on_abort = nullptr;
    bool allow_tf32 = false;  // SessionOptions::allow_tf32, for the kernels
    // Non-null when this step is captured (a device partition's, untraced). Not owned.
    StepCapture* capture = nullptr;
  };
  explicit RunState(const Options& options);
  ~RunState() override;
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  // Sets the value of the i-th feed. Before run().
  void set_feed(int i, Tensor value);
  // Whether the step ran to its end without an error or a cancellation: then restart() may run
  // another step of the same plan and options on this object, without making a new one.
  bool completed() const;
  // Makes this completed step (of run(), untraced) ready to run again as step `step_id`.
  void restart(int64_t step_id);
  // Runs the step on the calling thread and the pool; blocks until done (or the deadline, after
  // which the step is cancelled and drained). Returns the step's status.
  Status run();
  // Starts the step and returns; `done(status)` runs once when it is over, on whichever thread
  // finished it; the RunState may be destroyed from `done` on.
  void run_async(std::function<void(Status)> done);
  // The value of fetch i after a successful run.
  const Tensor& fetch(int i) const;
  // The same, moved out of the step where no later fetch reads it (Plan::fetch_moves): once each.
  // InvalidArgumentError for a dead one (an untaken branch of a cond: Note [Dead tensors]).
  StatusOr<Tensor> take_fetch(int i);
  // Cancels the step (session close): pending ops fail with `reason`.
  void cancel(const Status& reason);
  std::vector<TraceRecord> take_trace();
  void add(TraceRecord record) override;  // TraceSink
  // StreamWork (Note [Stream-ordered kernels] in executor.cc).
  void issued(Device& device, Stream& stream, const Node& node) override;
  void issued_then(Device& device, Stream& stream, const Node& node, std::function<Status(Status)> check) override;
  void fail(const Status& s) override;
  StreamRecorder* recorder() override { return opt_.capture; }
  int64_t start_us() const { return start_us_; }
  int64_t step_id() const { return opt_.step_id; }

 private:
  // Where slot s's value lives: the plan's constant or this step's slot.
  const Tensor* slot(int s) const {
    const int c = s - plan_.first_constant_slot;
    return c < 0 ? &slots_[s] : &plan_.constants[c].second;
  }
  void process(int node_index);
  // The counters a step starts with (Plan::counted_nodes, counted_slots).
  void reset_counters();
  // Counts a finished node's `delta` (newly ready nodes - 1) in outstanding_: true when that
  // ends the step.
  bool ends_step(int64_t delta);
  // Runs node `first` (none when -1), the nodes on `stack` and every cheap node they make ready,
  // until the stack is empty (or the step is over: `this` may then be gone).
  void run_loop(int first, std::vector<int>* stack);
  // Runs a synchronous kernel and completes it. Its output goes to `discard` (null before and
  // after) when no one reads it (PlanNode::discard_output). kFlow: in a plan with control flow
  // (a dead node completes without running; complete_flow).
  template <bool kFlow>
  void run_sync(int node_index, int64_t start, std::vector<int>* ready, Tensor* discard);
  // A node of a plan with control flow: completes it dead, or runs run_sync<true> or
  // run_async_node (false when an async kernel still runs).
  bool run_flow_node(int node_index, int64_t start, std::vector<int>* ready, Tensor* discard);
  // Starts an async kernel; true when it finished before returning (it is then completed), false
  // when on_async_done will complete it.
  bool run_async_node(int node_index, int64_t start, std::vector<int>* ready);
  // An async kernel's call in flight: its context, and whether done() came before compute_async
  // returned (Note [Async kernels]).
  struct AsyncCall {
    enum : int { kRunning, kDoneEarly, kReturned };
    AsyncCall(int node, int64_t start) : node_index(node), start_us(start) {}
    AsyncCall(const AsyncCall&) = delete;
    AsyncCall& operator=(const AsyncCall&) = delete;

    std::atomic<int> phase{kRunning};
    const int node_index;
    const int64_t start_us;
    std::optional<OpKernelContext> ctx;
  };
  void on_async_done(AsyncCall* call);
  // Checks the outputs (the kernel wrote them into `outputs`: their slots, or the discard
  // tensor), releases inputs, collects newly ready successors; returns false on error.
  bool complete(int node_index, OpKernelContext& ctx, Tensor* outputs, std::vector<int>* ready);
  // Whether node i is dead: a dead input or control predecessor (every input, for a Merge).
  bool is_dead(int node_index) const;
  // complete() in a plan with control flow: a Switch's or _Recv's unset output is dead.
  bool complete_flow(int node_index, OpKernelContext& ctx, Tensor* outputs, std::vector<int>* ready);
  // Completes node i without running it: it is dead, and so are its outputs.
  void complete_dead(int node_index, std::vector<int>* ready);
  // Releases node i's inputs and collects the successors it makes ready.
  void release_inputs_and_ready(int node_index, std::vector<int>* ready);
  // Tells the capture (opt_.capture) that node i completed with `outputs`.
  void capture_completed(int node_index, const OpKernelContext& ctx, const Tensor* outputs);
  // complete()'s error for output k of node i, `t`: missing, or of the wrong dtype.
  void fail_output(int node_index, int k, const Tensor& t);
  void record_error(const Status& s);
  // Dispatches the nodes a finished node made ready: cheap ones onto `inline_stack` (this thread
  // runs them next), expensive ones to the pool, keeping one if nothing cheap is left. Clears
  // `ready`. (The caller has already counted them in outstanding_.)
  void finish_node(std::vector<int>* ready, std::vector<int>* inline_stack);
  // Every node is over: waits (without blocking) for the device work the step issued, then
  // finish()es.
  void done();
  // One stream-ordered wait is over (the executor's own counts as one); the last one finishes.
  void stream_work_over(bool on_completion_thread);
  // Reports the step's status: run() returns, or run_async's callback runs.
  void finish();
  // A stream in error, found after `node`: the device is failed for good, and so is the step.
  void device_fault(Device& device, const Node& node, const Status& s);
  void start();
  void trace_op(const Node* node, int64_t start_us);

  Options opt_;
  const Plan& plan_;
  // The plan's arrays that every node reads (plan_'s, not owned), held here: one load each
  // instead of two.
  const PlanNode* const nodes_;
  const PlanInput* const inputs_;
  const int* const successors_;
  const DType* const output_dtypes_;
  // The kernel context fields every node of this step shares (set once, read by every node's).
  OpKernelContext::Params step_params_;
  // ANDed with PlanNode::forwardable_inputs: all ones where this step's kernels may take over
  // their inputs (host memory, no capture: Note [Forwarded inputs]), else 0.
  uint32_t forward_mask_ = 0;
  std::unique_ptr<StepArrays> arrays_;
  Tensor* slots_;                     // arrays_->slots
  std::atomic<int>* pending_;         // arrays_->pending
  std::atomic<int>* slot_uses_;       // arrays_->slot_uses
  const Tensor* const* input_ptrs_;   // arrays_->inputs
  std::atomic<int64_t> outstanding_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abort_reported_{false};
  std::function<void(Status)> on_done_;  // run_async
  CancellationManager cancellation_;

  // Runs `fn` (an async op's continuation) on the caller of run() if it is waiting, else the pool.
  void hand_off(std::function<void()> fn);

  std::mutex mu_;
  std::condition_variable cv_;
  // run(): whether the step ended before start() returned (Note [Steps that end in start]).
  enum : int { kStarting, kWaiting, kEndedInStart };
  std::atomic<int> run_phase_{kStarting};
  bool ended_inline_ = false;  // finish() ran on run()'s thread, inside start()
  // Written under mu_, or by run() itself after kEndedInStart; read without it by the destructor.
  std::atomic<bool> done_{false};
  Status status_;                               // guarded by mu_ until finish() (see the Note)
  bool caller_waiting_ = false;                 // guarded by mu_
  std::vector<std::function<void()>> inbox_;    // guarded by mu_ (a deque allocates when made)

  // Streams that stream-ordered kernels of this step issued work on, with the last op issued
  // on each (what a fault found at the step's end is named after).
  struct IssuedStream {
    Device* device;
    Stream* stream;
    const Node* last;
  };
  std::atomic<bool> any_stream_work_{false};
  std::mutex stream_mu_;
  std::vector<IssuedStream> issued_streams_;  // guarded by stream_mu_
  // issued_then checks in flight and, once every node is over, the step's final waits on its
  // streams, plus one held until done(): the step finishes when it reaches zero.
  std::atomic<int64_t> stream_waits_{1};

  int64_t start_us_ = 0;
  std::mutex trace_mu_;
  std::vector<TraceRecord> trace_;  // guarded by trace_mu_
  // arrays_->dead (null without control flow). Last: the fields above keep their places, which
  // the per-node path was measured with.
  uint8_t* dead_ = nullptr;
};

int64_t now_micros();

}  // namespace tessera::internal
