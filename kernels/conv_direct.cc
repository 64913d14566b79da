// Note [Direct convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A first layer's window holds a handful of values (3x3 over one channel: 9), so im2col + GEMM is
// a poor fit: im2col copies each input value nine times, a few floats at a time, and a product with
// an inner dimension of 9 keeps BLAS's kernels mostly loading and storing. With AVX-512 each output
// pixel is instead K broadcast values times K rows of the filter, 16 output channels to a register
// (the last block masked), the window read from a zero-padded copy of the image (no bounds tests in
// the loop); the filter's gradient is the same walk with the roles swapped, eight patch values'
// sums for every channel block kept in registers over an image. Measured on the digits CNN's first
// layer (benchmarks/README.md, "Direct convolution").
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
#include <vector>

#include "core/op_kernel.h"
#include "kernels/blas.h"
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

__attribute__((target("avx512f"))) void forward_images(const Window2D& w, const Padded& pd, const int64_t* off,
                                                       const float* x, const float* f, float* out,
                                                       const BiasRelu<float>& epilogue, int64_t n0, int64_t n1,
                                                       float* pad) {
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t image_out = w.out_h * w.out_w * o;
  for (int64_t n = n0; n < n1; ++n) {
    pd.fill(w, x, n, pad);
    float* oi = out + n * image_out;
    for (int64_t oh = 0; oh < w.out_h; ++oh) {
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        const float* p = pad + pd.corner(w, oh, ow);
        float* dst = oi + (oh * w.out_w + ow) * o;
        for (int64_t b = 0; b < o; b += 16) {
          const __mmask16 m = block_mask(o - b);
          __m512 acc = _mm512_setzero_ps();
          for (int64_t i = 0; i < k; ++i) {
            acc = _mm512_fmadd_ps(_mm512_set1_ps(p[off[i]]), _mm512_maskz_loadu_ps(m, f + i * o + b), acc);
          }
          _mm512_mask_storeu_ps(dst + b, m, acc);
        }
      }
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

template <int kBlocks>
void filter_images(const Window2D& w, const Padded& pd, const int64_t* off, const float* x, const float* dy,
                   float* acc, int64_t n0, int64_t n1, float* pad) {
  constexpr int kGroup = kBlocks <= 2 ? 8 : 4;  // sums and dy's blocks within the 32 registers
  const int64_t image_out = w.out_h * w.out_w * w.out_c;
  for (int64_t n = n0; n < n1; ++n) {
    pd.fill(w, x, n, pad);
    for (int64_t first = 0; first < w.patch_size(); first += kGroup) {
      filter_group<kBlocks, kGroup>(w, pd, off, dy + n * image_out, pad, first, acc);
    }
  }
}

bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace direct

bool direct_conv_applies(const Window2D& w, DType dtype) {
  return dtype == DType::Float32 && w.patch_size() <= direct::kMaxPatch && w.out_c >= direct::kMinOutChannels &&
         w.out_c <= direct::kMaxOutChannels && direct::has_avx512();
}

void direct_conv2d(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* f, float* out,
                   const BiasRelu<float>& epilogue) {
  const direct::Padded pd(w);
  const std::vector<int64_t> off = pd.offsets(w);
  const int64_t image_work = std::max<int64_t>(1, w.out_h * w.out_w * w.patch_size() * w.out_c);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, kGemmShardMultiplyAdds / image_work), [&](int64_t n0, int64_t n1) {
    std::vector<float> pad(static_cast<std::size_t>(pd.size()));
    direct::forward_images(w, pd, off.data(), x, f, out, epilogue, n0, n1, pad.data());
  });
}

void direct_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* dy,
                                   float* df) {
  const direct::Padded pd(w);
  const std::vector<int64_t> off = pd.offsets(w);
  const int64_t size = w.patch_size() * w.out_c;
  const int64_t work = w.batch * w.out_h * w.out_w * size;
  int64_t parts = std::clamp<int64_t>(work / (4 * kGemmShardMultiplyAdds), 1, std::min(direct::kFilterParts, w.batch));
  const int64_t part_images = (w.batch + parts - 1) / parts;
  parts = (w.batch + part_images - 1) / part_images;
  // Part 0 sums into df, part p > 0 into partials[p - 1]; the parts are added in order.
  std::fill(df, df + size, 0.0f);
  std::vector<float> partials(static_cast<std::size_t>((parts - 1) * size), 0.0f);
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> pad(static_cast<std::size_t>(pd.size()));
    for (int64_t p = p0; p < p1; ++p) {
      float* acc = p == 0 ? df : partials.data() + (p - 1) * size;
      const int64_t n0 = p * part_images;
      const int64_t n1 = std::min(w.batch, (p + 1) * part_images);
      switch ((w.out_c + 15) / 16) {
        case 1: direct::filter_images<1>(w, pd, off.data(), x, dy, acc, n0, n1, pad.data()); break;
        case 2: direct::filter_images<2>(w, pd, off.data(), x, dy, acc, n0, n1, pad.data()); break;
        case 3: direct::filter_images<3>(w, pd, off.data(), x, dy, acc, n0, n1, pad.data()); break;
        default: direct::filter_images<4>(w, pd, off.data(), x, dy, acc, n0, n1, pad.data()); break;
      }
    }
  });
  add_parts_in_order(ctx, df, partials.data(), parts - 1, size);
}

}  // namespace tessera::internal
