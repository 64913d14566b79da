// Note [Send and Recv]
// ~~~~~~~~~~~~~~~~~~~~
// A _Recv waits on the step's Rendezvous holding no thread (it is an async kernel), then moves
// the tensor into its partition's memory on the copy streams: host to device on the destination's
// host_to_device stream, device to host on the source's device_to_host stream (after an event of
// the source's compute streams: the producer may still be queued there), device to device peer to
// peer on the destination's host_to_device stream where the devices allow it (after the same
// event), else through host memory. Both streams are separate from the compute streams, so copies overlap
// compute. A _Recv from another task receives into host memory (it runs on the task's CPU) and
// checks that what arrived is the dtype and shape the master said it would be. A dead tensor (an
// untaken branch of a cond) travels as an unset one and makes the _Recv's output dead.
#include "core/sendrecv_ops.h"

#include "core/graph_partition.h"
#include "core/executor.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {
namespace {

bool is_control(const Node& node) {
  const std::string& t = node.attr<std::string>("tensor_name");
  return !t.empty() && t[0] == '^';
}

RendezvousKey key_from_attrs(const Node& node) {
  return RendezvousKey::named(RendezvousKey::name_of(node.attr<std::string>("send_device"),
                                                     node.attr<std::string>("recv_device"),
                                                     node.attr<std::string>("tensor_name")));
}

Status no_rendezvous(const Node& node) {
  return errors::internal("{}: runs only in a partitioned step (one with a rendezvous)", node.debug_name());
}

// Hands its input (a token for a control transfer) to the step's rendezvous.
class SendOp final : public OpKernel {
 public:
  SendOp(const Node& node, RendezvousKey key) : OpKernel(node), key_(std::move(key)), control_(is_control(node)) {}
  explicit SendOp(const Node& node) : SendOp(node, key_from_attrs(node)) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    if (ctx.rendezvous() == nullptr) return ctx.fail(no_rendezvous(node()));
    // A dead input (Note [Dead tensors] in executor.cc) goes as an unset tensor: the _Recv's
    // output is dead too.
    Tensor value = ctx.dead_input() ? Tensor() : control_ ? Tensor::scalar<bool>(true) : ctx.input(0);
    Status s = ctx.rendezvous()->send(key_, std::move(value));
    if (!s.ok()) ctx.fail(s);
  }

 private:
  const RendezvousKey key_;
  const bool control_;
};

// Waits for the matching _Send, then brings the tensor into this partition's memory.
class RecvOp final : public OpKernel {
 public:
  RecvOp(const Node& node, RendezvousKey key, Device* src, Device* dst)
      : OpKernel(node), key_(std::move(key)), control_(is_control(node)), src_(src), dst_(dst) {}
  explicit RecvOp(const Node& node) : RecvOp(node, key_from_attrs(node), nullptr, nullptr) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override { ctx.fail(errors::internal("_Recv runs asynchronously only")); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    if (ctx.rendezvous() == nullptr) {
      ctx.fail(no_rendezvous(node()));
      return done();
    }
    ctx.rendezvous()->recv_async(key_, &ctx.cancellation(),
                                 [this, &ctx, done = std::move(done)](const Status& s, Tensor t) mutable {
                                   if (!s.ok()) {
                                     ctx.fail(s);
                                     return done();
                                   }
                                   deliver(ctx, std::move(t), std::move(done));
                                 });
  }

 private:
  using Done = std::function<void()>;

  void deliver(OpKernelContext& ctx, Tensor t, Done done) const {
    if (t.is_null()) return done();  // dead: the output stays unset (Note [Dead tensors])
    if (key_.slot < 0 && !control_) {  // from another task: what the master said would come?
      const DType want = node().attr<DType>("dtype");
      const Shape& shape = node().attr<Shape>("shape");
      if (t.dtype() != want || !shape.compatible_with(t.shape())) {
        ctx.fail(errors::internal("received a {} tensor of shape {} for key {}, expected {} {}", dtype_name(t.dtype()),
                                  t.shape().to_string(), key_.debug_string(), dtype_name(want), shape.to_string()));
        return done();
      }
    }
    const std::string where = t.device();
    const bool on_host = where == kHostDeviceName;
    if (control_ || (dst_ == nullptr && on_host) || (dst_ != nullptr && where == dst_->name())) {
      ctx.set_output(0, std::move(t));
      return done();
    }
    if (dst_ == nullptr) {  // device -> host
      to_host(ctx, std::move(t), std::move(done), nullptr);
    } else if (on_host) {  // host -> device
      to_device(ctx, std::move(t), std::move(done));
    } else if (src_ != nullptr && t.device() == src_->name() && dst_->can_copy_from_peer(*src_)) {
      from_peer(ctx, std::move(t), std::move(done));  // device -> device, peer to peer
    } else {  // device -> device, through host memory
      to_host(ctx, std::move(t), std::move(done), dst_);
    }
  }

