// Winograd's F(2x2, 3x3) convolution and its two gradients on the CPU (Note [Winograd
// convolution]).
//
// Note [Winograd convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2015). A 2x2 block of a 3x3
// stride-1 convolution's outputs (a tile) depends on a 4x4 block of the input d; with the filter g
// of one (in, out) channel pair,
//   y = A^T [ (G g G^T) ⊙ (B^T d B) ] A
// where ⊙ multiplies element by element, so the 36 multiplications of the direct form become 16.
// Summed over the input channels, each of the 16 elements ("positions" p) of the transformed tile is
// a matrix product over all tiles at once:
//   U[p] = (G g G^T)[p]   [in_c, out_c]      the filter, transformed once per call
//   V[p] = (B^T d B)[p]   [tiles, in_c]      the input, per tile
//   M[p] = V[p] x U[p]    [tiles, out_c]     16 GEMMs (OpenBLAS, kernels/blas.h)
//   y    = A^T M A        per tile and out channel
// 2.25x fewer multiply-adds than im2col's one GEMM, for a little transform work per tile. The
// gradients are this algorithm's own (the transposes of its linear steps), exact in exact
// arithmetic as the forward form is:
//   dM[p] = (A dy A^T)[p];  dV[p] = dM[p] x U[p]^T;  dx += B dV B^T  (tiles overlap: summed)
//   dU[p] = sum over tiles of V[p]^T x dM[p];  dg = G^T dU G
// A tile's outputs past the output's edge are dropped (its gradient there is zero); its inputs in
// the padding are zeros (their gradient is dropped). In floating point the result differs from
// im2col's by rounding only (the transforms have the coefficients 0, ±1 and ±1/2).
//
// The tiles are sharded by images over the session's pool and transformed a chunk at a time, so
// that a chunk's V and M (kChunkBytes) are still in the core's L2 cache when BLAS reads them; an
// image's dx is summed on one thread. The filter's gradient is summed in parts of tiles, their
// number a function of the shapes only, as im2col's is (Note [The filter's gradient in parts] in
// kernels/conv_ops.cc): the same bits on every run and machine.
//
// It is used where it wins (winograd_applies): with few channels (the first layer's one) the
// transforms cost more than the multiplications they save. Measured on the digits CNN's second
// layer (benchmarks/README.md, "Winograd convolution").
#include "kernels/conv_winograd.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "core/op_kernel.h"
#include "kernels/blas.h"

