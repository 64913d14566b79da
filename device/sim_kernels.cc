// Kernels of the simulated accelerator: every CPU kernel of an op that is not host-only, run on
// the SIM device's compute stream (Note [SIM kernels]).
//
// Note [SIM kernels]
// ~~~~~~~~~~~~~~~~~~
// A SIM kernel is asynchronous and runs the op's CPU kernel as work on the device's compute
// stream, so the executor, the copy streams and the events see the same protocol as on a GPU.
// Inputs must already be in the device's memory: an input that is not is an InternalError naming
// the op (a missing transfer in the partition), which the tests rely on to prove that every
// cross-device edge carries a copy.
//
// Most ops are stream-ordered (Note [Stream-ordered kernels] in core/executor.cc), as a GPU
// kernel is: a stateless op whose shape function gives every output shape from the input shapes
// gets its outputs allocated in device memory on the host, at enqueue time; the CPU kernel then
// runs on the stream over views of the inputs and outputs (it writes host memory, whose results
// are copied into the outputs), and the kernel is done as soon as the work is enqueued. An error
// the CPU kernel finds there fails the step (StreamWork::fail), not the device. Stateful ops
// (variables: their updates must be seen in stream order and under their locks), asynchronous
// ones and ops whose output shapes depend on input values run the whole kernel on the stream and
// are done only once the stream has run it, as before. Ops that only relabel their input's buffer
// (Reshape, ExpandDims, Squeeze, ReshapeToShapeOf) run their CPU kernel at once on the host
// instead, touching no data: the output shares the device buffer, as on a GPU, and stream order still covers it.

// Note [Stream-ordered memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Stream-ordered kernels hold no handle on their memory while their work is queued: the executor
// releases an op's inputs as soon as its consumers are enqueued, and the allocator may hand that
// memory out again at once. That is safe by four rules, the same on SIM and on the GPU (PyTorch's
// caching allocator works this way):
// 1. device memory is taken on the host, in enqueue order, for a stream (kernels: compute stream
//    0, which they all run on; a copy's target: its copy stream), and the caching allocator hands
//    a freed block only to later allocations for that same stream: stream order puts the new
//    user behind every queued use;
// 2. a block used on another stream too is recorded (Device::record_stream: a _Recv's copy target,
//    which compute kernels read next; a GPU Const's cached value): freed, it is cached again only
//    after an event recorded on that stream at the free has completed;
// 3. a copy out of device memory waits on an event of the compute streams recorded when it is
//    asked for (so it sees its producer) and holds its source until it is done;
// 4. memory allocated from inside stream work (a kernel that runs whole on the stream) is fresh,
//    and is freed in stream order (SimMemory; on the GPU, kernels never allocate on the stream).
// tests/stream_order_test.cc checks it with guard patterns: a block freed while a slow kernel
// still reads it and reused at once must never be overwritten before that kernel has run.
#include <cstring>

