// Note [Direct convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A first layer's window holds a handful of values (3x3 over one channel: 9), so im2col + GEMM is
// a poor fit: im2col copies each input value nine times, a few floats at a time, and a product with
// an inner dimension of 9 keeps BLAS's kernels mostly loading and storing. With AVX-512 each output
// pixel is instead K broadcast values times K rows of the filter, 16 output channels to a register
// (the last block masked), eight pixels' sums at once (four with more than two blocks) so that the
// filter's rows are loaded once for them and the sums do not wait on each other; the window is read
// from a zero-padded copy of the image (no bounds tests in the loop). The filter's gradient is the
// same walk with the roles swapped, up to twelve patch values' sums for every channel block kept
// in registers over an image (a 3x3 patch: one pass of nine). Measured on the digits CNN's first
// layer (benchmarks/README.md, "Direct convolution"). The filter's gradient can also take each
// image's dy from a function (the fused filter and bias gradient makes it there from the pool's
// gradient) and sum BiasAddGrad's parts in the same pass.
// Images are sharded over the session's pool. The filter's gradient is summed in parts of images,
// their number a function of the shapes only, the parts added in order: the same bits on every run
// and machine with AVX-512 (Note [The filter's gradient in parts] in kernels/conv_ops.cc). The sums
// run in another order than im2col's GEMM: results differ from it by rounding.
// Machines without AVX-512F (and valgrind, which hides it) take im2col + GEMM.
#include "kernels/conv_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/op_kernel.h"
#include "kernels/bias_add_grad.h"
#include "kernels/blas.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise_shards.h"

namespace tessera::internal {
// A named namespace, not an anonymous one: the demo's unity build compiles this file in one unit
// with conv_ops.cc, whose anonymous namespace has a kFilterParts too.
namespace direct {

// The largest patch taken directly: 3x3 over three channels fits, 5x5 over one too.
constexpr int64_t kMaxPatch = 32;
// 16 output channels (one register) to 64 (four).
constexpr int64_t kMinOutChannels = 16;
constexpr int64_t kMaxOutChannels = 64;
// The filter's gradient: at most this many parts of images.
constexpr int64_t kFilterParts = 8;

// An image zero-padded so that every window lies inside it: rows and columns as the windows reach.
struct Padded {
  int64_t h = 0, w = 0, c = 0;

  explicit Padded(const Window2D& win)
      : h((win.out_h - 1) * win.stride_h + win.k_h), w((win.out_w - 1) * win.stride_w + win.k_w), c(win.in_c) {}
  int64_t size() const { return h * w * c; }

  // Image `n` of x into `pad` (size() values).
  void fill(const Window2D& win, const float* x, int64_t n, float* pad) const {
    std::fill(pad, pad + size(), 0.0f);
    const float* image = x + n * win.in_h * win.in_w * c;
    const int64_t c0 = std::max<int64_t>(0, -win.pad_left);
    const int64_t c1 = std::min(win.in_w, w - win.pad_left);
    for (int64_t r = 0; r < h; ++r) {
      const int64_t in_r = r - win.pad_top;
      if (in_r < 0 || in_r >= win.in_h || c1 <= c0) continue;
      std::copy(image + (in_r * win.in_w + c0) * c, image + (in_r * win.in_w + c1) * c,
                pad + (r * w + c0 + win.pad_left) * c);
    }
  }
  // Where the patch's values lie from its window's top-left corner, in the filter's row order
  // (height, width, channel).
  std::vector<int64_t> offsets(const Window2D& win) const {
    std::vector<int64_t> off;
    for (int64_t kh = 0; kh < win.k_h; ++kh) {
      for (int64_t kw = 0; kw < win.k_w; ++kw) {
        for (int64_t ic = 0; ic < c; ++ic) off.push_back((kh * w + kw) * c + ic);
      }
    }
    return off;
  }
  // The top-left corner of output (oh, ow)'s window.
  int64_t corner(const Window2D& win, int64_t oh, int64_t ow) const {
    return (oh * win.stride_h * w + ow * win.stride_w) * c;
  }
};

__mmask16 block_mask(int64_t channels_left) {
  return channels_left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << channels_left) - 1);
}

