// CUDA kernels for the comparisons, the logical ops, SelectV2, GatherV2, OneHot, ArgMax/ArgMin and
// AddN, with the semantics of kernels/select_ops.cc element for element: the 16-bit floats compare
// and add in float32 (AddN rounds once per launch of up to kMaxAddN inputs), NaN compares unequal,
// ArgMax/ArgMin pick the first extreme (a NaN wins), integer sums wrap. Grid-stride loops, one
// output element per step; broadcast offsets from the merged dims of SelectGeometry.
#include <cstdint>

#include "core/arg_extreme.h"
#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

__device__ __forceinline__ int64_t offset_of(const SelectGeometry& g, int k, int64_t i) {
  int64_t off = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    off += (i % g.dims[d]) * g.strides[k][d];
    i /= g.dims[d];
  }
  return off;
}

template <CompareKind kOp, class T>
__device__ __forceinline__ bool compare(T a, T b) {
  if constexpr (kOp == CompareKind::kLogicalAnd) {
    return a && b;
  } else if constexpr (kOp == CompareKind::kLogicalOr) {
    return a || b;
  } else {
    const auto x = widen(a);
    const auto y = widen(b);
    switch (kOp) {
      case CompareKind::kEqual: return x == y;
      case CompareKind::kNotEqual: return x != y;
      case CompareKind::kLess: return x < y;
      case CompareKind::kLessEqual: return x <= y;
      case CompareKind::kGreater: return x > y;
      default: return x >= y;
    }
  }
}

template <CompareKind kOp, class T>
__global__ void compare_kernel(SelectGeometry g, const T* a, const T* b, bool* out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    out[i] = compare<kOp>(a[offset_of(g, 0, i)], b[offset_of(g, 1, i)]);
  }
}

template <class T>
cudaError_t compare_typed(CompareKind op, const SelectGeometry& g, const T* a, const T* b, bool* out, int64_t n,
                          cudaStream_t s) {
  const unsigned blocks = blocks_for(n, kThreads);
  switch (op) {
#define TESSERA_COMPARE_CASE(K) \
  case CompareKind::K: compare_kernel<CompareKind::K><<<blocks, kThreads, 0, s>>>(g, a, b, out, n); break;
    TESSERA_COMPARE_CASE(kEqual)
    TESSERA_COMPARE_CASE(kNotEqual)
    TESSERA_COMPARE_CASE(kLess)
    TESSERA_COMPARE_CASE(kLessEqual)
    TESSERA_COMPARE_CASE(kGreater)
    TESSERA_COMPARE_CASE(kGreaterEqual)
#undef TESSERA_COMPARE_CASE
    case CompareKind::kLogicalAnd:
    case CompareKind::kLogicalOr:
      if constexpr (std::is_same_v<T, bool>) {
        if (op == CompareKind::kLogicalAnd) {
          compare_kernel<CompareKind::kLogicalAnd><<<blocks, kThreads, 0, s>>>(g, a, b, out, n);
        } else {
          compare_kernel<CompareKind::kLogicalOr><<<blocks, kThreads, 0, s>>>(g, a, b, out, n);
        }
        break;
      }
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

__global__ void logical_not_kernel(const bool* x, bool* out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = !x[i];
}

template <class U>  // an unsigned type of the element's size
__global__ void select_kernel(SelectGeometry g, const bool* cond, const U* x, const U* y, U* out, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    out[i] = cond[offset_of(g, 0, i)] ? x[offset_of(g, 1, i)] : y[offset_of(g, 2, i)];
  }
}

template <class U, class I>
__global__ void gather_kernel(const U* params, const I* indices, U* out, int64_t outer, int64_t limit, int64_t m,
                              int64_t inner, unsigned long long* bad) {
  for_each_indexed(
      indices, outer, limit, m, inner, bad, [&](int64_t e, int64_t from) { out[e] = params[from]; },
      [&](int64_t e) { out[e] = U{0}; });
}

template <class I>
__global__ void one_hot_kernel(const I* indices, float* out, int64_t n, int64_t depth, float on, float off) {
  const int64_t total = n * depth;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    out[e] = static_cast<int64_t>(indices[e / depth]) == e % depth ? on : off;
  }
}

