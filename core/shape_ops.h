// The shape arithmetic of the shape ops (Reshape, Transpose, ConcatV2, Split, Slice, ExpandDims,
// Squeeze, Tile, Pad), shared by their definitions (core/shape_ops.cc, at graph-build time, on
// partial shapes) and their kernels (kernels/shape_ops.cc, device/cuda/gpu_shape_ops.cc, at run
// time, on concrete shapes), so that a check gives the same message wherever it is made. Errors
// are InvalidArgument without the op's name (callers prefix it); an unknown dim or rank gives an
// unknown dim or rank, left for the kernel to check.
//
//   reshape_shape(Shape{2, 6}, {3, -1});         // [3,4]
//   reshape_shape(Shape{-1, 6}, {3, -1});        // [3,?]: the kernel infers the -1
//
//   StridedCopy c = slice_copy(Shape{4, 5}, {1, 2}, Shape{2, 3});   // in a kernel: what to move
//   c.simplify();
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// A Shape of `dims` (-1 = unknown), or InvalidArgument when the rank is over Shape::kMaxRank or the
// known dims' product does not fit an int64 (Shape's own check, which every element count here
// goes through).
StatusOr<Shape> checked_shape(const std::vector<int64_t>& dims);

// `axis` counted from the front of `rank` dims, a negative one from the end (as TensorFlow):
// InvalidArgument "axis A is out of range [-rank, rank) for ..." otherwise. `what` names the
// input in the message ("an input of shape [2,3]").
StatusOr<int> resolve_axis(int64_t axis, int rank, const std::string& what);

// Reshape: one -1 in `shape` is inferred from the element count.
StatusOr<Shape> reshape_shape(const Shape& in, const std::vector<int64_t>& shape);

// Transpose: the permutation for a rank-`rank` input (`perm` {} = reverse the dims); entries must
// be a permutation of [0, rank) (negative entries are refused, as TensorFlow's kernel does).
StatusOr<std::vector<int>> transpose_perm(const std::vector<int64_t>& perm, int rank);
StatusOr<Shape> transpose_shape(const Shape& in, const std::vector<int64_t>& perm);

// ConcatV2: inputs of one rank (not scalars) whose dims agree except along `axis`.
StatusOr<Shape> concat_shape(const std::vector<Shape>& ins, int64_t axis);

// Split: `num` pieces of equal size along `axis`; the shape of each. `num` is bounded, so that a
// graph (a peer's too) cannot ask for billions of outputs: TensorFlow sets no bound.
inline constexpr int64_t kMaxSplitOutputs = int64_t{1} << 16;
StatusOr<Shape> split_shape(const Shape& in, int64_t num, int64_t axis);

// Slice: begin[i] in [0, dim], size[i] in [0, dim - begin[i]] or -1 (to the end).
StatusOr<Shape> slice_shape(const Shape& in, const std::vector<int64_t>& begin, const std::vector<int64_t>& size);

// ExpandDims: a dim of 1 inserted at `axis`, in [-rank - 1, rank].
StatusOr<Shape> expand_dims_shape(const Shape& in, int64_t axis);

// Squeeze: the dims of size 1 listed in `axes` removed ({} = every dim of size 1; an unknown dim
// then makes the rank unknown).
StatusOr<Shape> squeeze_shape(const Shape& in, const std::vector<int64_t>& axes);

// ReshapeToShapeOf (core/gradients.h): `to`, when it has as many elements as `in`.
StatusOr<Shape> reshape_to_shape(const Shape& in, const Shape& to);

// Tile: each dim times its multiple (>= 0).
StatusOr<Shape> tile_shape(const Shape& in, const std::vector<int64_t>& multiples);

// Pad: `paddings` holds (before, after) per dim, flattened: [b0, a0, b1, a1, ...], all >= 0.
StatusOr<Shape> pad_shape(const Shape& in, const std::vector<int64_t>& paddings);

// ---- What the kernels move ----

// A copy of elements between two buffers, as nested loops over `dims` (outermost first): element
// (i_0, ..., i_{rank-1}) goes from src[src_offset + sum i_d * src_strides[d]] to
// dst[dst_offset + sum i_d * dst_strides[d]], offsets and strides in elements. Tile needs two loops
// per dim, hence twice Shape::kMaxRank. Every device's kernels walk the same plans (the CPU's
// loops, the GPU's index arithmetic), made by the functions below from concrete shapes.
struct StridedCopy {
  static constexpr int kMaxDims = 2 * Shape::kMaxRank;
  int rank = 0;
  std::array<int64_t, kMaxDims> dims{};
  std::array<int64_t, kMaxDims> dst_strides{};
  std::array<int64_t, kMaxDims> src_strides{};
  int64_t dst_offset = 0;
  int64_t src_offset = 0;

  int64_t num_elements() const;
  // Drops dims of size 1 and merges each dim into the one outside it where both buffers step
  // through the pair as one run, so that contiguous runs become one long innermost loop. A copy of
  // no elements becomes rank 1 with dims[0] = 0.
  void simplify();
};

// Row-major strides of a concrete shape, in elements.
std::array<int64_t, Shape::kMaxRank> row_major_strides(const Shape& s);

// out = in[begin : begin + out.dims] (contiguous out).
StridedCopy slice_copy(const Shape& in, const std::vector<int64_t>& begin, const Shape& out);
// out = transpose(in, perm) (contiguous out).
StridedCopy transpose_copy(const Shape& in, const std::vector<int>& perm);
// out = tile(in, multiples) (contiguous out).
StridedCopy tile_copy(const Shape& in, const std::vector<int64_t>& multiples);
// in into the interior of out = pad(in, paddings): the caller zeroes out first.
StridedCopy pad_copy(const Shape& in, const std::vector<int64_t>& paddings, const Shape& out);
// The rows of one input of a concatenation (or one output of a split): `outer` rows of `width`
// elements, at `offset` within rows of `total` elements of the whole. `into_whole`: from the
// piece into the whole (concat), else from the whole into the piece (split).
StridedCopy rows_copy(int64_t outer, int64_t width, int64_t total, int64_t offset, bool into_whole);

}  // namespace tessera::internal
