#include "core/captured_partition.h"

#include <algorithm>
#include <span>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/env_util.h"
#include "core/logging.h"
#include "core/op_registry.h"

namespace tessera::internal {

// Note [Captured partitions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A step of many small device ops costs a launch per op on the host, however little the device
// does (gpu_chain_100). CUDA graphs remove that: the work is issued once into a graph, and a step
// launches the graph. As PyTorch's CUDA graphs do, the capture fixes every address:
//   * Capture: the first untraced step of a partition that may be captured (static shapes, no
//     state: CapturedPartition::make) runs as usual, and its kernels also record the body of
//     each piece of stream work they issue (StreamRecorder::record), with the buffers it uses.
//     The capture keeps every tensor the step made on the device, so no other work ever gets
//     that memory. A kernel that ran on the host, checked its work there (issued_then) or made an
//     output without recorded work leaves the partition eager for good.
//   * The device makes the bodies one launchable unit (Device::make_graph): a CUDA graph,
//     captured by issuing every body on a private stream; on SIM, one stream work item.
//   * Replay: the step runs a variant of the plan (plan_variant). Each _Recv still receives the
//     step's input, then copies it into the buffer the capture read (on the compute stream); the
//     other ops wait for the _Recvs of their segment (Note [Replay segments]: one unless a value
//     may leave and come back), and the first to run launches the segment's graph; each op's
//     outputs are the capture's buffers, which the _Sends hand on as usual.
// One step replays at a time (the buffers are shared): a step that finds the graph in use runs
// eagerly. A traced step is never the capture (its kernels check their spans on the host). The
// memory stays with the session's plan, as a CUDA graph's private pool stays with the graph; a
// capture that would keep more than TESSERA_CAPTURE_MAX_MB (256 by default) is dropped. Results
// equal eager execution's: the same kernels, in the same stream order, over the same values.

// Note [Replay segments]
// ~~~~~~~~~~~~~~~~~~~~~~
// A replay cannot launch everything once every input is in: a value may leave for another device
// and come back (SIM -> a gather on the host -> SIM), and the ops that send it out must run before
// the input that brings it back can arrive. Waiting for that input first deadlocked the second
// step. The return need not be an edge of any graph (an enqueue on the host and a dequeue that
// waits for it; another task), so the cut is decided from the partition alone, as XLA's clustering
// keeps a cluster free of paths that leave and re-enter it:
//   * each inner op needs the _Recvs it depends on (data or control): eager execution waits for
//     them too;
//   * its gate is what it needs when an output leaves the partition (a _Send) or it has no
//     consumer; otherwise the intersection of its consumers' gates, never less than it needs, so
//     an op that only feeds later work (a Square of a constant beside the fed x) waits with it;
//   * ops of one gate are a segment, one graph of their recorded work in recording order; a
//     segment's ops wait for its gate's _Recvs, and the first to run launches every segment whose
//     gate is within its own and that has not launched yet, smaller gates first.
// A replay then waits for no input an eager step would not wait for before the same sends, so it
// cannot deadlock where eager execution does not. A partition without a value that leaves before
// an input arrives is one segment, one launch, as before; a round trip costs a launch per segment.
// Segments may run in another order than the capture's, which is safe: its buffers are all kept,
// none reused by later work.

// The most device memory one capture keeps (every tensor of the captured step, none reused: a
// partition of large tensors is bound by the device's throughput, not by launches, and gains
// little from a replay): TESSERA_CAPTURE_MAX_MB, 256 by default, read as each plan is built.
static std::size_t max_captured_bytes() {
  return static_cast<std::size_t>(env_mebibytes("TESSERA_CAPTURE_MAX_MB").value_or(uint64_t{256} << 20));
}

// The step being captured: what its kernels record and what each node made.
class Recording final : public StepCapture {
 public:
  Recording(const Plan& plan, const std::vector<bool>& inner, const Device& device)
      : inner_(inner), device_(device), recorded_(plan.nodes.size(), false), outputs_(plan.nodes.size()) {
    for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
      const Node* n = plan.nodes[i].node;
      nodes_.push_back(n);
      index_.emplace(n, static_cast<int>(i));
      // Kernels belong to the graph's nodes, which partitions copy: they record under the original.
      if (n->origin != nullptr) index_.emplace(n->origin, static_cast<int>(i));
    }
  }

