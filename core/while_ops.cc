// Note [While loops]
// ~~~~~~~~~~~~~~~~~~
// ops::while_loop is TensorFlow's tf.while_loop built as TensorFlow 2 builds it (a functional
// While op), not as TensorFlow 1's executor runs it (frames and iterations of Enter, Merge,
// Switch, NextIteration and Exit in the step's own dataflow):
//   * The cond and body functions run with a WhileFrame as the graph's current one
//     (GraphImpl::while_frame_). The loop variables are _LoopArg nodes of the frame; an op they
//     make that reads a tensor from outside the frame reads a capture instead (a _LoopArg made once
//     per tensor, GraphImpl::capture_into_frame); a control input from outside becomes the
//     While's. These nodes are never part of a session's step: nothing outside the frame may read
//     them (InvalidArgumentError), and a _LoopArg's kernel fails when a step runs it unfed.
//   * The While node reads the initial values and the captured tensors, and runs the frame's
//     nodes as steps of their own (executor plans fed with the arguments, built on the While's
//     first run): the cond's step, then, while it says true, the body's step and the cond's again.
//     Its kernel is asynchronous, so a body that waits (a dequeue) holds no thread, and the outer
//     step's cancellation cancels the iteration in flight.
//   * Iterations run one after the other (TF1 may overlap parallel_iterations of them).
//   * The loop runs on one host: the body's ops and the While run on the CPU of the task they
//     request (a request for an accelerator means that task's CPU), placed with the first loop
//     variable. A cond inside the body, or a loop inside it, work as anywhere. On a cluster, a
//     step's While brings its loop's nodes into its task's partition (append_loop_nodes in
//     core/graph_partition.h), and the frame crosses the wire as attrs of those nodes (Note
//     [While loops on the wire] in distributed/wire.cc).
//
// Gradients (as TF2's, but recomputing instead of accumulating): the While outputs, besides the
// final values, its iteration count and, once a gradient asked for it (WhileFrame::keep_history),
// each loop variable's value at the start of every iteration, stacked (none for one the body only
// writes: Note [Tensor arrays]). The gradient, another loop, runs the iterations backwards: each
// copies the body's nodes, fed with the values its iteration started with, and takes their gradient
// against the gradients of the next one. The gradients of captured tensors are summed over the
// iterations. Recomputing the body means a body with a stateful op (a random op, an assign) has
// no gradient (InvalidArgumentError), where TF's accumulators would replay its values.
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/executor.h"
#include "core/gradients.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_array_ops.h"
#include "tessera/control_flow.h"
#include "tessera/gradients.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

Status loop_arg_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs");
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

// A While's outputs: the final value of each loop variable, the iteration count, then each loop
// variable's history (its value at the start of each iteration, stacked: [iterations, shape...]).
Status while_shape(ShapeContext& c) {
  const auto& dtypes = c.attr<std::vector<DType>>("T");
  const auto& shapes = c.attr<std::vector<Shape>>("shapes");
  if (dtypes.empty() || dtypes.size() != shapes.size()) return c.invalid("needs one dtype and shape per loop variable");
  for (std::size_t k = 0; k < dtypes.size(); ++k) c.add_output(dtypes[k], shapes[k]);
  c.add_output(DType::Int32, Shape{});
  for (std::size_t k = 0; k < dtypes.size(); ++k) {
    Shape stacked = Shape::unknown();
    if (!shapes[k].unknown_rank()) {
      std::vector<int64_t> dims{-1};
      for (int64_t d : shapes[k].dims()) dims.push_back(d);
      stacked = Shape(dims);
    }
    c.add_output(dtypes[k], stacked);
  }
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"_LoopArg", loop_arg_shape, /*stateful=*/false, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"While", while_shape, /*stateful=*/true, /*host_only=*/true, /*host_of_request=*/true});

