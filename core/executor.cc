// Note [Executor scheduling]
// A step starts its root nodes on the calling thread. When a node finishes, each successor whose
// last predecessor it was becomes ready. Cheap ready nodes run inline on the same thread (no
// queueing, no wake-up: a chain of small ops costs one virtual call each); expensive ones go to
// the inter-op pool, except that a thread with nothing cheap to do keeps one expensive node for
// itself; a node that makes exactly one cheap successor ready runs it next, without the stack.
// `outstanding_` counts nodes that are ready or running; it is raised for new ready nodes before
// they are dispatched, so it reaches zero exactly once, when the step is over.
//
// Note [Step state]
// A step's per-node cost is kept to what the node needs. Kernels write their outputs straight into
// the step's slots (OpKernelContext::Params::outputs), where consumers read them, so an output is
// stored once. The step's counters are only consulted where a node has several predecessors or a
// value several uses (Plan::counted_nodes, counted_slots: a lone predecessor or consumer needs no
// atomic), so a step resets just those. A step that ran to completion has released every value
// but its feeds and fetches (Plan::kept_slots), so only those are cleared for the next step; a
// failed or cancelled step clears every slot.
//
// Note [Async kernels]
// Kernels that wait (queue enqueue/dequeue) are asynchronous: they register a callback with the
// resource they wait on and return, so a blocked step holds no pool thread at all. An op that did
// not have to wait (its callback ran before compute_async returned) completes inline like a
// synchronous one. A later completion (from whichever thread satisfied or cancelled the wait) is
// never run on that thread, which is often another step's enqueue: it is handed to the thread
// that called run(), if that thread is idle waiting for the step (one wake-up, no pool hop),
// else to the pool. Every waiting kernel also registers with the step's CancellationManager: a
// deadline or a session close cancels the step and every wait ends with that reason.
#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "core/denormals.h"
#include "core/graph_partition.h"
#include "core/parallel_for.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {

int64_t now_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void trace_stream_span(TraceSink& sink, const Node& node, const Device& device, const Stream& stream,
                       int64_t start_us, const char* category) {
  TraceRecord r;
  r.name = node.name;
  r.category = category != nullptr ? category : node.type;
  r.device = device.name();
  r.lane = stream.name();
  r.start_us = start_us;
  r.end_us = now_micros();
  sink.add(std::move(r));
}

void OpKernelContext::trace_on_stream(const Device& device, const Stream& stream, int64_t start_us,
                                      const char* category) const {
  if (step_->trace != nullptr) trace_stream_span(*step_->trace, *node_, device, stream, start_us, category);
}

void OpKernelContext::parallel_for(int64_t total, int64_t min_shard,
                                   const std::function<void(int64_t, int64_t)>& fn) const {
  const bool host = step_->device == nullptr || step_->device->type() == "CPU";
  internal::parallel_for(host ? step_->runner : nullptr, total, min_shard, fn);
}

// ---- Plan ----

namespace {
std::atomic<uint64_t> next_plan_serial{1};
}  // namespace

std::vector<const Node*> prune_nodes(const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& fetches,
                                     const std::vector<const Node*>& targets, const Remap& remap) {
  std::unordered_set<uint64_t> fed;
  for (const auto& f : feeds) fed.insert(endpoint_key(f));
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> needed;
  std::vector<const Node*> stack;
  auto want = [&](const Node* n) {
    if (seen.insert(n).second) {
      needed.push_back(n);
      stack.push_back(n);
    }
  };
  for (const auto& fetch : fetches) {
    const Endpoint f = remap.resolve(fetch);
    if (!fed.count(endpoint_key(f))) want(f.node);
  }
  for (const Node* t : targets) want(t);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& input : n->inputs) {
      const Endpoint in = remap.resolve(input);
      if (!fed.count(endpoint_key(in))) want(in.node);
    }
    for (const Node* c : n->control_inputs) want(c);
  }
  return needed;
}

// Note [Forwarded inputs]
// An elementwise kernel may write its output over an input that nobody will read again, as
// TensorFlow's forward_input_or_allocate_output does: no allocation, no release, and the data
// stays in the cache it is already in (x = x + 1 ten thousand times, or relu(bias_add(...)) on
// large activations, touches one buffer instead of a fresh one per op). Three checks make it safe:
// * the plan marks input j of a node forwardable only when the node reads the value's only use
//   (PlanInput::kLastUse: not fetched, not a constant, no other reader), so its slot would be
//   reset right after the kernel anyway;
// * the kernel context forwards only a tensor holding the only reference to host memory of its
//   own buffer (is_sole_owner_of_host_buffer): never a variable's value, a tensor a client (a
//   feed), a queue or a frame still holds, a view, device memory or strings, and only with the
//   output's dtype and exact shape;
// * the step allows it only on the host and when not captured (RunState::forward_mask_): a
//   device's buffers follow stream order, and a capture records buffers for its replays.
// The kernel takes the input's data pointer before forwarding (the input then reads as null) and
// must compute element k of the output from element k of that input alone.

// Note [Slot reuse]
// What a step writes is what ties it to the machine's memory: a slot is a 96-byte Tensor, and with
// a slot per output a chain of 10,000 ops wrote 10,000 fresh slots per step, each read for
// ownership and written back once the step's data outgrew the core's caches (benchmarks/README.md,
// "executor_chain_10k and the machine"). So outputs whose lifetimes cannot overlap share a slot,
// chosen when the plan is built: a node with one output that is read stores it in a slot one of
// its predecessors released, the slot of a value that predecessor was the only reader of (one
// use, not fetched). The predecessor resets that slot in complete() before it makes its
// successors ready, and the node cannot start before, so the slot is empty when the node writes
// it and the old value is never read again; a failed or aborted predecessor makes no successor
// ready. A chain then alternates between two slots that stay in L1. Feeds, constants and values
// with several uses keep a slot of their own. A synchronous node whose one output no one reads
// writes it into a tensor of the running loop instead (PlanNode::discard_output).

