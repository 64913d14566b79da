// GPU kernels (device type "GPU") that move no data or update state: NoOp, Identity, Const (the value
// copied into GPU memory once per device, then shared), and the variable ops VariableV2,
// _ReadVariable, Assign, AssignAdd and AssignSub, whose value lives in GPU memory and is updated
// there, under the variable's lock, with the copy-on-write rule of Note [Variable updates] in
// kernels/variable_ops.cc.
#include <map>
#include <mutex>
#include <vector>

#include "core/op_registry.h"
#include "core/variable_resource.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

// Passes its input through (wherever it is). Thread-safe.
class IdentityGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  bool needs_inputs_on_device() const override { return false; }
  void run(OpKernelContext& ctx, GpuRun&) override { ctx.set_output(0, ctx.input(0)); }
};

// The "value" attr in GPU memory: the first run on a device copies it there (host-to-device
// stream), runs that arrive meanwhile wait for that copy without blocking, and later runs share
// the device tensor. A failed copy fails the runs waiting for it; the next run tries again.
// Thread-safe.
class ConstGpuOp final : public GpuOpKernel {
 public:
  explicit ConstGpuOp(const Node& n) : GpuOpKernel(n), value_(n.attr<Tensor>("value")) {}

  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    auto* gpu = dynamic_cast<CudaDevice*>(ctx.device());
    if (gpu == nullptr) return GpuOpKernel::compute_async(ctx, std::move(done));
    std::unique_lock<std::mutex> lock(mu_);
    Entry& entry = entries_[gpu];
    if (!entry.value.is_null()) {
      ctx.set_output(0, entry.value);
      lock.unlock();
      done();
      return;
    }
    entry.waiters.push_back(Waiter{&ctx, std::move(done)});
    if (entry.copying) return;
    entry.copying = true;
    lock.unlock();
    gpu->copy_to_device(value_, gpu->host_to_device_stream(), [this, gpu](StatusOr<Tensor> copied) {
      std::vector<Waiter> waiters;
      {
        std::lock_guard<std::mutex> l(mu_);
        Entry& e = entries_[gpu];
        e.copying = false;
        if (copied.ok()) {
          e.value = copied.value();
          gpu->record_stream(e.value, gpu->compute_stream(0));  // read by kernels from now on
        }
        waiters.swap(e.waiters);
      }
      for (Waiter& w : waiters) {
        if (copied.ok()) {
          w.ctx->set_output(0, copied.value());
        } else {
          w.ctx->fail(copied.status());
        }
        w.done();
      }
    });
  }

 protected:
  void run(OpKernelContext& ctx, GpuRun&) override { ctx.set_output(0, value_); }  // not reached

 private:
  struct Waiter {
    OpKernelContext* ctx;  // Not owned: alive until done().
    std::function<void()> done;
  };
  struct Entry {
    Tensor value;  // in the device's memory; null until copied
    bool copying = false;
    std::vector<Waiter> waiters;
  };
  const Tensor value_;
  std::mutex mu_;
  std::map<CudaDevice*, Entry> entries_;  // guarded by mu_
};

// Finds the variable in the session's resources once (VariableLookup).
class VariableGpuKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  StatusOr<VariableResource*> variable(OpKernelContext& ctx, const Node& var) {
    return variable_.get(ctx.resources(), var);
  }

 private:
  VariableLookup variable_;
};

// The variable's current value (a snapshot: the handle, no copy): VariableV2's, and
// _ReadVariable's of its resource. Thread-safe.
class VariableGpuOp final : public VariableGpuKernel {
 public:
  using VariableGpuKernel::VariableGpuKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    auto var = variable(ctx, node().resource != nullptr ? *node().resource : node());
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    std::lock_guard<std::mutex> l(v.mu);
    if (Status s = v.check_initialized(); !s.ok()) return ctx.fail(s);
    if (Status s = v.check_memory(r.device.name(), node().debug_name()); !s.ok()) return ctx.fail(s);
    ctx.set_output(0, v.value);
  }
};

