// Op definitions and builders of the fused optimizer updates (ApplyGradientDescent, ApplyMomentum,
// ApplyAdam, ApplyAdagrad, ApplyRMSProp) and of CountUpTo, and the variable handling their
// kernels share (ApplyVariables).
//
// Note [Optimizer updates]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// An Apply* op updates a variable and its slot variables (accum, m, v, ms, mom) in one kernel, as
// TensorFlow 1's do. Its NodeSpec.resource is the variable's VariableV2 node, so placement puts
// the op with it; each slot is named by a string attr ("accum", "m", ...) holding the slot's
// VariableV2 node name, and the slot nodes are in the op's colocate_with, so the variable, its
// slots and the op form one colocation group (one device, one task). The partitioner keeps a
// colocate_with entry only within the step's partition and a cluster master clears them in what
// it sends a worker, so the names in the attrs are all a kernel has: it looks each slot up by name
// in the same ResourceMgr the variable kernels use (the session's, or the server task's), never
// creating it; a slot that no kernel has created yet is uninitialized (FailedPrecondition naming
// it), as a read of it would be.
//
// Atomicity: a kernel takes the locks of the variable and of its slots together (std::lock, so
// two applies that share variables in other roles cannot deadlock) and holds them for the whole
// update, writing in place only buffers nobody else holds (copy on write, Note [Variable updates]
// in kernels/variable_ops.cc): an apply is atomic, and a value read before it never changes. The
// use_locking attr is accepted and recorded for TensorFlow compatibility; tessera's updates are
// always atomic per apply, stronger than TensorFlow 1's use_locking=false (which lets concurrent
// updates interleave element by element). On a GPU the update is launched under the locks, so
// updates reach the compute stream in lock order (device/cuda/gpu_training_ops.cc).
#include "core/training_ops.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

using training::ApplyKind;

// The variable an op acts on, or nullptr when its resource is not a variable.
const Node* variable_of(const ShapeContext& c) {
  const Node* var = c.spec().resource;
  return var != nullptr && var->type == "VariableV2" ? var : nullptr;
}

Status apply_shape(ShapeContext& c) {
  const ApplyOpInfo& info = *find_apply_op(c.op_type());
  const Node* var = variable_of(c);
  if (var == nullptr) return c.invalid("must act on a variable");
  const DType dtype = var->output_dtypes[0];
  const Shape& shape = var->output_shapes[0];
  if (!dtype_is_floating(dtype)) {
    return c.invalid("variable '{}' is {}: the update needs a floating point variable", var->name, dtype_name(dtype));
  }
  if (c.num_inputs() != static_cast<int>(info.inputs.size())) {
    return c.invalid("expects {} inputs ({}), got {}", info.inputs.size(), fmt::join(info.inputs, ", "),
                     c.num_inputs());
  }
  for (int i = 0; i < c.num_inputs(); ++i) {
    const char* input = info.inputs[static_cast<std::size_t>(i)];
    if (c.input_dtype(i) != dtype) {
      return c.invalid("{} is {}, the variable '{}' is {}", input, dtype_name(c.input_dtype(i)), var->name,
                       dtype_name(dtype));
    }
    const Shape& s = c.input_shape(i);
    if (i == info.grad && !shape.compatible_with(s)) {
      return c.invalid("variable '{}' has shape {}, {} has shape {}", var->name, shape.to_string(), input,
                       s.to_string());
    }
    if (i != info.grad && !s.unknown_rank() && s.rank() != 0) {
      return c.invalid("{} must be a scalar, got shape {}", input, s.to_string());
    }
  }
  std::vector<std::string> names;
  for (const char* slot : info.slots) {
    if (!c.has_attr(slot)) return c.invalid("attr '{}' (the slot variable's name) is missing", slot);
    const std::string& name = c.attr<std::string>(slot);
    if (name == var->name) return c.invalid("slot '{}' is the variable '{}' itself", slot, name);
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (names[k] == name) return c.invalid("slots '{}' and '{}' are both '{}'", info.slots[k], slot, name);
    }
    names.push_back(name);
    // The slot's node is checked where the graph has it (always when the op is built; a worker's
    // partition may lack it, and the kernel then checks the slot's value).
    const Node* node = var->graph->find_locked(name);
    if (node == nullptr) continue;
    if (node->type != "VariableV2") {
      return c.invalid("slot '{}' names '{}', a {}, not a variable", slot, name, node->type);
    }
    if (node->output_dtypes[0] != dtype) {
      return c.invalid("slot '{}' ('{}') is {}, the variable '{}' is {}", slot, name,
                       dtype_name(node->output_dtypes[0]), var->name, dtype_name(dtype));
    }
    if (!shape.compatible_with(node->output_shapes[0])) {
      return c.invalid("variable '{}' has shape {}, slot '{}' ('{}') has shape {}", var->name, shape.to_string(), slot,
                       name, node->output_shapes[0].to_string());
    }
  }
  c.add_output(dtype, shape);
  return Status();
}

