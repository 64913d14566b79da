// Winograd's F(2x2, 3x3) and F(4x4, 3x3) convolutions and their two gradients on the CPU (Note
// [Winograd convolution]).
//
// Note [Winograd convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2015). In F(2x2, 3x3) a
// 2x2 block of a 3x3 stride-1 convolution's outputs (a tile) depends on a 4x4 block of the input
// d; with the filter g of one (in, out) channel pair,
//   y = A^T [ (G g G^T) ⊙ (B^T d B) ] A
// where ⊙ multiplies element by element. Summed over the input channels, each of the 16 elements
// ("positions" p) of the transformed tile is a matrix product over all tiles at once:
//   U[p] = (G g G^T)[p]   [in_c, out_c]      the filter, transformed once per call
//   V[p] = (B^T d B)[p]   [tiles, in_c]      the input, per tile
//   M[p] = V[p] x U[p]    [tiles, out_c]     16 GEMMs (OpenBLAS, kernels/blas.h)
//   y    = A^T M A        per tile and out channel
// 2.25x fewer multiply-adds than im2col's one GEMM. F(4x4, 3x3): 4x4 tiles, 6x6 inputs, 36
// positions, 4x fewer, for longer transforms with coefficients up to 8 (a little more rounding).
// Each output takes the tiles that make fewer products (winograd_tile). The gradients are the
// algorithm's own (the transposes of its linear steps), exact in exact arithmetic:
//   dM[p] = (A dy A^T)[p];  dV[p] = dM[p] x U[p]^T;  dx += B dV B^T  (tiles overlap: summed)
//   dU[p] = sum over tiles of V[p]^T x dM[p];  dg = G^T dU G
// A tile's outputs past the output's edge are dropped (its gradient there is zero); its inputs in
// the padding are zeros (their gradient is dropped).
//
// The tiles are sharded by images over the session's pool and transformed a chunk at a time, so
// that a chunk's V and M (kChunkBytes) are still in the core's L2 cache when BLAS reads them; an
// image's dx is summed on one thread. The filter's gradient is summed in parts of tiles, their
// number a function of the shapes only (Note [The filter's gradient in parts] in
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
#include <type_traits>
#include <utility>

#include "core/conv_ops.h"
#include "core/op_kernel.h"
#include "kernels/blas.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise_shards.h"
#include "kernels/im2col.h"

namespace tessera::internal {
// A named namespace, not an anonymous one: the demo's unity build compiles this file in one unit
// with conv_ops.cc, whose anonymous namespace has helpers of the same names.
namespace winograd {

// The fewest channels in and out for which the transforms pay (winograd_applies).
constexpr int64_t kMinChannels = 8;
// The most bytes of a chunk's transformed tiles (its V or dV and M or dM together).
constexpr int64_t kChunkBytes = int64_t{1} << 19;
// The filter's gradient: at most this many parts, each of kFilterPartTiles tiles at least.
constexpr int64_t kFilterParts = 8;
constexpr int64_t kFilterPartTiles = 128;

// An image's tiles: `rows` down and `cols` across, each `size` x `size` outputs.
struct Tiling {
  int64_t size = 0, rows = 0, cols = 0;
  int64_t per_image() const { return rows * cols; }
};

Tiling tiling_of(const Window2D& w, int64_t size) {
  return {size, (w.out_h + size - 1) / size, (w.out_w + size - 1) / size};
}

template <class T>
std::unique_ptr<T[]> scratch_of(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(std::max<int64_t>(n, 1)));
}

// The tiles as windows, so that im2col (kernels/im2col.h) of tile t gathers its values and
// col2im_add adds values back: over the input, (size + 2)-square windows with stride `size` and the
// convolution's padding (row (size + 2) * a + b of a tile holds the in_c values at (a, b), zeros
// outside the input); over the output, size-square windows with stride `size` (row size * a + b,
// zeros past the output's edge).
Window2D input_tiles(const Window2D& w, const Tiling& tl) {
  Window2D t = w;
  t.k_h = t.k_w = tl.size + 2;
  t.stride_h = t.stride_w = tl.size;
  t.out_h = tl.rows;
  t.out_w = tl.cols;
  return t;
}

Window2D output_tiles(const Window2D& w, const Tiling& tl) {
  Window2D t;
  t.batch = w.batch;
  t.in_h = w.out_h;
  t.in_w = w.out_w;
  t.in_c = w.out_c;
  t.k_h = t.k_w = tl.size;
  t.stride_h = t.stride_w = tl.size;
  t.out_h = tl.rows;
  t.out_w = tl.cols;
  return t;
}

// Writes tile t's outputs g (as im2col of output_tiles lays them out) into the output y, inside it
// only (the forward op's output is not zeroed first, so col2im_add's sum would not do).
template <class T>
void scatter_output(const Window2D& out_tiles, const T* g, int64_t t, T* y) {
  const int64_t c = out_tiles.in_c;
  const int64_t size = out_tiles.k_h;
  const int64_t per_image = out_tiles.out_h * out_tiles.out_w;
  const int64_t h0 = size * (t % per_image / out_tiles.out_w);
  const int64_t w0 = size * (t % out_tiles.out_w);
  T* base = y + t / per_image * out_tiles.in_h * out_tiles.in_w * c;
  for (int64_t a = 0; a < size && h0 + a < out_tiles.in_h; ++a) {
    for (int64_t b = 0; b < size && w0 + b < out_tiles.in_w; ++b) {
      std::memcpy(base + ((h0 + a) * out_tiles.in_w + w0 + b) * c, g + (a * size + b) * c,
                  static_cast<std::size_t>(c) * sizeof(T));
    }
  }
}

// The transforms. Each is Y = L X L^T for one tile and channel, where the gradients' matrices are
// the transposes of the forward ones:
//   V  = B^T d B   (input)           dd = B dV B^T    (its transpose, the input's gradient)
//   y  = A^T M A   (output)          dM = A dy A^T    (the output's gradient)
//   U  = G g G^T   (filter)          dg = G^T dU G    (the filter's gradient)
template <int kRows, int kCols>
struct Matrix {
  double at[kRows][kCols];
};

template <int kRows, int kCols>
constexpr Matrix<kCols, kRows> transposed(const Matrix<kRows, kCols>& m) {
  Matrix<kCols, kRows> t{};
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) t.at[j][i] = m.at[i][j];
  }
  return t;
}

