// CUDA kernels for the neural-network ops, with the semantics of kernels/nn_ops.cc: the softmax
// family one block per row (the row's maximum and sum of exponentials by warp shuffles, then
// across warps through shared memory; 16-bit floats computed in float32 and rounded once per
// result), BiasAddGrad as 32 columns per block with 8 row lanes, L2Loss as float64 per-block sums
// then one block (deterministic), GatherGrad by atomicAdd (repeats accumulate in any order), and
// grid-stride elementwise loops for the rest. Dropout and TruncatedNormal draw from philox.cuh as
// the CPU kernels do from kernels/random_stream.h: the same blocks give the same masks.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "device/cuda/philox.cuh"

namespace tessera::internal::gpu {
namespace {

inline constexpr int kWarp = 32;

template <class T>
inline constexpr bool is_number = !std::is_same_v<T, bool>;

struct MaxOp {
  // NaN never wins (kernels/nn_ops.cc's row maximum skips it; the sum then makes the row NaN).
  template <class A> __device__ A operator()(A a, A b) const { return (b > a || a != a) ? b : a; }
};
struct SumOp {
  template <class A> __device__ A operator()(A a, A b) const { return a + b; }
};

// The reduction of every thread's `v` over the block (blockDim.x a multiple of 32, at most 1024),
// returned to every thread. `shared` holds 32 values; all threads must call it.
template <class A, class Op>
__device__ A block_reduce(A v, Op op, A identity, A* shared) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / kWarp) ? shared[lane] : identity;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

// A row's maximum and sum of exp(x - max), as kernels/nn_ops.cc's row_stats.
template <class T>
struct RowStats {
  Accumulate<T> max;
  Accumulate<T> sum;
};
template <class T>
__device__ RowStats<T> row_stats(const T* x, int64_t cols, Accumulate<T>* shared) {
  using A = Accumulate<T>;
  const A inf = static_cast<A>(INFINITY);
  A m = -inf;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = MaxOp{}(m, widen(x[j]));
  m = block_reduce(m, MaxOp{}, -inf, shared);
  A s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += exp(widen(x[j]) - m);
  s = block_reduce(s, SumOp{}, A{0}, shared);
  return {m, s};
}

template <class T, bool kLog>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  using A = Accumulate<T>;
  __shared__ A shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const RowStats<T> s = row_stats(xr, cols, shared);
    if constexpr (kLog) {
      const A log_sum = log(s.sum);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = narrow<T>(widen(xr[j]) - s.max - log_sum);
    } else {
      const A inv = A{1} / s.sum;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = narrow<T>(exp(widen(xr[j]) - s.max) * inv);
    }
  }
}

template <class T>
__global__ void xent_kernel(const T* __restrict__ labels, const T* __restrict__ logits, T* __restrict__ loss,
                            T* __restrict__ backprop, int64_t rows, int64_t cols) {
  using A = Accumulate<T>;
  __shared__ A shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* lr = logits + r * cols;
    const T* yr = labels + r * cols;
    T* br = backprop + r * cols;
    const RowStats<T> s = row_stats(lr, cols, shared);
    const A log_sum = log(s.sum);
    A total = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A shifted = widen(lr[j]) - s.max;
      br[j] = narrow<T>(exp(shifted) / s.sum - widen(yr[j]));
      total += widen(yr[j]) * (log_sum - shifted);
    }
    total = block_reduce(total, SumOp{}, A{0}, shared);
    if (threadIdx.x == 0) loss[r] = narrow<T>(total);
  }
}