namespace tessera::internal {
namespace {

// The fewest channels in and out for which the transforms pay (winograd_applies).
constexpr int64_t kMinChannels = 8;
// Elements of a transformed tile.
constexpr int64_t kPositions = 16;
// The most bytes of a chunk's transformed tiles (its V or dV and M or dM together).
constexpr int64_t kChunkBytes = int64_t{1} << 19;
// The filter's gradient: at most this many parts, each of kFilterPartTiles tiles at least.
constexpr int64_t kFilterParts = 8;
constexpr int64_t kFilterPartTiles = 128;

// An image's tiles: `rows` down and `cols` across, each 2x2 outputs.
struct Tiling {
  int64_t rows = 0, cols = 0;
  int64_t per_image() const { return rows * cols; }
};

Tiling tiling_of(const Window2D& w) { return {(w.out_h + 1) / 2, (w.out_w + 1) / 2}; }

template <class T>
std::unique_ptr<T[]> scratch_of(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(std::max<int64_t>(n, 1)));
}

// Calls visit(t, image, i, j) for tiles [t0, t0 + n), t counted from t0: the tile's image and its
// row and column among the image's tiles.
template <class F>
void for_each_tile(const Tiling& tl, int64_t t0, int64_t n, F visit) {
  int64_t j = t0 % tl.cols;
  int64_t i = (t0 / tl.cols) % tl.rows;
  int64_t image = t0 / tl.per_image();
  for (int64_t t = 0; t < n; ++t) {
    visit(t, image, i, j);
    if (++j == tl.cols) {
      j = 0;
      if (++i == tl.rows) {
        i = 0;
        ++image;
      }
    }
  }
}

// The 4x4 block of `image`'s input whose top-left corner is (h0, w0) into d (row 4 * a + b holds
// the c values at (h0 + a, w0 + b)); outside the input, zeros.
template <class T>
void gather_input(const Window2D& w, const T* x, int64_t image, int64_t h0, int64_t w0, T* d) {
  const int64_t c = w.in_c;
  const T* base = x + image * w.in_h * w.in_w * c;
  const int64_t lo = std::clamp<int64_t>(-w0, 0, 4);
  const int64_t hi = std::clamp<int64_t>(w.in_w - w0, lo, 4);
  for (int64_t a = 0; a < 4; ++a) {
    T* row = d + a * 4 * c;
    const int64_t h = h0 + a;
    if (h < 0 || h >= w.in_h) {
      std::fill(row, row + 4 * c, T{0});
      continue;
    }
    std::fill(row, row + lo * c, T{0});
    std::memcpy(row + lo * c, base + (h * w.in_w + w0 + lo) * c, static_cast<std::size_t>((hi - lo) * c) * sizeof(T));
    std::fill(row + hi * c, row + 4 * c, T{0});
  }
}

// Adds d (as gather_input lays it out) into `image`'s dx at (h0, w0); what falls outside is
// dropped.
template <class T>
void scatter_add_input(const Window2D& w, const T* d, int64_t image, int64_t h0, int64_t w0, T* dx) {
  const int64_t c = w.in_c;
  T* base = dx + image * w.in_h * w.in_w * c;
  const int64_t lo = std::clamp<int64_t>(-w0, 0, 4);
  const int64_t hi = std::clamp<int64_t>(w.in_w - w0, lo, 4);
  for (int64_t a = 0; a < 4; ++a) {
    const int64_t h = h0 + a;
    if (h < 0 || h >= w.in_h) continue;
    const T* __restrict src = d + (a * 4 + lo) * c;
    T* __restrict dst = base + (h * w.in_w + w0 + lo) * c;
    for (int64_t i = 0; i < (hi - lo) * c; ++i) dst[i] += src[i];
  }
}

// The 2x2 block of `image`'s output (or output gradient) at (h0, w0) into g (row 2 * a + b holds
// the c values at (h0 + a, w0 + b)); past the output's edge, zeros.
template <class T>
void gather_output(const Window2D& w, const T* y, int64_t image, int64_t h0, int64_t w0, T* g) {
  const int64_t c = w.out_c;
  const T* base = y + image * w.out_h * w.out_w * c;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      T* row = g + (a * 2 + b) * c;
      if (h0 + a < w.out_h && w0 + b < w.out_w) {
        std::memcpy(row, base + ((h0 + a) * w.out_w + w0 + b) * c, static_cast<std::size_t>(c) * sizeof(T));
      } else {
        std::fill(row, row + c, T{0});
      }
    }
  }
}

// Writes g (as gather_output lays it out) into `image`'s output at (h0, w0), inside it only.
template <class T>
void scatter_output(const Window2D& w, const T* g, int64_t image, int64_t h0, int64_t w0, T* y) {
  const int64_t c = w.out_c;
  T* base = y + image * w.out_h * w.out_w * c;
  for (int64_t a = 0; a < 2 && h0 + a < w.out_h; ++a) {
    for (int64_t b = 0; b < 2 && w0 + b < w.out_w; ++b) {
      std::memcpy(base + ((h0 + a) * w.out_w + w0 + b) * c, g + (a * 2 + b) * c, static_cast<std::size_t>(c) * sizeof(T));
    }
  }
}

// The transforms, each over a run of channels (the innermost, vectorized loop). A transformed tile
// goes to out[p * plane + channel] (its row in the positions' GEMM operands). The 16 rows of a tile
// are one pointer apart by `plane`, which the compiler cannot prove keeps them apart, and more
// pairs than it checks at run time: without `ivdep` the loops stay scalar (and the transforms took
// more time than the products).
#define TESSERA_CHANNEL_LOOP _Pragma("GCC ivdep")