StatusOr<std::shared_ptr<const Plan>> build_plan(
    const GraphImpl& graph, const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& signature_fetches,
    const std::vector<const Node*>& targets,
    const std::function<StatusOr<OpKernel*>(const Node&)>& make_kernel, const Remap& remap) {
  auto plan = std::make_shared<Plan>();
  // Every endpoint is read through the remap (Note [Op fusion] in core/remapper.cc): a fused
  // chain's output is its fused node's.
  std::vector<Endpoint> fetches;
  fetches.reserve(signature_fetches.size());
  for (const Endpoint& f : signature_fetches) fetches.push_back(remap.resolve(f));
  plan->graph_version = graph.version();
  plan->serial = next_plan_serial.fetch_add(1, std::memory_order_relaxed);

  std::unordered_map<uint64_t, int> fed;  // endpoint -> feed index
  for (std::size_t i = 0; i < feeds.size(); ++i) fed[endpoint_key(feeds[i])] = static_cast<int>(i);

  std::vector<const Node*> needed = prune_nodes(feeds, fetches, targets, remap);
  std::unordered_map<const Node*, int> index_of;  // needed node -> plan index (set below)

  // Constants are hoisted out of the step: their immutable value is placed in a slot when the step
  // starts, like a feed, so they cost no node and their consumers wait for nothing. (A constant
  // that is a target or has control inputs stays a node; a control edge from a hoisted constant
  // is satisfied from the start, as a constant has no effects.)
  std::unordered_map<const Node*, int> hoisted;  // constant -> slot (set below)
  {
    std::unordered_map<const Node*, bool> is_target;
    for (const Node* t : targets) is_target[t] = true;
    std::vector<const Node*> kept;
    kept.reserve(needed.size());
    for (const Node* n : needed) {
      if (n->type == "Const" && n->control_inputs.empty() && !is_target.count(n)) {
        hoisted.emplace(n, -1);
        auto kernel = make_kernel(*n);  // placement and validation, as for any op
        if (!kernel.ok()) return kernel.status();
      } else {
        kept.push_back(n);
      }
    }
    needed.swap(kept);
  }

  // Distinct predecessors per node, then Kahn's algorithm.
  std::unordered_map<const Node*, std::vector<const Node*>> succ;
  std::unordered_map<const Node*, int> indegree;
  for (const Node* n : needed) {
    std::vector<const Node*> preds;
    for (const auto& input : n->inputs) {
      const Endpoint in = remap.resolve(input);
      if (!fed.count(endpoint_key(in)) && !hoisted.count(in.node)) preds.push_back(in.node);
    }
    for (const Node* c : n->control_inputs) {
      if (!hoisted.count(c)) preds.push_back(c);
    }
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    indegree[n] = static_cast<int>(preds.size());
    for (const Node* p : preds) succ[p].push_back(n);
  }
  std::vector<const Node*> order;
  order.reserve(needed.size());
  // Seed in creation order so plans (and traces) are deterministic.
  std::vector<const Node*> ready;
  for (const Node* n : needed) {
    if (indegree[n] == 0) ready.push_back(n);
  }
  std::sort(ready.begin(), ready.end(), [](const Node* a, const Node* b) { return a->id > b->id; });
  auto remaining = indegree;
  while (!ready.empty()) {
    const Node* n = ready.back();
    ready.pop_back();
    order.push_back(n);
    for (const Node* s : succ[n]) {
      if (--remaining[s] == 0) ready.push_back(s);
    }
  }
  if (order.size() != needed.size()) {
    std::vector<std::string> in_cycle;
    for (const Node* n : needed) {
      if (remaining[n] > 0) in_cycle.push_back(n->debug_name());
    }
    std::sort(in_cycle.begin(), in_cycle.end());
    if (in_cycle.size() > 5) in_cycle.resize(5);
    return errors::invalid_argument("the graph has a cycle through op(s) {}", fmt::join(in_cycle, ", "));
  }

  // Lay out the plan: each node's outputs, numbered in plan order, then where they are stored.
  const int n_nodes = static_cast<int>(order.size());
  plan->nodes.resize(n_nodes);
  int num_outputs = 0;
  for (int i = 0; i < n_nodes; ++i) {
    index_of[order[i]] = i;
    auto& pn = plan->nodes[i];
    pn.node = order[i];
    pn.num_outputs = static_cast<int>(order[i]->output_dtypes.size());
    pn.first_output = num_outputs;
    num_outputs += pn.num_outputs;
  }
  plan->output_dtypes.resize(num_outputs);
  plan->output_uses.assign(num_outputs, 0);
  for (const auto& pn : plan->nodes) {
    for (int k = 0; k < pn.num_outputs; ++k) plan->output_dtypes[pn.first_output + k] = pn.node->output_dtypes[k];
  }
  // The node output an endpoint reads (-1: a feed or a hoisted constant).
  auto output_of = [&](const Endpoint& e) {
    if (fed.count(endpoint_key(e)) || hoisted.count(e.node)) return -1;
    return plan->nodes[index_of.at(e.node)].first_output + e.index;
  };
  std::vector<int> feed_uses(feeds.size(), 0);
  auto use = [&](const Endpoint& e) {
    auto it = fed.find(endpoint_key(e));
    if (it != fed.end()) {
      ++feed_uses[it->second];
    } else if (!hoisted.count(e.node)) {
      ++plan->output_uses[output_of(e)];
    }
  };
  for (const auto& pn : plan->nodes) {
    for (const auto& in : pn.node->inputs) use(remap.resolve(in));
  }
  for (const auto& f : fetches) use(f);

  // Slots, in plan order (Note [Slot reuse]): a node with one output that is read takes a slot one
  // of its predecessors released (the slot of a value that predecessor was the only reader of),
  // else every output gets a fresh slot.
  std::vector<std::vector<int>> preds(n_nodes);
  for (int i = 0; i < n_nodes; ++i) {
    for (const Node* s : succ[order[i]]) preds[index_of.at(s)].push_back(i);
  }
  std::vector<int> output_slot(num_outputs);
  std::vector<std::vector<int>> released(n_nodes);
  int slot = 0;
  for (int i = 0; i < n_nodes; ++i) {
    auto& pn = plan->nodes[i];
    int reused = -1;
    if (pn.num_outputs == 1 && plan->output_uses[pn.first_output] > 0) {
      for (int p : preds[i]) {
        if (released[p].empty()) continue;
        reused = released[p].back();
        released[p].pop_back();
        break;
      }
    }
    if (reused >= 0) {
      pn.first_output_slot = reused;
      output_slot[pn.first_output] = reused;
    } else {
      pn.first_output_slot = slot;
      for (int k = 0; k < pn.num_outputs; ++k) output_slot[pn.first_output + k] = slot++;
    }
    for (const auto& in : pn.node->inputs) {
      const int o = output_of(remap.resolve(in));
      if (o >= 0 && plan->output_uses[o] == 1) released[i].push_back(output_slot[o]);
    }
  }
  for (std::size_t f = 0; f < feeds.size(); ++f) plan->feed_slots.push_back(slot++);
  plan->first_constant_slot = slot;  // the constants' slots come last (RunState::slot)
  for (auto& [n, const_slot] : hoisted) {
    const_slot = slot++;
    plan->constants.push_back({const_slot, n->attr<Tensor>("value")});
  }
  plan->num_slots = slot;
  // Where an endpoint's value is, and what its reader does with it.
  auto input_of = [&](const Endpoint& e) -> PlanInput {
    auto it = fed.find(endpoint_key(e));
    if (it != fed.end()) {
      return {static_cast<uint32_t>(plan->feed_slots[it->second]),
              feed_uses[it->second] > 1 ? PlanInput::kCounted : PlanInput::kLastUse};
    }
    auto h = hoisted.find(e.node);
    if (h != hoisted.end()) {
      return {static_cast<uint32_t>(h->second - plan->first_constant_slot), PlanInput::kPinned};
    }
    const int o = output_of(e);
    return {static_cast<uint32_t>(output_slot[o]),
            plan->output_uses[o] > 1 ? PlanInput::kCounted : PlanInput::kLastUse};
  };
  for (int i = 0; i < n_nodes; ++i) {
    auto& pn = plan->nodes[i];
    const Node* n = pn.node;
    pn.first_input = static_cast<int>(plan->inputs.size());
    pn.num_inputs = static_cast<int>(n->inputs.size());
    for (const auto& in : n->inputs) plan->inputs.push_back(input_of(remap.resolve(in)));
    pn.first_successor = static_cast<int>(plan->successors.size());
    for (const Node* s : succ[n]) plan->successors.push_back(index_of.at(s));
    pn.num_successors = static_cast<int>(plan->successors.size()) - pn.first_successor;
    pn.initial_pending = indegree[n];
    if (pn.initial_pending == 0) plan->roots.push_back(i);
    auto kernel = make_kernel(*n);
    if (!kernel.ok()) return kernel.status();
    pn.kernel = kernel.value();
    pn.run = pn.kernel->is_async() ? PlanNode::kAsync : PlanNode::kSync;
    pn.expensive = pn.kernel->is_expensive();
    for (int k = 0; k < pn.num_outputs; ++k) {
      if (plan->output_uses[pn.first_output + k] == 0) pn.some_output_unused = true;
    }
    pn.discard_output = !pn.is_async() && pn.num_outputs == 1 && pn.some_output_unused;
    for (int j = 0; j < std::min(pn.num_inputs, 32); ++j) {
      if (plan->inputs[pn.first_input + j].release == PlanInput::kLastUse) pn.forwardable_inputs |= uint32_t{1} << j;
    }
  }
  for (const auto& f : fetches) {
    const PlanInput in = input_of(f);
    plan->fetch_slots.push_back(static_cast<int>(in.slot) +
                                (in.release == PlanInput::kPinned ? plan->first_constant_slot : 0));
  }
  for (int i = 0; i < n_nodes; ++i) {
    if (plan->nodes[i].initial_pending > 1) plan->counted_nodes.push_back(i);
  }
  // A slot shared by several outputs holds at most one with two or more uses: an output hands its
  // slot on only when it has one use, and only after that use.
  for (int o = 0; o < num_outputs; ++o) {
    if (plan->output_uses[o] > 1) plan->counted_slots.push_back({output_slot[o], plan->output_uses[o]});
  }
  for (std::size_t f = 0; f < feeds.size(); ++f) {
    if (feed_uses[f] > 1) plan->counted_slots.push_back({plan->feed_slots[f], feed_uses[f]});
  }
  // Conditionals (Note [Dead tensors]): a plan of a graph with a cond (or a partition of one)
  // tracks which nodes are dead.
  for (const Node* n : order) {
    const GraphImpl* g = n->origin != nullptr ? n->origin->graph : n->graph;
    if (g->has_control_flow() || n->graph->has_control_flow()) {
      plan->control_flow = true;
      break;
    }
  }
  if (plan->control_flow) {
    plan->control_pred_begin.reserve(static_cast<std::size_t>(n_nodes) + 1);
    plan->flows.assign(static_cast<std::size_t>(n_nodes), Plan::kPlain);
    for (int i = 0; i < n_nodes; ++i) {
      PlanNode& pn = plan->nodes[i];
      pn.run = static_cast<uint8_t>(pn.run | PlanNode::kFlow);
      const std::string& type = pn.node->type;
      if (type == "Merge") {
        plan->flows[i] = Plan::kMerge;
      } else if (type == kSendOp) {
        plan->flows[i] = Plan::kSend;
      } else if (type == "Switch" || type == kRecvOp) {
        plan->flows[i] = Plan::kMakesDead;
      }
      const std::size_t begin = plan->control_preds.size();
      plan->control_pred_begin.push_back(static_cast<int>(begin));
      for (const Node* c : pn.node->control_inputs) {
        if (hoisted.count(c)) continue;
        const int p = index_of.at(c);
        if (std::find(plan->control_preds.begin() + static_cast<std::ptrdiff_t>(begin), plan->control_preds.end(),
                      p) == plan->control_preds.end()) {
          plan->control_preds.push_back(p);
        }
      }
    }
    plan->control_pred_begin.push_back(static_cast<int>(plan->control_preds.size()));
    for (const Endpoint& f : signature_fetches) plan->fetch_names.push_back(fmt::format("{}:{}", f.node->name, f.index));
  }
  plan->kept_slots = plan->feed_slots;
  plan->kept_slots.insert(plan->kept_slots.end(), plan->fetch_slots.begin(), plan->fetch_slots.end());
  // The last fetch of each slot takes its value; earlier ones (the same output fetched twice) and
  // constants copy it.
  std::vector<char> fetched(static_cast<std::size_t>(plan->num_slots), 0);
  plan->fetch_moves.assign(plan->fetch_slots.size(), 0);
  for (std::size_t f = plan->fetch_slots.size(); f-- > 0;) {
    const int slot = plan->fetch_slots[f];
    plan->fetch_moves[f] = slot < plan->first_constant_slot && !fetched[static_cast<std::size_t>(slot)];
    fetched[static_cast<std::size_t>(slot)] = 1;
  }
  return std::shared_ptr<const Plan>(std::move(plan));
}