// CountUpTo: an int32 or int64 scalar variable; the output is its value before the increment.
Status count_up_to_shape(ShapeContext& c) {
  const Node* var = variable_of(c);
  if (var == nullptr) return c.invalid("must act on a variable");
  const DType dtype = var->output_dtypes[0];
  const Shape& shape = var->output_shapes[0];
  if (dtype != DType::Int32 && dtype != DType::Int64) {
    return c.invalid("variable '{}' is {}: CountUpTo counts in int32 or int64", var->name, dtype_name(dtype));
  }
  if (!shape.unknown_rank() && shape.rank() != 0) {
    return c.invalid("variable '{}' has shape {}: CountUpTo counts in a scalar", var->name, shape.to_string());
  }
  if (c.num_inputs() != 0) return c.invalid("expects no inputs, got {}", c.num_inputs());
  c.add_output(dtype, Shape{});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"ApplyGradientDescent", apply_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"ApplyMomentum", apply_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"ApplyAdam", apply_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"ApplyAdagrad", apply_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"ApplyRMSProp", apply_shape, /*stateful=*/true});
// A host kernel (as TensorFlow's): its variable is placed on the host with it.
TESSERA_REGISTER_OP(OpDef{"CountUpTo", count_up_to_shape, /*stateful=*/true, /*host_only=*/true});

// State updates, as Assign: no gradient flows through them (TensorFlow registers none either).
TESSERA_NOT_DIFFERENTIABLE("ApplyGradientDescent");
TESSERA_NOT_DIFFERENTIABLE("ApplyMomentum");
TESSERA_NOT_DIFFERENTIABLE("ApplyAdam");
TESSERA_NOT_DIFFERENTIABLE("ApplyAdagrad");
TESSERA_NOT_DIFFERENTIABLE("ApplyRMSProp");
TESSERA_NOT_DIFFERENTIABLE("CountUpTo");

// Adds the Apply* op `type` updating `var` and `slots` (in the op's slot order) from `inputs`.
Output add_apply(const char* type, const Variable& var, const std::vector<Variable>& slots, std::vector<Output> inputs,
                 AttrMap attrs, bool use_locking, std::string name) {
  const ApplyOpInfo& info = *find_apply_op(type);
  Node* v = var.op().node();
  GraphImpl& g = *v->graph;
  NodeSpec spec{type, name.empty() ? v->name + "/" + type : std::move(name)};
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.attrs["use_locking"] = use_locking;
  spec.resource = v;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    Node* s = slots[k].op().node();
    if (s->graph != &g) {
      throw InvalidArgumentError(fmt::format("{} of '{}': slot '{}' ('{}') belongs to another graph", type, v->name,
                                             info.slots[k], s->name));
    }
    spec.attrs[info.slots[k]] = s->name;
  }
  // One colocation group: the op, its variable (its resource) and its slots.
  GraphScope restore([&g, saved = g.colocation_scope_] { g.colocation_scope_ = saved; });
  for (const Variable& s : slots) g.colocation_scope_.push_back(s.op().node());
  return Output(g.add_node(std::move(spec)), 0);
}

}  // namespace

std::span<const ApplyOpInfo> apply_ops() {
  // A function's static, made on first use: kernels register through it during static
  // initialization, in whatever order the translation units run.
  static const ApplyOpInfo kOps[] = {
      {"ApplyGradientDescent", ApplyKind::kGradientDescent, {}, {"alpha", "delta"}, 1},
      {"ApplyMomentum", ApplyKind::kMomentum, {"accum"}, {"lr", "grad", "momentum"}, 1},
      {"ApplyAdam", ApplyKind::kAdam, {"m", "v"},
       {"beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"}, 6},
      {"ApplyAdagrad", ApplyKind::kAdagrad, {"accum"}, {"lr", "grad"}, 1},
      {"ApplyRMSProp", ApplyKind::kRMSProp, {"ms", "mom"}, {"lr", "rho", "momentum", "epsilon", "grad"}, 4},
  };
  return kOps;
}

const ApplyOpInfo* find_apply_op(std::string_view type) {
  for (const ApplyOpInfo& info : apply_ops()) {
    if (type == info.type) return &info;
  }
  return nullptr;
}

Output apply_gradient_descent(const Variable& var, Output alpha, Output delta, bool use_locking, std::string name) {
  return add_apply("ApplyGradientDescent", var, {}, {alpha, delta}, {}, use_locking, std::move(name));
}

Output apply_momentum(const Variable& var, const Variable& accum, Output lr, Output grad, Output momentum,
                      bool use_locking, bool use_nesterov, std::string name) {
  return add_apply("ApplyMomentum", var, {accum}, {lr, grad, momentum}, {{"use_nesterov", use_nesterov}}, use_locking,
                   std::move(name));
}

Output apply_adam(const Variable& var, const Variable& m, const Variable& v, Output beta1_power, Output beta2_power,
                  Output lr, Output beta1, Output beta2, Output epsilon, Output grad, bool use_locking,
                  std::string name) {
  return add_apply("ApplyAdam", var, {m, v}, {beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad}, {},
                   use_locking, std::move(name));
}

Output apply_adagrad(const Variable& var, const Variable& accum, Output lr, Output grad, bool use_locking,
                     std::string name) {
  return add_apply("ApplyAdagrad", var, {accum}, {lr, grad}, {}, use_locking, std::move(name));
}