// The algorithms' matrices (Lavin and Gray's: F(2x2, 3x3) interpolates at 0, ±1 and infinity,
// F(4x4, 3x3) at ±2 too), one struct for each tile size; Winograd<> adds their transposes and the
// positions of a transformed tile.
template <int kTile>
struct Algorithm;

template <>
struct Algorithm<2> {
  static constexpr Matrix<4, 4> kBt{{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}};
  static constexpr Matrix<2, 4> kAt{{{1, 1, 1, 0}, {0, 1, -1, -1}}};
  static constexpr Matrix<4, 3> kG{{{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}}};
};

template <>
struct Algorithm<4> {
  static constexpr Matrix<6, 6> kBt{{{4, 0, -5, 0, 1, 0},
                                     {0, -4, -4, 1, 1, 0},
                                     {0, 4, -4, -1, 1, 0},
                                     {0, -2, -1, 2, 1, 0},
                                     {0, 2, -1, -2, 1, 0},
                                     {0, 4, 0, -5, 0, 1}}};
  static constexpr Matrix<4, 6> kAt{{{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}}};
  static constexpr Matrix<6, 3> kG{{{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}}};
};

template <int kTile>
struct Winograd : Algorithm<kTile> {
  using Base = Algorithm<kTile>;
  static constexpr int64_t kSize = kTile;
  static constexpr int64_t kPositions = (kTile + 2) * (kTile + 2);  // elements of a transformed tile
  static constexpr auto kB = transposed(Base::kBt);
  static constexpr auto kA = transposed(Base::kAt);
  static constexpr auto kGt = transposed(Base::kG);
};

// sum += kCoef * v, kCoef = L[row][col], the first term assigned: zero coefficients cost nothing
// and ±1 no product (the coefficients are known at compile time, so each transform compiles to its
// additions). L, not the coefficient, is the template argument: clang 14 (the fuzz preset's) takes
// no floating-point template arguments.
template <const auto& L, int row, int col, class T>
inline void add_term(T& sum, bool& any, T v) {
  constexpr double kCoef = L.at[row][col];
  if constexpr (kCoef != 0) {
    const T t = kCoef == 1 ? v : kCoef == -1 ? -v : static_cast<T>(kCoef) * v;
    sum = any ? sum + t : t;
    any = true;
  }
}

// Row `row` of L times v (L's columns' worth of values).
template <const auto& L, int row, class T, int... col>
inline T row_times(const T* v, std::integer_sequence<int, col...>) {
  T sum{};
  bool any = false;
  (add_term<L, row, col>(sum, any, v[col]), ...);
  return sum;
}

