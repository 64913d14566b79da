// CPU kernels for Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool, AvgPool, MaxPoolGrad
// and AvgPoolGrad, float32 and float64 (Note [Convolution as im2col and GEMM]).
//
// Note [Convolution as im2col and GEMM]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A convolution is one matrix product once each output position's window is laid out as a row
// (im2col; core/conv_ops.h's Window2D::patch_size): patches [M, K] x filter [K, O] = output [M, O],
// M the output positions, K = k_h * k_w * in_c, and NHWC output and HWIO filter are already those
// row-major matrices. The gradients are the two other products of the same three matrices:
//   d_patches [M, K] = d_output [M, O] x filter^T, scattered back into d_input (col2im: sums
//   where windows overlap);
//   d_filter [K, O] = patches^T x d_output, accumulated over chunks of rows.
// The patches of the whole output would be k_h * k_w times the input, so they are made a chunk of
// rows at a time (kPatchBytes at most, one row at least), each chunk one BLAS call; a pointwise
// window (1x1, stride 1) is the input itself and needs no copy. The GPU kernels
// (device/cuda/gpu_conv_ops.cc) do the same with cuBLAS.
//
// Pools walk each window directly. MaxPool takes, and MaxPoolGrad gives the gradient to, the first
// largest element of a window in row-major order (a NaN there wins only as the first element);
// AvgPool divides by the number of the window's elements inside the input. Gradients are summed
// where windows overlap, in output order.
#include "core/conv_ops.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/blas.h"

namespace tessera::internal {
namespace {

// The most bytes of patches one chunk holds.
constexpr int64_t kPatchBytes = int64_t{4} << 20;

// Calls visit(row, h0, w0, x_offset) for each output position row in [row0, row0 + rows): its
// window's top-left corner (h0, w0) in the input, possibly in the padding, and the offset of its
// image in the input.
template <class F>
void for_each_position(const Window2D& w, int64_t row0, int64_t rows, F visit) {
  for (int64_t row = row0; row < row0 + rows; ++row) {
    const int64_t ow = row % w.out_w;
    const int64_t oh = (row / w.out_w) % w.out_h;
    const int64_t n = row / (w.out_w * w.out_h);
    visit(row, oh * w.stride_h - w.pad_top, ow * w.stride_w - w.pad_left, n * w.in_h * w.in_w * w.in_c);
  }
}

// The patches of output rows [row0, row0 + rows) into `patches` ([rows, K]); padding is zeros.
template <class T>
void im2col(const Window2D& w, const T* x, int64_t row0, int64_t rows, T* patches) {
  const int64_t c = w.in_c;
  for_each_position(w, row0, rows, [&](int64_t row, int64_t h0, int64_t w0, int64_t image) {
    T* dst = patches + (row - row0) * w.patch_size();
    for (int64_t kh = 0; kh < w.k_h; ++kh) {
      const int64_t h = h0 + kh;
      for (int64_t kw = 0; kw < w.k_w; ++kw, dst += c) {
        const int64_t ww = w0 + kw;
        if (h < 0 || h >= w.in_h || ww < 0 || ww >= w.in_w) {
          std::fill(dst, dst + c, T{0});
        } else {
          std::memcpy(dst, x + image + (h * w.in_w + ww) * c, static_cast<std::size_t>(c) * sizeof(T));
        }
      }
    }
  });
}

// The inverse scatter: adds the patches of rows [row0, row0 + rows) into dx (padding dropped).
template <class T>
void col2im_add(const Window2D& w, const T* patches, int64_t row0, int64_t rows, T* dx) {
  const int64_t c = w.in_c;
  for_each_position(w, row0, rows, [&](int64_t row, int64_t h0, int64_t w0, int64_t image) {
    const T* src = patches + (row - row0) * w.patch_size();
    for (int64_t kh = 0; kh < w.k_h; ++kh) {
      const int64_t h = h0 + kh;
      for (int64_t kw = 0; kw < w.k_w; ++kw, src += c) {
        const int64_t ww = w0 + kw;
        if (h < 0 || h >= w.in_h || ww < 0 || ww >= w.in_w) continue;
        T* d = dx + image + (h * w.in_w + ww) * c;
        for (int64_t i = 0; i < c; ++i) d[i] += src[i];
      }
    }
  });
}

// Calls fn(row0, rows) for the chunks of `chunk` output rows.
template <class F>
void for_each_chunk(const Window2D& w, int64_t chunk, F fn) {
  for (int64_t row0 = 0; row0 < w.out_pixels(); row0 += chunk) fn(row0, std::min(chunk, w.out_pixels() - row0));
}

// The patches of output rows [row0, row0 + rows): the input's own rows for a pointwise window,
// else made in `scratch` (chunk_rows * K elements).
template <class T>
const T* patches_of(const Window2D& w, const T* x, int64_t row0, int64_t rows, std::vector<T>& scratch) {
  if (w.pointwise()) return x + row0 * w.patch_size();
  im2col(w, x, row0, rows, scratch.data());
  return scratch.data();
}

template <class T>
void conv2d(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  std::vector<T> scratch(w.pointwise() ? 0 : static_cast<std::size_t>(chunk * k));
  for_each_chunk(w, chunk, [&](int64_t row0, int64_t rows) {
    gemm(ctx, false, false, rows, o, k, patches_of(w, x, row0, rows, scratch), k, f, o, T{0}, out + row0 * o, o);
  });
}

template <class T>
void conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  if (w.pointwise()) {  // the patches' gradient is dx itself
    for_each_chunk(w, chunk, [&](int64_t row0, int64_t rows) {
      gemm(ctx, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, dx + row0 * k, k);
    });
    return;
  }
  std::fill(dx, dx + w.batch * w.in_h * w.in_w * w.in_c, T{0});
  std::vector<T> d_patches(static_cast<std::size_t>(chunk * k));
  for_each_chunk(w, chunk, [&](int64_t row0, int64_t rows) {
    gemm(ctx, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, d_patches.data(), k);
    col2im_add(w, d_patches.data(), row0, rows, dx);
  });
}

template <class T>
void conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  std::vector<T> scratch(w.pointwise() ? 0 : static_cast<std::size_t>(chunk * k));
  for_each_chunk(w, chunk, [&](int64_t row0, int64_t rows) {
    const T beta = row0 == 0 ? T{0} : T{1};  // the first chunk overwrites, the others accumulate
    gemm(ctx, true, false, k, o, rows, patches_of(w, x, row0, rows, scratch), k, dy + row0 * o, o, beta, df, o);
  });
}

