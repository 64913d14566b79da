// CPU kernels for Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool, AvgPool, MaxPoolGrad
// and AvgPoolGrad, float32 and float64 (Note [Convolution as im2col and GEMM]), and the fused
// _FusedConv2D and _FusedMaxPoolGradReluGrad (Note [Op fusion] in core/remapper.cc).
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
// rows at a time (kPatchBytes at most, so that they are still in cache when BLAS reads them; one
// row at least), each chunk one BLAS call; a pointwise window (1x1, stride 1) is the input itself
// and needs no copy. Images are sharded over the session's pool (each shard its own chunks and
// scratch); d_filter, a sum over all rows, is summed in parts, each its own chunks
// (Note [The filter's gradient in parts]). The GPU kernels (device/cuda/gpu_conv_ops.cc) do the
// same with cuBLAS. A 3x3 stride-1 convolution with enough channels takes Winograd's algorithm
// instead (Note [Winograd convolution] in kernels/conv_winograd.cc), and a float32 window of a few
// values a direct AVX-512 kernel (Note [Direct convolution] in kernels/conv_direct.cc).
//
// Pools walk each window directly. MaxPool takes, and MaxPoolGrad gives the gradient to, the first
// largest element of a window in row-major order (a NaN there wins only as the first element;
// Note [MaxPoolGrad in two passes]); AvgPool divides by the number of the window's elements inside
// the input. Gradients are summed where windows overlap, in output order.
#include "core/conv_ops.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/nn_ops.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/blas.h"
#include "kernels/conv_direct.h"
#include "kernels/conv_winograd.h"
#include "kernels/elementwise_shards.h"
#include "kernels/im2col.h"