// The variable adopts the input's buffer (no copy). Thread-safe.
class AssignGpuOp final : public VariableGpuKernel {
 public:
  using VariableGpuKernel::VariableGpuKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun&) override {
    auto var = variable(ctx, *node().resource);
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    const Tensor& value = ctx.input(0);
    if (!v.shape().compatible_with(value.shape())) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has shape {}, the value has shape {}", v.name(),
                      v.shape().to_string(), value.shape().to_string());
    }
    std::lock_guard<std::mutex> l(v.mu);
    v.value = value;
    v.initialized = true;
    ctx.set_output(0, v.value);
  }
};

// value += delta (kAdd) or value -= delta, on the GPU, in place when the buffer is the variable's
// alone, else into a fresh buffer. The launch is issued under the variable's lock, so updates reach
// the compute stream (and run) in lock order. Thread-safe.
template <bool kAdd>
class AssignUpdateGpuOp final : public VariableGpuKernel {
 public:
  using VariableGpuKernel::VariableGpuKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    auto var = variable(ctx, *node().resource);
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    const Tensor& delta = ctx.input(0);
    std::lock_guard<std::mutex> l(v.mu);
    if (Status s = v.check_initialized(); !s.ok()) return ctx.fail(s);
    if (delta.shape() != v.value.shape()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has shape {}, the update has shape {}", v.name(),
                      v.value.shape().to_string(), delta.shape().to_string());
    }
    if (v.value.dtype() == DType::Bool) {
      return ctx.fail(ErrorCode::kInvalidArgument, "arithmetic update of a bool variable");
    }
    if (delta.dtype() != v.value.dtype()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has dtype {}, the update has dtype {}", v.name(),
                      dtype_name(v.value.dtype()), dtype_name(delta.dtype()));
    }
    if (Status s = v.check_memory(r.device.name(), node().debug_name()); !s.ok()) return ctx.fail(s);
    // In place when the buffer is ours alone; else into a fresh buffer (Note [Variable updates]).
    Tensor out = v.value.is_buffer_shared() ? ctx.allocate_temp(v.value.dtype(), v.value.shape()) : v.value;
    const int64_t n = out.num_elements();
    const void* pv = v.value.raw_data();
    const void* pd = delta.raw_data();
    void* po = out.raw_mutable_data();
    // The value read must outlive the kernel even if a later Assign replaces it before it runs.
    r.keep_alive.push_back(v.value);
    v.value = out;
    ctx.set_output(0, v.value);
    if (n == 0) return;
    r.launch([check = r.launch_check, elem = gpu_elem(out.dtype()), pv, pd, po, n](cudaStream_t s) {
      check->check(gpu::launch_binary(kAdd ? gpu::BinaryKind::kAdd : gpu::BinaryKind::kSub, elem,
                                      gpu::BroadcastKind::kSame, gpu::BroadcastGeometry{}, pv, pd, po, n, nullptr, s),
                   kAdd ? "AssignAdd" : "AssignSub");
    });
  }
};

// Nothing to do: a NoOp that groups GPU ops (an optimizer's update, an initializer) stays on the
// GPU, so what its control edges order runs in stream order after it, with no round trip through
// the host (as a NoOp on the CPU between GPU ops made: the training step waited for every
// ApplyAdam to finish before the global step's AssignAdd could be issued). Thread-safe.
class NoOpGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  bool needs_inputs_on_device() const override { return false; }
  void run(OpKernelContext&, GpuRun&) override {}
};

TESSERA_REGISTER_KERNEL("NoOp", "GPU", NoOpGpuOp);
TESSERA_REGISTER_KERNEL("Identity", "GPU", IdentityGpuOp);
TESSERA_REGISTER_KERNEL("StopGradient", "GPU", IdentityGpuOp);  // core/nn_ops.cc
TESSERA_REGISTER_KERNEL("Const", "GPU", ConstGpuOp);
TESSERA_REGISTER_KERNEL("VariableV2", "GPU", VariableGpuOp);
TESSERA_REGISTER_KERNEL("_ReadVariable", "GPU", VariableGpuOp);
TESSERA_REGISTER_KERNEL("Assign", "GPU", AssignGpuOp);
TESSERA_REGISTER_KERNEL("AssignAdd", "GPU", AssignUpdateGpuOp<true>);
TESSERA_REGISTER_KERNEL("AssignSub", "GPU", AssignUpdateGpuOp<false>);

}  // namespace
}  // namespace tessera::internal
