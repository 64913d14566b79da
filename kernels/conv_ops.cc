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
// window (1x1, stride 1) is the input itself and needs no copy. Images are sharded over the
// session's pool (each shard its own chunks and scratch); d_filter, a sum over all rows, takes its
// chunks one after another, each product sharded by rows of d_filter. The GPU kernels
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

// Calls fn(row0, rows, scratch, product) for the chunks of output rows (at most `chunk` each,
// `scratch` of chunk * scratch_cols elements for each). With two images or more the images are
// sharded over the session's pool, each shard its own chunks, scratch and single-threaded
// products (product = null): a chunk's col2im scatter never leaves its images. With one image the
// chunks run here and each product is sharded (product = &ctx).
template <class T, class F>
void for_each_chunk(const OpKernelContext& ctx, const Window2D& w, int64_t chunk, int64_t scratch_cols, F fn) {
  const int64_t image_rows = w.out_h * w.out_w;
  auto rows_of = [&](int64_t row_begin, int64_t row_end, const OpKernelContext* product) {
    const int64_t step = std::min(chunk, row_end - row_begin);
    std::vector<T> scratch(static_cast<std::size_t>(step * scratch_cols));
    for (int64_t row0 = row_begin; row0 < row_end; row0 += step) {
      fn(row0, std::min(step, row_end - row0), scratch, product);
    }
  };
  if (w.batch < 2 || image_rows == 0) return rows_of(0, w.out_pixels(), &ctx);
  const int64_t image_work = std::max<int64_t>(1, image_rows * w.patch_size() * w.out_c);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, kGemmShardMultiplyAdds / image_work),
                   [&](int64_t n0, int64_t n1) { rows_of(n0 * image_rows, n1 * image_rows, nullptr); });
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
  for_each_chunk<T>(ctx, w, w.chunk_rows(kPatchBytes, sizeof(T)), w.pointwise() ? 0 : k,
                    [&](int64_t row0, int64_t rows, std::vector<T>& scratch, const OpKernelContext* product) {
                      gemm(product, false, false, rows, o, k, patches_of(w, x, row0, rows, scratch), k, f, o, T{0},
                           out + row0 * o, o);
                    });
}

template <class T>
void conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  if (w.pointwise()) {  // the patches' gradient is dx itself
    for_each_chunk<T>(ctx, w, chunk, 0, [&](int64_t row0, int64_t rows, std::vector<T>&, const OpKernelContext* product) {
      gemm(product, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, dx + row0 * k, k);
    });
    return;
  }
  std::fill(dx, dx + w.batch * w.in_h * w.in_w * w.in_c, T{0});
  for_each_chunk<T>(ctx, w, chunk, k,
                    [&](int64_t row0, int64_t rows, std::vector<T>& d_patches, const OpKernelContext* product) {
                      gemm(product, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, d_patches.data(), k);
                      col2im_add(w, d_patches.data(), row0, rows, dx);
                    });
}

template <class T>
void conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  // A sum over every row: the chunks run here, one after the other, and each product is sharded
  // (by rows of df).
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  std::vector<T> scratch(w.pointwise() ? 0 : static_cast<std::size_t>(chunk * k));
  for (int64_t row0 = 0; row0 < w.out_pixels(); row0 += chunk) {
    const int64_t rows = std::min(chunk, w.out_pixels() - row0);
    const T beta = row0 == 0 ? T{0} : T{1};  // the first chunk overwrites, the others accumulate
    gemm(&ctx, true, false, k, o, rows, patches_of(w, x, row0, rows, scratch), k, dy + row0 * o, o, beta, df, o);
  }
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