// A step that runs a _LoopArg unfed reads a tensor of a loop's body from outside the loop.
class LoopArgOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const WhileFrame* frame = ctx.node().while_frame;
    ctx.fail(ErrorCode::kInvalidArgument,
             "a tensor of the body of while loop '{}' has a value only inside the loop: fetch the loop's results",
             frame != nullptr ? frame->name : std::string("?"));
  }
};
TESSERA_REGISTER_KERNEL("_LoopArg", "CPU", LoopArgOp);

// Whether `shape` (a value's) is one `invariant` allows.
bool shape_allows(const Shape& invariant, const Shape& shape) {
  if (invariant.unknown_rank()) return true;
  if (invariant.rank() != shape.rank()) return false;
  for (int d = 0; d < shape.rank(); ++d) {
    if (invariant.dim(d) >= 0 && invariant.dim(d) != shape.dim(d)) return false;
  }
  return true;
}

// [n, shape...] of the n tensors of `values` (of one dtype and shape, else an error naming
// loop variable k).
StatusOr<Tensor> stack_history(const std::vector<Tensor>& values, DType dtype, const Shape& invariant, int k) {
  std::vector<int64_t> dims{static_cast<int64_t>(values.size())};
  if (values.empty()) {
    // The invariant's rank where it has one (an unknown dim as 0: the history is empty anyway).
    if (!invariant.unknown_rank()) {
      for (int64_t d : invariant.dims()) dims.push_back(d < 0 ? 0 : d);
    }
    return Tensor(dtype, Shape(dims));
  }
  const Shape& each = values.front().shape();
  for (const Tensor& v : values) {
    if (v.shape() != each) {
      return errors::invalid_argument(
          "loop variable {} changes shape between iterations ({} then {}): its gradient needs one shape", k,
          each.to_string(), v.shape().to_string());
    }
  }
  if (dtype == DType::String) {
    return errors::unimplemented("loop variable {} is a string tensor: its history is not kept", k);
  }
  for (int64_t d : each.dims()) dims.push_back(d);
  Tensor out(dtype, Shape(dims));
  auto* dst = static_cast<char*>(out.raw_mutable_data());
  for (const Tensor& v : values) {
    std::memcpy(dst, v.raw_data(), v.bytes());
    dst += v.bytes();
  }
  return out;
}

class WhileOp final : public OpKernel {
 public:
  explicit WhileOp(const Node& node) : OpKernel(node) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }

  void compute(OpKernelContext& ctx) override { ctx.fail(ErrorCode::kInternal, "While runs asynchronously"); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override;

  // The cond's and the body's plans, built on first use (and again after the graph changed).
  struct Plans {
    std::shared_ptr<const Plan> cond;
    std::shared_ptr<const Plan> body;
    // Per loop variable: only written to by the body (write_only_loop_variable), so it keeps no
    // history.
    std::vector<char> write_only;
  };
  StatusOr<Plans> plans();

 private:
  std::mutex mu_;
  Plans plans_;                                                    // guarded by mu_
  std::unordered_map<const Node*, std::unique_ptr<OpKernel>> kernels_;  // guarded by mu_
};

StatusOr<WhileOp::Plans> WhileOp::plans() {
  const WhileFrame* frame = node().loop;
  if (frame == nullptr) {
    return errors::internal("the While has no loop (its body's nodes did not come with it)");
  }
  // The frame's graph: this node may be a partition's copy of the While (core/graph_partition.h).
  GraphImpl& g = *frame->args.front()->graph;
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t version = g.version();
  if (plans_.cond != nullptr && plans_.cond->graph_version == version) return plans_;
  std::shared_lock<std::shared_mutex> gl(g.mutex());
  std::vector<Endpoint> feeds;
  for (Node* a : frame->args) feeds.push_back({a, 0});
  for (Node* a : frame->capture_args) feeds.push_back({a, 0});
  auto make_kernel = [this](const Node& n) -> StatusOr<OpKernel*> {
    auto it = kernels_.find(&n);
    if (it != kernels_.end()) return it->second.get();
    auto k = OpRegistry::global().create_kernel(n, "CPU");
    if (!k.ok()) return k.status();
    OpKernel* raw = k.value().get();
    kernels_.emplace(&n, std::move(k).value());
    return raw;
  };
  auto endpoint = [](const Output& o) { return Endpoint{o.node(), o.index()}; };
  std::vector<Endpoint> body;
  for (const Output& o : frame->body) body.push_back(endpoint(o));
  auto cond = build_plan(g, feeds, {endpoint(frame->cond)}, {}, make_kernel);
  if (!cond.ok()) return cond.status().with_prefix("the loop's cond: ");
  auto step = build_plan(g, feeds, body, {}, make_kernel);
  if (!step.ok()) return step.status().with_prefix("the loop's body: ");
  plans_.cond = std::move(cond).value();
  plans_.body = std::move(step).value();
  plans_.write_only.clear();
  for (const Node* a : frame->args) plans_.write_only.push_back(write_only_loop_variable(*frame, a) ? 1 : 0);
  return plans_;
}