// V = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; d as gather_input lays it out.
template <class T>
void transform_input(int64_t c, const T* __restrict d, T* __restrict out, int64_t plane) {
  TESSERA_CHANNEL_LOOP
  for (int64_t ch = 0; ch < c; ++ch) {
    T r[4][4];
    for (int b = 0; b < 4; ++b) {
      const T d0 = d[b * c + ch], d1 = d[(4 + b) * c + ch], d2 = d[(8 + b) * c + ch], d3 = d[(12 + b) * c + ch];
      r[0][b] = d0 - d2;
      r[1][b] = d1 + d2;
      r[2][b] = d2 - d1;
      r[3][b] = d1 - d3;
    }
    for (int a = 0; a < 4; ++a) {
      out[(a * 4 + 0) * plane + ch] = r[a][0] - r[a][2];
      out[(a * 4 + 1) * plane + ch] = r[a][1] + r[a][2];
      out[(a * 4 + 2) * plane + ch] = r[a][2] - r[a][1];
      out[(a * 4 + 3) * plane + ch] = r[a][1] - r[a][3];
    }
  }
}

// d = B dV B^T (the transpose of transform_input), into d as gather_input lays it out.
template <class T>
void transform_input_grad(int64_t c, const T* __restrict dv, int64_t plane, T* __restrict d) {
  TESSERA_CHANNEL_LOOP
  for (int64_t ch = 0; ch < c; ++ch) {
    T r[4][4];
    for (int q = 0; q < 4; ++q) {
      const T v0 = dv[q * plane + ch], v1 = dv[(4 + q) * plane + ch], v2 = dv[(8 + q) * plane + ch],
              v3 = dv[(12 + q) * plane + ch];
      r[0][q] = v0;
      r[1][q] = v1 - v2 + v3;
      r[2][q] = v1 + v2 - v0;
      r[3][q] = -v3;
    }
    for (int a = 0; a < 4; ++a) {
      d[(a * 4 + 0) * c + ch] = r[a][0];
      d[(a * 4 + 1) * c + ch] = r[a][1] - r[a][2] + r[a][3];
      d[(a * 4 + 2) * c + ch] = r[a][1] + r[a][2] - r[a][0];
      d[(a * 4 + 3) * c + ch] = -r[a][3];
    }
  }
}

// y = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1], into y as gather_output lays it out.
template <class T>
void transform_output(int64_t c, const T* __restrict m, int64_t plane, T* __restrict y) {
  TESSERA_CHANNEL_LOOP
  for (int64_t k = 0; k < c; ++k) {
    T s[2][4];
    for (int b = 0; b < 4; ++b) {
      const T m0 = m[b * plane + k], m1 = m[(4 + b) * plane + k], m2 = m[(8 + b) * plane + k],
              m3 = m[(12 + b) * plane + k];
      s[0][b] = m0 + m1 + m2;
      s[1][b] = m1 - m2 - m3;
    }
    for (int a = 0; a < 2; ++a) {
      y[(a * 2 + 0) * c + k] = s[a][0] + s[a][1] + s[a][2];
      y[(a * 2 + 1) * c + k] = s[a][1] - s[a][2] - s[a][3];
    }
  }
}

// dM = A g A^T (the transpose of transform_output); g as gather_output lays it out.
template <class T>
void transform_output_grad(int64_t c, const T* __restrict g, T* __restrict out, int64_t plane) {
  TESSERA_CHANNEL_LOOP
  for (int64_t k = 0; k < c; ++k) {
    T r[4][2];
    for (int b = 0; b < 2; ++b) {
      const T g0 = g[b * c + k], g1 = g[(2 + b) * c + k];
      r[0][b] = g0;
      r[1][b] = g0 + g1;
      r[2][b] = g0 - g1;
      r[3][b] = -g1;
    }
    for (int a = 0; a < 4; ++a) {
      out[(a * 4 + 0) * plane + k] = r[a][0];
      out[(a * 4 + 1) * plane + k] = r[a][0] + r[a][1];
      out[(a * 4 + 2) * plane + k] = r[a][0] - r[a][1];
      out[(a * 4 + 3) * plane + k] = -r[a][1];
    }
  }
}