std::shared_ptr<const Plan> plan_variant(const Plan& plan, const std::vector<OpKernel*>& kernels,
                                         const std::vector<std::pair<int, int>>& edges) {
  auto v = std::make_shared<Plan>(plan);
  v->serial = next_plan_serial.fetch_add(1, std::memory_order_relaxed);
  const int n = static_cast<int>(v->nodes.size());
  for (int i = 0; i < n && i < static_cast<int>(kernels.size()); ++i) {
    if (kernels[i] == nullptr) continue;
    PlanNode& pn = v->nodes[i];
    pn.kernel = kernels[i];
    pn.run = static_cast<uint8_t>((pn.run & PlanNode::kFlow) | (pn.kernel->is_async() ? PlanNode::kAsync : 0));
    pn.expensive = pn.kernel->is_expensive();
    pn.discard_output = !pn.is_async() && pn.num_outputs == 1 && pn.some_output_unused;
  }
  std::vector<std::vector<int>> succ(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const PlanNode& pn = plan.nodes[i];
    succ[i].assign(plan.successors.begin() + pn.first_successor,
                   plan.successors.begin() + pn.first_successor + pn.num_successors);
  }
  for (const auto& [from, to] : edges) {
    if (std::find(succ[from].begin(), succ[from].end(), to) != succ[from].end()) continue;
    succ[from].push_back(to);
    ++v->nodes[to].initial_pending;
  }
  v->successors.clear();
  v->roots.clear();
  v->counted_nodes.clear();
  for (int i = 0; i < n; ++i) {
    PlanNode& pn = v->nodes[i];
    pn.first_successor = static_cast<int>(v->successors.size());
    pn.num_successors = static_cast<int>(succ[i].size());
    v->successors.insert(v->successors.end(), succ[i].begin(), succ[i].end());
    if (pn.initial_pending == 0) v->roots.push_back(i);
    if (pn.initial_pending > 1) v->counted_nodes.push_back(i);
  }
  return v;
}