// Conv2D (input, filter), Conv2DBackpropInput (input, filter, out_backprop: input read for its
// shape) and Conv2DBackpropFilter (input, filter, out_backprop: filter read for its shape).
// Thread-safe: compute() keeps no state between runs (OpenBLAS may be called from several threads).
template <ConvKind kKind>
class ConvOp final : public OpKernel {
 public:
  explicit ConvOp(const Node& n) : OpKernel(n), attrs_(WindowAttrs::of(n.attrs)) {}

  void compute(OpKernelContext& ctx) override {
    auto plan = plan_conv(kKind, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status());
    const Window2D& w = plan.value().window;
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    // No products to sum (no input channels, or, for the filter, no output positions): zeros.
    if (w.patch_size() == 0 || w.out_pixels() == 0 || w.out_c == 0) {
      std::memset(out.raw_mutable_data(), 0, out.bytes());
      return;
    }
    if (out.dtype() == DType::Float32) return run<float>(w, ctx, out);
    run<double>(w, ctx, out);
  }

  // Each output element is a sum of K products: never cheap enough to run inline.
  bool is_expensive() const override { return true; }

 private:
  template <class T>
  void run(const Window2D& w, OpKernelContext& ctx, Tensor& out) const {
    T* po = out.mutable_data<T>();
    if constexpr (kKind == ConvKind::kForward) {
      conv2d(ctx, w, ctx.input(0).data<T>(), ctx.input(1).data<T>(), po);
    } else if constexpr (kKind == ConvKind::kBackpropInput) {
      conv2d_backprop_input(ctx, w, ctx.input(1).data<T>(), ctx.input(2).data<T>(), po);
    } else {
      conv2d_backprop_filter(ctx, w, ctx.input(0).data<T>(), ctx.input(2).data<T>(), po);
    }
  }

  const WindowAttrs attrs_;
};