// U = G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], for every (in, out) channel pair:
// f is HWIO [3, 3, in_c, out_c], u is [16, in_c, out_c].
template <class T>
void transform_filter(int64_t plane, const T* __restrict f, T* __restrict u) {
  const T half = T{0.5};
  TESSERA_CHANNEL_LOOP
  for (int64_t i = 0; i < plane; ++i) {
    T r[4][3];
    for (int b = 0; b < 3; ++b) {
      const T g0 = f[b * plane + i], g1 = f[(3 + b) * plane + i], g2 = f[(6 + b) * plane + i];
      r[0][b] = g0;
      r[1][b] = (g0 + g1 + g2) * half;
      r[2][b] = (g0 - g1 + g2) * half;
      r[3][b] = g2;
    }
    for (int a = 0; a < 4; ++a) {
      u[(a * 4 + 0) * plane + i] = r[a][0];
      u[(a * 4 + 1) * plane + i] = (r[a][0] + r[a][1] + r[a][2]) * half;
      u[(a * 4 + 2) * plane + i] = (r[a][0] - r[a][1] + r[a][2]) * half;
      u[(a * 4 + 3) * plane + i] = r[a][2];
    }
  }
}

// dg = G^T dU G (the transpose of transform_filter), into HWIO df.
template <class T>
void transform_filter_grad(int64_t plane, const T* __restrict du, T* __restrict df) {
  const T half = T{0.5};
  TESSERA_CHANNEL_LOOP
  for (int64_t i = 0; i < plane; ++i) {
    T r[3][4];
    for (int q = 0; q < 4; ++q) {
      const T v0 = du[q * plane + i], v1 = du[(4 + q) * plane + i], v2 = du[(8 + q) * plane + i],
              v3 = du[(12 + q) * plane + i];
      r[0][q] = v0 + (v1 + v2) * half;
      r[1][q] = (v1 - v2) * half;
      r[2][q] = (v1 + v2) * half + v3;
    }
    for (int a = 0; a < 3; ++a) {
      df[(a * 3 + 0) * plane + i] = r[a][0] + (r[a][1] + r[a][2]) * half;
      df[(a * 3 + 1) * plane + i] = (r[a][1] - r[a][2]) * half;
      df[(a * 3 + 2) * plane + i] = (r[a][1] + r[a][2]) * half + r[a][3];
    }
  }
}

// to = from^T, from [rows, cols], in blocks that stay in cache.
template <class T>
void transpose(int64_t rows, int64_t cols, const T* __restrict from, T* __restrict to) {
  constexpr int64_t kBlock = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += kBlock) {
    for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
      for (int64_t i = i0; i < std::min(rows, i0 + kBlock); ++i) {
        for (int64_t j = j0; j < std::min(cols, j0 + kBlock); ++j) to[j * rows + i] = from[i * cols + j];
      }
    }
  }
}

// The most tiles of a chunk: kChunkBytes of their transforms (16 * (in_c + out_c) values each), one
// at least.
int64_t chunk_tiles(const Window2D& w, int64_t elem_bytes) {
  return std::max<int64_t>(1, kChunkBytes / (kPositions * (w.in_c + w.out_c) * elem_bytes));
}

// Scratch for a chunk of `chunk` tiles: the two transformed operands and one tile's values.
int64_t chunk_scratch(const Window2D& w, int64_t chunk) {
  return chunk * kPositions * (w.in_c + w.out_c) + kPositions * std::max(w.in_c, w.out_c);
}