template <class T, class L>
__global__ void sparse_xent_kernel(const L* __restrict__ labels, const T* __restrict__ logits, T* __restrict__ loss,
                                   T* __restrict__ backprop, int64_t rows, int64_t cols, unsigned long long* bad) {
  using A = Accumulate<T>;
  __shared__ A shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* lr = logits + r * cols;
    T* br = backprop + r * cols;
    const auto k = static_cast<int64_t>(labels[r]);
    if (k < 0 || k >= cols) {  // the same for the whole block
      const T nan = narrow<T>(static_cast<A>(NAN));
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) br[j] = nan;
      if (threadIdx.x == 0) {
        loss[r] = nan;
        atomicMin(bad, static_cast<unsigned long long>(r));
      }
      continue;
    }
    const RowStats<T> s = row_stats(lr, cols, shared);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      br[j] = narrow<T>(exp(widen(lr[j]) - s.max) / s.sum - (j == k ? A{1} : A{0}));
    }
    if (threadIdx.x == 0) loss[r] = narrow<T>(log(s.sum) - (widen(lr[k]) - s.max));
  }
}

template <class T>
__global__ void bias_add_kernel(const T* __restrict__ value, const T* __restrict__ bias, T* __restrict__ out, int64_t n,
                                int64_t cols) {
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    out[e] = narrow<T>(wrapping_add(widen(value[e]), widen(bias[e % cols])));
  }
}

inline constexpr int kRowLanes = 8;

// Block (32, kRowLanes): column blockIdx.x * 32 + threadIdx.x, rows threadIdx.y, + kRowLanes, ...
template <class T>
__global__ void bias_add_grad_kernel(const T* __restrict__ dy, T* __restrict__ out, int64_t rows, int64_t cols) {
  using A = Accumulate<T>;
  __shared__ A partial[kRowLanes][kWarp + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  A sum = 0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum = wrapping_add(sum, widen(dy[r * cols + c]));
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    A total = 0;
    for (int k = 0; k < kRowLanes; ++k) total = wrapping_add(total, partial[k][threadIdx.x]);
    out[c] = narrow<T>(total);
  }
}

template <class T>
__global__ void l2_partial_kernel(const T* __restrict__ x, int64_t n, double* partials) {
  __shared__ double shared[kWarp];
  double sum = 0;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const auto v = static_cast<double>(widen(x[e]));
    sum += v * v;
  }
  sum = block_reduce(sum, SumOp{}, 0.0, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <class T>
__global__ void l2_final_kernel(const double* partials, T* out) {
  __shared__ double shared[kWarp];
  const double sum = block_reduce(partials[threadIdx.x], SumOp{}, 0.0, shared);
  if (threadIdx.x == 0) out[0] = narrow<T>(static_cast<Accumulate<T>>(sum / 2));
}

template <GradKind kOp, class A>
__device__ __forceinline__ A grad_of(A a, A b) {
  if constexpr (kOp == GradKind::kRelu) {
    return b > A{0} ? a : A{0};  // (gradients, features)
  } else if constexpr (kOp == GradKind::kTanh) {
    return b * (A{1} - a * a);  // (y, dy)
  } else if constexpr (kOp == GradKind::kSigmoid) {
    return b * a * (A{1} - a);
  } else {
    return b * A{0.5} / a;
  }
}

template <GradKind kOp, class T>
__global__ void elementwise_grad_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                        int64_t n) {
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    out[e] = narrow<T>(grad_of<kOp>(widen(a[e]), widen(b[e])));
  }
}

// atomicAdd for every number elem; int64 wraps through the unsigned add.
template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <class T, class I>
__global__ void gather_grad_kernel(const T* __restrict__ dy, const I* __restrict__ indices, T* out, int64_t outer,
                                   int64_t limit, int64_t m, int64_t inner, unsigned long long* bad) {
  for_each_indexed(
      indices, outer, limit, m, inner, bad, [&](int64_t e, int64_t to) { atomic_add(out + to, dy[e]); },
      [](int64_t) {});
}

// Thread j: the four elements of block first + j.
template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, T* __restrict__ mask, int64_t n,
                               float keep_prob, T scale, uint32_t k0, uint32_t k1, uint64_t first) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t j = global_thread(); j < blocks; j += grid_threads()) {
    const uint4 w = philox(first + static_cast<uint64_t>(j), k0, k1);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int64_t e = j * 4 + t;
      if (e >= n) break;
      const T m = uniform_float(words[t]) < keep_prob ? scale : narrow<T>(Accumulate<T>{0});
      mask[e] = m;
      y[e] = narrow<T>(widen(x[e]) * widen(m));
    }
  }
}

