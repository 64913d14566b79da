// CUDA kernels of the fused optimizer updates: one grid-stride loop per rule of
// core/training_rules.h (the CPU kernels' rules, so both evaluate the same expressions in the same
// order; --fmad=false keeps the GPU from contracting them). Each thread reads the scalar
// hyper-parameters from device memory and builds the rule itself (Adam's lr_t too): a few
// arithmetic operations, and no host round trip.
#include <cstdint>
#include <type_traits>

#include "device/cuda/gpu_common.cuh"
#include "device/cuda/training_launch.h"

namespace tessera::internal::gpu {
namespace {

using training::kMaxApplyScalars;
using training::kMaxApplySlots;

template <class Rule, class T>
__global__ void apply_kernel(ApplyPointers p, bool use_nesterov, int64_t n) {
  using C = Accumulate<T>;
  C scalars[kMaxApplyScalars] = {};
  for (int k = 0; k < kMaxApplyScalars; ++k) {
    if (p.scalars[k] != nullptr) scalars[k] = widen(*static_cast<const T*>(p.scalars[k]));
  }
  const Rule rule(scalars, use_nesterov);
  const T* var_in = static_cast<const T*>(p.var_in);
  T* var_out = static_cast<T*>(p.var_out);
  const T* grad = static_cast<const T*>(p.grad);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    C var = widen(var_in[i]);
    C slots[kMaxApplySlots] = {};
    for (int k = 0; k < Rule::kSlots; ++k) slots[k] = widen(static_cast<const T*>(p.slot_in[k])[i]);
    rule(var, slots, widen(grad[i]));
    var_out[i] = narrow<T>(var);
    for (int k = 0; k < Rule::kSlots; ++k) static_cast<T*>(p.slot_out[k])[i] = narrow<T>(slots[k]);
  }
}

}  // namespace

cudaError_t launch_apply(training::ApplyKind kind, bool use_nesterov, Elem elem, const ApplyPointers& p, int64_t n,
                         cudaStream_t stream) {
  return visit_elem(elem, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;
    } else {
      return training::visit_rule<Accumulate<T>>(kind, [&](auto* rule_tag) -> cudaError_t {
        using Rule = std::remove_pointer_t<decltype(rule_tag)>;
        apply_kernel<Rule, T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(p, use_nesterov, n);
        return cudaGetLastError();
      });
    }
  });
}

}  // namespace tessera::internal::gpu
