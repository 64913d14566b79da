// Note [Variable updates]
// A variable's value is a Tensor guarded by the variable's mutex. Reads copy the handle (no data
// copy) under the lock, so a read is a snapshot. Updates run under the lock, so they are atomic
// per variable; an update writes in place only when nobody else holds the buffer, otherwise it
// writes a fresh buffer (copy on write) so earlier snapshots never change. Assign adopts the
// input's buffer as is (no copy): a later in-place update is safe because whoever still holds
// that input makes the buffer shared, which forces the copy.
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/device.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"
#include "core/variable_resource.h"

namespace tessera::internal {
namespace {

// Base of the variable kernels: finds the variable in the session's resources once.
class VariableKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  // The memory this kernel reads and writes: the host's, or a simulated accelerator's.
  static std::string memory_of(OpKernelContext& ctx) { return cpu_kernel_memory(ctx.device()); }
  StatusOr<VariableResource*> variable(OpKernelContext& ctx, const Node& var) {
    return variable_.get(ctx.resources(), var);
  }

 private:
  VariableLookup variable_;
};

// VariableV2, and _ReadVariable of its resource: the variable's current value (a snapshot).
class VariableOp : public VariableKernel {
 public:
  using VariableKernel::VariableKernel;
  void compute(OpKernelContext& ctx) override {
    auto var = variable(ctx, node().resource != nullptr ? *node().resource : node());
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    std::lock_guard<std::mutex> l(v.mu);
    if (Status s = v.check_initialized(); !s.ok()) return ctx.fail(s);
    if (Status s = v.check_memory(memory_of(ctx), node().debug_name()); !s.ok()) return ctx.fail(s);
    ctx.set_output(0, v.value);
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("VariableV2", "CPU", VariableOp);
TESSERA_REGISTER_KERNEL("_ReadVariable", "CPU", VariableOp);

// Base of Assign, AssignAdd and AssignSub: finds the variable, then update() runs under its lock
// with the kernel's input.
class VariableUpdateKernel : public VariableKernel {
 public:
  using VariableKernel::VariableKernel;
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    auto var = variable(ctx, *node().resource);
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    std::lock_guard<std::mutex> l(v.mu);
    update(ctx, v, ctx.input(0));
  }

 protected:
  virtual void update(OpKernelContext& ctx, VariableResource& v, const Tensor& input) = 0;
};

class AssignOp : public VariableUpdateKernel {
 public:
  using VariableUpdateKernel::VariableUpdateKernel;

 protected:
  void update(OpKernelContext& ctx, VariableResource& v, const Tensor& value) override {
    if (!v.shape().compatible_with(value.shape())) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has shape {}, the value has shape {}",
                      v.name(), v.shape().to_string(), value.shape().to_string());
    }
    v.value = value;
    v.initialized = true;
    ctx.set_output(0, v.value);
  }
};

TESSERA_REGISTER_KERNEL("Assign", "CPU", AssignOp);

template <class T, bool kAdd>
void apply(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = kAdd ? a[i] + b[i] : a[i] - b[i];
}

template <bool kAdd>
class AssignUpdateOp : public VariableUpdateKernel {
 public:
  using VariableUpdateKernel::VariableUpdateKernel;

 protected:
  void update(OpKernelContext& ctx, VariableResource& v, const Tensor& delta) override {
    if (Status s = v.check_initialized(); !s.ok()) return ctx.fail(s);
    if (Status s = v.check_memory(memory_of(ctx), node().debug_name()); !s.ok()) return ctx.fail(s);
    if (delta.shape() != v.value.shape()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has shape {}, the update has shape {}",
                      v.name(), v.value.shape().to_string(), delta.shape().to_string());
    }
    // In place when the buffer is ours alone; else into a fresh buffer (Note [Variable updates]).
    Tensor out = v.value.is_buffer_shared() ? ctx.allocate_temp(v.value.dtype(), v.value.shape()) : v.value;
    const int64_t n = out.num_elements();
    switch (out.dtype()) {
      case DType::Float32: apply<float, kAdd>(out.mutable_data<float>(), v.value.data<float>(), delta.data<float>(), n); break;
      case DType::Float64: apply<double, kAdd>(out.mutable_data<double>(), v.value.data<double>(), delta.data<double>(), n); break;
      case DType::Int32: apply<int32_t, kAdd>(out.mutable_data<int32_t>(), v.value.data<int32_t>(), delta.data<int32_t>(), n); break;
      case DType::Int64: apply<int64_t, kAdd>(out.mutable_data<int64_t>(), v.value.data<int64_t>(), delta.data<int64_t>(), n); break;
      case DType::Float16: apply<float16_t, kAdd>(out.mutable_data<float16_t>(), v.value.data<float16_t>(), delta.data<float16_t>(), n); break;
      case DType::BFloat16: apply<bfloat16_t, kAdd>(out.mutable_data<bfloat16_t>(), v.value.data<bfloat16_t>(), delta.data<bfloat16_t>(), n); break;
      case DType::Bool:
      case DType::String:
        return ctx.fail(ErrorCode::kInvalidArgument, "arithmetic update of a {} variable", dtype_name(out.dtype()));
    }
    v.value = std::move(out);
    ctx.set_output(0, v.value);
  }
};

TESSERA_REGISTER_KERNEL("AssignAdd", "CPU", AssignUpdateOp<true>);
TESSERA_REGISTER_KERNEL("AssignSub", "CPU", AssignUpdateOp<false>);

// IsVariableInitialized: whether the variable named "var_name" has a value in this task's (or
// in-process session's) resources; one not created there yet has none (Note [Readiness ops] in
// core/variable_ops.cc).
class IsVariableInitializedOp : public OpKernel {
 public:
  explicit IsVariableInitializedOp(const Node& n) : OpKernel(n), var_name_(n.attr<std::string>("var_name")) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    bool initialized = false;
    auto var = ctx.resources().lookup<VariableResource>(var_name_);
    if (var.ok()) {
      VariableResource& v = *var.value();
      std::lock_guard<std::mutex> l(v.mu);
      initialized = v.initialized;
    } else if (var.status().code() != ErrorCode::kNotFound) {
      return ctx.fail(var.status());
    }
    ctx.allocate_output(0, Shape{}).mutable_data<bool>()[0] = initialized;
  }

 private:
  const std::string var_name_;
};

TESSERA_REGISTER_KERNEL("IsVariableInitialized", "CPU", IsVariableInitializedOp);

// _ListUninitialized: the "names" whose Bool input is false.
class ListUninitializedOp : public OpKernel {
 public:
  explicit ListUninitializedOp(const Node& n) : OpKernel(n), names_(n.attr<Tensor>("names")) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    std::vector<std::string> out;
    const std::string* names = names_.data<std::string>();
    for (int i = 0; i < static_cast<int>(names_.num_elements()); ++i) {
      if (!ctx.input(i).data<bool>()[0]) out.push_back(names[i]);
    }
    ctx.set_output(0, Tensor::vector<std::string>(std::move(out)));
  }

 private:
  const Tensor names_;
};

TESSERA_REGISTER_KERNEL("_ListUninitialized", "CPU", ListUninitializedOp);

}  // namespace
}  // namespace tessera::internal