#include "core/executor.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {
namespace {

// What stream work needs after the kernel is done: views of the inputs and outputs, and the
// step's context fields (their owners outlive the step's stream work).
struct StreamCall {
  OpKernelContext::Params params;
  std::vector<Tensor> inputs;  // unowned views
  std::vector<const Tensor*> input_ptrs;
  std::vector<Tensor> outputs;  // unowned views of the preallocated outputs
};

class SimKernel final : public OpKernel {
 public:
  explicit SimKernel(std::unique_ptr<OpKernel> base) : OpKernel(base->node()), base_(std::move(base)) {
    const OpDef* def = OpRegistry::global().find_op(node().type);
    stream_ordered_ = def != nullptr && def->shape_fn && !def->stateful && node().resource == nullptr &&
                      !base_->is_async();
    if (stream_ordered_) {
      def_ = def;
      spec_.type = node().type;
      spec_.name = node().name;
      spec_.attrs = node().attrs;
    }
  }

  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }  // the host side only enqueues
  void compute(OpKernelContext& ctx) override { ctx.fail(errors::internal("SIM kernels run asynchronously only")); }

  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    Device* device = ctx.device();
    if (device == nullptr || device->type() != "SIM") {
      ctx.fail(errors::internal("a SIM kernel must run on a SIM device"));
      done();
      return;
    }
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).device() != device->name()) {
        ctx.fail(errors::internal("input {} is in the memory of {}, not of {} (missing transfer)", i,
                                  ctx.input(i).device(), device->name()));
        done();
        return;
      }
    }
    Stream& stream = device->compute_stream(0);
    if (stream_ordered_ && ctx.stream_work() != nullptr) {
      std::vector<Shape> shapes;
      if (output_shapes(ctx, &shapes)) return issue(ctx, *device, stream, shapes, std::move(done));
    }
    run_whole(ctx, *device, stream, std::move(done));
  }

 private:
  // The output shapes the op's shape function gives for these inputs; false when one is not
  // fully defined or the function refuses them (the CPU kernel then says why, as on the host).
  bool output_shapes(const OpKernelContext& ctx, std::vector<Shape>* shapes) const {
    std::vector<DType> dtypes;
    std::vector<Shape> in_shapes;
    dtypes.reserve(ctx.num_inputs());
    in_shapes.reserve(ctx.num_inputs());
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      dtypes.push_back(ctx.input(i).dtype());
      in_shapes.push_back(ctx.input(i).shape());
    }
    ShapeContext sc(spec_, node().name, std::move(dtypes), std::move(in_shapes));
    Status s;
    try {
      s = def_->shape_fn(sc);
    } catch (...) {
      return false;
    }
    if (!s.ok() || static_cast<int>(sc.out_shapes_.size()) != ctx.num_outputs()) return false;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      if (!sc.out_shapes_[i].fully_defined() || sc.out_dtypes_[i] != node().output_dtypes[i]) return false;
    }
    *shapes = std::move(sc.out_shapes_);
    return true;
  }

  // Stream-ordered: outputs taken now, the CPU kernel queued over views, done at once.
  void issue(OpKernelContext& ctx, Device& device, Stream& stream, const std::vector<Shape>& shapes,
             std::function<void()> done) {
    auto call = std::make_unique<StreamCall>();
    try {
      for (int i = 0; i < ctx.num_outputs(); ++i) call->outputs.push_back(unowned_view(ctx.allocate_output(i, shapes[i])));
    } catch (...) {
      ctx.fail(status_from_current_exception());  // out of device memory
      done();
      return;
    }
    for (int i = 0; i < ctx.num_inputs(); ++i) call->inputs.push_back(unowned_view(ctx.input(i)));
    for (const Tensor& t : call->inputs) call->input_ptrs.push_back(&t);
    call->params = ctx.params();
    StreamWork* work = ctx.stream_work();
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    std::shared_ptr<StreamCall> shared(std::move(call));
    stream.enqueue([this, call = shared, work, &device, &stream, start] {
      run_on_stream(*call, *work);
      if (call->params.trace != nullptr) trace_stream_span(*call->params.trace, node(), device, stream, start);
    });
    if (StreamRecorder* recorder = work->recorder(); recorder != nullptr) {
      recorder->record(node(), [this, replay = replayable(*shared)](void*, StreamWork& w) { run_on_stream(*replay, w); });
    }
    work->issued(device, stream, node());
    done();
  }

  // `call` for replays (Note [Captured partitions] in core/captured_partition.cc): the same
  // buffers, none of its step's state (the captured step is gone by then).
  static std::shared_ptr<StreamCall> replayable(const StreamCall& call) {
    static CancellationManager never_cancelled;
    auto replay = std::make_shared<StreamCall>();
    replay->params.node = call.params.node;
    replay->params.output_dtypes = call.params.output_dtypes;
    replay->params.num_inputs = call.params.num_inputs;
    replay->params.cancellation = &never_cancelled;
    replay->params.allow_tf32 = call.params.allow_tf32;
    replay->inputs = call.inputs;
    replay->outputs = call.outputs;
    for (const Tensor& t : replay->inputs) replay->input_ptrs.push_back(&t);
    return replay;
  }

  // Runs the CPU kernel on host memory and copies its results into the preallocated outputs.
  void run_on_stream(StreamCall& call, StreamWork& work) const {
    OpKernelContext::Params p = call.params;
    p.device = nullptr;  // the CPU kernel's own allocations are host memory
    p.runner = nullptr;  // and its work stays on this stream (no intra-op shards on the host's pool)
    p.inputs = call.input_ptrs.data();
    p.outputs = nullptr;
    p.stream_work = nullptr;
    p.trace = nullptr;
    OpKernelContext c(p);
    try {
      base_->compute(c);
    } catch (...) {
      c.fail(status_from_current_exception());
    }
    if (!c.status().ok()) return work.fail(c.status());
    for (int i = 0; i < c.num_outputs(); ++i) {
      const Tensor& got = c.output(i);
      Tensor& out = call.outputs[i];
      if (got.is_null() || got.dtype() != out.dtype() || got.shape() != out.shape()) {
        return work.fail(errors::internal("{}: output {} is {} {}, its shape function said {} {}", node().debug_name(), i,
                                          got.is_null() ? "null" : dtype_name(got.dtype()),
                                          got.is_null() ? "" : got.shape().to_string(), dtype_name(out.dtype()),
                                          out.shape().to_string()));
      }
      if (out.bytes() > 0 && got.raw_data() != out.raw_data()) {
        std::memcpy(out.raw_mutable_data(), got.raw_data(), out.bytes());
      }
    }
  }

  // The whole kernel on the stream; done once the stream has run it.
  void run_whole(OpKernelContext& ctx, Device& device, Stream& stream, std::function<void()> done) {
    if (StreamWork* work = ctx.stream_work(); work != nullptr && work->recorder() != nullptr) {
      work->recorder()->unreplayable(node(), "runs whole on its stream (state, or shapes known only as it runs)");
    }
    Device* dev = &device;
    stream.enqueue([this, &ctx, dev, &stream] {
      const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
      try {
        base_->compute(ctx);
        for (int i = 0; i < ctx.num_outputs() && ctx.status().ok(); ++i) {
          Tensor& out = ctx.output(i);
          if (out.is_null() || out.device() == dev->name()) continue;
          Tensor moved = ctx.allocate_temp(out.dtype(), out.shape());
          if (out.bytes() > 0) std::memcpy(moved.raw_mutable_data(), out.raw_data(), out.bytes());
          out = std::move(moved);
        }
      } catch (...) {
        ctx.fail(status_from_current_exception());
      }
      ctx.trace_on_stream(*dev, stream, start);
    });
    stream.then([&ctx, dev, done = std::move(done)](Status s) {
      if (!s.ok()) {
        // The stream is in error (sticky, as a CUDA fault is): the device is done for, and the
        // failure names this op, whose work it was found after.
        dev->fail_after(ctx.node().debug_name(), s).ignore();  // the op fails with the stream's own error
        ctx.fail(s);
      }
      done();
    });
  }

  std::unique_ptr<OpKernel> base_;
  bool stream_ordered_ = false;
  const OpDef* def_ = nullptr;  // when stream_ordered_
  NodeSpec spec_;               // what the shape function reads (type, name, attrs)
};