// Output pixels [ow, ow + kPix) of row oh into dst: per patch value, the filter's kBlocks channel
// blocks loaded once and each pixel's value broadcast, kPix * kBlocks independent sums.
template <int kBlocks, int kPix>
__attribute__((target("avx512f"), always_inline)) inline void forward_pixels(const Window2D& w, const Padded& pd,
                                                                             const int64_t* off, const float* pad,
                                                                             const float* f, int64_t oh, int64_t ow,
                                                                             float* dst) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  __mmask16 mask[kBlocks];
  for (int b = 0; b < kBlocks; ++b) mask[b] = block_mask(o - 16 * b);
  const float* p[kPix];
  for (int q = 0; q < kPix; ++q) p[q] = pad + pd.corner(w, oh, ow + q);
  __m512 acc[kPix][kBlocks];
  for (int q = 0; q < kPix; ++q) {
    for (int b = 0; b < kBlocks; ++b) acc[q][b] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; ++i) {
    __m512 fv[kBlocks];
    for (int b = 0; b < kBlocks; ++b) fv[b] = _mm512_maskz_loadu_ps(mask[b], f + i * o + 16 * b);
    for (int q = 0; q < kPix; ++q) {
      const __m512 v = _mm512_set1_ps(p[q][off[i]]);
      for (int b = 0; b < kBlocks; ++b) acc[q][b] = _mm512_fmadd_ps(v, fv[b], acc[q][b]);
    }
  }
  for (int q = 0; q < kPix; ++q) {
    for (int b = 0; b < kBlocks; ++b) _mm512_mask_storeu_ps(dst + q * o + 16 * b, mask[b], acc[q][b]);
  }
}

// Each output value is its patch's products summed in the patch's order, from zero.
template <int kBlocks>
__attribute__((target("avx512f"))) void forward_images(const Window2D& w, const Padded& pd, const int64_t* off,
                                                       const float* x, const float* f, float* out,
                                                       const BiasRelu<float>& epilogue, int64_t n0, int64_t n1,
                                                       float* pad) {
  constexpr int kPix = kBlocks <= 2 ? 8 : 4;  // kPix * kBlocks sums, kBlocks of the filter: 32 registers
  const int64_t o = w.out_c;
  const int64_t image_out = w.out_h * w.out_w * o;
  for (int64_t n = n0; n < n1; ++n) {
    pd.fill(w, x, n, pad);
    float* oi = out + n * image_out;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      int64_t ow = 0;
      for (; ow + kPix <= w.out_w; ow += kPix) {
        forward_pixels<kBlocks, kPix>(w, pd, off, pad, f, oh, ow, oi + (oh * w.out_w + ow) * o);
      }
      for (; ow < w.out_w; ++ow) forward_pixels<kBlocks, 1>(w, pd, off, pad, f, oh, ow, oi + (oh * w.out_w + ow) * o);
    }
    epilogue(oi, w.out_h * w.out_w, o);
  }
}