// Calls visit(o, base, h0, h1, w0, w1) for each output element o = (n, oh, ow, c) in order: its
// window's elements inside the input are x[base + (h * W + w) * C] for h in [h0, h1), w in [w0, w1).
template <class F>
void for_each_window(const Window2D& w, F visit) {
  int64_t o = 0;
  for (int64_t n = 0; n < w.batch; ++n) {
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      const int64_t h_begin = oh * w.stride_h - w.pad_top;
      const int64_t h0 = std::max<int64_t>(h_begin, 0);
      const int64_t h1 = std::min(h_begin + w.k_h, w.in_h);
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const int64_t w_begin = ow * w.stride_w - w.pad_left;
        const int64_t w0 = std::max<int64_t>(w_begin, 0);
        const int64_t w1 = std::min(w_begin + w.k_w, w.in_w);
        const int64_t base = n * w.in_h * w.in_w * w.in_c;
        for (int64_t c = 0; c < w.in_c; ++c, ++o) visit(o, base + c, h0, h1, w0, w1);
      }
    }
  }
}

// The input offset of the first largest element of output element o's window (never empty:
// SAME's padding is smaller than the window, VALID's windows lie inside the input).
template <class T>
int64_t argmax_of(const Window2D& w, const T* x, int64_t base, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
  int64_t best = base + (h0 * w.in_w + w0) * w.in_c;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t ww = w0; ww < w1; ++ww) {
      const int64_t i = base + (h * w.in_w + ww) * w.in_c;
      if (x[i] > x[best]) best = i;
    }
  }
  return best;
}

template <PoolKind kKind, class T>
void pool(const Window2D& w, const T* x, const T* grad, T* out) {
  const bool is_grad = kKind == PoolKind::kMaxGrad || kKind == PoolKind::kAvgGrad;
  if (is_grad) std::fill(out, out + w.batch * w.in_h * w.in_w * w.in_c, T{0});
  for_each_window(w, [&](int64_t o, int64_t base, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    if constexpr (kKind == PoolKind::kMax) {
      out[o] = x[argmax_of(w, x, base, h0, h1, w0, w1)];
    } else if constexpr (kKind == PoolKind::kMaxGrad) {
      out[argmax_of(w, x, base, h0, h1, w0, w1)] += grad[o];
    } else if constexpr (kKind == PoolKind::kAvg) {
      T sum{0};
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t ww = w0; ww < w1; ++ww) sum += x[base + (h * w.in_w + ww) * w.in_c];
      }
      out[o] = sum / static_cast<T>((h1 - h0) * (w1 - w0));
    } else {
      const T share = grad[o] / static_cast<T>((h1 - h0) * (w1 - w0));
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t ww = w0; ww < w1; ++ww) out[base + (h * w.in_w + ww) * w.in_c] += share;
      }
    }
  });
}

// MaxPool and AvgPool (input), MaxPoolGrad (orig_input, orig_output, grad) and AvgPoolGrad
// (orig_input: read for its shape, grad). Thread-safe: compute() keeps no state between runs.
template <PoolKind kKind>
class PoolOp final : public OpKernel {
 public:
  explicit PoolOp(const Node& n) : OpKernel(n), attrs_(WindowAttrs::of(n.attrs)) {}

  void compute(OpKernelContext& ctx) override {
    auto plan = plan_pool(kKind, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status());
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    const Tensor& x = ctx.input(0);
    const Tensor* grad = kKind == PoolKind::kMaxGrad   ? &ctx.input(2)
                         : kKind == PoolKind::kAvgGrad ? &ctx.input(1)
                                                       : nullptr;
    if (x.dtype() == DType::Float32) {
      return pool<kKind>(plan.value().window, x.data<float>(), grad ? grad->data<float>() : nullptr,
                         out.mutable_data<float>());
    }
    pool<kKind>(plan.value().window, x.data<double>(), grad ? grad->data<double>() : nullptr,
                out.mutable_data<double>());
  }

 private:
  const WindowAttrs attrs_;
};

TESSERA_REGISTER_KERNEL("Conv2D", "CPU", ConvOp<ConvKind::kForward>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropInput", "CPU", ConvOp<ConvKind::kBackpropInput>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropFilter", "CPU", ConvOp<ConvKind::kBackpropFilter>);
TESSERA_REGISTER_KERNEL("MaxPool", "CPU", PoolOp<PoolKind::kMax>);
TESSERA_REGISTER_KERNEL("AvgPool", "CPU", PoolOp<PoolKind::kAvg>);
TESSERA_REGISTER_KERNEL("MaxPoolGrad", "CPU", PoolOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_KERNEL("AvgPoolGrad", "CPU", PoolOp<PoolKind::kAvgGrad>);

}  // namespace
}  // namespace tessera::internal