namespace tessera::internal {
namespace {

// The most bytes of patches one chunk holds: small enough that a chunk made by im2col is still in
// the core's L2 cache (512 KiB on the machines measured) when BLAS reads it.
constexpr int64_t kPatchBytes = int64_t{256} << 10;

// The most partial sums a filter's gradient is split into (Note [The filter's gradient in parts]).
constexpr int64_t kFilterParts = 8;
// The fewest rows a part of the filter's gradient sums (fewer make a product of a short reduction).
constexpr int64_t kFilterPartRows = 512;

// Scratch that is written before it is read: not zeroed.
template <class T>
std::unique_ptr<T[]> scratch_of(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(std::max<int64_t>(n, 1)));
}

// Calls fn(row0, rows, scratch, product) for the chunks of output rows (at most `chunk` each,
// `scratch` of chunk * scratch_cols elements for each). With two images or more the images are
// sharded over the session's pool, each shard its own chunks, scratch and single-threaded
// products (product = null): a chunk's col2im scatter never leaves its images. With one image the
// chunks run here and each product is sharded (product = &ctx). Either way an image's chunks run
// in order on one thread.
template <class T, class F>
void for_each_chunk(const OpKernelContext& ctx, const Window2D& w, int64_t chunk, int64_t scratch_cols, F fn) {
  const int64_t image_rows = w.out_h * w.out_w;
  auto rows_of = [&](int64_t row_begin, int64_t row_end, const OpKernelContext* product) {
    // As many chunks as `chunk` needs, of equal size (no short last one).
    const int64_t chunks = (row_end - row_begin + chunk - 1) / chunk;
    const int64_t step = (row_end - row_begin + chunks - 1) / chunks;
    auto scratch = scratch_of<T>(step * scratch_cols);
    for (int64_t row0 = row_begin; row0 < row_end; row0 += step) {
      fn(row0, std::min(step, row_end - row0), scratch.get(), product);
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
const T* patches_of(const Window2D& w, const T* x, int64_t row0, int64_t rows, T* scratch) {
  if (w.pointwise()) return x + row0 * w.patch_size();
  im2col(w, x, row0, rows, scratch);
  return scratch;
}

// Each chunk's output rows are finished by `epilogue` right after their product (a fused
// convolution's bias and ReLU).
template <class T>
void conv2d(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out,
            const BiasRelu<T>& epilogue) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  for_each_chunk<T>(ctx, w, w.chunk_rows(kPatchBytes, sizeof(T)), w.pointwise() ? 0 : k,
                    [&](int64_t row0, int64_t rows, T* scratch, const OpKernelContext* product) {
                      gemm(product, false, false, rows, o, k, patches_of(w, x, row0, rows, scratch), k, f, o, T{0},
                           out + row0 * o, o);
                      epilogue(out + row0 * o, rows, o);
                    });
}

template <class T>
void conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  if (w.pointwise()) {  // the patches' gradient is dx itself
    for_each_chunk<T>(ctx, w, chunk, 0, [&](int64_t row0, int64_t rows, T*, const OpKernelContext* product) {
      gemm(product, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, dx + row0 * k, k);
    });
    return;
  }
  const int64_t image_rows = w.out_h * w.out_w;
  const int64_t image = w.in_h * w.in_w * w.in_c;
  for_each_chunk<T>(ctx, w, chunk, k, [&](int64_t row0, int64_t rows, T* d_patches, const OpKernelContext* product) {
    // An image's dx is zeroed by the chunk that holds its first row, before any chunk adds to it
    // (its chunks run in order on one thread), on the thread that then scatters into it.
    const int64_t n0 = (row0 + image_rows - 1) / image_rows;
    const int64_t n1 = (row0 + rows + image_rows - 1) / image_rows;
    std::fill(dx + n0 * image, dx + n1 * image, T{0});
    gemm(product, false, true, rows, k, o, dy + row0 * o, o, f, o, T{0}, d_patches, k);
    col2im_add(w, d_patches, row0, rows, dx);
  });
}

// Note [The filter's gradient in parts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// d_filter [K, O] is a sum over every output position. Sharding its product by rows of d_filter
// leaves im2col on one thread and gives each thread a strided strip of the patches (K is 9 for a
// one-channel 3x3 window); so a big one is cut into `parts` runs of rows instead, each its own
// chunks, im2col and single-threaded products into its own partial sum, the parts sharded over the
// pool, then the partials summed in part order. The number of parts depends only on the shapes
// (at most kFilterParts, each of kFilterPartRows rows and 4 * kGemmShardMultiplyAdds multiply-adds
// at least), never on the threads, so a result is the same on every run and machine. A small one
// stays one part: its chunks here, one after another, each product sharded by rows of d_filter.
template <class T>
void conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t m = w.out_pixels();
  const int64_t chunk = w.chunk_rows(kPatchBytes, sizeof(T));
  const int64_t most_parts = std::min(kFilterParts, m / kFilterPartRows);
  int64_t parts = std::clamp<int64_t>(m * k * o / (4 * kGemmShardMultiplyAdds), 1, std::max<int64_t>(most_parts, 1));
  const int64_t part_rows = (m + parts - 1) / parts;
  parts = (m + part_rows - 1) / part_rows;
  // Sums rows [begin, end) into out (overwriting it), `product` sharding each product or not.
  auto sum_rows = [&](int64_t begin, int64_t end, T* out, T* scratch, const OpKernelContext* product) {
    for (int64_t row0 = begin; row0 < end; row0 += chunk) {
      const int64_t rows = std::min(chunk, end - row0);
      const T beta = row0 == begin ? T{0} : T{1};  // the first chunk overwrites, the others accumulate
      gemm(product, true, false, k, o, rows, patches_of(w, x, row0, rows, scratch), k, dy + row0 * o, o, beta, out, o);
    }
  };
  const int64_t scratch_size = w.pointwise() ? 0 : std::min(chunk, part_rows) * k;
  if (parts == 1) {
    auto scratch = scratch_of<T>(scratch_size);
    return sum_rows(0, m, df, scratch.get(), &ctx);
  }
  // Part 0 sums into df itself, part p > 0 into partials[p - 1].
  const int64_t size = k * o;
  auto partials = scratch_of<T>((parts - 1) * size);
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    auto scratch = scratch_of<T>(scratch_size);
    for (int64_t p = p0; p < p1; ++p) {
      T* out = p == 0 ? df : partials.get() + (p - 1) * size;
      sum_rows(p * part_rows, std::min(m, (p + 1) * part_rows), out, scratch.get(), nullptr);
    }
  });
  add_parts_in_order(ctx, df, partials.get(), parts - 1, size);
}

// Conv2D (input, filter), Conv2DBackpropInput (input, filter, out_backprop: input read for its
// shape) and Conv2DBackpropFilter (input, filter, out_backprop: filter read for its shape); and
// _FusedConv2D (input, filter, bias; Note [Op fusion] in core/remapper.cc): Conv2D, then BiasAdd,
// then Relu where its activation is "Relu". Thread-safe: compute() keeps no state between runs
// (OpenBLAS may be called from several threads).
template <ConvKind kKind>
class ConvOp final : public OpKernel {
 public:
  explicit ConvOp(const Node& n)
      : OpKernel(n),
        attrs_(WindowAttrs::of(n.attrs)),
        fused_(n.type == "_FusedConv2D"),
        relu_(n.attr_or<std::string>("activation", "") == "Relu") {}