  void record(const Node& node, ReplayableWork body) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_.find(&node);
    if (it == index_.end() || !inner_[static_cast<std::size_t>(it->second)]) {
      return set_why_locked(node, "recorded work but is not an op of the partition");
    }
    recorded_[it->second] = true;
    bodies_.emplace_back(it->second, std::move(body));
  }

  void retain(const Tensor& t) override {
    std::lock_guard<std::mutex> l(mu_);
    retained_.push_back(t);
  }

  void unreplayable(const Node& node, const char* why) override {
    std::lock_guard<std::mutex> l(mu_);
    set_why_locked(node, why);
  }

  void completed(int i, const Tensor* const* inputs, int num_inputs, const Tensor* outputs, int num_outputs) override {
    std::lock_guard<std::mutex> l(mu_);
    auto& kept = outputs_[static_cast<std::size_t>(i)];
    kept.assign(outputs, outputs + num_outputs);
    if (!inner_[static_cast<std::size_t>(i)]) return;
    const Node* node = nodes_[static_cast<std::size_t>(i)];
    for (const Tensor& t : kept) {
      if (t.is_null() || t.bytes() == 0) continue;
      if (t.device() != device_.name()) return set_why_locked(*node, "an output is not in the device's memory");
      // Work it did not record made this output, unless it is an input's buffer (Identity,
      // Reshape), which the replay fills.
      bool aliases_input = false;
      for (int j = 0; j < num_inputs && !aliases_input; ++j) {
        aliases_input = !inputs[j]->is_null() && inputs[j]->bytes() > 0 && inputs[j]->raw_data() == t.raw_data();
      }
      if (!recorded_[static_cast<std::size_t>(i)] && !aliases_input) {
        return set_why_locked(*node, "made an output without recorded work");
      }
    }
  }

  // Read once the step is over.
  std::string why() const { return why_; }
  // (plan index, body) in recording order.
  std::vector<std::pair<int, ReplayableWork>>& bodies() { return bodies_; }
  std::vector<Tensor>& retained() { return retained_; }
  std::vector<std::vector<Tensor>>& outputs() { return outputs_; }

 private:
  void set_why_locked(const Node& node, const char* why) {
    if (why_.empty()) why_ = fmt::format("{}: {}", node.debug_name(), why);
  }

  const std::vector<bool>& inner_;
  const Device& device_;
  std::vector<const Node*> nodes_;  // by plan index
  std::unordered_map<const Node*, int> index_;
  std::mutex mu_;
  std::vector<bool> recorded_;                  // guarded by mu_
  std::vector<std::pair<int, ReplayableWork>> bodies_;  // guarded by mu_
  std::vector<Tensor> retained_;                // guarded by mu_
  std::vector<std::vector<Tensor>> outputs_;    // guarded by mu_
  std::string why_;                             // guarded by mu_
};

// An op of a replayed partition: its outputs are the capture's buffers; the first one of its
// segment to run in a step launches the graph that fills them.
class CapturedPartition::SkipKernel final : public OpKernel {
 public:
  SkipKernel(const Node& node, CapturedPartition& owner, int segment, std::vector<Tensor> outputs)
      : OpKernel(node), owner_(owner), segment_(segment), outputs_(std::move(outputs)) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    owner_.launch_once(segment_, ctx);
    for (int k = 0; k < ctx.num_outputs(); ++k) ctx.set_output(k, outputs_[static_cast<std::size_t>(k)]);
  }

 private:
  CapturedPartition& owner_;
  const int segment_;
  const std::vector<Tensor> outputs_;
};