// Adds images [n0, n1)'s sums into acc ([patch, out_c]) for kGroup patch values from `first` on
// (those past the patch are read at offset 0 and dropped): per pixel, its kBlocks channel blocks
// of dy loaded once, each value broadcast once, kGroup * kBlocks independent sums in registers.
template <int kBlocks, int kGroup>
__attribute__((target("avx512f"))) void filter_group(const Window2D& w, const Padded& pd, const int64_t* off,
                                                     const float* di, const float* pad, int64_t first, float* acc) {
  const int64_t o = w.out_c;
  const int64_t k = w.patch_size();
  __mmask16 mask[kBlocks];
  for (int b = 0; b < kBlocks; ++b) mask[b] = block_mask(o - 16 * b);
  int64_t value_at[kGroup];
  __m512 sum[kGroup][kBlocks];
  for (int g = 0; g < kGroup; ++g) {
    value_at[g] = first + g < k ? off[first + g] : 0;
    for (int b = 0; b < kBlocks; ++b) {
      sum[g][b] = first + g < k ? _mm512_maskz_loadu_ps(mask[b], acc + (first + g) * o + 16 * b) : _mm512_setzero_ps();
    }
  }
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      const float* p = pad + pd.corner(w, oh, ow);
      const float* d = di + (oh * w.out_w + ow) * o;
      __m512 dv[kBlocks];
      for (int b = 0; b < kBlocks; ++b) dv[b] = _mm512_maskz_loadu_ps(mask[b], d + 16 * b);
      for (int g = 0; g < kGroup; ++g) {
        const __m512 v = _mm512_set1_ps(p[value_at[g]]);
        for (int b = 0; b < kBlocks; ++b) sum[g][b] = _mm512_fmadd_ps(v, dv[b], sum[g][b]);
      }
    }
  }
  for (int g = 0; g < kGroup && first + g < k; ++g) {
    for (int b = 0; b < kBlocks; ++b) _mm512_mask_storeu_ps(acc + (first + g) * o + 16 * b, mask[b], sum[g][b]);
  }
}

// Image n's sums into acc; di: its dy. kGroup: as many patch values as fit in the registers
// beside kBlocks blocks of dy, or fewer so that the passes over the image are each as full (a 3x3
// patch of one channel: one pass of 9).
template <int kBlocks, int kGroup>
void filter_image(const Window2D& w, const Padded& pd, const int64_t* off, const float* x, int64_t n,
                  const float* di, float* acc, float* pad) {
  pd.fill(w, x, n, pad);
  for (int64_t first = 0; first < w.patch_size(); first += kGroup) {
    filter_group<kBlocks, kGroup>(w, pd, off, di, pad, first, acc);
  }
}

// The most patch values a pass sums: kGroup * kBlocks sums, kBlocks of dy and a broadcast value
// within the 32 registers.
constexpr int kMostGroup[] = {0, 12, 12, 6, 6};

using FilterImage = void (*)(const Window2D&, const Padded&, const int64_t*, const float*, int64_t, const float*,
                             float*, float*);

template <int kBlocks, int... kGroups>
FilterImage filter_image_for(int group, std::integer_sequence<int, kGroups...>) {
  FilterImage fn = nullptr;
  ((group == kGroups + 1 ? (fn = &filter_image<kBlocks, kGroups + 1>, 0) : 0), ...);
  return fn;
}

// The filter-gradient walk for out_c channels and the patch's size.
FilterImage filter_image_of(int64_t out_c, int64_t patch) {
  const int blocks = static_cast<int>((out_c + 15) / 16);
  const int64_t passes = (patch + kMostGroup[blocks] - 1) / kMostGroup[blocks];
  const int group = static_cast<int>((patch + passes - 1) / passes);
  switch (blocks) {
    case 1: return filter_image_for<1>(group, std::make_integer_sequence<int, kMostGroup[1]>());
    case 2: return filter_image_for<2>(group, std::make_integer_sequence<int, kMostGroup[2]>());
    case 3: return filter_image_for<3>(group, std::make_integer_sequence<int, kMostGroup[3]>());
    default: return filter_image_for<4>(group, std::make_integer_sequence<int, kMostGroup[4]>());
  }
}

// The images in each part of the filter's gradient (the last part may have fewer): a function of
// the shapes only.
int64_t filter_part_images(const Window2D& w) {
  const int64_t work = w.batch * w.out_h * w.out_w * w.patch_size() * w.out_c;
  const int64_t parts = std::clamp<int64_t>(work / (4 * kGemmShardMultiplyAdds), 1, std::min(kFilterParts, w.batch));
  return (w.batch + parts - 1) / parts;
}

}  // namespace direct

bool direct_conv_applies(const Window2D& w, DType dtype) {
  return dtype == DType::Float32 && w.patch_size() <= direct::kMaxPatch && w.out_c >= direct::kMinOutChannels &&
         w.out_c <= direct::kMaxOutChannels && has_avx512f();
}