// Pools, image by image (the images are sharded over the session's pool: a gradient's scatter
// stays inside its image), each output position's window walked with the channels innermost, so
// each step is a contiguous run of in_c values. Max keeps the first largest value of each channel
// (a strict >: a NaN wins only as the window's first element).
template <PoolKind kKind, class T>
void pool(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out) {
  const int64_t channels = w.in_c;
  const int64_t image_in = w.in_h * w.in_w * channels;
  const int64_t image_out = w.out_h * w.out_w * channels;
  const int64_t image_work = std::max<int64_t>(1, image_out * w.k_h * w.k_w);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, (int64_t{1} << 16) / image_work), [&](int64_t n0, int64_t n1) {
    std::vector<T> best(static_cast<std::size_t>(channels));
    std::vector<int64_t> at(static_cast<std::size_t>(channels));
    for (int64_t n = n0; n < n1; ++n) {
      const T* xi = x + n * image_in;
      T* oi = out + (kKind == PoolKind::kMaxGrad || kKind == PoolKind::kAvgGrad ? n * image_in : n * image_out);
      if constexpr (kKind == PoolKind::kMaxGrad || kKind == PoolKind::kAvgGrad) std::fill(oi, oi + image_in, T{0});
      for (int64_t oh = 0; oh < w.out_h; ++oh) {
        const int64_t h_begin = oh * w.stride_h - w.pad_top;
        const int64_t h0 = std::max<int64_t>(h_begin, 0);
        const int64_t h1 = std::min(h_begin + w.k_h, w.in_h);
        for (int64_t ow = 0; ow < w.out_w; ++ow) {
          const int64_t w_begin = ow * w.stride_w - w.pad_left;
          const int64_t w0 = std::max<int64_t>(w_begin, 0);
          const int64_t w1 = std::min(w_begin + w.k_w, w.in_w);
          const int64_t o = (oh * w.out_w + ow) * channels;  // within the image
          auto offset = [&](int64_t h, int64_t ww) { return (h * w.in_w + ww) * channels; };
          if constexpr (kKind == PoolKind::kMax) {
            // Branch-free, so that the channel loop vectorizes: a NaN in `top` stays (x > NaN is
            // false), a later NaN never enters.
            T* __restrict top = oi + o;
            std::copy(xi + offset(h0, w0), xi + offset(h0, w0) + channels, top);
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t ww = w0; ww < w1; ++ww) {
                const T* __restrict row = xi + offset(h, ww);
                for (int64_t c = 0; c < channels; ++c) top[c] = row[c] > top[c] ? row[c] : top[c];
              }
            }
          } else if constexpr (kKind == PoolKind::kMaxGrad) {
            T* __restrict top = best.data();
            int64_t* __restrict where = at.data();
            const int64_t first = offset(h0, w0);
            for (int64_t c = 0; c < channels; ++c) {
              top[c] = xi[first + c];
              where[c] = first + c;
            }
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t ww = w0; ww < w1; ++ww) {
                const int64_t start = offset(h, ww);
                const T* __restrict row = xi + start;
                for (int64_t c = 0; c < channels; ++c) {
                  const bool larger = row[c] > top[c];
                  top[c] = larger ? row[c] : top[c];
                  where[c] = larger ? start + c : where[c];
                }
              }
            }
            const T* gi = grad + n * image_out + o;
            for (int64_t c = 0; c < channels; ++c) oi[where[c]] += gi[c];
          } else {
            const T count = static_cast<T>((h1 - h0) * (w1 - w0));
            if constexpr (kKind == PoolKind::kAvg) {
              std::fill(best.begin(), best.end(), T{0});
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t ww = w0; ww < w1; ++ww) {
                  const T* row = xi + offset(h, ww);
                  for (int64_t c = 0; c < channels; ++c) best[c] += row[c];
                }
              }
              for (int64_t c = 0; c < channels; ++c) oi[o + c] = best[c] / count;
            } else {
              const T* gi = grad + n * image_out + o;
              for (int64_t c = 0; c < channels; ++c) best[c] = gi[c] / count;
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t ww = w0; ww < w1; ++ww) {
                  T* row = oi + offset(h, ww);
                  for (int64_t c = 0; c < channels; ++c) row[c] += best[c];
                }
              }
            }
          }
        }
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
      return pool<kKind>(ctx, plan.value().window, x.data<float>(), grad ? grad->data<float>() : nullptr,
                         out.mutable_data<float>());
    }
    pool<kKind>(ctx, plan.value().window, x.data<double>(), grad ? grad->data<double>() : nullptr,
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