// Y = L X L^T for each of n channels (the innermost, vectorized loop): X [k, k] (k = L's
// columns) at src[(a * k + b) * src_stride + channel], Y [m, m] (m = L's rows) to
// dst[(a * m + b) * dst_stride + channel]. A tile's rows lie `stride` apart, which the compiler
// cannot prove keeps them apart, and more pairs than it checks at run time: without `ivdep` the
// loop stays scalar (and the transforms took more time than the products).
template <const auto& L, class T>
[[gnu::always_inline]] inline void transform_channels(int64_t n, const T* __restrict src, int64_t src_stride,
                                                      T* __restrict dst, int64_t dst_stride) {
  constexpr int kIn = std::extent_v<decltype(L.at), 1>;
  constexpr int kOut = std::extent_v<decltype(L.at), 0>;
  constexpr auto in = std::make_integer_sequence<int, kIn>();
  constexpr auto out = std::make_integer_sequence<int, kOut>();
#pragma GCC ivdep
  for (int64_t ch = 0; ch < n; ++ch) {
    // (Loops unrolled by hand: GCC leaves a 6x6 tile's loops rolled, and a loop nest stays scalar.)
    T xt[kIn][kIn];  // X transposed: xt[b] is column b
#pragma GCC unroll 8
    for (int a = 0; a < kIn; ++a) {
#pragma GCC unroll 8
      for (int b = 0; b < kIn; ++b) xt[b][a] = src[(a * kIn + b) * src_stride + ch];
    }
    T r[kOut][kIn];  // L X
    [&]<int... row>(std::integer_sequence<int, row...>) {
#pragma GCC unroll 8
      for (int b = 0; b < kIn; ++b) ((r[row][b] = row_times<L, row>(xt[b], in)), ...);
    }(out);
    [&]<int... col>(std::integer_sequence<int, col...>) {  // (L X) L^T
#pragma GCC unroll 8
      for (int a = 0; a < kOut; ++a) ((dst[(a * kOut + col) * dst_stride + ch] = row_times<L, col>(r[a], in)), ...);
    }(out);
  }
}

// The same loop compiled for AVX-512: 16 floats to an instruction instead of SSE2's 4, the same
// operations on each channel (no FMA contraction: -ffp-contract=off, CMakeLists.txt), so the same
// bits.
template <const auto& L, class T>
__attribute__((target("avx512f"))) void transform_avx512(int64_t n, const T* __restrict src, int64_t src_stride,
                                                         T* __restrict dst, int64_t dst_stride) {
  transform_channels<L>(n, src, src_stride, dst, dst_stride);
}

template <const auto& L, class T>
void transform(int64_t n, const T* __restrict src, int64_t src_stride, T* __restrict dst, int64_t dst_stride) {
  if (has_avx512f()) return transform_avx512<L>(n, src, src_stride, dst, dst_stride);
  transform_channels<L>(n, src, src_stride, dst, dst_stride);
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

// The most tiles of a chunk: kChunkBytes of their transforms (positions * (in_c + out_c) values
// each), one at least.
int64_t chunk_tiles(const Window2D& w, int64_t positions, int64_t elem_bytes) {
  return std::max<int64_t>(1, kChunkBytes / (positions * (w.in_c + w.out_c) * elem_bytes));
}

// Scratch for a chunk of `chunk` tiles: the two transformed operands and one tile's values.
int64_t chunk_scratch(const Window2D& w, int64_t positions, int64_t chunk) {
  return chunk * positions * (w.in_c + w.out_c) + positions * std::max(w.in_c, w.out_c);
}

// Calls fn(t0, n, scratch, product) for chunks of tiles (chunk_tiles each at most, of equal size),
// as for_each_chunk in kernels/conv_ops.cc does for rows: images sharded over the pool, each shard
// its chunks in order and its scratch, products single-threaded (product = null); one image: the
// chunks here, each product sharded (product = &ctx).
template <class T, class F>
void for_each_tile_chunk(const OpKernelContext& ctx, const Window2D& w, const Tiling& tl, int64_t positions, F fn) {
  const int64_t chunk = chunk_tiles(w, positions, sizeof(T));
  auto tiles_of = [&](int64_t begin, int64_t end, const OpKernelContext* product) {
    const int64_t chunks = (end - begin + chunk - 1) / chunk;
    const int64_t step = (end - begin + chunks - 1) / chunks;
    auto scratch = scratch_of<T>(chunk_scratch(w, positions, step));
    for (int64_t t0 = begin; t0 < end; t0 += step) fn(t0, std::min(step, end - t0), scratch.get(), product);
  };
  if (w.batch < 2) return tiles_of(0, w.batch * tl.per_image(), &ctx);
  const int64_t image_work = std::max<int64_t>(1, tl.per_image() * positions * w.in_c * w.out_c);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, kGemmShardMultiplyAdds / image_work), [&](int64_t n0, int64_t n1) {
    tiles_of(n0 * tl.per_image(), n1 * tl.per_image(), nullptr);
  });
}