// Calls fn(t0, n, scratch, product) for chunks of tiles (chunk_tiles each at most, of equal size),
// as for_each_chunk in kernels/conv_ops.cc does for rows: images sharded over the pool, each shard
// its chunks in order and its scratch, products single-threaded (product = null); one image: the
// chunks here, each product sharded (product = &ctx).
template <class T, class F>
void for_each_tile_chunk(const OpKernelContext& ctx, const Window2D& w, const Tiling& tl, F fn) {
  const int64_t chunk = chunk_tiles(w, sizeof(T));
  auto tiles_of = [&](int64_t begin, int64_t end, const OpKernelContext* product) {
    const int64_t chunks = (end - begin + chunk - 1) / chunk;
    const int64_t step = (end - begin + chunks - 1) / chunks;
    auto scratch = scratch_of<T>(chunk_scratch(w, step));
    for (int64_t t0 = begin; t0 < end; t0 += step) fn(t0, std::min(step, end - t0), scratch.get(), product);
  };
  if (w.batch < 2) return tiles_of(0, w.batch * tl.per_image(), &ctx);
  const int64_t image_work = std::max<int64_t>(1, tl.per_image() * kPositions * w.in_c * w.out_c);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, kGemmShardMultiplyAdds / image_work), [&](int64_t n0, int64_t n1) {
    tiles_of(n0 * tl.per_image(), n1 * tl.per_image(), nullptr);
  });
}

}  // namespace

bool winograd_applies(const Window2D& w) {
  // (The products' row strides, 16 channels' worth, must fit BLAS's int as im2col's do.)
  return w.k_h == 3 && w.k_w == 3 && w.stride_h == 1 && w.stride_w == 1 && w.in_c >= kMinChannels &&
         w.out_c >= kMinChannels && w.out_h >= 2 && w.out_w >= 2 &&
         kPositions * std::max(w.in_c, w.out_c) <= std::numeric_limits<int>::max();
}

template <class T>
void winograd_conv2d(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out) {
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const Tiling tl = tiling_of(w);
  auto u = scratch_of<T>(kPositions * c * k);
  transform_filter(c * k, f, u.get());
  for_each_tile_chunk<T>(ctx, w, tl, [&](int64_t t0, int64_t n, T* s, const OpKernelContext* product) {
    T* v = s;
    T* m = v + n * kPositions * c;
    T* tile = m + n * kPositions * k;
    for_each_tile(tl, t0, n, [&](int64_t t, int64_t image, int64_t i, int64_t j) {
      gather_input(w, x, image, 2 * i - w.pad_top, 2 * j - w.pad_left, tile);
      transform_input(c, tile, v + t * kPositions * c, c);
    });
    for (int64_t p = 0; p < kPositions; ++p) {
      gemm(product, false, false, n, k, c, v + p * c, kPositions * c, u.get() + p * c * k, k, T{0}, m + p * k,
           kPositions * k);
    }
    for_each_tile(tl, t0, n, [&](int64_t t, int64_t image, int64_t i, int64_t j) {
      transform_output(k, m + t * kPositions * k, k, tile);
      scatter_output(w, tile, image, 2 * i, 2 * j, out);
    });
  });
}

template <class T>
void winograd_conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const Tiling tl = tiling_of(w);
  const int64_t image = w.in_h * w.in_w * c;
  // U[p] transposed ([out_c, in_c]), so that each product is a plain one (OpenBLAS's
  // transposed-operand kernels were slower at these sizes): the transform of the filter with its
  // in and out channels swapped.
  auto ft = scratch_of<T>(9 * c * k);
  for (int64_t tap = 0; tap < 9; ++tap) transpose(c, k, f + tap * c * k, ft.get() + tap * c * k);
  auto ut = scratch_of<T>(kPositions * c * k);
  transform_filter(c * k, ft.get(), ut.get());
  for_each_tile_chunk<T>(ctx, w, tl, [&](int64_t t0, int64_t n, T* s, const OpKernelContext* product) {
    // An image's dx is zeroed by the chunk that holds its first tile, before any chunk adds to it
    // (its chunks run in order on one thread).
    const int64_t n0 = (t0 + tl.per_image() - 1) / tl.per_image();
    const int64_t n1 = (t0 + n + tl.per_image() - 1) / tl.per_image();
    std::fill(dx + n0 * image, dx + n1 * image, T{0});
    T* dm = s;
    T* dv = dm + n * kPositions * k;
    T* tile = dv + n * kPositions * c;
    for_each_tile(tl, t0, n, [&](int64_t t, int64_t img, int64_t i, int64_t j) {
      gather_output(w, dy, img, 2 * i, 2 * j, tile);
      transform_output_grad(k, tile, dm + t * kPositions * k, k);
    });
    for (int64_t p = 0; p < kPositions; ++p) {
      gemm(product, false, false, n, c, k, dm + p * k, kPositions * k, ut.get() + p * c * k, c, T{0}, dv + p * c,
           kPositions * c);
    }
    for_each_tile(tl, t0, n, [&](int64_t t, int64_t img, int64_t i, int64_t j) {
      transform_input_grad(c, dv + t * kPositions * c, c, tile);
      scatter_add_input(w, tile, img, 2 * i - w.pad_top, 2 * j - w.pad_left, dx);
    });
  });
}