// A _Recv of a replayed partition: receives as usual, then copies the value into the buffer the
// capture read, on the compute stream (where the graph's launch follows).
class CapturedPartition::InputKernel final : public OpKernel {
 public:
  InputKernel(const Node& node, OpKernel& recv, Device& device, Tensor target)
      : OpKernel(node), recv_(recv), device_(device), target_(std::move(target)) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override { recv_.compute(ctx); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    recv_.compute_async(ctx, [this, &ctx, done = std::move(done)] {
      if (ctx.status().ok() && !target_.is_null()) copy_in(ctx);
      done();
    });
  }

 private:
  void copy_in(OpKernelContext& ctx) {
    const Tensor& got = ctx.output(0);
    if (got.dtype() != target_.dtype() || got.shape() != target_.shape()) {
      return ctx.fail(errors::internal("received {} {} for a partition captured with {} {}", dtype_name(got.dtype()),
                                       got.shape().to_string(), dtype_name(target_.dtype()),
                                       target_.shape().to_string()));
    }
    Stream& stream = device_.compute_stream(0);
    if (Status s = device_.copy_within(got, target_, stream); !s.ok()) return ctx.fail(s);
    ctx.stream_work()->issued(device_, stream, node());
  }

  OpKernel& recv_;
  Device& device_;
  const Tensor target_;
};

std::unique_ptr<CapturedPartition> CapturedPartition::make(const Plan& plan, Device& device) {
  if (!device.supports_graphs()) return nullptr;
  // What runs depends on a cond's predicate each step (Note [Dead tensors] in executor.cc).
  if (plan.control_flow) return nullptr;
  std::vector<int> inputs;
  int inner = 0;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const PlanNode& pn = plan.nodes[i];
    const Node& n = *pn.node;
    for (const Shape& s : n.output_shapes) {
      if (!s.fully_defined()) return nullptr;
    }
    if (n.type == "_Recv") {
      if (pn.initial_pending != 0) return nullptr;
      inputs.push_back(static_cast<int>(i));
      continue;
    }
    if (n.type == "_Send") continue;
    const OpDef* def = OpRegistry::global().find_op(n.type);
    if (def == nullptr || def->stateful || def->host_only || n.resource != nullptr) return nullptr;
    ++inner;
  }
  if (inner == 0) return nullptr;
  return std::unique_ptr<CapturedPartition>(new CapturedPartition(plan, device, std::move(inputs)));
}

CapturedPartition::CapturedPartition(const Plan& plan, Device& device, std::vector<int> inputs)
    : plan_(plan), device_(device), inputs_(std::move(inputs)), inner_(plan.nodes.size(), false),
      max_bytes_(max_captured_bytes()) {
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const std::string& type = plan.nodes[i].node->type;
    inner_[i] = type != "_Recv" && type != "_Send";
  }
  make_segments();
}

