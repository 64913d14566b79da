// The fused optimizer update ops (TensorFlow 1's ApplyGradientDescent, ApplyMomentum, ApplyAdam,
// ApplyAdagrad, ApplyRMSProp) and CountUpTo: their builders, their inputs, and what their kernels
// share (finding, locking and checking the variables they update). The update rules themselves
// are in core/training_rules.h. Note [Optimizer updates] in core/training_ops.cc says how an apply
// finds its slot variables and why it is atomic.
//
//   Variable w(g, Tensor::vector<float>({1, 2}), "w");
//   Variable accum(g, Tensor::zeros(DType::Float32, {2}), "w/Momentum");
//   auto step = internal::apply_momentum(w, accum, lr, grad, momentum);   // w's new value
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/training_rules.h"
#include "core/variable_resource.h"
#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::internal {

// ---- Builders ----
// Each adds one op updating `var` (placed with it and with its slots) and returns the variable's
// new value. The hyper-parameters are scalars of the variable's dtype (float32, float64, float16,
// bfloat16), the gradient has its shape; the slots, its dtype and shape. `use_locking` is recorded
// for TensorFlow compatibility only: every apply is atomic (Note [Optimizer updates]).
// `name` = "" names the op "<var>/<Type>". Make the slots under graph.colocate_with(var.op()), as
// TensorFlow's slot_creator does: a cluster master pins a variable that asks for no task to its
// own, and the op's colocation group then asks for two tasks (InvalidArgumentError).
Output apply_gradient_descent(const Variable& var, Output alpha, Output delta, bool use_locking = false,
                              std::string name = "");
Output apply_momentum(const Variable& var, const Variable& accum, Output lr, Output grad, Output momentum,
                      bool use_locking = false, bool use_nesterov = false, std::string name = "");
Output apply_adam(const Variable& var, const Variable& m, const Variable& v, Output beta1_power, Output beta2_power,
                  Output lr, Output beta1, Output beta2, Output epsilon, Output grad, bool use_locking = false,
                  std::string name = "");
Output apply_adagrad(const Variable& var, const Variable& accum, Output lr, Output grad, bool use_locking = false,
                     std::string name = "");
Output apply_rms_prop(const Variable& var, const Variable& ms, const Variable& mom, Output lr, Output rho,
                      Output momentum, Output epsilon, Output grad, bool use_locking = false, std::string name = "");

// ---- What the kernels share ----

// The layout of one Apply* op: the attrs naming its slot variables and its inputs, in order.
struct ApplyOpInfo {
  const char* type;
  training::ApplyKind kind;
  std::vector<const char*> slots;   // attr names; the attr holds the slot's VariableV2 node name
  std::vector<const char*> inputs;  // input names, as TensorFlow's
  int grad;                         // which input is the gradient (the others are scalars)
};
// Every Apply* op's layout. Safe to call during static initialization.
std::span<const ApplyOpInfo> apply_ops();
// The op's layout, or nullptr for a type that is not an Apply* op.
const ApplyOpInfo* find_apply_op(std::string_view type);

// Registers `Kernel` on `device_type` for every Apply* op: one kernel class serves them all (it
// reads the op's layout from its node), and an op added to apply_ops() gets its kernels with it.
//   const ApplyKernelRegistrar<ApplyOp> kApplyKernels("CPU");
template <class Kernel>
struct ApplyKernelRegistrar {
  explicit ApplyKernelRegistrar(const char* device_type) {
    for (const ApplyOpInfo& info : apply_ops()) {
      OpRegistry::global().register_kernel(info.type, device_type, [](const Node& n) -> std::unique_ptr<OpKernel> {
        return std::make_unique<Kernel>(n);
      });
    }
  }
};

// The variables an Apply* kernel updates: its variable (node.resource, found as the variable
// kernels find it) and its slots (looked up by name in the same resources, never created), each
// found once. Thread-safe.
class ApplyVariables {
 public:
  explicit ApplyVariables(const Node& node);

  // The variables of one update, locked together.
  struct Locked {
    std::vector<VariableResource*> vars;  // the variable, then the slots in the op's order. Not owned.
    std::vector<std::unique_lock<std::mutex>> locks;
  };
  // Finds and locks the variables, then checks, under the locks, everything the update needs:
  // every variable initialized (FailedPrecondition naming the first that is not; a slot no kernel
  // has seen yet counts as uninitialized) and in `memory` (the memory the kernel reads and
  // writes), the slots of the variable's dtype and shape, the scalar inputs scalars of that dtype,
  // the gradient of the variable's shape and dtype (InvalidArgument). On success `out` holds the
  // locks; on failure nothing stays locked. Errors lack the op's name (ctx.fail adds it).
  Status lock(OpKernelContext& ctx, const std::string& memory, Locked* out);

  const ApplyOpInfo& info() const { return info_; }
  bool use_nesterov() const { return use_nesterov_; }

 private:
  Status check_locked(OpKernelContext& ctx, const std::string& memory, const Locked& l) const;

  const Node& node_;
  const ApplyOpInfo& info_;
  const bool use_nesterov_;
  std::vector<std::string> slot_names_;
  VariableLookup var_;
  std::array<CachedResource<VariableResource>, training::kMaxApplySlots> slots_;
};

// The tensor an update of `value` writes: `value` itself when no one else holds its buffer, else
// a fresh buffer (copy on write, Note [Variable updates] in kernels/variable_ops.cc).
Tensor writable_value(OpKernelContext& ctx, const Tensor& value);

}  // namespace tessera::internal