template <bool kMax, class T>
__global__ void arg_kernel(const T* x, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t e = global_thread(); e < outer * inner; e += grid_threads()) {
    out[e] = arg_extreme<kMax>(x + (e / inner) * n * inner + e % inner, n, inner, Widen{});
  }
}

template <class T>
__global__ void add_n_kernel(AddNInputs in, T* out, int64_t n) {
  using A = std::conditional_t<std::is_integral_v<T>, std::make_unsigned_t<std::conditional_t<std::is_integral_v<T>, T, int>>,
                               Accumulate<T>>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    A acc = static_cast<A>(widen(static_cast<const T*>(in.p[0])[i]));
    for (int k = 1; k < in.count; ++k) acc += static_cast<A>(widen(static_cast<const T*>(in.p[k])[i]));
    out[i] = narrow<T>(static_cast<Accumulate<T>>(acc));
  }
}

}  // namespace

cudaError_t launch_compare(CompareKind op, Elem elem, const SelectGeometry& geometry, const void* a, const void* b,
                           bool* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    return compare_typed<T>(op, geometry, static_cast<const T*>(a), static_cast<const T*>(b), out, n, stream);
  });
}

cudaError_t launch_logical_not(const bool* x, bool* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  logical_not_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t launch_select(int elem_bytes, const SelectGeometry& geometry, const bool* cond, const void* x,
                          const void* y, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return visit_size(elem_bytes, [&](auto type) -> cudaError_t {
    using U = decltype(type);
    select_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(geometry, cond, static_cast<const U*>(x),
                                                                     static_cast<const U*>(y), static_cast<U*>(out), n);
    return cudaGetLastError();
  });
}

cudaError_t launch_gather(int elem_bytes, bool int64_indices, const void* params, const void* indices, void* out,
                          int64_t outer, int64_t limit, int64_t m, int64_t inner, int64_t* bad, cudaStream_t stream) {
  const int64_t total = outer * m * inner;
  return visit_size(elem_bytes, [&](auto type) -> cudaError_t {
    using U = decltype(type);
    return launch_with_index_check(int64_indices, indices, m, bad, stream, [&](const auto* idx, auto* flag) {
      if (total <= 0) return;
      gather_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          static_cast<const U*>(params), idx, static_cast<U*>(out), outer, limit, m, inner, flag);
    });
  });
}

cudaError_t launch_one_hot(bool int64_indices, const void* indices, float* out, int64_t n, int64_t depth, float on,
                           float off, cudaStream_t stream) {
  if (n * depth <= 0) return cudaSuccess;
  const unsigned blocks = blocks_for(n * depth, kThreads);
  visit_indices(int64_indices, indices, [&](const auto* idx) {
    one_hot_kernel<<<blocks, kThreads, 0, stream>>>(idx, out, n, depth, on, off);
  });
  return cudaGetLastError();
}

cudaError_t launch_arg_reduce(bool max, Elem elem, const void* x, int64_t* out, int64_t outer, int64_t n,
                              int64_t inner, cudaStream_t stream) {
  if (outer * inner <= 0) return cudaSuccess;
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      const unsigned blocks = blocks_for(outer * inner, kThreads);
      if (max) {
        arg_kernel<true><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), out, outer, n, inner);
      } else {
        arg_kernel<false><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), out, outer, n, inner);
      }
      return cudaGetLastError();
    }
  });
}

cudaError_t launch_add_n(Elem elem, const AddNInputs& inputs, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (inputs.count < 1 || inputs.count > kMaxAddN) return cudaErrorInvalidValue;
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      add_n_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(inputs, static_cast<T*>(out), n);
      return cudaGetLastError();
    }
  });
}

}  // namespace tessera::internal::gpu