// Note [Replay segments]. Sets of _Recvs are vectors of flags over inputs_.
void CapturedPartition::make_segments() {
  const std::size_t n = plan_.nodes.size();
  using Inputs = std::vector<bool>;
  auto successors = [this](std::size_t i) {
    const PlanNode& pn = plan_.nodes[i];
    return std::span<const int>(plan_.successors.data() + pn.first_successor,
                                static_cast<std::size_t>(pn.num_successors));
  };
  // What each node waits for in eager execution (the plan is in topological order).
  std::vector<Inputs> needs(n, Inputs(inputs_.size(), false));
  for (std::size_t k = 0; k < inputs_.size(); ++k) needs[static_cast<std::size_t>(inputs_[k])][k] = true;
  for (std::size_t i = 0; i < n; ++i) {
    for (int s : successors(i)) {
      Inputs& to = needs[static_cast<std::size_t>(s)];
      for (std::size_t k = 0; k < to.size(); ++k) to[k] = to[k] || needs[i][k];
    }
  }
  // The gates, consumers first.
  std::vector<Inputs> gate(n);
  for (std::size_t i = n; i-- > 0;) {
    if (!inner_[i]) continue;
    bool leaves = plan_.nodes[i].num_successors == 0;  // a target: nothing to join
    gate[i] = Inputs(inputs_.size(), true);
    for (int s : successors(i)) {
      const auto su = static_cast<std::size_t>(s);
      if (!inner_[su]) {
        leaves = true;
        continue;
      }
      for (std::size_t k = 0; k < gate[i].size(); ++k) gate[i][k] = gate[i][k] && gate[su][k];
    }
    if (leaves) gate[i] = needs[i];
  }
  // One segment per distinct gate, smaller gates first: a segment's data come from segments whose
  // gates are within its own, so from earlier ones.
  std::vector<Inputs> gates;
  for (std::size_t i = 0; i < n; ++i) {
    if (inner_[i] && std::find(gates.begin(), gates.end(), gate[i]) == gates.end()) gates.push_back(gate[i]);
  }
  auto size_of = [](const Inputs& in) { return std::count(in.begin(), in.end(), true); };
  std::stable_sort(gates.begin(), gates.end(),
                   [&](const Inputs& a, const Inputs& b) { return size_of(a) < size_of(b); });
  auto within = [](const Inputs& a, const Inputs& b) {
    for (std::size_t k = 0; k < a.size(); ++k) {
      if (a[k] && !b[k]) return false;
    }
    return true;
  };
  segments_.resize(gates.size());
  for (std::size_t g = 0; g < gates.size(); ++g) {
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      if (gates[g][k]) segments_[g].gate.push_back(inputs_[k]);
    }
    for (std::size_t t = 0; t <= g; ++t) {
      if (within(gates[t], gates[g])) segments_[g].launches.push_back(static_cast<int>(t));
    }
  }
  segment_of_.assign(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    if (inner_[i]) segment_of_[i] = static_cast<int>(std::find(gates.begin(), gates.end(), gate[i]) - gates.begin());
  }
}

CapturedPartition::~CapturedPartition() = default;

CapturedPartition::Step CapturedPartition::begin(bool traced) {
  std::lock_guard<std::mutex> l(mu_);
  if (busy_ || state_ == State::kNever || state_ == State::kCapturing) return Step{Mode::kEager, &plan_, nullptr};
  if (state_ == State::kWarming) {
    if (traced) return Step{Mode::kEager, &plan_, nullptr};
    state_ = State::kCapturing;
    busy_ = true;
    recording_ = std::make_unique<Recording>(plan_, inner_, device_);
    return Step{Mode::kCapture, &plan_, recording_.get()};
  }
  busy_ = true;
  {
    std::lock_guard<std::mutex> launch(launch_mu_);
    launched_.assign(segments_.size(), false);
  }
  ++replays_;
  return Step{Mode::kReplay, replay_plan_.get(), nullptr};
}

void CapturedPartition::end(const Step& step, const Status& status) {
  if (step.mode == Mode::kEager) return;
  if (step.mode == Mode::kReplay) {
    std::lock_guard<std::mutex> l(mu_);
    busy_ = false;
    return;
  }
  if (!status.ok()) {  // the step failed (a bad feed, a cancelled run): capture the next one
    std::lock_guard<std::mutex> l(mu_);
    recording_.reset();
    busy_ = false;
    state_ = State::kWarming;
    return;
  }
  // The capture's recorded work may report to its step (still alive) while the graph is made.
  Status made = finish_capture(*recording_);
  std::lock_guard<std::mutex> l(mu_);
  recording_.reset();
  busy_ = false;
  if (made.ok()) {
    state_ = State::kReady;
    return;
  }
  state_ = State::kNever;
  why_not_ = made.message();
  for (Segment& segment : segments_) segment.graph.reset();
  retained_.clear();
  outputs_.clear();
  input_targets_.clear();
  TESSERA_LOG(kInfo, "{}: a partition of {} nodes runs eagerly: {}", device_.name(), plan_.nodes.size(), why_not_);
}

