// The update rules of the fused optimizer ops (TensorFlow 1's tensorflow/core/kernels/
// training_ops.cc), one element at a time, shared by the CPU kernels (kernels/training_ops.cc) and
// the CUDA kernels (device/cuda/training_kernels.cu) so that both evaluate the same expressions in
// the same order. Plain arithmetic on the compute type C (float for the 16-bit floats, which are
// widened on load and rounded once on store), no tessera types: nvcc compiles this header alone.
//
//   AdamRule<float> rule(scalars, /*nesterov=*/false);   // once per apply: lr_t
//   float slots[2] = {m[i], v[i]};
//   rule(var[i], slots, grad[i]);                          // per element
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace tessera::internal::training {

// The ops, as the kernels dispatch on them. The scalar hyper-parameters arrive in the op's input
// order with the gradient left out (core/training_ops.h, kApplyOps).
enum class ApplyKind : int { kGradientDescent, kMomentum, kAdam, kAdagrad, kRMSProp };
inline constexpr int kMaxApplySlots = 2;
inline constexpr int kMaxApplyScalars = 6;

template <class C>
TESSERA_HOST_DEVICE inline C rule_sqrt(C x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// var -= alpha * delta. Scalars: alpha.
template <class C>
struct GradientDescentRule {
  static constexpr int kSlots = 0;
  C alpha;
  TESSERA_HOST_DEVICE GradientDescentRule(const C* s, bool) : alpha(s[0]) {}
  TESSERA_HOST_DEVICE void operator()(C& var, C*, C delta) const { var -= alpha * delta; }
};

// accum = accum * momentum + grad; var -= lr * accum, or with Nesterov
// var -= grad * lr + accum * momentum * lr. Scalars: lr, momentum. Slots: accum.
template <class C>
struct MomentumRule {
  static constexpr int kSlots = 1;
  C lr, momentum;
  bool nesterov;
  TESSERA_HOST_DEVICE MomentumRule(const C* s, bool use_nesterov) : lr(s[0]), momentum(s[1]), nesterov(use_nesterov) {}
  TESSERA_HOST_DEVICE void operator()(C& var, C* slot, C g) const {
    C& accum = slot[0];
    accum = accum * momentum + g;
    if (nesterov) {
      var -= g * lr + accum * momentum * lr;
    } else {
      var -= lr * accum;
    }
  }
};

// lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power); m += (g - m) * (1 - beta1);
// v += (g * g - v) * (1 - beta2); var -= m * lr_t / (sqrt(v) + epsilon).
// Scalars: beta1_power, beta2_power, lr, beta1, beta2, epsilon. Slots: m, v.
template <class C>
struct AdamRule {
  static constexpr int kSlots = 2;
  C lr_t, one_minus_beta1, one_minus_beta2, epsilon;
  TESSERA_HOST_DEVICE AdamRule(const C* s, bool)
      : lr_t(s[2] * rule_sqrt(C(1) - s[1]) / (C(1) - s[0])), one_minus_beta1(C(1) - s[3]),
        one_minus_beta2(C(1) - s[4]), epsilon(s[5]) {}
  TESSERA_HOST_DEVICE void operator()(C& var, C* slot, C g) const {
    C& m = slot[0];
    C& v = slot[1];
    m += (g - m) * one_minus_beta1;
    v += (g * g - v) * one_minus_beta2;
    var -= m * lr_t / (rule_sqrt(v) + epsilon);
  }
};

// accum += g * g; var -= lr * g / sqrt(accum). Scalars: lr. Slots: accum.
template <class C>
struct AdagradRule {
  static constexpr int kSlots = 1;
  C lr;
  TESSERA_HOST_DEVICE AdagradRule(const C* s, bool) : lr(s[0]) {}
  TESSERA_HOST_DEVICE void operator()(C& var, C* slot, C g) const {
    C& accum = slot[0];
    accum += g * g;
    var -= lr * g / rule_sqrt(accum);
  }
};

// ms += (g * g - ms) * (1 - rho); mom = mom * momentum + lr * g / sqrt(ms + epsilon); var -= mom.
// Scalars: lr, rho, momentum, epsilon. Slots: ms, mom.
template <class C>
struct RMSPropRule {
  static constexpr int kSlots = 2;
  C lr, one_minus_rho, momentum, epsilon;
  TESSERA_HOST_DEVICE RMSPropRule(const C* s, bool) : lr(s[0]), one_minus_rho(C(1) - s[1]), momentum(s[2]), epsilon(s[3]) {}
  TESSERA_HOST_DEVICE void operator()(C& var, C* slot, C g) const {
    C& ms = slot[0];
    C& mom = slot[1];
    ms += (g * g - ms) * one_minus_rho;
    mom = mom * momentum + lr * g / rule_sqrt(ms + epsilon);
    var -= mom;
  }
};

// Calls fn((Rule*)nullptr) with the rule type of `kind` for compute type C: a tag from which fn
// picks its loop (host code: the kernels dispatch once per apply).
template <class C, class Fn>
inline auto visit_rule(ApplyKind kind, Fn&& fn) {
  switch (kind) {
    case ApplyKind::kMomentum: return fn(static_cast<MomentumRule<C>*>(nullptr));
    case ApplyKind::kAdam: return fn(static_cast<AdamRule<C>*>(nullptr));
    case ApplyKind::kAdagrad: return fn(static_cast<AdagradRule<C>*>(nullptr));
    case ApplyKind::kRMSProp: return fn(static_cast<RMSPropRule<C>*>(nullptr));
    case ApplyKind::kGradientDescent: break;
  }
  return fn(static_cast<GradientDescentRule<C>*>(nullptr));
}

}  // namespace tessera::internal::training