// Thread g: group g, from block first + g redrawn until it holds its values, as the CPU kernel.
template <class T>
__global__ void truncated_normal_kernel(T* __restrict__ out, int64_t n, uint32_t k0, uint32_t k1, uint64_t first) {
  constexpr int kPerBlock = sizeof(T) == 4 ? 4 : 2;
  const int64_t groups = (n + kPerBlock - 1) / kPerBlock;
  for (int64_t g = global_thread(); g < groups; g += grid_threads()) {
    const int64_t left = n - g * kPerBlock;
    const int want = left < kPerBlock ? static_cast<int>(left) : kPerBlock;
    int filled = 0;
    for (uint32_t redraw = 0; filled < want; ++redraw) {
      T z[kPerBlock];
      block_normals(philox(first + static_cast<uint64_t>(g), k0, k1, redraw), z);
      for (int t = 0; t < kPerBlock; ++t) {
        if (filled < want && fabs(z[t]) < T{2}) out[g * kPerBlock + filled++] = z[t];
      }
    }
  }
}

// Calls fn(T{}) for a floating point elem (kFloatingOnly) or for every number elem (not bool);
// cudaErrorInvalidValue for the others.
template <bool kFloatingOnly, class Fn>
cudaError_t visit_supported(Elem elem, Fn&& fn) {
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    if constexpr (kFloatingOnly ? is_floating<decltype(type)> : is_number<decltype(type)>) {
      return fn(type);
    } else {
      return cudaErrorInvalidValue;
    }
  });
}
template <class Fn>
cudaError_t visit_floating(Elem elem, Fn&& fn) {
  return visit_supported<true>(elem, std::forward<Fn>(fn));
}
template <class Fn>
cudaError_t visit_number(Elem elem, Fn&& fn) {
  return visit_supported<false>(elem, std::forward<Fn>(fn));
}

// Threads per row block: enough warps for the row, at most 256.
unsigned int row_threads(int64_t cols) {
  int64_t t = kWarp;
  while (t < kThreads && t < cols) t *= 2;
  return static_cast<unsigned int>(t);
}
unsigned int row_blocks(int64_t rows) { return static_cast<unsigned int>(rows < kMaxBlocks ? rows : kMaxBlocks); }

}  // namespace

cudaError_t launch_softmax(bool log, Elem elem, const void* x, void* y, int64_t rows, int64_t cols,
                           cudaStream_t stream) {
  return visit_floating(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    const auto* px = static_cast<const T*>(x);
    auto* py = static_cast<T*>(y);
    if (log) {
      softmax_kernel<T, true><<<row_blocks(rows), row_threads(cols), 0, stream>>>(px, py, rows, cols);
    } else {
      softmax_kernel<T, false><<<row_blocks(rows), row_threads(cols), 0, stream>>>(px, py, rows, cols);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_xent(Elem elem, const void* labels, const void* logits, void* loss, void* backprop, int64_t rows,
                        int64_t cols, cudaStream_t stream) {
  return visit_floating(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    xent_kernel<T><<<row_blocks(rows), row_threads(cols), 0, stream>>>(
        static_cast<const T*>(labels), static_cast<const T*>(logits), static_cast<T*>(loss), static_cast<T*>(backprop),
        rows, cols);
    return cudaGetLastError();
  });
}

cudaError_t launch_sparse_xent(Elem elem, bool int64_labels, const void* labels, const void* logits, void* loss,
                               void* backprop, int64_t rows, int64_t cols, int64_t* bad, cudaStream_t stream) {
  return visit_floating(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    return launch_with_index_check(int64_labels, labels, rows, bad, stream, [&](const auto* l, auto* flag) {
      sparse_xent_kernel<<<row_blocks(rows), row_threads(cols), 0, stream>>>(
          l, static_cast<const T*>(logits), static_cast<T*>(loss), static_cast<T*>(backprop), rows, cols, flag);
    });
  });
}

cudaError_t launch_bias_add(Elem elem, const void* value, const void* bias, void* out, int64_t n, int64_t cols,
                            cudaStream_t stream) {
  return visit_number(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    bias_add_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(value), static_cast<const T*>(bias), static_cast<T*>(out), n, cols);
    return cudaGetLastError();
  });
}

