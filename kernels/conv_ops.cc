// CPU kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter, float32 and float64 (Note
// [Convolution as im2col and GEMM]), and the fused _FusedConv2D (Note [Op fusion] in
// core/remapper.cc). The pools are in kernels/pool_ops.cc. float16 and bfloat16 go through the
// float32 code: the inputs widened, every product and sum in float32, each result rounded back
// once. That is what TensorFlow's CPU kernels give in accuracy terms (Eigen computes half in
// float32 too; rounding only the result is, if anything, closer), at the cost of a widened copy.
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
#include "core/conv_ops.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/nn_ops.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/bias_add_grad.h"
#include "kernels/blas.h"
#include "kernels/conv_direct.h"
#include "kernels/conv_winograd.h"
#include "kernels/dtype_visit.h"
#include "kernels/elementwise_shards.h"
#include "kernels/im2col.h"
#include "kernels/pool.h"
#include "kernels/widened.h"

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

// The filter's gradient by the algorithm that suits the window (zeros where no products are summed).
template <class T>
void backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  if (w.patch_size() == 0 || w.out_pixels() == 0 || w.out_c == 0) {
    std::fill(df, df + w.patch_size() * w.out_c, T{0});
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv_applies(w, DType::Float32)) return direct_conv2d_backprop_filter(ctx, w, x, dy, df);
  }
  winograd_applies(w) ? winograd_conv2d_backprop_filter(ctx, w, x, dy, df) : conv2d_backprop_filter(ctx, w, x, dy, df);
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
    const int64_t n = out.num_elements();
    switch (out.dtype()) {
      case DType::Float64: return run<double>(w, ctx, inputs<double>(ctx), out.mutable_data<double>(), n);
      case DType::Float16: return run_widened<float16_t>(w, ctx, out);
      case DType::BFloat16: return run_widened<bfloat16_t>(w, ctx, out);
      default: return run<float>(w, ctx, inputs<float>(ctx), out.mutable_data<float>(), n);  // float32
    }
  }

  // Each output element is a sum of K products: never cheap enough to run inline.
  bool is_expensive() const override { return true; }

 private:
  // Inputs 0 to 2 of T as the kernel reads them; null for one read for its shape only, or absent.
  template <class T>
  using Inputs = std::array<const T*, 3>;

  // Whether the kernel reads input i's values (the gradients read one input for its shape only).
  bool reads(int i) const {
    switch (kKind) {
      case ConvKind::kForward: return i < 2 || (fused_ && i == 2);  // x, f, the fused bias
      case ConvKind::kBackpropInput: return i == 1 || i == 2;       // f, dy
      case ConvKind::kBackpropFilter: return i == 0 || i == 2;      // x, dy
    }
    return false;
  }

  template <class T>
  Inputs<T> inputs(const OpKernelContext& ctx) const {
    Inputs<T> in{};
    for (int i = 0; i < 3; ++i) {
      if (reads(i)) in[i] = ctx.input(i).data<T>();
    }
    return in;
  }

  // float16 and bfloat16: the float32 kernel on widened inputs, its result rounded once.
  template <class H>
  void run_widened(const Window2D& w, OpKernelContext& ctx, Tensor& out) const {
    std::array<std::vector<float>, 3> wide;
    Inputs<float> in{};
    for (int i = 0; i < 3; ++i) {
      if (!reads(i)) continue;
      wide[i] = widened<H>(ctx.input(i));
      in[i] = wide[i].data();
    }
    std::vector<float> result(static_cast<std::size_t>(out.num_elements()));
    run<float>(w, ctx, in, result.data(), out.num_elements());
    round_into<H>(result, out);
  }

  // The output's n elements into po.
  template <class T>
  void run(const Window2D& w, const OpKernelContext& ctx, const Inputs<T>& in, T* po, int64_t n) const {
    BiasRelu<T> epilogue;
    if (fused_) epilogue = {in[2], relu_};
    // No products to sum (no input channels, or, for the filter, no output positions): zeros.
    if (w.patch_size() == 0 || w.out_pixels() == 0 || w.out_c == 0) {
      std::fill(po, po + n, T{0});
      if (fused_) epilogue(po, n / w.out_c, w.out_c);  // the bias, as BiasAdd would add it
      return;
    }
    const bool winograd = winograd_applies(w);  // Note [Winograd convolution] in kernels/conv_winograd.cc
    // Note [Direct convolution] in kernels/conv_direct.cc: float32 only.
    constexpr bool kFloat = std::is_same_v<T, float>;
    const bool direct = kFloat && direct_conv_applies(w, DType::Float32);
    if constexpr (kKind == ConvKind::kForward) {
      const T* x = in[0];
      const T* f = in[1];
      if constexpr (kFloat) {
        if (direct) return direct_conv2d(ctx, w, x, f, po, epilogue);
      }
      winograd ? winograd_conv2d(ctx, w, x, f, po, epilogue) : conv2d(ctx, w, x, f, po, epilogue);
    } else if constexpr (kKind == ConvKind::kBackpropInput) {
      winograd ? winograd_conv2d_backprop_input(ctx, w, in[1], in[2], po)
               : conv2d_backprop_input(ctx, w, in[1], in[2], po);
    } else {
      backprop_filter(ctx, w, in[0], in[2], po);
    }
  }

  const WindowAttrs attrs_;
  const bool fused_;
  const bool relu_;
};