// ---- RunState ----

namespace {
uint64_t this_thread_id() {
  return static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id()));
}
}  // namespace

namespace {
// Each thread keeps the arrays of its last few steps as spares, by plan: a thread that runs the
// same plans again reuses them without allocating and without touching anything another thread
// touches (Note [Session fast path] in core/direct_session.cc). A thread runs one step at a
// time, so a plan's spare is free whenever the thread starts a step of it.
struct SpareArrays {
  static constexpr int kPlans = 4;
  uint64_t plan_serial[kPlans] = {};
  std::unique_ptr<StepArrays> arrays[kPlans];
  int next_victim = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local SpareArrays tls_spares;  // as tls_small_blocks in core/tensor.cc
}  // namespace

std::unique_ptr<StepArrays> Plan::acquire_arrays() const {
  SpareArrays& spares = tls_spares;
  for (int k = 0; k < SpareArrays::kPlans; ++k) {
    if (spares.plan_serial[k] == serial && spares.arrays[k]) return std::move(spares.arrays[k]);
  }
  auto a = std::make_unique<StepArrays>();
  a->slots = std::make_unique<Tensor[]>(num_slots);
  a->pending = std::make_unique<std::atomic<int>[]>(nodes.size());
  a->slot_uses = std::make_unique<std::atomic<int>[]>(num_slots);
  a->inputs = std::make_unique<const Tensor*[]>(inputs.size());
  if (control_flow) a->dead = std::make_unique<uint8_t[]>(nodes.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    const PlanInput in = inputs[j];
    a->inputs[j] = in.release == PlanInput::kPinned ? &constants[in.slot].second : &a->slots[in.slot];
  }
  return a;
}

void Plan::release_arrays(std::unique_ptr<StepArrays> a, bool completed) const {
  if (completed) {
    for (int s : kept_slots) a->slots[s].reset();
  } else {
    for (int s = 0; s < num_slots; ++s) a->slots[s].reset();
  }
  SpareArrays& spares = tls_spares;
  int k = 0;
  while (k < SpareArrays::kPlans && spares.plan_serial[k] != serial) ++k;
  if (k == SpareArrays::kPlans) {  // not cached yet: evict round-robin (a stale plan's arrays go)
    k = spares.next_victim;
    spares.next_victim = (k + 1) % SpareArrays::kPlans;
  }
  spares.plan_serial[k] = serial;
  spares.arrays[k] = std::move(a);
}

namespace {
// The RunState whose run() is in start() on this thread (Note [Steps that end in start]).
__attribute__((tls_model("initial-exec"))) constinit thread_local const RunState* tls_starting = nullptr;
}  // namespace

RunState::RunState(const Options& options)
    : opt_(options), plan_(*options.plan), nodes_(plan_.nodes.data()), inputs_(plan_.inputs.data()),
      successors_(plan_.successors.data()), output_dtypes_(plan_.output_dtypes.data()) {
  arrays_ = plan_.acquire_arrays();
  slots_ = arrays_->slots.get();
  pending_ = arrays_->pending.get();
  slot_uses_ = arrays_->slot_uses.get();
  input_ptrs_ = arrays_->inputs.get();
  dead_ = arrays_->dead.get();
  reset_counters();
  step_params_.resources = opt_.resources;
  step_params_.private_resources = opt_.private_resources;
  step_params_.cancellation = &cancellation_;
  step_params_.step_id = opt_.step_id;
  step_params_.runner = opt_.runner;
  step_params_.device = opt_.device;
  step_params_.rendezvous = opt_.rendezvous;
  step_params_.trace = opt_.trace ? this : nullptr;
  step_params_.stream_work = this;
  step_params_.allow_tf32 = opt_.allow_tf32;
  const bool host = opt_.device == nullptr || opt_.device->type() == "CPU";
  forward_mask_ = host && opt_.capture == nullptr ? ~uint32_t{0} : 0;
}

RunState::~RunState() { plan_.release_arrays(std::move(arrays_), completed()); }

bool RunState::completed() const {
  // A step that finished without an abort ran every node through complete(), which released
  // every value but the feeds and fetches (Plan::kept_slots). done_ is written (under mu_) by the
  // thread that finished the step, which happens before the owner reads it.
  return done_.load(std::memory_order_acquire) && !aborted_.load(std::memory_order_acquire);
}

void RunState::reset_counters() {
  for (int i : plan_.counted_nodes) pending_[i].store(plan_.nodes[i].initial_pending, std::memory_order_relaxed);
  for (const auto& [s, uses] : plan_.counted_slots) slot_uses_[s].store(uses, std::memory_order_relaxed);
  if (dead_ != nullptr) std::fill_n(dead_, plan_.nodes.size(), uint8_t{0});
}

void RunState::restart(int64_t step_id) {
  TESSERA_CHECK(completed() && on_done_ == nullptr && !opt_.trace);
  // What a completed, untraced step leaves (its status OK, nothing cancelled, no stream work
  // pending) is as a new RunState has it, but for these.
  for (int s : plan_.kept_slots) slots_[s].reset();
  reset_counters();
  opt_.step_id = step_params_.step_id = step_id;
  done_.store(false, std::memory_order_relaxed);
  run_phase_.store(kStarting, std::memory_order_relaxed);
  ended_inline_ = false;
  any_stream_work_.store(false, std::memory_order_relaxed);
  stream_waits_.store(1, std::memory_order_relaxed);
}

void RunState::set_feed(int i, Tensor value) { slots_[plan_.feed_slots[i]] = std::move(value); }

const Tensor& RunState::fetch(int i) const { return *slot(plan_.fetch_slots[i]); }

StatusOr<Tensor> RunState::take_fetch(int i) {
  Tensor t = plan_.fetch_moves[i] ? std::move(slots_[plan_.fetch_slots[i]]) : fetch(i);
  if (t.is_null()) [[unlikely]] {
    return errors::invalid_argument(
        "fetch {} has no value: it is computed in a branch of a cond that this step did not take",
        plan_.fetch_names.empty() ? std::to_string(i) : "'" + plan_.fetch_names[i] + "'");
  }
  return t;
}

void RunState::start() {
  if (opt_.trace) start_us_ = now_micros();
  if (plan_.nodes.empty()) return done();
  const std::vector<int>& roots = plan_.roots;
  outstanding_.store(static_cast<int64_t>(roots.size()), std::memory_order_release);
  std::vector<int> stack;
  if (roots.size() == 1) return run_loop(roots[0], &stack);  // what finish_node would keep for this thread
  std::vector<int> ready(roots.begin(), roots.end());
  finish_node(&ready, &stack);  // dispatch only: the roots are already counted
  if (!stack.empty()) run_loop(-1, &stack);
}

void RunState::run_async(std::function<void(Status)> done) {
  on_done_ = std::move(done);
  start();
}

// Note [Steps that end in start]
// Most steps of a small graph are over before start() returns: every node ran inline on the
// caller's thread. run() then needs neither mu_ nor cv_, nor (when that thread ended it) any
// atomic read-modify-write. A step that ends on the thread in start() (tls_starting) just says so
// in ended_inline_, which only that thread reads. Otherwise run_phase_ says which came first, the
// caller leaving start() (kStarting -> kWaiting, then it waits as below) or the step's end on
// another thread (kStarting -> kEndedInStart, finish()'s last touch of `this`; run() returns at
// once). finish() reads and writes status_ without mu_: every other writer (a failed node, a
// stream's check) is over by then, ordered before it by outstanding_ and stream_waits_. Likewise
// a node that finds itself the only one outstanding ends the step without decrementing the count
// (nothing else can change it), and a step that issued no stream work skips stream_waits_.
Status RunState::run() {
  const RunState* outer = tls_starting;  // a kernel may run a step of its own (nested run())
  tls_starting = this;
  start();
  tls_starting = outer;
  int phase = kStarting;
  if (ended_inline_ || !run_phase_.compare_exchange_strong(phase, kWaiting, std::memory_order_acq_rel)) {
    done_.store(true, std::memory_order_relaxed);  // it ended before start() returned: no wait, no lock
    return status_;
  }
  // Wait for the step, running the continuations of async ops handed to this (otherwise idle)
  // thread: see Note [Async kernels].
  std::unique_lock<std::mutex> l(mu_);
  caller_waiting_ = true;
  const bool has_deadline = opt_.timeout.count() > 0;
  const auto deadline = has_deadline ? std::chrono::steady_clock::now() + opt_.timeout
                                     : std::chrono::steady_clock::time_point{};
  bool timed_out = false;
  while (!done_) {
    if (!inbox_.empty()) {
      std::vector<std::function<void()>> handed;
      handed.swap(inbox_);
      l.unlock();
      for (auto& fn : handed) fn();  // may finish the step (done() takes mu_)
      l.lock();
      continue;
    }
    if (has_deadline && !timed_out) {
      if (cv_.wait_until(l, deadline) == std::cv_status::timeout && !done_ && inbox_.empty()) {
        timed_out = true;
        l.unlock();
        cancel(Status(ErrorCode::kDeadlineExceeded,
                      fmt::format("the run exceeded its timeout of {} ms", opt_.timeout.count())));
        l.lock();
      }
    } else {
      cv_.wait(l);
    }
  }
  caller_waiting_ = false;
  return status_;
}

void RunState::hand_off(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (caller_waiting_) {
      inbox_.push_back(std::move(fn));
      cv_.notify_all();
      return;
    }
  }
  (*opt_.runner)(std::move(fn));
}

