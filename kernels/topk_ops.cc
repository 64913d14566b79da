// CPU kernels of TopKV2 and InTopK (core/topk_ops.cc), as TensorFlow's:
//   TopKV2   per row of the last dim, the k largest values, largest first, and their int32
//            positions; equal values keep the order of their positions. NaN is taken as larger
//            than every number (so a NaN is never dropped in favour of a number).
//   InTopK   per row, whether the target's prediction is among the k largest: fewer than k
//            predictions are strictly larger (ties count as in). A target outside [0, classes),
//            or whose prediction is not finite, gives false.
// Thread-safe: compute() keeps no state between runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/select_ops.h"  // index_at
#include "core/topk_ops.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

// a ranks before b: larger, or NaN against a number, or equal and earlier.
template <class C>
bool ranks_before(C a, int32_t ia, C b, int32_t ib) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
    if (a_nan != b_nan) return a_nan;
    if (a_nan) return ia < ib;
  }
  if (a != b) return a > b;
  return ia < ib;
}

class TopKOp : public OpKernel {
 public:
  explicit TopKOp(const Node& n) : OpKernel(n), k_(n.attr<int64_t>("k")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    visit_number_or_fail(ctx, x.dtype(), [&](auto zero) { run<decltype(zero)>(ctx, x); });
  }

 private:
  template <class T>
  void run(OpKernelContext& ctx, const Tensor& x) {
    const StatusOr<Shape> out_shape = top_k_shape(x.shape(), k_);
    if (!out_shape.ok()) return ctx.fail(out_shape.status());
    const int64_t n = x.shape().dim(x.shape().rank() - 1);
    if (n > std::numeric_limits<int32_t>::max()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "the last dim ({}) exceeds int32 indices", n);
    }
    Tensor& values = ctx.allocate_output(0, out_shape.value());
    Tensor& indices = ctx.allocate_output(1, out_shape.value());
    const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
    if (k_ == 0 || rows == 0) return;
    using C = Accumulate<T>;
    const T* px = x.data<T>();
    T* pv = values.mutable_data<T>();
    int32_t* pi = indices.mutable_data<int32_t>();
    std::vector<int32_t> order(static_cast<std::size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * n;
      std::iota(order.begin(), order.end(), 0);
      auto before = [row](int32_t a, int32_t b) { return ranks_before(static_cast<C>(row[a]), a, static_cast<C>(row[b]), b); };
      std::partial_sort(order.begin(), order.begin() + k_, order.end(), before);
      for (int64_t j = 0; j < k_; ++j) {
        pi[r * k_ + j] = order[static_cast<std::size_t>(j)];
        pv[r * k_ + j] = row[order[static_cast<std::size_t>(j)]];
      }
    }
  }

  const int64_t k_;
};

class InTopKOp : public OpKernel {
 public:
  explicit InTopKOp(const Node& n) : OpKernel(n), k_(n.attr<int64_t>("k")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& p = ctx.input(0);
    const Tensor& targets = ctx.input(1);
    const StatusOr<Shape> out_shape = in_top_k_shape(p.shape(), targets.shape(), k_);
    if (!out_shape.ok()) return ctx.fail(out_shape.status());
    const int64_t rows = p.shape().dim(0), classes = p.shape().dim(1);
    Tensor& out = ctx.allocate_output(0, out_shape.value());
    const float* pp = p.data<float>();
    bool* po = out.mutable_data<bool>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t target = index_at(targets, r);
      const float* row = pp + r * classes;
      if (target < 0 || target >= classes || !std::isfinite(row[target])) {
        po[r] = false;
        continue;
      }
      int64_t larger = 0;
      for (int64_t c = 0; c < classes; ++c) larger += row[c] > row[target] ? 1 : 0;
      po[r] = larger < k_;
    }
  }

 private:
  const int64_t k_;
};

TESSERA_REGISTER_KERNEL("TopKV2", "CPU", TopKOp);
TESSERA_REGISTER_KERNEL("InTopK", "CPU", InTopKOp);

}  // namespace
}  // namespace tessera::internal