// _FusedConv2DBackpropFilterWithBias (Note [Op fusion] in core/remapper.cc): Conv2DBackpropFilter
// (input, filter, out_backprop) and BiasAddGrad of the same out_backprop; outputs the filter's
// gradient and the bias's. With "pool_grad" set, out_backprop is _FusedMaxPoolGradReluGrad's,
// whose three inputs (orig_input, orig_output, grad) come last and whose window the pool_* attrs
// hold. Where the direct kernel applies (and its parts hold BiasAddGrad's), each image's
// out_backprop is made, summed into both gradients and dropped while it is in cache; elsewhere
// out_backprop is made whole and the unfused kernels' functions run on it. The same bits either
// way. Thread-safe: compute() keeps no state between runs.
class ConvFilterBiasOp final : public OpKernel {
 public:
  explicit ConvFilterBiasOp(const Node& n)
      : OpKernel(n), attrs_(WindowAttrs::of(n.attrs)), pooled_(n.attr_or<bool>("pool_grad", false)) {
    if (pooled_) {
      pool_attrs_.ksize = std::get<std::vector<int64_t>>(n.attrs.at("pool_ksize"));
      pool_attrs_.strides = std::get<std::vector<int64_t>>(n.attrs.at("pool_strides"));
      pool_attrs_.padding = std::get<std::string>(n.attrs.at("pool_padding"));
    }
  }

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& dy = ctx.input(2);  // pooled: the pool's orig_input, of out_backprop's shape
    // Conv2DBackpropFilter's checks, on the same inputs 0 to 2.
    auto plan = plan_conv(ConvKind::kBackpropFilter, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status().with_prefix("Conv2DBackpropFilter: "));
    if (Status s = same_dtypes(x, dy, 0, 2); !s.ok()) return ctx.fail(s.with_prefix("Conv2DBackpropFilter: "));
    const Window2D& w = plan.value().window;
    Window2D pw;
    if (pooled_) {
      auto pool = pool_attrs_.pool(dy.shape());
      if (!pool.ok()) return ctx.fail(pool.status().with_prefix("MaxPoolGrad: "));
      pw = pool.value();
      for (Status s : {expect_shape(ctx.input(3).shape(), pw.out_shape(), "orig_output"),
                       expect_shape(ctx.input(4).shape(), pw.out_shape(), "grad"), same_dtypes(dy, ctx.input(4), 2, 4)}) {
        if (!s.ok()) return ctx.fail(s.with_prefix("MaxPoolGrad: "));
      }
    }
    // The remapper fuses float32 and float64 only (core/remapper.cc).
    if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64) return fail_unsupported_dtype(ctx, x.dtype());
    auto bias_shape = bias_add_grad_shape(dy.shape());
    if (!bias_shape.ok()) return ctx.fail(bias_shape.status().with_prefix("BiasAddGrad: "));
    Tensor& df = ctx.allocate_output(0, plan.value().out);
    Tensor& db = ctx.allocate_output(1, bias_shape.value());
    if (x.dtype() == DType::Float32) return run<float>(ctx, w, pw, df, db);
    run<double>(ctx, w, pw, df, db);
  }

  bool is_expensive() const override { return true; }

 private:
  template <class T>
  void run(const OpKernelContext& ctx, const Window2D& w, const Window2D& pw, Tensor& df, Tensor& db) const {
    const T* x = ctx.input(0).data<T>();
    const int64_t rows = w.out_pixels();
    const int64_t image_dy = w.out_h * w.out_w * w.out_c;
    if constexpr (std::is_same_v<T, float>) {
      if (w.patch_size() > 0 && w.out_pixels() > 0 && w.out_c > 0 && direct_conv_applies(w, DType::Float32) &&
          direct_filter_parts_hold_bias_parts(w)) {
        std::vector<float> sums(static_cast<std::size_t>(bias_grad_parts(rows, w.out_c) * w.out_c), 0.0f);
        const float* dy = ctx.input(2).data<float>();
        if (pooled_) {
          const float* grad = ctx.input(4).data<float>();
          const int64_t image_grad = pw.out_h * pw.out_w * pw.in_c;
          direct_conv2d_backprop_filter_bias(
              ctx, w, x,
              [&](int64_t n, float* scratch) {
                MaxPoolGradImage<float> image(pw, /*relu=*/true);
                const int64_t ahead = n + kPrefetchImages;  // images run in order in each part
                if (ahead < w.batch) image.prefetch(dy + ahead * image_dy, grad + ahead * image_grad);
                image(dy + n * image_dy, grad + n * image_grad, scratch);
                return static_cast<const float*>(scratch);
              },
              df.mutable_data<float>(), sums.data());
        } else {
          direct_conv2d_backprop_filter_bias(
              ctx, w, x, [&](int64_t n, float*) { return dy + n * image_dy; }, df.mutable_data<float>(), sums.data());
        }
        finish_bias_sums(sums, bias_grad_parts(rows, w.out_c), w.out_c, db.mutable_data<float>());
        return;
      }
    }
    const T* dy = ctx.input(2).data<T>();
    std::vector<T> made;  // pooled: out_backprop, made whole
    if (pooled_) {
      made.resize(static_cast<std::size_t>(rows * w.out_c));
      max_pool_grad(ctx, pw, dy, ctx.input(4).data<T>(), made.data(), /*relu=*/true);
      dy = made.data();
    }
    backprop_filter(ctx, w, x, dy, df.mutable_data<T>());
    bias_add_grad(ctx, dy, rows, w.out_c, db.mutable_data<T>());
  }

  const WindowAttrs attrs_;
  const bool pooled_;
  WindowAttrs pool_attrs_;
};

TESSERA_REGISTER_KERNEL("Conv2D", "CPU", ConvOp<ConvKind::kForward>);
TESSERA_REGISTER_KERNEL("_FusedConv2D", "CPU", ConvOp<ConvKind::kForward>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropInput", "CPU", ConvOp<ConvKind::kBackpropInput>);
TESSERA_REGISTER_KERNEL("Conv2DBackpropFilter", "CPU", ConvOp<ConvKind::kBackpropFilter>);
TESSERA_REGISTER_KERNEL("_FusedConv2DBackpropFilterWithBias", "CPU", ConvFilterBiasOp);

}  // namespace
}  // namespace tessera::internal
