// im2col and its inverse on the CPU (Note [Convolution as im2col and GEMM] in kernels/conv_ops.cc):
// each output position's window laid out as a row, and the rows' values added back. Used by the
// im2col convolutions and, with a tile as the window, by Winograd's (kernels/conv_winograd.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/conv_ops.h"

namespace tessera::internal {

// Copies n values with inline moves (8, 4, 2, 1 at a time), not a libc call: im2col copies one
// window row at a time, three floats for a one-channel image's 3x3 window.
template <class T>
inline void copy_values(T* __restrict dst, const T* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(dst + i, src + i, 8 * sizeof(T));
  if (n - i >= 4) {
    std::memcpy(dst + i, src + i, 4 * sizeof(T));
    i += 4;
  }
  if (n - i >= 2) {
    std::memcpy(dst + i, src + i, 2 * sizeof(T));
    i += 2;
  }
  if (n - i >= 1) dst[i] = src[i];
}

// Zeros n values the same way (the padding of a window).
template <class T>
inline void zero_values(T* dst, int64_t n) {
  static constexpr T kZeros[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(dst + i, kZeros, 8 * sizeof(T));
  for (; i < n; ++i) dst[i] = T{0};
}

// Calls visit(row, h0, w0, x_offset) for each output position row in [row0, row0 + rows): its
// window's top-left corner (h0, w0) in the input, possibly in the padding, and the offset of its
// image in the input. (Counters, not a division per row.)
template <class F>
void for_each_position(const Window2D& w, int64_t row0, int64_t rows, F visit) {
  if (rows <= 0) return;
  int64_t ow = row0 % w.out_w;
  int64_t oh = (row0 / w.out_w) % w.out_h;
  int64_t n = row0 / (w.out_w * w.out_h);
  const int64_t image = w.in_h * w.in_w * w.in_c;
  for (int64_t row = row0; row < row0 + rows; ++row) {
    visit(row, oh * w.stride_h - w.pad_top, ow * w.stride_w - w.pad_left, n * image);
    if (++ow == w.out_w) {
      ow = 0;
      if (++oh == w.out_h) {
        oh = 0;
        ++n;
      }
    }
  }
}

// The patches of output rows [row0, row0 + rows) into `patches` ([rows, K]); padding is zeros.
// A window's row inside the input is one contiguous run of the input: one copy.
template <class T>
void im2col(const Window2D& w, const T* x, int64_t row0, int64_t rows, T* patches) {
  const int64_t c = w.in_c;
  const int64_t row_values = w.k_w * c;
  for_each_position(w, row0, rows, [&](int64_t row, int64_t h0, int64_t w0, int64_t image) {
    T* dst = patches + (row - row0) * w.patch_size();
    // The window's columns [lo, hi) are inside the input.
    const int64_t lo = std::min(w.k_w, std::max<int64_t>(0, -w0));
    const int64_t hi = std::max(lo, std::min(w.k_w, w.in_w - w0));
    for (int64_t kh = 0; kh < w.k_h; ++kh, dst += row_values) {
      const int64_t h = h0 + kh;
      if (h < 0 || h >= w.in_h) {
        zero_values(dst, row_values);
        continue;
      }
      zero_values(dst, lo * c);
      copy_values(dst + lo * c, x + image + (h * w.in_w + w0 + lo) * c, (hi - lo) * c);
      zero_values(dst + hi * c, (w.k_w - hi) * c);
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

}  // namespace tessera::internal