  void compute(OpKernelContext& ctx) override {
    auto plan = plan_conv(kKind, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status());
    const Window2D& w = plan.value().window;
    if (fused_) {  // BiasAdd's checks
      const Tensor& bias = ctx.input(2);
      if (Status s = same_dtypes(ctx.input(0), bias, 0, 2); !s.ok()) return ctx.fail(s.with_prefix("BiasAdd: "));
      if (auto shape = bias_add_shape(plan.value().out, bias.shape()); !shape.ok()) {
        return ctx.fail(shape.status().with_prefix("BiasAdd: "));
      }
    }
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    if (out.dtype() == DType::Float32) return run<float>(w, ctx, out);
    run<double>(w, ctx, out);
  }

  // Each output element is a sum of K products: never cheap enough to run inline.
  bool is_expensive() const override { return true; }

 private:
  template <class T>
  void run(const Window2D& w, OpKernelContext& ctx, Tensor& out) const {
    T* po = out.mutable_data<T>();
    BiasRelu<T> epilogue;
    if (fused_) epilogue = {ctx.input(2).data<T>(), relu_};
    // No products to sum (no input channels, or, for the filter, no output positions): zeros.
    if (w.patch_size() == 0 || w.out_pixels() == 0 || w.out_c == 0) {
      std::memset(out.raw_mutable_data(), 0, out.bytes());
      if (fused_) epilogue(po, out.num_elements() / w.out_c, w.out_c);  // the bias, as BiasAdd would add it
      return;
    }
    const bool winograd = winograd_applies(w);  // Note [Winograd convolution] in kernels/conv_winograd.cc
    // Note [Direct convolution] in kernels/conv_direct.cc: float32 only.
    constexpr bool kFloat = std::is_same_v<T, float>;
    const bool direct = kFloat && direct_conv_applies(w, out.dtype());
    if constexpr (kKind == ConvKind::kForward) {
      const T* x = ctx.input(0).data<T>();
      const T* f = ctx.input(1).data<T>();
      if constexpr (kFloat) {
        if (direct) return direct_conv2d(ctx, w, x, f, po, epilogue);
      }
      winograd ? winograd_conv2d(ctx, w, x, f, po, epilogue) : conv2d(ctx, w, x, f, po, epilogue);
    } else if constexpr (kKind == ConvKind::kBackpropInput) {
      const T* f = ctx.input(1).data<T>();
      const T* dy = ctx.input(2).data<T>();
      winograd ? winograd_conv2d_backprop_input(ctx, w, f, dy, po) : conv2d_backprop_input(ctx, w, f, dy, po);
    } else {
      const T* x = ctx.input(0).data<T>();
      const T* dy = ctx.input(2).data<T>();
      if constexpr (kFloat) {
        if (direct) return direct_conv2d_backprop_filter(ctx, w, x, dy, po);
      }
      winograd ? winograd_conv2d_backprop_filter(ctx, w, x, dy, po) : conv2d_backprop_filter(ctx, w, x, dy, po);
    }
  }

  const WindowAttrs attrs_;
  const bool fused_;
  const bool relu_;
};

TESSERA_REGISTER_KERNEL("Conv2D", "CPU", ConvOp<ConvKind::kForward>);
TESSERA_REGISTER_KERNEL("_FusedConv2D", "CPU", ConvOp<ConvKind::kForward>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropInput", "CPU", ConvOp<ConvKind::kBackpropInput>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropFilter", "CPU", ConvOp<ConvKind::kBackpropFilter>);

// The windows of one image, in output order: visit(pos, h0, h1, w0, w1) for each output position
// `pos` (its index among the image's out_h * out_w), its window's rows [h0, h1) and columns
// [w0, w1) inside the input (the padding cut off).
template <class F>
void for_each_window(const Window2D& w, F visit) {
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    const int64_t h_begin = oh * w.stride_h - w.pad_top;
    const int64_t h0 = std::max<int64_t>(h_begin, 0);
    const int64_t h1 = std::min(h_begin + w.k_h, w.in_h);
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      const int64_t w_begin = ow * w.stride_w - w.pad_left;
      visit(oh * w.out_w + ow, h0, h1, std::max<int64_t>(w_begin, 0), std::min(w_begin + w.k_w, w.in_w));
    }
  }
}

// The channel loops of the max pools, apart so that their pointers are known not to alias
// (__restrict) and each loop, branch-free, vectorizes.
//
// top = the larger of top and row, channel by channel, top kept unless row is strictly larger: a
// NaN in top stays (x > NaN is false), a later NaN never enters.
template <class T>
inline void keep_larger(int64_t channels, const T* __restrict row, T* __restrict top) {
  for (int64_t c = 0; c < channels; ++c) top[c] = row[c] > top[c] ? row[c] : top[c];
}