void RunState::cancel(const Status& reason) {
  aborted_.store(true, std::memory_order_release);
  cancellation_.start_cancel(reason);
  if (opt_.on_abort != nullptr && !abort_reported_.exchange(true, std::memory_order_acq_rel)) {
    (*opt_.on_abort)(reason);
  }
}

void RunState::record_error(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) status_ = s;
  }
  cancel(s);
}

// Note [Stream-ordered kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a device with streams (SIM, GPU) a kernel is done for the executor when its work is
// enqueued, not when it has run: successors on the same stream follow it in stream order, so a
// chain of device ops never goes back through the host between ops (TensorFlow's GPU device and
// PyTorch work this way). Such a kernel tells the step through Params::stream_work (this RunState):
// issued() names the stream, issued_then() adds a check that runs once the stream has passed the
// work (a device-side error flag read back), and fail() reports an error the work itself found.
// When every node is over, done() records one completion on each stream the step issued work
// on and the step finishes only when those and the checks have completed: a step returns after
// its device work has run (TensorFlow's sync-on-finish), so the tensors, cancellation manager and
// trace the stream work may still use outlive it, and an error that work finds fails the very
// step that issued it. A stream in error there marks its device failed, naming the last op
// issued on it. The host waits for device work only where a host consumer needs the data: a
// _Recv's copy to host memory first waits on an event of the source's compute stream (Note
// [Send and Recv]).

