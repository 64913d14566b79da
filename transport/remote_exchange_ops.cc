// The _RemoteSend and _RemoteRecv ops and their CPU kernels: the ends of an edge between two tasks
// of a cluster, through the task's worker (Note [Remote exchange] in worker.cc).
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "tessera/errors.h"
#include "transport/worker.h"

namespace tessera::internal {

namespace {

StatusOr<std::shared_ptr<Worker>> worker_of(OpKernelContext& ctx) {
  auto link = ctx.resources().lookup<WorkerLink>(kWorkerResource);
  if (!link.ok()) {
    return errors::internal("{}: runs only in a partition a cluster master registered with a worker",
                            ctx.node().debug_name());
  }
  std::shared_ptr<Worker> worker = link.value()->worker.lock();
  if (!worker) return errors::cancelled("{}: the server is stopping", ctx.node().debug_name());
  return worker;
}

// ---- _RemoteSend / _RemoteRecv ----

Status remote_send_shape(ShapeContext& c) {
  if (c.num_inputs() > 1) return c.invalid("takes at most one input, got {}", c.num_inputs());
  return Status();
}

Status remote_recv_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  c.add_output(c.attr<DType>("dtype"), c.attr<Shape>("shape"));
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"_RemoteSend", remote_send_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"_RemoteRecv", remote_recv_shape, /*stateful=*/true, /*host_only=*/true});

// Hands its input (or, with none, a control token) to this task's exchange for the step.
class RemoteSendOp final : public OpKernel {
 public:
  explicit RemoteSendOp(const Node& node) : OpKernel(node), key_(node.attr<std::string>("key")) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    auto worker = worker_of(ctx);
    if (!worker.ok()) return ctx.fail(worker.status());
    Tensor value = ctx.num_inputs() == 1 ? ctx.input(0) : Tensor::scalar<bool>(true);
    Status s = worker.value()->send(ctx.step_id(), key_, std::move(value));
    if (!s.ok()) ctx.fail(s);
  }

 private:
  const std::string key_;
};

// Pulls its tensor from the producing task, holding no thread while it waits.
class RemoteRecvOp final : public OpKernel {
 public:
  explicit RemoteRecvOp(const Node& node)
      : OpKernel(node), key_(node.attr<std::string>("key")), src_(node.attr<std::string>("src_task")),
        dtype_(node.attr<DType>("dtype")), shape_(node.attr<Shape>("shape")) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override { ctx.fail(errors::internal("_RemoteRecv runs asynchronously only")); }

  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    auto worker = worker_of(ctx);
    if (!worker.ok()) {
      ctx.fail(worker.status());
      return done();
    }
    auto call = std::make_shared<Call>();
    call->ctx = &ctx;
    call->done = std::move(done);
    call->op = this;
    call->token = ctx.cancellation().register_callback([call](const Status& reason) { call->cancel(reason); });
    if (call->token == CancellationManager::kInvalidToken) {
      call->finish(ctx.cancellation().reason());
      return;
    }
    auto canceller = worker.value()->recv(src_, ctx.step_id(), key_,
                                          [call](StatusOr<Tensor> r) { call->finish(std::move(r)); });
    call->set_canceller(std::move(canceller));
  }

 private:
  // One pull: finished by the reply, an error, or a cancellation, whichever comes first.
  struct Call {
    std::mutex mu;
    bool finished = false;                                   // guarded by mu
    bool cancelled = false;                                  // guarded by mu
    Status cancel_reason;                                    // guarded by mu
    std::function<void(const Status&)> canceller;            // guarded by mu
    OpKernelContext* ctx = nullptr;
    std::function<void()> done;
    const RemoteRecvOp* op = nullptr;
    CancellationManager::Token token = CancellationManager::kInvalidToken;

    void cancel(const Status& reason) {
      std::function<void(const Status&)> c;
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished || cancelled) return;
        cancelled = true;
        cancel_reason = reason;
        c = canceller;
      }
      if (c) c(reason);  // finishes the pull with `reason`
    }
    void set_canceller(std::function<void(const Status&)> c) {
      Status reason;
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished) return;
        canceller = c;
        if (!cancelled) return;
        reason = cancel_reason;
      }
      c(reason);  // cancelled before the pull started
    }
    void finish(StatusOr<Tensor> r) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (finished) return;
        finished = true;
        canceller = nullptr;
      }
      if (token != CancellationManager::kInvalidToken) ctx->cancellation().deregister_callback(token);
      if (!r.ok()) {
        ctx->fail(r.status());
      } else if (r.value().dtype() != op->dtype_ || !op->shape_.compatible_with(r.value().shape())) {
        ctx->fail(errors::internal("received a {} tensor of shape {} for key '{}', expected {} {}",
                                   dtype_name(r.value().dtype()), r.value().shape().to_string(), op->key_,
                                   dtype_name(op->dtype_), op->shape_.to_string()));
      } else {
        ctx->set_output(0, std::move(r).value());
      }
      auto d = std::move(done);
      d();
    }
  };

  const std::string key_;
  const std::string src_;
  const DType dtype_;
  const Shape shape_;
};

TESSERA_REGISTER_KERNEL("_RemoteSend", "CPU", RemoteSendOp);
TESSERA_REGISTER_KERNEL("_RemoteRecv", "CPU", RemoteRecvOp);

}  // namespace

}  // namespace tessera::internal