// MaxPoolGrad's second pass over one window element (Note [MaxPoolGrad in two passes]): a channel
// whose top this element equals (for the window's first element, or whose top is NaN) takes the
// gradient here, and its top becomes NaN (all bits set), which no later element equals. Into d:
// added, or (a window's own elements) written as 0 + g, what a sum into zeros gives (-0.0 lands as
// +0.0). Bit masks, not selects: GCC does not if-convert two selects on one float comparison, and
// this vectorizes for float (double stays scalar, still branch-free). kRelu (written windows
// only): then ReluGrad's, over the same values (x > 0 ? d : +0.0).
template <class T, bool kFirst, bool kAdd, bool kRelu>
inline void give_to_max(int64_t channels, const T* __restrict row, const T* __restrict grad, T* __restrict top,
                        T* __restrict d) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  static_assert(!(kAdd && kRelu));
  for (int64_t c = 0; c < channels; ++c) {
    const T r = row[c];
    const T t = top[c];
    const Bits hit = Bits{0} - static_cast<Bits>(kFirst ? (r == t) | (t != t) : r == t);  // all ones or zero
    const T g = std::bit_cast<T>(std::bit_cast<Bits>(grad[c]) & hit);
    if constexpr (kAdd) {
      d[c] += g;
    } else if constexpr (kRelu) {
      const Bits positive = Bits{0} - static_cast<Bits>(r > T{0});
      d[c] = std::bit_cast<T>(std::bit_cast<Bits>(T{0} + g) & positive);
    } else {
      d[c] = T{0} + g;
    }
    top[c] = std::bit_cast<T>(std::bit_cast<Bits>(t) | hit);
  }
}

// Note [MaxPoolGrad in two passes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// MaxPoolGrad gives each window's gradient, channel by channel, to the window's first largest
// element in row-major order (a NaN wins only as the first element). Carrying that element's index
// through one pass is a 64-bit blend per value that did not vectorize; so two passes over the
// window, both vectorized over the channels: the first takes the max as MaxPool does (from the
// first element, replaced only by a strictly larger one), the second gives the gradient to the
// first element equal to it and marks the channel taken (NaN in `top`). That is the same element:
// one equal to the max before it would have stayed the max, as nothing after it was strictly
// larger. A NaN max comes only from the first element, which the second pass tests for (NaN equals
// nothing). -0.0 and +0.0 are equal: the first of them wins, as before.
// Windows that do not overlap (stride >= window, the common case) give each input element at most
// one gradient, so each window writes its own elements (no += into a zeroed image); the image is
// zeroed first only when some element is in no window. Overlapping windows add into a zeroed
// image, in output order.
// `relu` (_FusedMaxPoolGradReluGrad, Note [Op fusion] in core/remapper.cc): the result then goes
// through ReluGrad with x as its features, in the same pass where windows are written, or in a
// pass over the image after its sums.
template <class T>
void max_pool_grad(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out, bool relu) {
  const int64_t channels = w.in_c;
  const int64_t image_in = w.in_h * w.in_w * channels;
  const int64_t image_out = w.out_h * w.out_w * channels;
  const int64_t image_work = std::max<int64_t>(1, image_out * w.k_h * w.k_w);
  const bool disjoint = w.stride_h >= w.k_h && w.stride_w >= w.k_w;
  // Disjoint windows with stride == window are contiguous from the first (which starts at or
  // before the input's first row and column): they cover the input if the last one reaches its end.
  const bool covered = w.stride_h == w.k_h && w.stride_w == w.k_w &&
                       (w.out_h - 1) * w.stride_h - w.pad_top + w.k_h >= w.in_h &&
                       (w.out_w - 1) * w.stride_w - w.pad_left + w.k_w >= w.in_w;
  ctx.parallel_for(w.batch, std::max<int64_t>(1, (int64_t{1} << 16) / image_work), [&](int64_t n0, int64_t n1) {
    std::vector<T> best(static_cast<std::size_t>(channels));
    T* top = best.data();
    for (int64_t n = n0; n < n1; ++n) {
      const T* xi = x + n * image_in;
      T* oi = out + n * image_in;
      if (!(disjoint && covered)) std::fill(oi, oi + image_in, T{0});
      auto offset = [&](int64_t h, int64_t ww) { return (h * w.in_w + ww) * channels; };
      for_each_window(w, [&](int64_t pos, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
        std::copy(xi + offset(h0, w0), xi + offset(h0, w0) + channels, top);
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t ww = w0; ww < w1; ++ww) keep_larger(channels, xi + offset(h, ww), top);
        }
        const T* gi = grad + n * image_out + pos * channels;
        auto give = [&]<bool kAdd, bool kRelu>() {
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t ww = w0; ww < w1; ++ww) {
              const int64_t at = offset(h, ww);
              h == h0 && ww == w0 ? give_to_max<T, true, kAdd, kRelu>(channels, xi + at, gi, top, oi + at)
                                  : give_to_max<T, false, kAdd, kRelu>(channels, xi + at, gi, top, oi + at);
            }
          }
        };
        if (!disjoint) {
          give.template operator()<true, false>();
        } else if (relu) {
          give.template operator()<false, true>();
        } else {
          give.template operator()<false, false>();
        }
      });
      // Elements in no window are zeros either way; sums of overlapping windows are masked here.
      if (relu && !disjoint) {
        for (int64_t i = 0; i < image_in; ++i) oi[i] = xi[i] > T{0} ? oi[i] : T{0};
      }
    }
  });
}

