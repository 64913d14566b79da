#include "core/broadcast.h"

#include <algorithm>

namespace tessera::internal {
namespace {

Status incompatible(const Shape& a, const Shape& b) {
  return errors::invalid_argument("incompatible shapes {} and {}", a.to_string(), b.to_string());
}

// Dim i counted from the right (0 = innermost) of `s`, or 1 past its rank: the implicit leading
// ones of broadcasting.
int64_t dim_from_right(const Shape& s, int i) { return i < s.rank() ? s.dim(s.rank() - 1 - i) : 1; }

}  // namespace

StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  if (a.unknown_rank() || b.unknown_rank()) return Shape::unknown();
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (int i = 0; i < rank; ++i) {
    const int64_t da = dim_from_right(a, i);
    const int64_t db = dim_from_right(b, i);
    int64_t d;
    if (da == 1) {
      d = db;
    } else if (db == 1) {
      d = da;
    } else if (da < 0) {
      d = db;  // unknown: it must turn out to be 1 or db (checked at run time)
    } else if (db < 0 || da == db) {
      d = da;
    } else {
      return incompatible(a, b);
    }
    out[rank - 1 - i] = d;
  }
  return Shape(out);
}

StatusOr<BroadcastPlan> BroadcastPlan::make(const Shape& a, const Shape& b) {
  auto out = broadcast_shapes(a, b);
  if (!out.ok()) return out.status();
  BroadcastPlan plan;
  plan.out_shape_ = out.value();

  // Walk the output dims from the outermost, dropping size-1 dims (they move no offset) and
  // merging each dim into the previous one when both inputs broadcast along them the same way.
  const int rank = plan.out_shape_.rank();
  std::array<bool, Shape::kMaxRank> a_broadcast{};
  std::array<bool, Shape::kMaxRank> b_broadcast{};
  for (int i = rank - 1; i >= 0; --i) {
    const int64_t d = plan.out_shape_.dim(rank - 1 - i);
    if (d == 1) continue;
    const bool ab = dim_from_right(a, i) == 1;
    const bool bb = dim_from_right(b, i) == 1;
    const int last = plan.rank_ - 1;
    if (last >= 0 && a_broadcast[last] == ab && b_broadcast[last] == bb) {
      plan.dims_[last] *= d;
    } else {
      plan.dims_[plan.rank_] = d;
      a_broadcast[plan.rank_] = ab;
      b_broadcast[plan.rank_] = bb;
      ++plan.rank_;
    }
  }

  // Row-major strides of each input over the merged dims it actually spans.
  int64_t a_stride = 1;
  int64_t b_stride = 1;
  for (int d = plan.rank_ - 1; d >= 0; --d) {
    plan.a_strides_[d] = a_broadcast[d] ? 0 : a_stride;
    plan.b_strides_[d] = b_broadcast[d] ? 0 : b_stride;
    if (!a_broadcast[d]) a_stride *= plan.dims_[d];
    if (!b_broadcast[d]) b_stride *= plan.dims_[d];
  }

  if (plan.rank_ == 0 || (plan.rank_ == 1 && !a_broadcast[0] && !b_broadcast[0])) {
    plan.kind_ = Kind::kSameShape;
  } else if (plan.rank_ == 1) {
    // Both cannot be broadcast along a dim of size > 1, so exactly one is: a single value.
    plan.kind_ = a_broadcast[0] ? Kind::kScalarA : Kind::kScalarB;
  } else {
    plan.kind_ = Kind::kGeneral;
  }
  return plan;
}

StatusOr<std::vector<bool>> reduction_mask(const std::vector<int64_t>& axes, int rank) {
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return errors::invalid_argument("axis {} is out of range for rank {}", axis, rank);
    }
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (mask[a]) return errors::invalid_argument("axis {} is listed twice", axis);
    mask[a] = true;
  }
  return mask;
}

StatusOr<std::vector<bool>> sum_to_shape_mask(const Shape& from, const Shape& to) {
  if (from.unknown_rank() || to.unknown_rank()) return std::vector<bool>();
  auto mismatch = [&] {
    return errors::invalid_argument("shape {} does not broadcast from {}", from.to_string(), to.to_string());
  };
  const int lead = from.rank() - to.rank();
  if (lead < 0) return mismatch();
  std::vector<bool> mask(static_cast<std::size_t>(from.rank()), false);
  for (int i = 0; i < from.rank(); ++i) {
    if (i < lead) {
      mask[i] = true;
      continue;
    }
    const int64_t f = from.dim(i);
    const int64_t t = to.dim(i - lead);
    if (t == 1) {
      mask[i] = f != 1;
    } else if (f >= 0 && t >= 0 && f != t) {
      return mismatch();
    }
  }
  return mask;
}

ReductionLayout reduction_layout(const Shape& in, const std::vector<bool>& mask, bool keep_dims) {
  ReductionLayout l;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t d = in.dim(i);
    if (mask[i]) {
      l.count *= d;
      if (keep_dims) l.out_shape.append(1);
    } else {
      l.out_shape.append(d);
    }
    if (d == 1) continue;
    if (l.rank > 0 && l.reduced[l.rank - 1] == mask[i]) {
      l.dims[l.rank - 1] *= d;
    } else {
      l.dims[l.rank] = d;
      l.reduced[l.rank] = mask[i];
      ++l.rank;
    }
  }
  return l;
}

}  // namespace tessera::internal
