// CPU kernels of the accumulator ops (core/accumulator_ops.cc), over the resource of
// kernels/conditional_accumulator.h. The take is asynchronous (Note [Async kernels] in
// core/executor.cc): it hands an attempt to the accumulator and returns; the accumulator calls
// back from whichever thread completes or cancels it. The step's CancellationManager is passed
// along, so a run timeout or a session close ends a wait with its reason.
#include <fmt/format.h>

#include "core/accumulator_ops.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/conditional_accumulator.h"
#include "kernels/resource_create_op.h"

namespace tessera::internal {

StatusOr<std::shared_ptr<ConditionalAccumulatorResource>> get_accumulator(OpKernelContext& ctx,
                                                                          const Node& accumulator_node) {
  const auto& shared_name = accumulator_node.attr<std::string>("shared_name");
  const std::string key = shared_name.empty() ? accumulator_node.name : shared_name;
  const auto dtype = accumulator_node.attr<DType>("dtype");
  const auto& shape = accumulator_node.attr<Shape>("shape");
  const bool mean = accumulator_node.attr<std::string>("reduction_type") == "MEAN";
  // Without a shared name the accumulator is the client session's own (Note [Private resources]).
  ResourceMgr& resources = shared_name.empty() ? ctx.private_resources() : ctx.resources();
  auto found = resources.lookup_or_create<ConditionalAccumulatorResource>(
      key, [&]() -> StatusOr<std::shared_ptr<ConditionalAccumulatorResource>> {
        return std::make_shared<ConditionalAccumulatorResource>(key, dtype, shape, mean);
      });
  if (!found.ok()) return found.status();
  const ConditionalAccumulatorResource& a = *found.value();
  if (a.dtype() != dtype) {
    return errors::invalid_argument("shared accumulator '{}' accumulates {} but {} was requested", key,
                                    dtype_name(a.dtype()), dtype_name(dtype));
  }
  if (a.shape() != shape) {
    return errors::invalid_argument("shared accumulator '{}' has shape {} but shape {} was requested", key,
                                    a.shape().to_string(), shape.to_string());
  }
  if (a.mean() != mean) {
    return errors::invalid_argument("shared accumulator '{}' has reduction type {} but {} was requested", key,
                                    a.mean() ? "MEAN" : "SUM", mean ? "MEAN" : "SUM");
  }
  return found;
}

namespace {

// InvalidArgument unless input `t`, named `what`, holds one value of `dtype`.
Status check_scalar_input(const Tensor& t, DType dtype, const char* what) {
  if (t.dtype() == dtype && t.num_elements() == 1) return Status();
  return errors::invalid_argument("{} must be an {} scalar, got {} {}", what, dtype_name(dtype), dtype_name(t.dtype()),
                                  t.shape().to_string());
}

// Base of the ops that act on an accumulator: `resource` is the accumulator node. The
// accumulator (and the check that a shared one agrees) is looked up once per kernel; a synchronous
// op gets it in run().
class AccumulatorOpKernel : public OpKernel {
 public:
  explicit AccumulatorOpKernel(const Node& n) : OpKernel(n) {
    TESSERA_CHECK(n.resource != nullptr && is_accumulator_type(n.resource->type));
  }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    auto a = accumulator(ctx);
    if (!a.ok()) return ctx.fail(a.status());
    run(ctx, *a.value());
  }

 protected:
  virtual void run(OpKernelContext& ctx, ConditionalAccumulatorResource& a) { TESSERA_CHECK(false); }  // async: none
  StatusOr<ConditionalAccumulatorResource*> accumulator(OpKernelContext& ctx) {
    return accumulator_.get([&] { return get_accumulator(ctx, *node().resource); });
  }

 private:
  CachedResource<ConditionalAccumulatorResource> accumulator_;
};

// "ConditionalAccumulator": creates the accumulator (and checks a shared one agrees) when run.
TESSERA_REGISTER_KERNEL("ConditionalAccumulator", "CPU", ResourceCreateOp<get_accumulator>);

class ApplyGradientOp : public AccumulatorOpKernel {
 public:
  using AccumulatorOpKernel::AccumulatorOpKernel;
  // Summing a large gradient is real work: let the pool run it.
  bool is_expensive() const override { return true; }
  void run(OpKernelContext& ctx, ConditionalAccumulatorResource& a) override {
    const Tensor& step = ctx.input(0);
    if (Status s = check_scalar_input(step, DType::Int64, "local_step"); !s.ok()) return ctx.fail(s);
    if (Status s = a.try_apply(step.scalar<int64_t>(), ctx.input(1)); !s.ok()) ctx.fail(s);
  }
};

TESSERA_REGISTER_KERNEL("AccumulatorApplyGradient", "CPU", ApplyGradientOp);

class TakeGradientOp : public AccumulatorOpKernel {
 public:
  using AccumulatorOpKernel::AccumulatorOpKernel;
  bool is_async() const override { return true; }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    auto a = accumulator(ctx);
    if (!a.ok()) {
      ctx.fail(a.status());
      done();
      return;
    }
    const Tensor& n = ctx.input(0);
    if (Status s = check_scalar_input(n, DType::Int32, "num_required"); !s.ok()) {
      ctx.fail(s);
      done();
      return;
    }
    a.value()->try_take(n.scalar<int32_t>(), &ctx.cancellation(),
                        [&ctx, done = std::move(done)](const Status& s, Tensor result) {
                          if (!s.ok()) {
                            ctx.fail(s);
                          } else {
                            ctx.set_output(0, std::move(result));
                          }
                          done();
                        });
  }
};

TESSERA_REGISTER_KERNEL("AccumulatorTakeGradient", "CPU", TakeGradientOp);

class NumAccumulatedOp : public AccumulatorOpKernel {
 public:
  using AccumulatorOpKernel::AccumulatorOpKernel;
  void run(OpKernelContext& ctx, ConditionalAccumulatorResource& a) override {
    *ctx.allocate_output(0, Shape{}).mutable_data<int32_t>() = static_cast<int32_t>(a.num_accumulated());
  }
};

TESSERA_REGISTER_KERNEL("AccumulatorNumAccumulated", "CPU", NumAccumulatedOp);

class SetGlobalStepOp : public AccumulatorOpKernel {
 public:
  using AccumulatorOpKernel::AccumulatorOpKernel;
  void run(OpKernelContext& ctx, ConditionalAccumulatorResource& a) override {
    const Tensor& step = ctx.input(0);
    if (Status s = check_scalar_input(step, DType::Int64, "new_global_step"); !s.ok()) return ctx.fail(s);
    a.set_global_step(step.scalar<int64_t>());
  }
};

TESSERA_REGISTER_KERNEL("AccumulatorSetGlobalStep", "CPU", SetGlobalStepOp);

class CancelTakesOp : public AccumulatorOpKernel {
 public:
  using AccumulatorOpKernel::AccumulatorOpKernel;
  void run(OpKernelContext& ctx, ConditionalAccumulatorResource& a) override {
    a.cancel_pending_takes(errors::cancelled("cancelled by {}", node().name));
  }
};

TESSERA_REGISTER_KERNEL("_AccumulatorCancelTakes", "CPU", CancelTakesOp);

}  // namespace
}  // namespace tessera::internal
