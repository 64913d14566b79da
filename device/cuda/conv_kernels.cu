// CUDA kernels of the convolutions and pools (gpu_conv_ops.cc), launchers in conv_launch.h: im2col
// and its inverse around cuBLAS's products, and the pools, with kernels/conv_ops.cc's semantics.
// Grid-stride loops, one output element per step. The gradients gather instead of scattering:
// each thread owns one element of dx and adds what every window covering it sends, in the CPU
// kernel's order, so sums are the same on every run (no atomics) and the pools' gradients are the
// CPU's bit for bit.
#include <cstdint>

#include "device/cuda/conv_launch.h"
#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

// The output positions whose windows cover input index `i` along one dim: [first, last] (empty
// when first > last), clipped to [0, out).
struct Covering {
  int64_t first;
  int64_t last;
};
__device__ __forceinline__ Covering covering(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out) {
  // Output o covers i when o * stride - pad <= i < o * stride - pad + k.
  const int64_t hi = i + pad;     // o * stride <= hi
  const int64_t lo = hi - k + 1;  // o * stride >= lo
  const int64_t first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int64_t last = min(hi / stride, out - 1);
  return {first, last};
}

// Input element i as (image, row, column, channel), and the output rows and columns whose
// windows cover it.
struct InputCover {
  int64_t n, h, w, c;
  Covering oh, ow;
};
__device__ __forceinline__ InputCover input_cover(const ConvGeometry& g, int64_t i) {
  const int64_t c = i % g.in_c;
  const int64_t w = (i / g.in_c) % g.in_w;
  const int64_t h = (i / (g.in_c * g.in_w)) % g.in_h;
  const int64_t n = i / (g.in_c * g.in_w * g.in_h);
  return {n, h, w, c, covering(h, g.k_h, g.stride_h, g.pad_top, g.out_h),
          covering(w, g.k_w, g.stride_w, g.pad_left, g.out_w)};
}

template <class T>
__global__ void im2col_kernel(ConvGeometry g, const T* __restrict__ x, int64_t row0, int64_t rows,
                              T* __restrict__ patches) {
  const int64_t k = g.k_h * g.k_w * g.in_c;
  const int64_t n_total = rows * k;
  for (int64_t i = global_thread(); i < n_total; i += grid_threads()) {
    const int64_t row = row0 + i / k;
    int64_t rest = i % k;
    const int64_t c = rest % g.in_c;
    rest /= g.in_c;
    const int64_t kw = rest % g.k_w;
    const int64_t kh = rest / g.k_w;
    const int64_t ow = row % g.out_w;
    const int64_t oh = (row / g.out_w) % g.out_h;
    const int64_t n = row / (g.out_w * g.out_h);
    const int64_t h = oh * g.stride_h - g.pad_top + kh;
    const int64_t w = ow * g.stride_w - g.pad_left + kw;
    const bool inside = h >= 0 && h < g.in_h && w >= 0 && w < g.in_w;
    patches[i] = inside ? x[((n * g.in_h + h) * g.in_w + w) * g.in_c + c] : T(0);
  }
}

template <class T>
__global__ void col2im_add_kernel(ConvGeometry g, const T* __restrict__ patches, int64_t row0, int64_t rows,
                                  T* __restrict__ dx, int64_t n_total) {
  const int64_t k = g.k_h * g.k_w * g.in_c;
  for (int64_t i = global_thread(); i < n_total; i += grid_threads()) {
    const auto [n, h, w, c, oh, ow] = input_cover(g, i);
    T sum = dx[i];
    for (int64_t y = oh.first; y <= oh.last; ++y) {
      for (int64_t xo = ow.first; xo <= ow.last; ++xo) {
        const int64_t row = (n * g.out_h + y) * g.out_w + xo;
        if (row < row0 || row >= row0 + rows) continue;
        const int64_t kh = h + g.pad_top - y * g.stride_h;
        const int64_t kw = w + g.pad_left - xo * g.stride_w;
        sum += patches[(row - row0) * k + (kh * g.k_w + kw) * g.in_c + c];
      }
    }
    dx[i] = sum;
  }
}

// Output element o's window inside the input: rows [h0, h1), columns [w0, w1), and the offset of
// its (image, channel) in x.
struct Window {
  int64_t h0, h1, w0, w1, base;
};
__device__ __forceinline__ Window window_of(const ConvGeometry& g, int64_t o) {
  const int64_t c = o % g.in_c;
  const int64_t ow = (o / g.in_c) % g.out_w;
  const int64_t oh = (o / (g.in_c * g.out_w)) % g.out_h;
  const int64_t n = o / (g.in_c * g.out_w * g.out_h);
  const int64_t hb = oh * g.stride_h - g.pad_top;
  const int64_t wb = ow * g.stride_w - g.pad_left;
  return {max(hb, int64_t{0}), min(hb + g.k_h, g.in_h), max(wb, int64_t{0}), min(wb + g.k_w, g.in_w),
          n * g.in_h * g.in_w * g.in_c + c};
}

// The first largest element of the window (kernels/conv_ops.cc's argmax_of).
template <class T>
__device__ __forceinline__ int64_t argmax_in(const ConvGeometry& g, const T* x, const Window& win) {
  int64_t best = win.base + (win.h0 * g.in_w + win.w0) * g.in_c;
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) {
      const int64_t i = win.base + (h * g.in_w + w) * g.in_c;
      if (x[i] > x[best]) best = i;
    }
  }
  return best;
}