void RunState::issued(Device& device, Stream& stream, const Node& node) {
  std::lock_guard<std::mutex> l(stream_mu_);
  any_stream_work_.store(true, std::memory_order_relaxed);
  for (IssuedStream& is : issued_streams_) {
    if (is.stream == &stream) {
      is.last = &node;
      return;
    }
  }
  issued_streams_.push_back(IssuedStream{&device, &stream, &node});
}

void RunState::issued_then(Device& device, Stream& stream, const Node& node, std::function<Status(Status)> check) {
  if (opt_.capture != nullptr) opt_.capture->unreplayable(node, "its work is checked on the host");
  issued(device, stream, node);
  stream_waits_.fetch_add(1, std::memory_order_acq_rel);
  stream.then([this, &device, &node, check = std::move(check)](Status s) {
    Status checked = check(s);
    if (!s.ok()) {
      device_fault(device, node, s);
    } else if (!checked.ok()) {
      fail(checked.with_prefix(node.debug_name() + ": "));
    }
    stream_work_over(/*on_completion_thread=*/true);
  });
}

void RunState::fail(const Status& s) {
  if (!s.ok()) record_error(s);
}

void RunState::device_fault(Device& device, const Node& node, const Status& s) {
  // The stream is in error (sticky, as a CUDA fault is): the device is done for.
  record_error(device.fail_after(node.debug_name(), s));
}

void RunState::done() {
  // No stream work issued: the executor's own wait is the only one (Note [Steps that end in start]).
  if (!any_stream_work_.load(std::memory_order_relaxed)) return finish();
  std::vector<IssuedStream> streams;
  {
    std::lock_guard<std::mutex> l(stream_mu_);
    streams.swap(issued_streams_);
  }
  stream_waits_.fetch_add(static_cast<int64_t>(streams.size()), std::memory_order_acq_rel);
  for (const IssuedStream& is : streams) {
    is.stream->then([this, is](Status s) {
      if (!s.ok()) device_fault(*is.device, *is.last, s);
      stream_work_over(/*on_completion_thread=*/true);
    });
  }
  stream_work_over(/*on_completion_thread=*/false);
}

void RunState::stream_work_over(bool on_completion_thread) {
  if (stream_waits_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (on_completion_thread && on_done_) {
    // The session's continuation does not run on a device's completion thread.
    (*opt_.runner)([this] { finish(); });
    return;
  }
  finish();
}

void RunState::finish() {
  if (on_done_) {
    Status status;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (status_.ok() && cancellation_.is_cancelled()) status_ = cancellation_.reason();
      done_.store(true, std::memory_order_release);
      status = status_;
    }
    auto on_done = std::move(on_done_);
    on_done(std::move(status));  // `this` may be gone from here on
    return;
  }
  // Every writer of status_ is over (Note [Steps that end in start]).
  if (status_.ok() && cancellation_.is_cancelled()) status_ = cancellation_.reason();
  if (tls_starting == this) {
    ended_inline_ = true;
    return;
  }
  int phase = kStarting;
  if (run_phase_.compare_exchange_strong(phase, kEndedInStart, std::memory_order_acq_rel)) return;  // run() has it
  std::lock_guard<std::mutex> l(mu_);
  done_.store(true, std::memory_order_release);
  // Notified under the lock: the waiter may destroy this object as soon as it sees done_.
  cv_.notify_all();
}

void RunState::trace_op(const Node* node, int64_t start_us) {
  TraceRecord r;
  r.name = node->name;
  r.category = node->type;
  r.device = opt_.device != nullptr ? opt_.device->name() : std::string(kHostDeviceName);
  r.thread = this_thread_id();
  r.start_us = start_us;
  r.end_us = now_micros();
  add(std::move(r));
}

void RunState::add(TraceRecord record) {
  std::lock_guard<std::mutex> l(trace_mu_);
  trace_.push_back(std::move(record));
}

// The per-node steps are forced inline into process(): an ordinary member of a class with default
// visibility in a shared library is interposable, so the compiler would call it through the PLT
// and never inline it. (Only this file calls them; their rare paths are out of line.)
#define TESSERA_HOT_INLINE inline __attribute__((always_inline))

TESSERA_HOT_INLINE void RunState::finish_node(std::vector<int>* ready, std::vector<int>* inline_stack) {
  // Dispatch: cheap nodes inline; expensive ones to the pool, keeping one if nothing is inline.
  int keep_expensive = -1;
  for (int r : *ready) {
    const auto& pn = nodes_[r];
    if (!pn.expensive) {
      inline_stack->push_back(r);
    } else if (keep_expensive < 0 && inline_stack->empty()) {
      keep_expensive = r;
    } else {
      (*opt_.runner)([this, r] { process(r); });
    }
  }
  if (keep_expensive >= 0) {
    if (inline_stack->empty()) {
      inline_stack->push_back(keep_expensive);
    } else {
      (*opt_.runner)([this, keep_expensive] { process(keep_expensive); });
    }
  }
  ready->clear();
}

// Note [Nothing after the last count]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread that finishes a node and makes nothing ready gives up its count in outstanding_; if
// that was not the step's end, another thread may end the step and destroy the RunState right
// after. So such a thread returns at once unless it still holds counted nodes (its stack): no
// finish_node, no member read. AddressSanitizer caught an on_async_done that went on into
// finish_node with nothing ready while a pool thread ended the step (a heap-use-after-free in one
// run of a cluster test once the pool's workers stayed awake, Note [Spinning before sleeping]).
//
// The last node outstanding needs no decrement (Note [Steps that end in start]).
TESSERA_HOT_INLINE bool RunState::ends_step(int64_t delta) {
  if (delta == -1 && outstanding_.load(std::memory_order_acquire) == 1) return true;
  return outstanding_.fetch_add(delta, std::memory_order_acq_rel) + delta == 0;
}