// One run of a While: its iterations, each a step of the cond's plan then (while it says true) a
// step of the body's. Deletes itself when the loop is over.
class Loop {
 public:
  Loop(OpKernelContext& ctx, std::function<void()> done, WhileOp::Plans plans)
      : ctx_(ctx),
        done_(std::move(done)),
        plans_(std::move(plans)),
        frame_(*ctx.node().loop),
        shapes_(ctx.node().attr<std::vector<Shape>>("shapes")) {}

  void start() {
    const int n = static_cast<int>(frame_.args.size());
    const int m = static_cast<int>(frame_.captures.size());
    for (int k = 0; k < n; ++k) vars_.push_back(ctx_.input(k));
    for (int k = 0; k < m; ++k) captures_.push_back(ctx_.input(n + k));
    if (ctx_.num_inputs() > n + m) {
      const Tensor& limit = ctx_.input(n + m);
      if (limit.shape().rank() != 0 || (limit.dtype() != DType::Int32 && limit.dtype() != DType::Int64)) {
        return finish(errors::invalid_argument("maximum_iterations must be an int32 or int64 scalar, got {} {}",
                                               dtype_name(limit.dtype()), limit.shape().to_string()));
      }
      max_iterations_ = limit.dtype() == DType::Int32 ? limit.scalar<int32_t>() : limit.scalar<int64_t>();
    }
    keep_history_ = frame_.keep_history.load(std::memory_order_acquire);
    if (keep_history_) history_.resize(static_cast<std::size_t>(n));
    // The callback holds what it touches: the loop may end (and be gone) while it runs, even
    // inside its cancel() (a step that ends there goes on to end the loop).
    token_ = ctx_.cancellation().register_callback([shared = shared_](const Status& reason) {
      std::shared_ptr<Step> step;
      {
        std::lock_guard<std::mutex> l(shared->mu);
        shared->cancelled = reason;
        step = shared->step;
      }
      if (step != nullptr) step->state.cancel(reason);
    });
    if (token_ == CancellationManager::kInvalidToken) return finish(ctx_.cancellation().reason());
    run();
  }

 private:
  // Runs steps until one is still running when run_async returns (its callback goes on) or the
  // loop is over.
  void run() {
    for (;;) {
      if (in_cond_ && max_iterations_ >= 0 && iterations_ >= max_iterations_) return finish(Status());
      RunState::Options o;
      o.runner = ctx_.params().runner;
      o.resources = &ctx_.resources();
      o.private_resources = &ctx_.private_resources();
      o.step_id = ctx_.step_id();
      o.allow_tf32 = ctx_.allow_tf32();
      auto step = std::make_shared<Step>(in_cond_ ? plans_.cond : plans_.body, o);
      int feed = 0;
      // The body's step gets the loop variables no history keeps as its only reference to them,
      // so a write (their only reader) may take over their buffers (Note [Tensor arrays] in
      // core/tensor_array_ops.cc); the body's results replace them when it ends.
      for (std::size_t k = 0; k < vars_.size(); ++k) {
        if (!in_cond_ && !keeps_history(k)) {
          step->state.set_feed(feed++, std::move(vars_[k]));
        } else {
          step->state.set_feed(feed++, vars_[k]);
        }
      }
      for (const Tensor& c : captures_) step->state.set_feed(feed++, c);
      {
        std::lock_guard<std::mutex> l(shared_->mu);
        if (!shared_->cancelled.ok()) return finish(shared_->cancelled);
        shared_->step = step;
      }
      phase_.store(kRunning, std::memory_order_relaxed);
      step->state.run_async([this](Status s) {
        step_status_ = std::move(s);
        if (phase_.exchange(kDone, std::memory_order_acq_rel) == kRunning) return;  // run() goes on
        if (after_step()) run();
      });
      if (phase_.exchange(kReturned, std::memory_order_acq_rel) == kRunning) return;  // the callback goes on
      if (!after_step()) return;
    }
  }