template <class T>
void winograd_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const int64_t plane = c * k;
  const Tiling tl = tiling_of(w);
  const int64_t total = w.batch * tl.per_image();
  const int64_t chunk = chunk_tiles(w, sizeof(T));
  // Parts as conv_ops.cc's im2col form makes them: from the shapes only.
  const int64_t most_parts = std::max<int64_t>(1, std::min(kFilterParts, total / kFilterPartTiles));
  int64_t parts = std::clamp<int64_t>(total * kPositions * plane / (4 * kGemmShardMultiplyAdds), 1, most_parts);
  const int64_t part_tiles = (total + parts - 1) / parts;
  parts = (total + part_tiles - 1) / part_tiles;
  // Sums the tiles [begin, end) into du ([16, in_c, out_c], overwritten).
  auto sum_tiles = [&](int64_t begin, int64_t end, T* du, const OpKernelContext* product) {
    auto scratch = scratch_of<T>(chunk_scratch(w, std::min(chunk, end - begin)));
    for (int64_t t0 = begin; t0 < end; t0 += chunk) {
      const int64_t n = std::min(chunk, end - t0);
      T* v = scratch.get();
      T* dm = v + n * kPositions * c;
      T* tile = dm + n * kPositions * k;
      for_each_tile(tl, t0, n, [&](int64_t t, int64_t image, int64_t i, int64_t j) {
        gather_input(w, x, image, 2 * i - w.pad_top, 2 * j - w.pad_left, tile);
        transform_input(c, tile, v + t * kPositions * c, c);
        gather_output(w, dy, image, 2 * i, 2 * j, tile);
        transform_output_grad(k, tile, dm + t * kPositions * k, k);
      });
      const T beta = t0 == begin ? T{0} : T{1};
      for (int64_t p = 0; p < kPositions; ++p) {
        gemm(product, true, false, c, k, n, v + p * c, kPositions * c, dm + p * k, kPositions * k, beta,
             du + p * plane, k);
      }
    }
  };
  const int64_t size = kPositions * plane;
  auto du = scratch_of<T>(parts * size);
  if (parts == 1) {
    sum_tiles(0, total, du.get(), &ctx);
  } else {
    ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        sum_tiles(p * part_tiles, std::min(total, (p + 1) * part_tiles), du.get() + p * size, nullptr);
      }
    });
    // The parts summed into the first, in part order.
    ctx.parallel_for(size, std::max<int64_t>(1024, size / 8), [&](int64_t i0, int64_t i1) {
      T* __restrict d = du.get();
      for (int64_t p = 1; p < parts; ++p) {
        const T* __restrict part = du.get() + p * size;
        for (int64_t i = i0; i < i1; ++i) d[i] += part[i];
      }
    });
  }
  transform_filter_grad(plane, du.get(), df);
}

#undef TESSERA_CHANNEL_LOOP

#define TESSERA_WINOGRAD_INSTANTIATE(T)                                                                        \
  template void winograd_conv2d<T>(const OpKernelContext&, const Window2D&, const T*, const T*, T*);           \
  template void winograd_conv2d_backprop_input<T>(const OpKernelContext&, const Window2D&, const T*, const T*, \
                                                  T*);                                                         \
  template void winograd_conv2d_backprop_filter<T>(const OpKernelContext&, const Window2D&, const T*, const T*, \
                                                   T*);
TESSERA_WINOGRAD_INSTANTIATE(float)
TESSERA_WINOGRAD_INSTANTIATE(double)
#undef TESSERA_WINOGRAD_INSTANTIATE

}  // namespace tessera::internal