template <bool kFlow>
TESSERA_HOT_INLINE void RunState::run_sync(int i, int64_t start, std::vector<int>* ready, Tensor* discard) {
  const PlanNode& pn = nodes_[i];
  bool dead_send = false;
  if constexpr (kFlow) {  // Note [Dead tensors]
    if (is_dead(i)) {
      if (plan_.flows[i] != Plan::kSend) return complete_dead(i, ready);
      dead_send = true;
    }
  }
  // The kernel writes its outputs straight into the node's slots (see complete()), or an output
  // no one reads into `discard`.
  Tensor* outputs = pn.discard_output ? discard : slots_ + pn.first_output_slot;
  OpKernelContext ctx(step_params_, pn.node, input_ptrs_ + pn.first_input, pn.num_inputs,
                      output_dtypes_ + pn.first_output, outputs, pn.num_outputs,
                      pn.forwardable_inputs & forward_mask_);
  if (dead_send) ctx.set_dead_input();
  try {
    pn.kernel->compute(ctx);
  } catch (...) {
    ctx.fail(status_from_current_exception());
  }
  if (opt_.trace) trace_op(pn.node, start);
  if constexpr (kFlow) {
    complete_flow(i, ctx, outputs, ready);
  } else {
    complete(i, ctx, outputs, ready);
  }
  if (pn.discard_output) discard->reset();  // complete() did, unless the node failed
}

// A node of a plan with control flow (Note [Dead tensors]); false: an async kernel still runs.
__attribute__((noinline, cold)) bool RunState::run_flow_node(int i, int64_t start, std::vector<int>* ready,
                                                       Tensor* discard) {
  if (nodes_[i].is_async()) {
    if (plan_.flows[i] != Plan::kSend && is_dead(i)) {  // Note [Dead tensors]
      complete_dead(i, ready);
      return true;
    }
    return run_async_node(i, start, ready);
  }
  run_sync<true>(i, start, ready, discard);
  return true;
}

void RunState::process(int node_index) {
  std::vector<int> stack;
  run_loop(node_index, &stack);
}

void RunState::run_loop(int first, std::vector<int>* stack_ptr) {
  const ScopedFlushDenormals flush;  // Note [Denormals flushed] in core/denormals.h
  // Everything this thread makes ready and keeps runs in this loop.
  std::vector<int>& stack = *stack_ptr;
  std::vector<int> ready;
  Tensor discard;  // the output of a node that nobody reads (PlanNode::discard_output)
  for (int i = first; i >= 0 || !stack.empty(); i = -1) {
    if (i < 0) {
      i = stack.back();
      stack.pop_back();
    }
    // Node i, then, while each node makes exactly one cheap successor ready, that successor: what
    // finish_node would push and the stack would pop next, without either.
    for (;;) {
      const PlanNode& pn = nodes_[i];
      ready.clear();
      if (!aborted_.load(std::memory_order_acquire)) {
        const int64_t start = opt_.trace ? now_micros() : 0;
        if (pn.run == PlanNode::kSync) {
          run_sync<false>(i, start, &ready, &discard);
        } else if (pn.run == PlanNode::kAsync) {
          if (!run_async_node(i, start, &ready)) break;  // still waiting: outstanding_ counts it
        } else if (!run_flow_node(i, start, &ready, &discard)) {
          break;
        }
      }
      // This node is over; count the ones it made ready before anyone can run them. A node that
      // makes exactly one successor ready leaves the count unchanged: no atomic needed.
      const int64_t delta = static_cast<int64_t>(ready.size()) - 1;
      if (delta != 0 && ends_step(delta)) {
        done();  // `this` may be gone from here on
        return;
      }
      if (delta == 0 && !nodes_[ready[0]].expensive) {
        i = ready[0];
        continue;
      }
      // Nothing made ready and nothing on the stack: this thread holds no count any more, and
      // `this` may already be gone (Note [Nothing after the last count]).
      if (ready.empty() && stack.empty()) return;
      finish_node(&ready, &stack);
      break;
    }
  }
}

bool RunState::run_async_node(int i, int64_t start, std::vector<int>* ready) {
  const PlanNode& pn = nodes_[i];
  // The context must outlive this frame: it lives in an AsyncCall until the kernel calls done
  // (whose closure, two pointers, needs no allocation of its own). Its inputs are the step's
  // (StepArrays::inputs), which outlive every node.
  auto* call = new AsyncCall(i, start);
  call->ctx.emplace(step_params_, pn.node, input_ptrs_ + pn.first_input, pn.num_inputs,
                    output_dtypes_ + pn.first_output, slots_ + pn.first_output_slot, pn.num_outputs);
  bool threw = false;
  try {
    pn.kernel->compute_async(*call->ctx, [this, call] {
      if (call->phase.exchange(AsyncCall::kDoneEarly, std::memory_order_acq_rel) == AsyncCall::kRunning) {
        return;
      }
      hand_off([this, call] { on_async_done(call); });
    });
  } catch (...) {
    // A kernel that throws before taking ownership of `done` never calls it.
    call->ctx->fail(status_from_current_exception());
    threw = true;
  }
  if (!threw && call->phase.exchange(AsyncCall::kReturned, std::memory_order_acq_rel) != AsyncCall::kDoneEarly) {
    return false;  // on_async_done completes it
  }
  if (opt_.trace && opt_.device == nullptr) trace_op(pn.node, start);
  if (dead_ != nullptr) [[unlikely]] {
    complete_flow(i, *call->ctx, slots_ + pn.first_output_slot, ready);
  } else {
    complete(i, *call->ctx, slots_ + pn.first_output_slot, ready);
  }
  delete call;
  return true;
}

void RunState::on_async_done(AsyncCall* call) {
  const int i = call->node_index;
  const int64_t start = call->start_us;
  std::vector<int> ready;
  // On a device the kernel traces itself, on its stream: the executor's span would only show
  // the wait.
  if (opt_.trace && opt_.device == nullptr) trace_op(nodes_[i].node, start);
  if (dead_ != nullptr) [[unlikely]] {
    complete_flow(i, *call->ctx, slots_ + nodes_[i].first_output_slot, &ready);
  } else {
    complete(i, *call->ctx, slots_ + nodes_[i].first_output_slot, &ready);
  }
  delete call;
  const int64_t delta = static_cast<int64_t>(ready.size()) - 1;
  if (delta != 0 && outstanding_.fetch_add(delta, std::memory_order_acq_rel) + delta == 0) {
    done();
    return;
  }
  // Nothing made ready and not the last: another thread may end the step and free `this` from the
  // moment of that decrement (Note [Nothing after the last count]).
  if (ready.empty()) return;
  std::vector<int> stack;
  finish_node(&ready, &stack);
  if (!stack.empty()) run_loop(-1, &stack);
}