// MaxPool, AvgPool and AvgPoolGrad, image by image (the images are sharded over the session's
// pool: a gradient's scatter stays inside its image), each output position's window walked with
// the channels innermost, so each step is a contiguous run of in_c values. Max keeps the first
// largest value of each channel (keep_larger).
template <PoolKind kKind, class T>
void pool(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out, bool relu) {
  if constexpr (kKind == PoolKind::kMaxGrad) {
    return max_pool_grad(ctx, w, x, grad, out, relu);
  } else {
    const int64_t channels = w.in_c;
    const int64_t image_in = w.in_h * w.in_w * channels;
    const int64_t image_out = w.out_h * w.out_w * channels;
    const int64_t image_work = std::max<int64_t>(1, image_out * w.k_h * w.k_w);
    ctx.parallel_for(w.batch, std::max<int64_t>(1, (int64_t{1} << 16) / image_work), [&](int64_t n0, int64_t n1) {
      std::vector<T> best(static_cast<std::size_t>(channels));
      for (int64_t n = n0; n < n1; ++n) {
        const T* xi = x + n * image_in;
        T* oi = out + (kKind == PoolKind::kAvgGrad ? n * image_in : n * image_out);
        if constexpr (kKind == PoolKind::kAvgGrad) std::fill(oi, oi + image_in, T{0});
        auto offset = [&](int64_t h, int64_t ww) { return (h * w.in_w + ww) * channels; };
        for_each_window(w, [&](int64_t pos, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
          const int64_t o = pos * channels;  // within the image
          if constexpr (kKind == PoolKind::kMax) {
            T* top = oi + o;
            std::copy(xi + offset(h0, w0), xi + offset(h0, w0) + channels, top);
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t ww = w0; ww < w1; ++ww) keep_larger(channels, xi + offset(h, ww), top);
            }
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
        });
      }
    });
  }
}

// MaxPool and AvgPool (input), MaxPoolGrad (orig_input, orig_output, grad) and AvgPoolGrad
// (orig_input: read for its shape, grad); _FusedMaxPoolGradReluGrad (MaxPoolGrad's inputs; Note
// [Op fusion] in core/remapper.cc): MaxPoolGrad, then ReluGrad with orig_input as its features.
// Thread-safe: compute() keeps no state between runs.
template <PoolKind kKind>
class PoolOp final : public OpKernel {
 public:
  explicit PoolOp(const Node& n)
      : OpKernel(n), attrs_(WindowAttrs::of(n.attrs)), relu_(n.type == "_FusedMaxPoolGradReluGrad") {}

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
                         out.mutable_data<float>(), relu_);
    }
    pool<kKind>(ctx, plan.value().window, x.data<double>(), grad ? grad->data<double>() : nullptr,
                out.mutable_data<double>(), relu_);
  }

 private:
  const WindowAttrs attrs_;
  const bool relu_;
};

TESSERA_REGISTER_KERNEL("MaxPool", "CPU", PoolOp<PoolKind::kMax>);
TESSERA_REGISTER_KERNEL("AvgPool", "CPU", PoolOp<PoolKind::kAvg>);
TESSERA_REGISTER_KERNEL("MaxPoolGrad", "CPU", PoolOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_KERNEL("_FusedMaxPoolGradReluGrad", "CPU", PoolOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_KERNEL("AvgPoolGrad", "CPU", PoolOp<PoolKind::kAvgGrad>);

}  // namespace
}  // namespace tessera::internal