  // The step is over: takes its results. False when the loop is over (finished).
  bool after_step() {
    std::shared_ptr<Step> step;
    {
      std::lock_guard<std::mutex> l(shared_->mu);
      step = std::move(shared_->step);
    }
    bool more = false;
    Status s = take_results(step->state, &more);
    // Gone before the loop ends: the session (and so the plan's kernels) may go as soon as it has.
    step.reset();
    if (!s.ok() || !more) {
      finish(s);
      return false;
    }
    return true;
  }

  // The results of the step that just ended: the cond's, whether the loop goes on (`more`); the
  // body's, the next values of the loop variables.
  Status take_results(RunState& step, bool* more) {
    if (!step_status_.ok()) {
      return step_status_.with_prefix(fmt::format("{} of iteration {}: ", in_cond_ ? "cond" : "body", iterations_));
    }
    if (in_cond_) {
      auto pred = step.take_fetch(0);
      if (!pred.ok()) return pred.status();
      const Tensor& p = pred.value();
      if (p.dtype() != DType::Bool || p.shape().rank() != 0) {
        return errors::invalid_argument("the cond must return a bool scalar, got {} {}", dtype_name(p.dtype()),
                                        p.shape().to_string());
      }
      *more = p.scalar<bool>();
      in_cond_ = !*more;
      return Status();
    }
    const auto& shapes = shapes_;
    for (std::size_t k = 0; k < vars_.size(); ++k) {
      auto v = step.take_fetch(static_cast<int>(k));
      if (!v.ok()) return v.status();
      if (!shape_allows(shapes[k], v.value().shape())) {
        return errors::invalid_argument(
            "loop variable {} has shape {} after iteration {}, which its shape invariant {} does not allow: "
            "pass shape_invariants",
            k, v.value().shape().to_string(), iterations_, shapes[k].to_string());
      }
      if (keeps_history(k)) history_[k].push_back(std::move(vars_[k]));
      vars_[k] = std::move(v).value();
    }
    ++iterations_;
    in_cond_ = true;
    *more = true;
    return Status();
  }

  void finish(const Status& s) {
    if (token_ != CancellationManager::kInvalidToken) ctx_.cancellation().deregister_callback(token_);
    if (!s.ok()) {
      ctx_.fail(s);
    } else {
      const int n = static_cast<int>(vars_.size());
      const auto& shapes = shapes_;
      for (int k = 0; k < n; ++k) ctx_.set_output(k, std::move(vars_[static_cast<std::size_t>(k)]));
      ctx_.set_output(n, Tensor::scalar<int32_t>(static_cast<int32_t>(iterations_)));
      for (int k = 0; k < n; ++k) {
        const DType dtype = ctx_.output_dtype(k);
        // Without a gradient that reads it, each history is empty ([0, shape...]).
        StatusOr<Tensor> h =
            stack_history(keep_history_ ? history_[static_cast<std::size_t>(k)] : std::vector<Tensor>{}, dtype,
                          shapes[static_cast<std::size_t>(k)], k);
        if (!h.ok()) {
          ctx_.fail(h.status());
          break;
        }
        ctx_.set_output(n + 1 + k, std::move(h).value());
      }
    }
    std::function<void()> done = std::move(done_);
    delete this;
    done();
  }