// A chunk of the forward op or of the input's gradient, tiles [t0, t0 + n): each tile gathered
// (im2col of `from_tiles` over `src`) and transformed by kLoad into its row of `from` ([n, P,
// from_c], P = kPositions); P products with the transformed filter (wt[p], [from_c, to_c]) make
// `to` ([n, P, to_c]); each tile of it transformed back by kStore and handed to write(tile, t).
template <int64_t kPositions, const auto& kLoad, const auto& kStore, class T, class Write>
void tile_products(const OpKernelContext* product, int64_t t0, int64_t n, const Window2D& from_tiles, const T* src,
                   int64_t from_c, int64_t to_c, const T* wt, T* scratch, Write write) {
  T* from = scratch;
  T* to = from + n * kPositions * from_c;
  T* tile = to + n * kPositions * to_c;
  for (int64_t t = 0; t < n; ++t) {
    im2col(from_tiles, src, t0 + t, 1, tile);
    transform<kLoad>(from_c, tile, from_c, from + t * kPositions * from_c, from_c);
  }
  for (int64_t p = 0; p < kPositions; ++p) {
    gemm(product, false, false, n, to_c, from_c, from + p * from_c, kPositions * from_c, wt + p * from_c * to_c,
         to_c, T{0}, to + p * to_c, kPositions * to_c);
  }
  for (int64_t t = 0; t < n; ++t) {
    transform<kStore>(to_c, to + t * kPositions * to_c, to_c, tile, to_c);
    write(tile, t0 + t);
  }
}

// The tile size whose products are fewer (positions x tiles), the smaller on a tie; 0 where
// Winograd does not apply.
int tile_size(const Window2D& w) {
  // (The products' row strides, 36 channels' worth at most, must fit BLAS's int as im2col's do.)
  const bool applies = w.k_h == 3 && w.k_w == 3 && w.stride_h == 1 && w.stride_w == 1 &&
                       w.in_c >= kMinChannels && w.out_c >= kMinChannels && w.out_h >= 2 && w.out_w >= 2 &&
                       Winograd<4>::kPositions * std::max(w.in_c, w.out_c) <= std::numeric_limits<int>::max();
  if (!applies) return 0;
  auto products = [&](auto algorithm) {
    return decltype(algorithm)::kPositions * tiling_of(w, decltype(algorithm)::kSize).per_image();
  };
  return products(Winograd<4>{}) < products(Winograd<2>{}) ? 4 : 2;
}

template <class A, class T>
void forward(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out,
             const BiasRelu<T>& epilogue) {
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const Tiling tl = tiling_of(w, A::kSize);
  auto u = scratch_of<T>(A::kPositions * c * k);
  transform<A::kG>(c * k, f, c * k, u.get(), c * k);
  const Window2D in_tiles = input_tiles(w, tl);
  const Window2D out_tiles = output_tiles(w, tl);
  for_each_tile_chunk<T>(ctx, w, tl, A::kPositions, [&](int64_t t0, int64_t n, T* s, const OpKernelContext* product) {
    tile_products<A::kPositions, A::kBt, A::kAt>(
        product, t0, n, in_tiles, x, c, k, u.get(), s,
        [&](T* tile, int64_t t) {
          epilogue(tile, A::kSize * A::kSize, k);
          scatter_output(out_tiles, tile, t, out);
        });
  });
}

template <class A, class T>
void backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const Tiling tl = tiling_of(w, A::kSize);
  const int64_t image_size = w.in_h * w.in_w * c;
  const Window2D in_tiles = input_tiles(w, tl);
  const Window2D out_tiles = output_tiles(w, tl);
  // U[p] transposed ([out_c, in_c]), so that each product is a plain one (OpenBLAS's
  // transposed-operand kernels were slower at these sizes): the transform of the filter with its
  // in and out channels swapped.
  auto ft = scratch_of<T>(9 * c * k);
  for (int64_t tap = 0; tap < 9; ++tap) transpose(c, k, f + tap * c * k, ft.get() + tap * c * k);
  auto ut = scratch_of<T>(A::kPositions * c * k);
  transform<A::kG>(c * k, ft.get(), c * k, ut.get(), c * k);
  for_each_tile_chunk<T>(ctx, w, tl, A::kPositions, [&](int64_t t0, int64_t n, T* s, const OpKernelContext* product) {
    // An image's dx is zeroed by the chunk that holds its first tile, before any chunk adds to it
    // (its chunks run in order on one thread).
    const int64_t n0 = (t0 + tl.per_image() - 1) / tl.per_image();
    const int64_t n1 = (t0 + n + tl.per_image() - 1) / tl.per_image();
    std::fill(dx + n0 * image_size, dx + n1 * image_size, T{0});
    tile_products<A::kPositions, A::kA, A::kB>(
        product, t0, n, out_tiles, dy, k, c, ut.get(), s,
        [&](const T* tile, int64_t t) { col2im_add(in_tiles, tile, t, 1, dx); });
  });
}