template <class T>
__global__ void max_pool_kernel(ConvGeometry g, const T* __restrict__ x, T* __restrict__ y, int64_t n_out) {
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) y[o] = x[argmax_in(g, x, window_of(g, o))];
}

template <class T>
__global__ void argmax_kernel(ConvGeometry g, const T* __restrict__ x, int64_t* __restrict__ argmax, int64_t n_out) {
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) argmax[o] = argmax_in(g, x, window_of(g, o));
}

template <class T>
__global__ void avg_pool_kernel(ConvGeometry g, const T* __restrict__ x, T* __restrict__ y, int64_t n_out) {
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) {
    const Window win = window_of(g, o);
    T sum = 0;
    for (int64_t h = win.h0; h < win.h1; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) sum += x[win.base + (h * g.in_w + w) * g.in_c];
    }
    y[o] = sum / static_cast<T>((win.h1 - win.h0) * (win.w1 - win.w0));
  }
}

// dx[i] = the sum, over the windows covering i in output order, of what each sends it: dy[o]
// where i is the window's argmax (max), dy[o] / the window's in-bounds size (avg).
template <bool kMax, class T>
__global__ void pool_grad_kernel(ConvGeometry g, const T* __restrict__ dy, const int64_t* __restrict__ argmax,
                                 T* __restrict__ dx, int64_t n_in) {
  for (int64_t i = global_thread(); i < n_in; i += grid_threads()) {
    const InputCover in = input_cover(g, i);
    T sum = 0;
    for (int64_t y = in.oh.first; y <= in.oh.last; ++y) {
      for (int64_t xo = in.ow.first; xo <= in.ow.last; ++xo) {
        const int64_t o = ((in.n * g.out_h + y) * g.out_w + xo) * g.in_c + in.c;
        if constexpr (kMax) {
          if (argmax[o] == i) sum += dy[o];
        } else {
          const Window win = window_of(g, o);
          sum += dy[o] / static_cast<T>((win.h1 - win.h0) * (win.w1 - win.w0));
        }
      }
    }
    dx[i] = sum;
  }
}

// Calls fn(T{}) for float and double, the dtypes the convolutions and pools take.
template <class Fn>
cudaError_t visit_float(Elem elem, Fn&& fn) {
  if (elem == Elem::kF32) return fn(float{});
  if (elem == Elem::kF64) return fn(double{});
  return cudaErrorInvalidValue;
}

int64_t in_elements(const ConvGeometry& g) { return g.batch * g.in_h * g.in_w * g.in_c; }
int64_t out_elements(const ConvGeometry& g) { return g.batch * g.out_h * g.out_w * g.out_c; }

}  // namespace

cudaError_t launch_im2col(Elem elem, const ConvGeometry& g, const void* x, int64_t row0, int64_t rows, void* patches,
                          cudaStream_t stream) {
  return visit_float(elem, [&](auto type) {
    using T = decltype(type);
    const int64_t n = rows * g.k_h * g.k_w * g.in_c;
    im2col_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, static_cast<const T*>(x), row0, rows,
                                                                    static_cast<T*>(patches));
    return cudaGetLastError();
  });
}

cudaError_t launch_col2im_add(Elem elem, const ConvGeometry& g, const void* patches, int64_t row0, int64_t rows,
                              void* dx, cudaStream_t stream) {
  return visit_float(elem, [&](auto type) {
    using T = decltype(type);
    const int64_t n = in_elements(g);
    col2im_add_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, static_cast<const T*>(patches), row0, rows,
                                                                        static_cast<T*>(dx), n);
    return cudaGetLastError();
  });
}

cudaError_t launch_pool(bool max, Elem elem, const ConvGeometry& g, const void* x, void* y, cudaStream_t stream) {
  return visit_float(elem, [&](auto type) {
    using T = decltype(type);
    const int64_t n = out_elements(g);
    const auto* px = static_cast<const T*>(x);
    auto* py = static_cast<T*>(y);
    if (max) {
      max_pool_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, px, py, n);
    } else {
      avg_pool_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, px, py, n);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_max_pool_grad(Elem elem, const ConvGeometry& g, const void* x, const void* dy, int64_t* argmax,
                                 void* dx, cudaStream_t stream) {
  return visit_float(elem, [&](auto type) {
    using T = decltype(type);
    const int64_t n_out = out_elements(g);
    const int64_t n_in = in_elements(g);
    argmax_kernel<<<blocks_for(n_out, kThreads), kThreads, 0, stream>>>(g, static_cast<const T*>(x), argmax, n_out);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    pool_grad_kernel<true><<<blocks_for(n_in, kThreads), kThreads, 0, stream>>>(g, static_cast<const T*>(dy), argmax,
                                                                                static_cast<T*>(dx), n_in);
    return cudaGetLastError();
  });
}

cudaError_t launch_avg_pool_grad(Elem elem, const ConvGeometry& g, const void* dy, void* dx, cudaStream_t stream) {
  return visit_float(elem, [&](auto type) {
    using T = decltype(type);
    const int64_t n = in_elements(g);
    pool_grad_kernel<false><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, static_cast<const T*>(dy), nullptr,
                                                                              static_cast<T*>(dx), n);
    return cudaGetLastError();
  });
}

}  // namespace tessera::internal::gpu