Status CapturedPartition::finish_capture(Recording& rec) {
  if (!rec.why().empty()) return errors::failed_precondition("{}", rec.why());
  if (rec.bodies().empty()) return errors::failed_precondition("no stream work to replay");
  retained_ = std::move(rec.retained());
  outputs_ = std::move(rec.outputs());
  for (const auto& outs : outputs_) retained_.insert(retained_.end(), outs.begin(), outs.end());
  std::unordered_map<const void*, std::size_t> buffers;  // distinct buffers, by address
  for (const Tensor& t : retained_) {
    if (!t.is_null() && t.device() == device_.name()) buffers[t.raw_data()] = std::max(buffers[t.raw_data()], t.bytes());
  }
  std::size_t kept = 0;
  for (const auto& [address, bytes] : buffers) kept += bytes;
  if (kept > max_bytes_) {
    return errors::resource_exhausted("the capture would keep {} bytes of device memory, over the bound of {} MiB "
                                      "(TESSERA_CAPTURE_MAX_MB)",
                                      kept, max_bytes_ >> 20);
  }
  std::vector<std::vector<ReplayableWork>> bodies(segments_.size());
  for (auto& [node, body] : rec.bodies()) {
    bodies[static_cast<std::size_t>(segment_of_[static_cast<std::size_t>(node)])].push_back(std::move(body));
  }
  for (std::size_t g = 0; g < segments_.size(); ++g) {
    if (bodies[g].empty()) continue;
    auto graph = device_.make_graph(std::move(bodies[g]));
    if (!graph.ok()) return graph.status();
    segments_[g].graph = std::move(graph).value();
  }
  std::vector<OpKernel*> kernels(plan_.nodes.size(), nullptr);
  std::vector<std::pair<int, int>> edges;
  for (int in : inputs_) {
    const std::vector<Tensor>& got = outputs_[static_cast<std::size_t>(in)];
    Tensor target = !got.empty() && got[0].device() == device_.name() && got[0].bytes() > 0 ? got[0] : Tensor();
    const PlanNode& pn = plan_.nodes[static_cast<std::size_t>(in)];
    kernels_.push_back(std::make_unique<InputKernel>(*pn.node, *pn.kernel, device_, target));
    kernels[static_cast<std::size_t>(in)] = kernels_.back().get();
    input_targets_.push_back(std::move(target));
  }
  for (std::size_t i = 0; i < plan_.nodes.size(); ++i) {
    if (!inner_[i]) continue;
    const int segment = segment_of_[i];
    kernels_.push_back(std::make_unique<SkipKernel>(*plan_.nodes[i].node, *this, segment, outputs_[i]));
    kernels[i] = kernels_.back().get();
    for (int in : segments_[static_cast<std::size_t>(segment)].gate) edges.emplace_back(in, static_cast<int>(i));
  }
  replay_plan_ = plan_variant(plan_, kernels, edges);
  return Status();
}

void CapturedPartition::launch_once(int segment, OpKernelContext& ctx) {
  std::lock_guard<std::mutex> l(launch_mu_);
  // The gates of the segments launched here are within this one's, whose _Recvs are all in.
  for (int t : segments_[static_cast<std::size_t>(segment)].launches) {
    if (launched_[static_cast<std::size_t>(t)]) continue;
    launched_[static_cast<std::size_t>(t)] = true;
    Device::Graph* graph = segments_[static_cast<std::size_t>(t)].graph.get();
    if (graph == nullptr) continue;
    StreamWork* work = ctx.stream_work();
    Stream& stream = device_.compute_stream(0);
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    graph->launch(stream, *work);
    if (TraceSink* sink = ctx.trace(); sink != nullptr) {
      work->issued_then(device_, stream, ctx.node(), [sink, &node = ctx.node(), this, &stream, start](Status) {
        trace_stream_span(*sink, node, device_, stream, start, "graph");
        return Status();
      });
    } else {
      work->issued(device_, stream, ctx.node());
    }
  }
}

bool CapturedPartition::replaying() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_ == State::kReady;
}

std::string CapturedPartition::why_not() const {
  std::lock_guard<std::mutex> l(mu_);
  return why_not_;
}

int64_t CapturedPartition::replays() const {
  std::lock_guard<std::mutex> l(mu_);
  return replays_;
}

}  // namespace tessera::internal