template <class A, class T>
void backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  constexpr int64_t kPositions = A::kPositions;
  const int64_t c = w.in_c;
  const int64_t k = w.out_c;
  const int64_t plane = c * k;
  const Tiling tl = tiling_of(w, A::kSize);
  const int64_t total = w.batch * tl.per_image();
  const int64_t chunk = chunk_tiles(w, kPositions, sizeof(T));
  const Window2D in_tiles = input_tiles(w, tl);
  const Window2D out_tiles = output_tiles(w, tl);
  // Parts as conv_ops.cc's im2col form makes them: from the shapes only.
  const int64_t most_parts = std::max<int64_t>(1, std::min(kFilterParts, total / kFilterPartTiles));
  int64_t parts = std::clamp<int64_t>(total * kPositions * plane / (4 * kGemmShardMultiplyAdds), 1, most_parts);
  const int64_t part_tiles = (total + parts - 1) / parts;
  parts = (total + part_tiles - 1) / part_tiles;
  // Sums the tiles [begin, end) into du ([16, in_c, out_c], overwritten).
  auto sum_tiles = [&](int64_t begin, int64_t end, T* du, const OpKernelContext* product) {
    auto scratch = scratch_of<T>(chunk_scratch(w, kPositions, std::min(chunk, end - begin)));
    for (int64_t t0 = begin; t0 < end; t0 += chunk) {
      const int64_t n = std::min(chunk, end - t0);
      T* v = scratch.get();
      T* dm = v + n * kPositions * c;
      T* tile = dm + n * kPositions * k;
      for (int64_t t = 0; t < n; ++t) {
        im2col(in_tiles, x, t0 + t, 1, tile);
        transform<A::kBt>(c, tile, c, v + t * kPositions * c, c);
        im2col(out_tiles, dy, t0 + t, 1, tile);
        transform<A::kA>(k, tile, k, dm + t * kPositions * k, k);
      }
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
    add_parts_in_order(ctx, du.get(), du.get() + size, parts - 1, size);
  }
  transform<A::kGt>(plane, du.get(), plane, df, plane);
}

}  // namespace winograd

int winograd_tile(const Window2D& w) { return winograd::tile_size(w); }
bool winograd_applies(const Window2D& w) { return winograd_tile(w) != 0; }

template <class T>
void winograd_conv2d(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out,
                     const BiasRelu<T>& epilogue) {
  using namespace winograd;
  winograd_tile(w) == 4 ? forward<Winograd<4>>(ctx, w, x, f, out, epilogue)
                        : forward<Winograd<2>>(ctx, w, x, f, out, epilogue);
}

template <class T>
void winograd_conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx) {
  using namespace winograd;
  winograd_tile(w) == 4 ? backprop_input<Winograd<4>>(ctx, w, f, dy, dx)
                        : backprop_input<Winograd<2>>(ctx, w, f, dy, dx);
}

template <class T>
void winograd_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df) {
  using namespace winograd;
  winograd_tile(w) == 4 ? backprop_filter<Winograd<4>>(ctx, w, x, dy, df)
                        : backprop_filter<Winograd<2>>(ctx, w, x, dy, df);
}

#define TESSERA_WINOGRAD_INSTANTIATE(T)                                                                        \
  template void winograd_conv2d<T>(const OpKernelContext&, const Window2D&, const T*, const T*, T*,            \
                                   const BiasRelu<T>&);                                                       \
  template void winograd_conv2d_backprop_input<T>(const OpKernelContext&, const Window2D&, const T*, const T*, \
                                                  T*);                                                         \
  template void winograd_conv2d_backprop_filter<T>(const OpKernelContext&, const Window2D&, const T*, const T*, \
                                                   T*);
TESSERA_WINOGRAD_INSTANTIATE(float)
TESSERA_WINOGRAD_INSTANTIATE(double)
#undef TESSERA_WINOGRAD_INSTANTIATE

}  // namespace tessera::internal