  // Waits (on `stream`) for what the source's compute streams hold now, the producer included:
  // it may only be queued there (Note [Stream-ordered kernels] in executor.cc).
  void after_source_compute(Stream& stream) const {
    for (int i = 0; i < src_->num_compute_streams(); ++i) {
      Event produced;
      (void)src_->compute_stream(i).record(produced);  // fresh: cannot fail
      (void)stream.wait(produced);                     // recorded: cannot fail
    }
  }

  // Copies `t` from src_'s memory into dst_'s directly, on dst_'s host-to-device stream.
  void from_peer(OpKernelContext& ctx, Tensor t, Done done) const {
    Stream& stream = dst_->host_to_device_stream();
    after_source_compute(stream);
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    dst_->copy_from_peer(t, *src_, stream, [this, &ctx, &stream, start, done = std::move(done)](StatusOr<Tensor> r) {
      ctx.trace_on_stream(*dst_, stream, start, "copy");
      if (!r.ok()) {
        ctx.fail(r.status());
      } else {
        dst_->record_stream(r.value(), dst_->compute_stream(0));  // read by kernels from now on
        ctx.set_output(0, std::move(r).value());
      }
      done();
    });
  }

  // Copies `t` from src_ into host memory; then on to `then_to` when set.
  void to_host(OpKernelContext& ctx, Tensor t, Done done, Device* then_to) const {
    if (src_ == nullptr || t.device() != src_->name()) {
      ctx.fail(errors::internal("{}: received a tensor in {}, expected {}", node().debug_name(), t.device(),
                                src_ == nullptr ? std::string(kHostDeviceName) : src_->name()));
      return done();
    }
    Stream& stream = src_->device_to_host_stream();
    after_source_compute(stream);
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    src_->copy_to_host(t, stream, [this, &ctx, &stream, start, done = std::move(done), then_to](StatusOr<Tensor> r) mutable {
      ctx.trace_on_stream(*src_, stream, start, "copy");
      if (!r.ok()) {
        ctx.fail(r.status());
        done();
      } else if (then_to != nullptr) {
        to_device(ctx, std::move(r).value(), std::move(done));
      } else {
        ctx.set_output(0, std::move(r).value());
        done();
      }
    });
  }

  void to_device(OpKernelContext& ctx, Tensor t, Done done) const {
    Stream& stream = dst_->host_to_device_stream();
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    dst_->copy_to_device(t, stream, [this, &ctx, &stream, start, done = std::move(done)](StatusOr<Tensor> r) {
      ctx.trace_on_stream(*dst_, stream, start, "copy");
      if (!r.ok()) {
        ctx.fail(r.status());
      } else {
        // Taken for the copy stream, read by kernels on the compute stream from now on: freed, it
        // waits for that stream too (Note [Stream-ordered memory] in device/sim_kernels.cc).
        dst_->record_stream(r.value(), dst_->compute_stream(0));
        ctx.set_output(0, std::move(r).value());
      }
      done();
    });
  }

  const RendezvousKey key_;
  const bool control_;
  Device* const src_;
  Device* const dst_;
};

Status send_shape(ShapeContext& c) {
  if (c.num_inputs() > 1) return c.invalid("takes at most one input, got {}", c.num_inputs());
  return Status();
}

Status recv_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

TESSERA_REGISTER_OP(OpDef{kSendOp, send_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{kRecvOp, recv_shape, /*stateful=*/true, /*host_only=*/true});
// Graph nodes (a master's transfers between tasks): keyed by name.
TESSERA_REGISTER_KERNEL(kSendOp, "CPU", SendOp);
TESSERA_REGISTER_KERNEL(kRecvOp, "CPU", RecvOp);

}  // namespace

std::unique_ptr<OpKernel> make_send_kernel(const Node& node, RendezvousKey key) {
  return std::make_unique<SendOp>(node, std::move(key));
}

std::unique_ptr<OpKernel> make_recv_kernel(const Node& node, RendezvousKey key, Device* src, Device* dst) {
  return std::make_unique<RecvOp>(node, std::move(key), src, dst);
}

}  // namespace tessera::internal
