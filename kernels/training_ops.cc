// CPU kernels of the fused optimizer updates (ApplyGradientDescent, ApplyMomentum, ApplyAdam,
// ApplyAdagrad, ApplyRMSProp; also what the simulated accelerator runs) and of CountUpTo. Each
// apply holds the locks of its variable and slots for the whole update (Note [Optimizer updates]
// in core/training_ops.cc) and computes the rules of core/training_rules.h element by element,
// the 16-bit floats in float32 with one rounding per stored value.
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/training_ops.h"
#include "core/variable_resource.h"

namespace tessera::internal {
namespace {

// The buffers of one update, in storage type T: `*_in` are read, `*_out` written (the same buffer
// when the update is in place).
template <class T>
struct ApplyBuffers {
  const T* var_in;
  T* var_out;
  const T* slot_in[training::kMaxApplySlots];
  T* slot_out[training::kMaxApplySlots];
  const T* grad;
  int64_t n;
};

template <class Rule, class T>
void apply_rule(const Rule& rule, const ApplyBuffers<T>& b) {
  using C = Accumulate<T>;
  // Element i reads index i of every input and writes index i of every output, so no iteration
  // depends on another even when the update is in place (each `*_out` then is its `*_in`, which
  // the compiler's alias check took for an overlap, running the scalar loop).
#pragma GCC ivdep
  for (int64_t i = 0; i < b.n; ++i) {
    C var = static_cast<C>(b.var_in[i]);
    C slots[training::kMaxApplySlots] = {};
    for (int k = 0; k < Rule::kSlots; ++k) slots[k] = static_cast<C>(b.slot_in[k][i]);
    rule(var, slots, static_cast<C>(b.grad[i]));
    b.var_out[i] = T(var);
    for (int k = 0; k < Rule::kSlots; ++k) b.slot_out[k][i] = T(slots[k]);
  }
}

template <class T>
void apply_typed(OpKernelContext& ctx, const ApplyOpInfo& info, bool nesterov, const std::vector<Tensor>& in,
                 std::vector<Tensor>& out) {
  using C = Accumulate<T>;
  C scalars[training::kMaxApplyScalars] = {};
  int s = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (i != info.grad) scalars[s++] = static_cast<C>(ctx.input(i).data<T>()[0]);
  }
  ApplyBuffers<T> b{};
  b.var_in = in[0].data<T>();
  b.var_out = out[0].mutable_data<T>();
  for (std::size_t k = 1; k < in.size(); ++k) {
    b.slot_in[k - 1] = in[k].data<T>();
    b.slot_out[k - 1] = out[k].mutable_data<T>();
  }
  b.grad = ctx.input(info.grad).data<T>();
  b.n = in[0].num_elements();
  training::visit_rule<C>(info.kind, [&](auto* tag) {
    using Rule = std::remove_pointer_t<decltype(tag)>;
    apply_rule(Rule(scalars, nesterov), b);
  });
}

class ApplyOp final : public OpKernel {
 public:
  explicit ApplyOp(const Node& n) : OpKernel(n), variables_(n) {}
  bool is_expensive() const override { return true; }

  void compute(OpKernelContext& ctx) override {
    ApplyVariables::Locked l;
    if (Status s = variables_.lock(ctx, cpu_kernel_memory(ctx.device()), &l); !s.ok()) return ctx.fail(s);
    std::vector<Tensor> in;
    std::vector<Tensor> out;
    for (VariableResource* v : l.vars) {
      in.push_back(v->value);
      out.push_back(writable_value(ctx, v->value));
    }
    const ApplyOpInfo& info = variables_.info();
    const bool nesterov = variables_.use_nesterov();
    switch (in[0].dtype()) {
      case DType::Float32: apply_typed<float>(ctx, info, nesterov, in, out); break;
      case DType::Float64: apply_typed<double>(ctx, info, nesterov, in, out); break;
      case DType::Float16: apply_typed<float16_t>(ctx, info, nesterov, in, out); break;
      case DType::BFloat16: apply_typed<bfloat16_t>(ctx, info, nesterov, in, out); break;
      default: return ctx.fail(errors::internal("no update for {}", dtype_name(in[0].dtype())));  // lock() refuses it
    }
    for (std::size_t k = 0; k < l.vars.size(); ++k) l.vars[k]->value = std::move(out[k]);
    ctx.set_output(0, l.vars[0]->value);
  }

 private:
  ApplyVariables variables_;
};

const ApplyKernelRegistrar<ApplyOp> kCpuApplyKernels("CPU");

// Hands out the variable's value and increments it, under its lock: N racing runs hand out each
// value once. OutOfRange once the value has reached the limit (TensorFlow's message).
class CountUpToOp final : public OpKernel {
 public:
  explicit CountUpToOp(const Node& n) : OpKernel(n), limit_(n.attr<int64_t>("limit")) {}
  bool is_expensive() const override { return false; }

  void compute(OpKernelContext& ctx) override {
    auto var = variable_.get(ctx.resources(), *node().resource);
    if (!var.ok()) return ctx.fail(var.status());
    VariableResource& v = *var.value();
    std::lock_guard<std::mutex> lock(v.mu);
    if (Status s = v.check_initialized(); !s.ok()) return ctx.fail(s);
    if (Status s = v.check_memory(cpu_kernel_memory(ctx.device()), node().debug_name()); !s.ok()) return ctx.fail(s);
    switch (v.value.dtype()) {
      case DType::Int32: return count<int32_t>(ctx, v);
      case DType::Int64: return count<int64_t>(ctx, v);
      default:
        return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' is {}: CountUpTo counts in int32 or int64",
                        v.name(), dtype_name(v.value.dtype()));
    }
  }

 private:
  template <class T>
  void count(OpKernelContext& ctx, VariableResource& v) {
    if (v.value.shape().rank() != 0) {
      return ctx.fail(ErrorCode::kInvalidArgument, "variable '{}' has shape {}: CountUpTo counts in a scalar",
                      v.name(), v.value.shape().to_string());
    }
    const T before = v.value.data<T>()[0];
    if (static_cast<int64_t>(before) >= limit_) {
      return ctx.fail(ErrorCode::kOutOfRange, "Reached limit of {}", limit_);
    }
    Tensor next = writable_value(ctx, v.value);
    next.mutable_data<T>()[0] = static_cast<T>(before + 1);
    v.value = std::move(next);
    Tensor& out = ctx.allocate_output(0, Shape{});
    out.mutable_data<T>()[0] = before;
  }

  const int64_t limit_;
  VariableLookup variable_;
};

TESSERA_REGISTER_KERNEL("CountUpTo", "CPU", CountUpToOp);

}  // namespace
}  // namespace tessera::internal