TESSERA_HOT_INLINE bool RunState::complete(int i, OpKernelContext& ctx, Tensor* outputs, std::vector<int>* ready) {
  const PlanNode& pn = nodes_[i];
  if (!ctx.status().ok()) [[unlikely]] {
    record_error(ctx.status());
    return false;
  }
  if (opt_.capture != nullptr) [[unlikely]] capture_completed(i, ctx, outputs);
  // The outputs are already in place (the context writes there). A failed or aborted step leaves
  // them: the step's arrays are cleared when it ends (Plan::release_arrays).
  for (int k = 0; k < pn.num_outputs; ++k) {
    Tensor& t = outputs[k];
    if (t.is_null() || t.dtype() != output_dtypes_[pn.first_output + k]) [[unlikely]] {
      fail_output(i, k, t);
      return false;
    }
    if (pn.some_output_unused && plan_.output_uses[pn.first_output + k] == 0) t.reset();  // nobody reads it
  }
  if (aborted_.load(std::memory_order_acquire)) return false;
  release_inputs_and_ready(i, ready);
  return true;
}

TESSERA_HOT_INLINE void RunState::release_inputs_and_ready(int i, std::vector<int>* ready) {
  const PlanNode& pn = nodes_[i];
  // A value with one use and a successor with one predecessor involve no other thread. A slot is
  // released before the successors start: one of them may store its output there (Note [Slot
  // reuse]).
  for (int j = 0; j < pn.num_inputs; ++j) {
    const PlanInput in = inputs_[pn.first_input + j];
    if (in.release == PlanInput::kPinned) continue;
    if (in.release == PlanInput::kLastUse || slot_uses_[in.slot].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      slots_[in.slot].reset();
    }
  }
  for (int k = 0; k < pn.num_successors; ++k) {
    const int succ = successors_[pn.first_successor + k];
    if (nodes_[succ].initial_pending == 1 ||
        pending_[succ].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ready->push_back(succ);
    }
  }
}

// Note [Dead tensors]
// ~~~~~~~~~~~~~~~~~~~
// A cond (core/control_flow_ops.cc) runs one of its branches as TensorFlow's executor does: the
// Switch at the branches' entry sets the output its predicate picks and leaves the other unset,
// and an output never set is dead. A node with a dead input, or a control predecessor that is
// dead, is dead itself: its kernel does not run and its outputs stay unset, so deadness flows
// down the untaken branch without computing anything, and every node still completes once (the
// step's counts are those of any step). The Merge at the branches' exit runs unless every input
// is dead, and forwards the live one. A _Send hands deadness on to its _Recv (an unset tensor
// through the rendezvous), whose output is then dead too. A dead value never reaches a kernel
// but the _Send's, and fetching one is an error (the session's).
//
// An unset slot is what makes an input dead: every value a node reads was set by its producer
// before the node became ready, and is released only after its last reader (Note [Slot reuse]).
// A node's own deadness (for its control successors) is a byte per node, kept only by plans of
// a graph with a cond (Plan::control_flow): other plans pay one pointer test per node.

__attribute__((cold)) bool RunState::is_dead(int i) const {
  const int* c = plan_.control_preds.data();
  for (int k = plan_.control_pred_begin[i]; k < plan_.control_pred_begin[i + 1]; ++k) {
    if (dead_[c[k]] != 0) return true;
  }
  const PlanNode& pn = nodes_[i];
  const Tensor* const* in = input_ptrs_ + pn.first_input;
  if (plan_.flows[i] == Plan::kMerge) {
    for (int j = 0; j < pn.num_inputs; ++j) {
      if (!in[j]->is_null()) return false;
    }
    return pn.num_inputs > 0;
  }
  for (int j = 0; j < pn.num_inputs; ++j) {
    if (in[j]->is_null()) return true;
  }
  return false;
}

__attribute__((cold)) bool RunState::complete_flow(int i, OpKernelContext& ctx, Tensor* outputs,
                                                  std::vector<int>* ready) {
  const PlanNode& pn = nodes_[i];
  if (plan_.flows[i] != Plan::kMakesDead || !ctx.status().ok()) return complete(i, ctx, outputs, ready);
  int unset = 0;
  for (int k = 0; k < pn.num_outputs; ++k) unset += outputs[k].is_null() ? 1 : 0;
  if (unset == 0) return complete(i, ctx, outputs, ready);
  // An untaken output of a Switch, or a dead tensor a _Recv received: dead. The others as
  // complete() checks them.
  for (int k = 0; k < pn.num_outputs; ++k) {
    Tensor& t = outputs[k];
    if (t.is_null()) continue;
    if (t.dtype() != output_dtypes_[pn.first_output + k]) {
      fail_output(i, k, t);
      return false;
    }
    if (pn.some_output_unused && plan_.output_uses[pn.first_output + k] == 0) t.reset();
  }
  if (opt_.capture != nullptr) capture_completed(i, ctx, outputs);
  // A _Recv of a dead tensor is dead (for its control successors); a Switch set its other output.
  if (unset == pn.num_outputs) dead_[i] = 1;
  if (aborted_.load(std::memory_order_acquire)) return false;
  release_inputs_and_ready(i, ready);
  return true;
}

__attribute__((cold)) void RunState::complete_dead(int i, std::vector<int>* ready) {
  dead_[i] = 1;
  if (aborted_.load(std::memory_order_acquire)) return;
  release_inputs_and_ready(i, ready);
}

void RunState::capture_completed(int i, const OpKernelContext& ctx, const Tensor* outputs) {
  const PlanNode& pn = nodes_[i];
  std::vector<const Tensor*> inputs(static_cast<std::size_t>(pn.num_inputs));
  for (int j = 0; j < pn.num_inputs; ++j) inputs[j] = &ctx.input(j);
  opt_.capture->completed(i, inputs.data(), pn.num_inputs, outputs, pn.num_outputs);
}

void RunState::fail_output(int i, int k, const Tensor& t) {
  const PlanNode& pn = nodes_[i];
  record_error(errors::internal("{}: kernel produced {} for output {} (expected {})", pn.node->debug_name(),
                                t.is_null() ? "nothing" : dtype_name(t.dtype()), k,
                                dtype_name(output_dtypes_[pn.first_output + k])));
}

std::vector<TraceRecord> RunState::take_trace() {
  std::lock_guard<std::mutex> l(trace_mu_);
  return std::move(trace_);
}

}  // namespace tessera::internal
