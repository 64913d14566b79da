// Kernels of the simulated accelerator: every CPU kernel of an op that is not host-only, run on
// the SIM device's compute stream (Note [SIM kernels]).
//
// Note [SIM kernels]
// A SIM kernel is asynchronous: it enqueues the CPU kernel on the device's compute stream and
// finishes through the stream's completion path (Stream::then), exactly as a CUDA kernel launch
// finishes through its stream, so the executor, the copy streams and the events see the same
// protocol as on a GPU. Inputs must already be in the device's memory: an input that is not is
// an InternalError naming the op (a missing transfer in the partition), which the tests rely on to
// prove that every cross-device edge carries a copy. Outputs are allocated in device memory by
// OpKernelContext::allocate_output; an output a CPU kernel made in host memory (a constant's
// value) is copied into device memory on the stream.
#include <cstring>

#include <fmt/format.h>

#include "core/executor.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"

namespace tessera::internal {
namespace {

class SimKernel final : public OpKernel {
 public:
  explicit SimKernel(std::unique_ptr<OpKernel> base) : OpKernel(base->node()), base_(std::move(base)) {}

  bool is_async() const override { return true; }
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
    stream.enqueue([this, &ctx, device, &stream] {
      const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
      try {
        base_->compute(ctx);
        for (int i = 0; i < ctx.num_outputs() && ctx.status().ok(); ++i) {
          Tensor& out = ctx.output(i);
          if (out.is_null() || out.device() == device->name()) continue;
          Tensor moved = ctx.allocate_temp(out.dtype(), out.shape());
          if (out.bytes() > 0) std::memcpy(moved.raw_mutable_data(), out.raw_data(), out.bytes());
          out = std::move(moved);
        }
      } catch (...) {
        ctx.fail(status_from_current_exception());
      }
      ctx.trace_on_stream(*device, stream, start);
    });
    stream.then([&ctx, device, done = std::move(done)](Status s) {
      if (!s.ok()) {
        // The stream is in error (sticky, as a CUDA fault is): the device is done for, and the
        // failure names this op, whose work it was found after.
        device->mark_failed(s.with_prefix(fmt::format("{}, after {}: ", device->name(), ctx.node().debug_name())));
        ctx.fail(s);
      }
      done();
    });
  }

 private:
  std::unique_ptr<OpKernel> base_;
};

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