cudaError_t launch_bias_add_grad(Elem elem, const void* dy, void* out, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  return visit_number(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    const dim3 block(kWarp, kRowLanes);
    bias_add_grad_kernel<<<static_cast<unsigned int>((cols + kWarp - 1) / kWarp), block, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(out), rows, cols);
    return cudaGetLastError();
  });
}

cudaError_t launch_l2_loss(Elem elem, const void* x, void* out, int64_t n, double* scratch, cudaStream_t stream) {
  return visit_floating(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    l2_partial_kernel<<<kL2LossBlocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n, scratch);
    l2_final_kernel<<<1, kL2LossBlocks, 0, stream>>>(scratch, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t launch_elementwise_grad(GradKind op, Elem elem, const void* a, const void* b, void* out, int64_t n,
                                    cudaStream_t stream) {
  return visit_number(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    const auto* pa = static_cast<const T*>(a);
    const auto* pb = static_cast<const T*>(b);
    auto* po = static_cast<T*>(out);
    const unsigned int blocks = blocks_for(n, kThreads);
    if (op == GradKind::kRelu) {
      elementwise_grad_kernel<GradKind::kRelu><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n);
      return cudaGetLastError();
    }
    if constexpr (is_floating<T>) {
      switch (op) {
        case GradKind::kTanh:
          elementwise_grad_kernel<GradKind::kTanh><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n);
          break;
        case GradKind::kSigmoid:
          elementwise_grad_kernel<GradKind::kSigmoid><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n);
          break;
        default: elementwise_grad_kernel<GradKind::kSqrt><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n); break;
      }
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;  // the integers have ReluGrad only
    }
  });
}

cudaError_t launch_gather_grad(Elem elem, bool int64_indices, const void* dy, const void* indices, void* out,
                               int64_t outer, int64_t limit, int64_t m, int64_t inner, int64_t* bad,
                               cudaStream_t stream) {
  return visit_number(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    const int64_t out_bytes = outer * limit * inner * static_cast<int64_t>(sizeof(T));
    if (out_bytes > 0) {
      if (const cudaError_t e = cudaMemsetAsync(out, 0, static_cast<std::size_t>(out_bytes), stream);
          e != cudaSuccess) {
        return e;
      }
    }
    const int64_t total = outer * m * inner;
    return launch_with_index_check(int64_indices, indices, m, bad, stream, [&](const auto* idx, auto* flag) {
      if (total <= 0) return;
      gather_grad_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(dy), idx, static_cast<T*>(out), outer, limit, m, inner, flag);
    });
  });
}

cudaError_t launch_dropout(Elem elem, const void* x, void* y, void* mask, int64_t n, float keep_prob, double scale,
                           uint64_t key, uint64_t first_block, cudaStream_t stream) {
  return visit_floating(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    dropout_kernel<<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), static_cast<T*>(mask), n, keep_prob,
        narrow<T>(static_cast<Accumulate<T>>(scale)), static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32),
        first_block);
    return cudaGetLastError();
  });
}

cudaError_t launch_truncated_normal(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const auto k0 = static_cast<uint32_t>(key);
  const auto k1 = static_cast<uint32_t>(key >> 32);
  if (elem == Elem::kF32) {
    truncated_normal_kernel<float><<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(
        static_cast<float*>(out), n, k0, k1, first_block);
  } else if (elem == Elem::kF64) {
    truncated_normal_kernel<double><<<blocks_for((n + 1) / 2, kThreads), kThreads, 0, stream>>>(
        static_cast<double*>(out), n, k0, k1, first_block);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tessera::internal::gpu