Output apply_rms_prop(const Variable& var, const Variable& ms, const Variable& mom, Output lr, Output rho,
                      Output momentum, Output epsilon, Output grad, bool use_locking, std::string name) {
  return add_apply("ApplyRMSProp", var, {ms, mom}, {lr, rho, momentum, epsilon, grad}, {}, use_locking,
                   std::move(name));
}

// ---- ApplyVariables ----

ApplyVariables::ApplyVariables(const Node& node)
    : node_(node), info_(*find_apply_op(node.type)), use_nesterov_(node.attr_or("use_nesterov", false)) {
  for (const char* slot : info_.slots) slot_names_.push_back(node.attr<std::string>(slot));
}

Status ApplyVariables::lock(OpKernelContext& ctx, const std::string& memory, Locked* out) {
  Locked l;
  auto var = var_.get(ctx.resources(), *node_.resource);
  if (!var.ok()) return var.status();
  l.vars.push_back(var.value());
  for (std::size_t k = 0; k < slot_names_.size(); ++k) {
    const std::string& name = slot_names_[k];
    auto slot = slots_[k].get([&]() -> StatusOr<std::shared_ptr<VariableResource>> {
      auto found = ctx.resources().lookup<VariableResource>(name);
      // Not yet created by any kernel: not initialized either (the message check_initialized gives).
      if (found.status().code() == ErrorCode::kNotFound) {
        return errors::failed_precondition("attempting to use uninitialized value {}", name);
      }
      return found;
    });
    if (!slot.ok()) return slot.status();
    for (const VariableResource* seen : l.vars) {
      if (seen == slot.value()) {
        return errors::invalid_argument("slot '{}' is '{}', which the op already updates", info_.slots[k], name);
      }
    }
    l.vars.push_back(slot.value());
  }
  for (VariableResource* v : l.vars) l.locks.emplace_back(v->mu, std::defer_lock);
  static_assert(training::kMaxApplySlots == 2, "the switch below locks at most 3 variables");
  switch (l.locks.size()) {
    case 1: l.locks[0].lock(); break;
    case 2: std::lock(l.locks[0], l.locks[1]); break;
    default: std::lock(l.locks[0], l.locks[1], l.locks[2]); break;
  }
  TESSERA_RETURN_IF_ERROR(check_locked(ctx, memory, l));
  *out = std::move(l);
  return Status();
}

Status ApplyVariables::check_locked(OpKernelContext& ctx, const std::string& memory, const Locked& l) const {
  for (const VariableResource* v : l.vars) {
    TESSERA_RETURN_IF_ERROR(v->check_initialized());
    TESSERA_RETURN_IF_ERROR(v->check_memory(memory, node_.debug_name()));
  }
  const VariableResource& var = *l.vars[0];
  const DType dtype = var.value.dtype();
  const Shape& shape = var.value.shape();
  if (!dtype_is_floating(dtype)) {
    return errors::invalid_argument("variable '{}' is {}: the update needs a floating point variable", var.name(),
                                    dtype_name(dtype));
  }
  for (std::size_t k = 1; k < l.vars.size(); ++k) {
    const VariableResource& slot = *l.vars[k];
    if (slot.value.dtype() != dtype) {
      return errors::invalid_argument("slot '{}' ('{}') is {}, the variable '{}' is {}", info_.slots[k - 1], slot.name(),
                                      dtype_name(slot.value.dtype()), var.name(), dtype_name(dtype));
    }
    if (slot.value.shape() != shape) {
      return errors::invalid_argument("variable '{}' has shape {}, slot '{}' ('{}') has shape {}", var.name(),
                                      shape.to_string(), info_.slots[k - 1], slot.name(),
                                      slot.value.shape().to_string());
    }
  }
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const char* input = info_.inputs[static_cast<std::size_t>(i)];
    const Tensor& t = ctx.input(i);
    if (t.dtype() != dtype) {
      return errors::invalid_argument("{} is {}, the variable '{}' is {}", input, dtype_name(t.dtype()), var.name(),
                                      dtype_name(dtype));
    }
    if (i == info_.grad && t.shape() != shape) {
      return errors::invalid_argument("variable '{}' has shape {}, {} has shape {}", var.name(), shape.to_string(),
                                      input, t.shape().to_string());
    }
    if (i != info_.grad && t.shape().rank() != 0) {
      return errors::invalid_argument("{} must be a scalar, got shape {}", input, t.shape().to_string());
    }
  }
  return Status();
}

Tensor writable_value(OpKernelContext& ctx, const Tensor& value) {
  return value.is_buffer_shared() ? ctx.allocate_temp(value.dtype(), value.shape()) : value;
}

}  // namespace internal

namespace ops {

Output count_up_to(const Variable& ref, int64_t limit, std::string name) {
  internal::Node* var = ref.op().node();
  internal::NodeSpec spec{"CountUpTo", std::move(name)};
  spec.attrs["limit"] = limit;
  spec.resource = var;
  return Output(var->graph->add_node(std::move(spec)), 0);
}

}  // namespace ops
}  // namespace tessera