void direct_conv2d(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* f, float* out,
                   const BiasRelu<float>& epilogue) {
  const direct::Padded pd(w);
  const std::vector<int64_t> off = pd.offsets(w);
  const int64_t image_work = std::max<int64_t>(1, w.out_h * w.out_w * w.patch_size() * w.out_c);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, kGemmShardMultiplyAdds / image_work), [&](int64_t n0, int64_t n1) {
    std::vector<float> pad(static_cast<std::size_t>(pd.size()));
    switch ((w.out_c + 15) / 16) {
      case 1: direct::forward_images<1>(w, pd, off.data(), x, f, out, epilogue, n0, n1, pad.data()); break;
      case 2: direct::forward_images<2>(w, pd, off.data(), x, f, out, epilogue, n0, n1, pad.data()); break;
      case 3: direct::forward_images<3>(w, pd, off.data(), x, f, out, epilogue, n0, n1, pad.data()); break;
      default: direct::forward_images<4>(w, pd, off.data(), x, f, out, epilogue, n0, n1, pad.data()); break;
    }
  });
}

bool direct_filter_parts_hold_bias_parts(const Window2D& w) {
  // Every boundary between parts (a multiple of part_images images) is one between bias parts.
  const int64_t pixels = w.out_h * w.out_w;
  const int64_t part_images = direct::filter_part_images(w);
  return part_images >= w.batch || (part_images * pixels) % bias_grad_part_rows(w.batch * pixels, w.out_c) == 0;
}

void direct_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* dy,
                                   float* df) {
  const int64_t image_out = w.out_h * w.out_w * w.out_c;
  direct_conv2d_backprop_filter_bias(
      ctx, w, x, [&](int64_t n, float*) { return dy + n * image_out; }, df, nullptr);
}

void direct_conv2d_backprop_filter_bias(const OpKernelContext& ctx, const Window2D& w, const float* x,
                                        const ImageGradient& dy_of, float* df, float* bias_sums) {
  const direct::Padded pd(w);
  const std::vector<int64_t> off = pd.offsets(w);
  const int64_t size = w.patch_size() * w.out_c;
  const int64_t pixels = w.out_h * w.out_w;
  const int64_t part_images = direct::filter_part_images(w);
  const int64_t parts = (w.batch + part_images - 1) / part_images;
  const int64_t bias_rows = bias_grad_part_rows(w.batch * pixels, w.out_c);
  // Part 0 sums into df, part p > 0 into partials[p - 1]; the parts are added in order.
  std::fill(df, df + size, 0.0f);
  std::vector<float> partials(static_cast<std::size_t>((parts - 1) * size), 0.0f);
  const direct::FilterImage filter = direct::filter_image_of(w.out_c, w.patch_size());
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> pad(static_cast<std::size_t>(pd.size()));
    std::vector<float> scratch(static_cast<std::size_t>(pixels * w.out_c));
    for (int64_t p = p0; p < p1; ++p) {
      float* acc = p == 0 ? df : partials.data() + (p - 1) * size;
      for (int64_t n = p * part_images; n < std::min(w.batch, (p + 1) * part_images); ++n) {
        const float* di = dy_of(n, scratch.data());
        filter(w, pd, off.data(), x, n, di, acc, pad.data());
        if (bias_sums == nullptr) continue;
        // The image's rows into their bias parts (each part inside this filter part: its rows in
        // order, on this thread).
        for (int64_t r0 = 0; r0 < pixels;) {
          const int64_t part = (n * pixels + r0) / bias_rows;
          const int64_t r1 = std::min(pixels, (part + 1) * bias_rows - n * pixels);
          add_bias_rows(di, w.out_c, r0, r1, bias_sums + part * w.out_c);
          r0 = r1;
        }
      }
    }
  });
  add_parts_in_order(ctx, df, partials.data(), parts - 1, size);
}

}  // namespace tessera::internal
