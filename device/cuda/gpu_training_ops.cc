// GPU kernels (device type "GPU") of the fused optimizer updates: ApplyGradientDescent,
// ApplyMomentum, ApplyAdam, ApplyAdagrad and ApplyRMSProp. The variable and its slots live in GPU
// memory and are updated there by one launch of training_kernels.cu, issued while the kernel holds
// their locks (Note [Optimizer updates] in core/training_ops.cc), so updates reach the compute
// stream in lock order, with the copy-on-write rule of Note [Variable updates] in
// kernels/variable_ops.cc, as AssignAdd's GPU kernel (gpu_state_ops.cc). CountUpTo has no GPU
// kernel: it runs on the host, with its variable.
#include <utility>
#include <vector>

#include "core/op_registry.h"
#include "core/training_ops.h"
#include "device/cuda/gpu_op_kernel.h"
#include "device/cuda/training_launch.h"

namespace tessera::internal {
namespace {

// Checks and locks through ApplyVariables (the CPU kernel's checks and messages), then launches the
// update into fresh buffers where a value is shared, in place otherwise. Thread-safe.
class ApplyGpuOp final : public GpuOpKernel {
 public:
  explicit ApplyGpuOp(const Node& n) : GpuOpKernel(n), variables_(n) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    ApplyVariables::Locked l;
    if (Status s = variables_.lock(ctx, r.device.name(), &l); !s.ok()) return ctx.fail(s);
    const ApplyOpInfo& info = variables_.info();
    gpu::ApplyPointers p;
    for (std::size_t k = 0; k < l.vars.size(); ++k) {
      VariableResource& v = *l.vars[k];
      Tensor out = writable_value(ctx, v.value);
      const void* in = v.value.raw_data();
      // The value read must outlive the launch even if a later Assign replaces it before it runs.
      r.keep_alive.push_back(v.value);
      if (k == 0) {
        p.var_in = in;
        p.var_out = out.raw_mutable_data();
      } else {
        p.slot_in[k - 1] = in;
        p.slot_out[k - 1] = out.raw_mutable_data();
      }
      v.value = std::move(out);
    }
    int s = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (i == info.grad) {
        p.grad = ctx.input(i).raw_data();
      } else {
        p.scalars[s++] = ctx.input(i).raw_data();
      }
    }
    const Tensor& var = l.vars[0]->value;
    ctx.set_output(0, var);
    const int64_t n = var.num_elements();
    if (n == 0) return;
    r.launch([check = r.launch_check, kind = info.kind, nesterov = variables_.use_nesterov(),
              elem = gpu_elem(var.dtype()), p, n, type = info.type](cudaStream_t stream) {
      check->check(gpu::launch_apply(kind, nesterov, elem, p, n, stream), type);
    });
  }

 private:
  ApplyVariables variables_;
};

const ApplyKernelRegistrar<ApplyGpuOp> kGpuApplyKernels("GPU");

}  // namespace
}  // namespace tessera::internal