// A CPU kernel that only relabels its input's buffer, run on the host over the device tensors
// (Note [SIM kernels]): the output is a view of the input in SIM memory. Thread-safe as the CPU
// kernel is.
class SimRelabelKernel final : public OpKernel {
 public:
  explicit SimRelabelKernel(const Node& n) : OpKernel(n) {
    base_ = OpRegistry::global().create_kernel(n, "CPU").value_or_raise();
  }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    Device* device = ctx.device();
    if (device == nullptr || device->type() != "SIM") {
      return ctx.fail(errors::internal("a SIM kernel must run on a SIM device"));
    }
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).device() != device->name()) {
        return ctx.fail(errors::internal("input {} is in the memory of {}, not of {} (missing transfer)", i,
                                         ctx.input(i).device(), device->name()));
      }
    }
    base_->compute(ctx);
    for (int i = 0; i < ctx.num_outputs() && ctx.status().ok(); ++i) {
      if (ctx.output(i).device() != device->name()) {
        ctx.fail(errors::internal("output {} is not a view of an input in {}", i, device->name()));
      }
    }
  }

 private:
  std::unique_ptr<OpKernel> base_;
};

TESSERA_REGISTER_KERNEL("Reshape", "SIM", SimRelabelKernel);
TESSERA_REGISTER_KERNEL("ExpandDims", "SIM", SimRelabelKernel);
TESSERA_REGISTER_KERNEL("Squeeze", "SIM", SimRelabelKernel);
TESSERA_REGISTER_KERNEL("ReshapeToShapeOf", "SIM", SimRelabelKernel);
TESSERA_REGISTER_KERNEL("StopGradient", "SIM", SimRelabelKernel);  // core/nn_ops.cc: Identity's kernel

struct RegisterSimKernels {
  RegisterSimKernels() {
    OpRegistry::global().register_kernel_adapter(
        "SIM", "CPU", [](std::unique_ptr<OpKernel> base) -> std::unique_ptr<OpKernel> {
          return std::make_unique<SimKernel>(std::move(base));
        });
  }
} register_sim_kernels;

}  // namespace
}  // namespace tessera::internal