  bool keeps_history(std::size_t k) const { return keep_history_ && plans_.write_only[k] == 0; }

  enum : int { kRunning, kDone, kReturned };
  OpKernelContext& ctx_;
  std::function<void()> done_;
  WhileOp::Plans plans_;
  const WhileFrame& frame_;
  const std::vector<Shape>& shapes_;  // the loop variables' invariants (the node's attr)
  std::vector<Tensor> vars_;
  std::vector<Tensor> captures_;
  std::vector<std::vector<Tensor>> history_;
  bool keep_history_ = false;
  bool in_cond_ = true;
  int64_t iterations_ = 0;
  int64_t max_iterations_ = -1;
  Status step_status_;
  std::atomic<int> phase_{kRunning};
  CancellationManager::Token token_ = CancellationManager::kInvalidToken;
  // A step of the loop, with its plan: the cancellation callback may hold it after the loop (and
  // the session, and so the While's kernel that keeps the plans) is gone.
  struct Step {
    Step(std::shared_ptr<const Plan> p, RunState::Options o) : plan(std::move(p)), state(with_plan(o, plan.get())) {}
    static RunState::Options with_plan(RunState::Options o, const Plan* p) {
      o.plan = p;
      return o;
    }
    std::shared_ptr<const Plan> plan;
    RunState state;
  };
  // What the loop shares with its cancellation callback.
  struct Shared {
    std::mutex mu;
    std::shared_ptr<Step> step;  // guarded by mu: the step in flight
    Status cancelled;            // guarded by mu
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

void WhileOp::compute_async(OpKernelContext& ctx, std::function<void()> done) {
  auto p = plans();
  if (!p.ok()) {
    ctx.fail(p.status());
    return done();
  }
  (new Loop(ctx, std::move(done), std::move(p).value()))->start();
}

TESSERA_REGISTER_KERNEL("While", "CPU", WhileOp);

bool differentiable_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Float16 || d == DType::BFloat16;
}

// Whether `type` may run again when the gradient recomputes a body: it has no state, or only
// reads one.
bool recomputable(const Node& n) {
  if (n.def == nullptr || !n.def->stateful) return true;
  return n.type == "_ReadVariable" || n.type == "While" || n.type == "VariableV2";
}

using Grads = std::vector<Output>;

// Note [While loops]: the backward loop, over (i, the loop variables' gradients, the captured
// tensors' summed gradients).
Grads while_grad(const GradContext& c) {
  const Node& fwd = c.node();
  const WhileFrame& frame = *fwd.loop;
  GraphImpl& g = *fwd.graph;
  const int n = static_cast<int>(frame.args.size());
  const int m = static_cast<int>(frame.captures.size());
  for (const Node* b : frame.nodes) {
    if (!recomputable(*b)) {
      throw InvalidArgumentError(fmt::format(
          "gradient of while loop '{}': its body has the stateful op {}, which the gradient would run again "
          "(it recomputes the body); a body with a gradient may read variables but not change them or draw "
          "random numbers",
          frame.name, b->debug_name()));
    }
  }
  frame.keep_history.store(true, std::memory_order_release);
  std::vector<int> dvars, dcaps;  // the floating-point loop variables and captures
  for (int k = 0; k < n; ++k) {
    if (differentiable_dtype(frame.args[static_cast<std::size_t>(k)]->output_dtypes[0])) dvars.push_back(k);
  }
  // The tensors this While captures: its own inputs (a gradient's copy of a loop inside a loop
  // reads the copies of what the original read, frame.captures).
  std::vector<Output> captured;
  for (int j = 0; j < m; ++j) captured.push_back(c.input(n + j));
  for (int j = 0; j < m; ++j) {
    if (differentiable_dtype(captured[static_cast<std::size_t>(j)].dtype())) dcaps.push_back(j);
  }
  Grads result(static_cast<std::size_t>(fwd.inputs.size()));
  if (dvars.empty() && dcaps.empty()) return result;

  std::vector<Output> init{c.output(n)};
  for (int k : dvars) init.push_back(c.grad(k));
  for (int j : dcaps) init.push_back(ops::zeros_like(captured[static_cast<std::size_t>(j)]));
  std::vector<Shape> invariants{Shape{}};
  for (int k : dvars) invariants.push_back(frame.args[static_cast<std::size_t>(k)]->output_shapes[0]);
  for (int j : dcaps) invariants.push_back(captured[static_cast<std::size_t>(j)].shape());

  ops::WhileOptions options;
  options.name = last_name_component(frame.name) + "_grad";
  options.shape_invariants = invariants;
  const std::vector<Output> out = ops::while_loop(
      [](const std::vector<Output>& v) { return ops::greater(v[0], ops::zeros_like(v[0])); },
      [&](const std::vector<Output>& v) {
        const Output i = ops::sub(v[0], ops::ones_like(v[0]));
        // The values iteration i started with, and the body's nodes copied over them.
        std::unordered_map<const Node*, std::vector<Output>> copies;
        std::vector<Output> xs(static_cast<std::size_t>(n));
        for (int k = 0; k < n; ++k) {
          xs[static_cast<std::size_t>(k)] = ops::gather(c.output(n + 1 + k), i);
          copies[frame.args[static_cast<std::size_t>(k)]] = {xs[static_cast<std::size_t>(k)]};
        }
        std::vector<Output> caps(static_cast<std::size_t>(m));
        for (int j = 0; j < m; ++j) {
          caps[static_cast<std::size_t>(j)] =
              g.capture_into_frame(captured[static_cast<std::size_t>(j)], frame.name + " gradient").value_or_raise();
          copies[frame.capture_args[static_cast<std::size_t>(j)]] = {caps[static_cast<std::size_t>(j)]};
        }
        auto copied = [&](const Endpoint& e) { return copies.at(e.node)[static_cast<std::size_t>(e.index)]; };
        for (const Node* b : frame.nodes) {
          if (copies.count(b)) continue;
          if (b->type == "_LoopArg") continue;  // an argument of a loop inside this one
          NodeSpec spec{b->type, last_name_component(b->name)};
          for (const Endpoint& e : b->inputs) spec.inputs.push_back(copied(e));
          spec.attrs = b->attrs;
          spec.resource = b->resource;
          spec.loop = b->loop;
          for (const Node* dep : b->control_inputs) {
            if (copies.count(dep)) spec.extra_control_inputs.push_back(copies.at(dep)[0].op());
          }
          Node* made = g.add_node(std::move(spec));
          std::vector<Output> outs;
          for (int o = 0; o < static_cast<int>(made->output_dtypes.size()); ++o) outs.emplace_back(made, o);
          copies[b] = std::move(outs);
        }
        std::vector<Output> ys, dys, wrt;
        for (std::size_t t = 0; t < dvars.size(); ++t) {
          const Output& r = frame.body[static_cast<std::size_t>(dvars[t])];
          ys.push_back(copies.count(r.node()) ? copied({r.node(), r.index()}) : r);
          dys.push_back(v[1 + t]);
        }
        for (int k : dvars) wrt.push_back(xs[static_cast<std::size_t>(k)]);
        for (int j : dcaps) wrt.push_back(caps[static_cast<std::size_t>(j)]);
        const std::vector<Output> dx = gradients(ys, wrt, dys);
        std::vector<Output> next{i};
        for (std::size_t t = 0; t < dvars.size(); ++t) {
          if (!dx[t].is_null()) {
            next.push_back(dx[t]);
          } else {
            // (A loop variable the body only writes has no history to shape zeros like.)
            const bool write_only = write_only_loop_variable(frame, frame.args[static_cast<std::size_t>(dvars[t])]);
            next.push_back(ops::zeros_like(write_only ? v[1 + t] : wrt[t]));
          }
        }
        for (std::size_t t = 0; t < dcaps.size(); ++t) {
          const Output& sum = v[1 + dvars.size() + t];
          const Output& d = dx[dvars.size() + t];
          next.push_back(d.is_null() ? ops::identity(sum) : ops::add(sum, d));
        }
        return next;
      },
      init, options);
  for (std::size_t t = 0; t < dvars.size(); ++t) result[static_cast<std::size_t>(dvars[t])] = out[1 + t];
  for (std::size_t t = 0; t < dcaps.size(); ++t) {
    result[static_cast<std::size_t>(n + dcaps[t])] = out[1 + dvars.size() + t];
  }
  return result;
}

TESSERA_REGISTER_GRADIENT("While", while_grad);

// `name`, or name_1, name_2, ...: the first whose op `marker` (relative to it) is not in the graph
// yet, under the current name scope.
std::string unique_loop_scope(const GraphImpl& g, const std::string& name, const std::string& marker) {
  const std::string outer = g.name_scope_.empty() ? std::string() : g.name_scope_ + "/";
  for (int k = 0;; ++k) {
    std::string candidate = k == 0 ? name : fmt::format("{}_{}", name, k);
    if (g.find(outer + candidate + "/" + marker) == nullptr) return candidate;
  }
}

// Makes `frame` the graph's current one while it lives, outside any branch of a cond and any
// control_dependencies scope (the frame's ops run in the loop's own steps).
class InFrame {
 public:
  InFrame(GraphImpl& g, WhileFrame* frame)
      : g_(g), frame_(g.while_frame_), branch_(g.cond_branch_), controls_(std::move(g.control_scope_)) {
    g.while_frame_ = frame;
    g.cond_branch_ = nullptr;
    g.control_scope_.clear();
  }
  ~InFrame() {
    g_.while_frame_ = frame_;
    g_.cond_branch_ = branch_;
    g_.control_scope_ = std::move(controls_);
  }
  InFrame(const InFrame&) = delete;
  InFrame& operator=(const InFrame&) = delete;

