// Shape arithmetic shared by the math op definitions (core/math_ops.cc, at graph-build time, on
// partial shapes) and their CPU kernels (at run time, on concrete shapes): NumPy broadcasting for
// the binary elementwise ops, and the reduced-axes mask of the reductions.
//
//   broadcast_shapes(Shape{4, 1, 3}, Shape{5, 1});      // [4,5,3]
//   broadcast_shapes(Shape{-1, 3}, Shape{3});           // [?,3]: rechecked by the kernel
//
//   auto plan = BroadcastPlan::make(a.shape(), b.shape());   // in a kernel
//   plan.value().for_each_row([&](int64_t out, int64_t a, int64_t b) { ...row_size() items... });
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// The NumPy broadcast of two partial shapes: dims align from the right and a dim of 1 stretches to
// match the other. An unknown dim is taken to be compatible (the kernel rechecks it at run time)
// and an unknown rank gives an unknown rank. Known dims that differ, neither being 1, give
// InvalidArgument "incompatible shapes [2,3] and [4]" (callers prefix the op).
StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// How a binary kernel walks two concrete input shapes to fill their broadcast. Output dims of
// size 1 are dropped and adjacent dims that broadcast the same way are merged, so that the common
// cases (same shape, one side a single value) become one contiguous loop (kind() says which), and
// any other case becomes rows of the innermost merged dim, each row one contiguous loop in which
// each input either advances with the output or stays on one value. Thread safety: an immutable
// value once made.
class BroadcastPlan {
 public:
  enum class Kind {
    kSameShape,  // out[i] = f(a[i], b[i]) over out_shape().num_elements()
    kScalarA,    // out[i] = f(a[0], b[i])
    kScalarB,    // out[i] = f(a[i], b[0])
    kGeneral,    // for_each_row
  };

  // InvalidArgument "incompatible shapes A and B" when they do not broadcast.
  static StatusOr<BroadcastPlan> make(const Shape& a, const Shape& b);

  const Shape& out_shape() const { return out_shape_; }
  Kind kind() const { return kind_; }

  // Rows of the general case: each row has row_size() output elements, starting at the offsets
  // fn(out_offset, a_offset, b_offset) receives. Within a row, input a advances by
  // a_row_stride() (1, or 0 when a is broadcast along it), likewise b.
  int64_t row_size() const { return dims_[rank_ - 1]; }
  int64_t a_row_stride() const { return a_strides_[rank_ - 1]; }
  int64_t b_row_stride() const { return b_strides_[rank_ - 1]; }
  template <class Fn>
  void for_each_row(Fn&& fn) const;

 private:
  BroadcastPlan() = default;

  Shape out_shape_;
  Kind kind_ = Kind::kSameShape;
  // The merged dims, outermost first, with each input's element stride along them (0 where
  // that input is broadcast).
  int rank_ = 0;
  std::array<int64_t, Shape::kMaxRank> dims_{};
  std::array<int64_t, Shape::kMaxRank> a_strides_{};
  std::array<int64_t, Shape::kMaxRank> b_strides_{};
};

template <class Fn>
void BroadcastPlan::for_each_row(Fn&& fn) const {
  // An odometer over the outer merged dims; the offsets move with it instead of being recomputed
  // from the index on every row.
  const int outer = rank_ - 1;
  std::array<int64_t, Shape::kMaxRank> index{};
  int64_t rows = 1;
  for (int d = 0; d < outer; ++d) rows *= dims_[d];
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  const int64_t n = row_size();
  for (int64_t row = 0; row < rows; ++row) {
    fn(row * n, a_offset, b_offset);
    for (int d = outer - 1; d >= 0; --d) {
      a_offset += a_strides_[d];
      b_offset += b_strides_[d];
      if (++index[d] < dims_[d]) break;
      a_offset -= a_strides_[d] * dims_[d];
      b_offset -= b_strides_[d] * dims_[d];
      index[d] = 0;
    }
  }
}

// Which dims of a rank-`rank` shape the reduction over `axes` removes: all of them when `axes` is
// empty; negative axes count from the end. InvalidArgument when an axis is out of range or listed
// twice.
StatusOr<std::vector<bool>> reduction_mask(const std::vector<int64_t>& axes, int rank);

// Which dims of `from` a sum must remove to undo a broadcast to it from `to` (the gradient of a
// broadcast input, core/gradients.h): the leading dims `to` lacks and the dims where `to` has 1
// and `from` has more. Shapes may be partial (an unknown dim of `to` is taken to match); an
// unknown rank gives an empty mask. InvalidArgument "shape [2,3] does not broadcast from [4]"
// when `to` could not have been broadcast to `from`.
StatusOr<std::vector<bool>> sum_to_shape_mask(const Shape& from, const Shape& to);

// A reduction of `in` by `mask` (from reduction_mask), as every device's kernel walks it: the
// output shape, and the input merged into runs (size-1 dims skipped, since they move no offset;
// adjacent dims of the same kind multiplied together).
struct ReductionLayout {
  Shape out_shape;
  int64_t count = 1;  // input elements folded into each output element
  std::array<int64_t, Shape::kMaxRank> dims{};  // runs [0, rank)
  std::array<bool, Shape::kMaxRank> reduced{};  // whether each run folds away
  int rank = 0;
};
ReductionLayout reduction_layout(const Shape& in, const std::vector<bool>& mask, bool keep_dims);

}  // namespace tessera::internal