 private:
  GraphImpl& g_;
  WhileFrame* frame_;
  CondBranch* branch_;
  std::vector<Node*> controls_;
};

}  // namespace
}  // namespace internal

namespace ops {

std::vector<Output> while_loop(const LoopCondFn& cond, const LoopBodyFn& body, const std::vector<Output>& loop_vars,
                               const WhileOptions& options) {
  using internal::GraphImpl;
  using internal::WhileFrame;
  if (loop_vars.empty()) throw InvalidArgumentError("while_loop: no loop variables");
  if (!cond || !body) throw InvalidArgumentError("while_loop: cond and body must be callable");
  GraphImpl& g = *internal::checked_node(loop_vars[0], "while_loop (loop_vars)")->graph;
  for (std::size_t k = 0; k < loop_vars.size(); ++k) {
    internal::Node* v = internal::checked_node(loop_vars[k], "while_loop (loop_vars)");
    if (v->graph != &g) throw InvalidArgumentError(fmt::format("while_loop: loop_vars[{}] is from another graph", k));
  }
  if (!options.shape_invariants.empty() && options.shape_invariants.size() != loop_vars.size()) {
    throw InvalidArgumentError(fmt::format("while_loop: {} shape_invariants for {} loop variables",
                                           options.shape_invariants.size(), loop_vars.size()));
  }
  const std::string name = options.name.empty() ? std::string("while") : options.name;
  GraphScope scope = g.owner->name_scope(internal::unique_loop_scope(g, name, "loop_var"));
  const std::string full = g.name_scope_;

  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  for (std::size_t k = 0; k < loop_vars.size(); ++k) {
    dtypes.push_back(loop_vars[k].dtype());
    const Shape s = options.shape_invariants.empty() ? loop_vars[k].shape() : options.shape_invariants[k];
    if (!options.shape_invariants.empty() && !loop_vars[k].shape().compatible_with(s)) {
      throw InvalidArgumentError(fmt::format("while '{}': loop variable {} has shape {}, which its shape invariant {} "
                                             "does not allow",
                                             full, k, loop_vars[k].shape().to_string(), s.to_string()));
    }
    shapes.push_back(s);
  }

  auto owned = std::make_unique<WhileFrame>();
  WhileFrame* frame = owned.get();
  frame->outer = g.while_frame_;
  frame->name = full;
  g.while_frames_.push_back(std::move(owned));
  {
    internal::InFrame in(g, frame);
    std::vector<Output> args;
    for (std::size_t k = 0; k < loop_vars.size(); ++k) {
      NodeSpec arg{"_LoopArg", "loop_var"};
      arg.attrs["dtype"] = dtypes[k];
      arg.attrs["shape"] = shapes[k];
      internal::Node* a = g.add_node(std::move(arg));
      frame->args.push_back(a);
      args.emplace_back(a, 0);
    }
    Output p;
    {
      GraphScope cs = g.owner->name_scope("cond");
      p = cond(args);
    }
    if (p.is_null() || p.node()->graph != &g) {
      throw InvalidArgumentError(fmt::format("while '{}': cond returned a null tensor or one of another graph", full));
    }
    if (p.dtype() != DType::Bool || (!p.shape().unknown_rank() && p.shape().rank() != 0)) {
      throw InvalidArgumentError(fmt::format("while '{}': cond must return a bool scalar, got {} {}", full,
                                             dtype_name(p.dtype()), p.shape().to_string()));
    }
    if (p.node()->while_frame != frame) p = identity(p);  // an outside tensor: its capture
    std::vector<Output> results;
    {
      GraphScope bs = g.owner->name_scope("body");
      results = body(args);
    }
    if (results.size() != loop_vars.size()) {
      throw InvalidArgumentError(fmt::format("while '{}': body returned {} results for {} loop variables", full,
                                             results.size(), loop_vars.size()));
    }
    for (std::size_t k = 0; k < results.size(); ++k) {
      Output& r = results[k];
      if (r.is_null() || r.node()->graph != &g) {
        throw InvalidArgumentError(fmt::format("while '{}': body result {} is null or of another graph", full, k));
      }
      if (r.dtype() != dtypes[k]) {
        throw InvalidArgumentError(fmt::format("while '{}': body result {} is {}, loop variable {} is {}", full, k,
                                               dtype_name(r.dtype()), k, dtype_name(dtypes[k])));
      }
      if (!r.shape().compatible_with(shapes[k])) {
        throw InvalidArgumentError(fmt::format(
            "while '{}': loop variable {} has shape {} before the loop but {} after an iteration: pass "
            "shape_invariants to allow it",
            full, k, shapes[k].to_string(), r.shape().to_string()));
      }
      if (r.node()->while_frame != frame) r = identity(r);  // an outside tensor: its capture
    }
    frame->cond = p;
    frame->body = results;
  }

  NodeSpec spec{"While", "While"};
  spec.inputs = loop_vars;
  for (const Output& c : frame->captures) spec.inputs.push_back(c);
  if (!options.maximum_iterations.is_null()) spec.inputs.push_back(options.maximum_iterations);
  spec.attrs["T"] = dtypes;
  spec.attrs["shapes"] = shapes;
  for (internal::Node* dep : frame->outer_controls) spec.extra_control_inputs.emplace_back(dep);
  spec.loop = frame;
  GraphScope with_loop = g.owner->colocate_with(Operation(frame->args.front()));
  internal::Node* w = g.add_node(std::move(spec));
  std::vector<Output> out;
  for (std::size_t k = 0; k < loop_vars.size(); ++k) out.emplace_back(w, static_cast<int>(k));
  return out;
}

Output while_loop(const std::function<Output(Output)>& cond, const std::function<Output(Output)>& body,
                  Output loop_var, const WhileOptions& options) {
  if (!cond || !body) throw InvalidArgumentError("while_loop: cond and body must be callable");
  return while_loop([&](const std::vector<Output>& v) { return cond(v[0]); },
                    [&](const std::vector<Output>& v) { return std::vector<Output>{body(v[0])}; }, {loop_var},
                    options)[0];
}

}  // namespace ops
}  // namespace tessera
