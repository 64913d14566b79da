// CPU kernels for the reductions Sum, Mean, Max, Min and Prod over a set of axes.
//
// The input's dims are merged into alternating runs of kept and reduced dims, and the input is
// read once, in memory order, as rows of the innermost run: a kept innermost run folds a row of
// input into a row of output (a vectorized loop), a reduced one folds a row into one value (a
// vectorized multi-lane reduction). The common cases (all axes; leading or trailing axes) are thus
// one or two plain loops with no special casing. Integer sums and products wrap around on
// overflow; the mean of integers is the sum divided by the count, truncated toward zero; Max and
// Min propagate NaN; the minimum of nothing is +inf (the largest integer) and the product 1, as in
// TensorFlow. float16 and bfloat16 are widened to float32, reduced there, and each result is
// rounded once.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/broadcast.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

// Reducers work on an accumulation type Acc<T>, which the input and output buffers are viewed as.
// Integers are summed in their unsigned type: overflow wraps instead of being undefined, and the
// bits are the two's complement sum either way. Keeping the whole reduction in that one type also
// matters in practice: GCC 12 at -O3 miscompiles the multi-lane reduction below when every step
// converts signed to unsigned and back (found by testing lane counts; clang gets it right).
struct SumReducer {
  static constexpr bool kIsMean = false;
  static constexpr bool kNeedsElements = false;
  template <class T>
  using Acc = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                          std::type_identity<T>>::type;
  template <class A> static A identity() { return A{0}; }
  template <class A> static A combine(A acc, A x) { return acc + x; }
};

struct MeanReducer : SumReducer {
  static constexpr bool kIsMean = true;
};

struct MaxReducer {
  static constexpr bool kIsMean = false;
  template <class T>
  using Acc = T;
  // The maximum of nothing has no value (a -inf or INT_MIN would pass for data).
  static constexpr bool kNeedsElements = true;
  template <class T> static T identity() {
    if constexpr (std::is_floating_point_v<T>) {
      return -std::numeric_limits<T>::infinity();
    } else {
      return std::numeric_limits<T>::lowest();
    }
  }
  // `x != x` is the NaN test: once NaN, the accumulator stays NaN. A select, so it vectorizes.
  template <class T> static T combine(T acc, T x) { return (x > acc || x != x) ? x : acc; }
};

struct MinReducer {
  static constexpr bool kIsMean = false;
  template <class T>
  using Acc = T;
  static constexpr bool kNeedsElements = false;  // TensorFlow: +inf, or the largest integer
  template <class T> static T identity() {
    if constexpr (std::is_floating_point_v<T>) {
      return std::numeric_limits<T>::infinity();
    } else {
      return std::numeric_limits<T>::max();
    }
  }
  template <class T> static T combine(T acc, T x) { return (x < acc || x != x) ? x : acc; }
};

struct ProdReducer {
  static constexpr bool kIsMean = false;
  static constexpr bool kNeedsElements = false;
  template <class T>
  using Acc = typename SumReducer::template Acc<T>;  // integers wrap in the unsigned type
  template <class A> static A identity() { return A{1}; }
  template <class A> static A combine(A acc, A x) { return acc * x; }
};

// Folds x[0, n) into one value. Independent lanes let the compiler vectorize a reduction it may
// not reorder on its own (floating point addition is not associative); they also shorten the
// chains that float rounding errors accumulate along.
template <class R, class T>
T reduce_row(const T* __restrict x, int64_t n) {
  constexpr int kLanes = 64 / sizeof(T);
  std::array<T, kLanes> lanes;
  lanes.fill(R::template identity<T>());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = R::combine(lanes[l], x[i + l]);
  }
  T acc = R::template identity<T>();
  for (int l = 0; l < kLanes; ++l) acc = R::combine(acc, lanes[l]);
  for (; i < n; ++i) acc = R::combine(acc, x[i]);
  return acc;
}

// out[j] = combine(out[j], x[j]) for j in [0, n).
template <class R, class T>
void fold_row(T* __restrict out, const T* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = R::combine(out[j], x[j]);
}

// Reduces input 0 over the "axes" attr with reducer R, keeping size-1 dims for the reduced axes
// when "keep_dims" is set. SumToShapeOf (a gradient's sum back to its input's shape,
// core/gradients.h) is the sum over the axes sum_to_shape_mask finds, with input 1's shape.
// Thread-safe: compute() keeps no state between runs.
template <class R>
class ReductionOp : public OpKernel {
 public:
  explicit ReductionOp(const Node& n)
      : OpKernel(n), to_shape_of_(n.type == "SumToShapeOf"),
        axes_(n.attr_or<std::vector<int64_t>>("axes", {})), keep_dims_(n.attr_or<bool>("keep_dims", false)) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    visit_number_or_fail(ctx, x.dtype(), [&](auto zero) { run<decltype(zero)>(ctx, x); });
  }

  // The work is proportional to the input, which the output size (the default) hides.
  bool is_expensive() const override {
    constexpr int64_t kInlineElements = 1 << 14;
    const Endpoint& in = node().inputs[0];
    const int64_t n = in.node->output_shapes[in.index].num_elements();
    return n < 0 || n > kInlineElements;
  }

 private:
  template <class T>
  void run(OpKernelContext& ctx, const Tensor& x) {
    const Shape& in_shape = x.shape();
    // The rank may have been unknown when the graph was built: the axes are checked here.
    auto mask_or = to_shape_of_ ? sum_to_shape_mask(in_shape, ctx.input(1).shape()) : reduction_mask(axes_, in_shape.rank());
    if (!mask_or.ok()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "{} (input shape {})",
                      mask_or.status().message(), in_shape.to_string());
    }
    ReductionLayout layout = reduction_layout(in_shape, mask_or.value(), keep_dims_ || to_shape_of_);
    if (to_shape_of_) {
      if (layout.count == 1) return ctx.set_output(0, x.reshaped(ctx.input(1).shape()));  // nothing to sum
      layout.out_shape = ctx.input(1).shape();  // the kept dims, without the leading ones
    }
    const int64_t count = layout.count;
    Tensor& out = ctx.allocate_output(0, layout.out_shape);
    const int64_t out_n = out.num_elements();
    if (out_n == 0) return;
    if (count == 0 && R::kNeedsElements) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "the maximum of an empty set is undefined (input shape {})",
                      in_shape.to_string());
    }
    if (count == 0 && R::kIsMean && std::is_integral_v<T>) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "the integer mean of an empty set divides by zero (input shape {})",
                      in_shape.to_string());
    }
    T* po = out.mutable_data<T>();
    if constexpr (is_16bit_float<T>) {
      run_widened(x.data<T>(), po, layout, x.num_elements(), out_n);
    } else {
      using A = typename R::template Acc<T>;  // same size; signed and unsigned views may alias
      A* acc = reinterpret_cast<A*>(po);
      std::fill(acc, acc + out_n, R::template identity<A>());
      if (count > 0) accumulate(reinterpret_cast<const A*>(x.data<T>()), acc, layout.dims, layout.reduced, layout.rank);
      if constexpr (R::kIsMean && std::is_integral_v<T>) {
        // Divided in int64: the count of an int32 tensor may not fit in an int32.
        for (int64_t i = 0; i < out_n; ++i) {
          po[i] = static_cast<T>(static_cast<int64_t>(po[i]) / count);
        }
      } else if constexpr (R::kIsMean) {
        // count == 0 here gives 0 / 0 = NaN, as in TensorFlow.
        const T divisor = static_cast<T>(count);
        for (int64_t i = 0; i < out_n; ++i) po[i] /= divisor;
      }
    }
  }

  // The 16-bit floats: the input widened to float32, reduced with float32 accumulators, and each
  // result rounded back once.
  template <class T>
  static void run_widened(const T* in, T* po, const ReductionLayout& layout, int64_t in_n,
                          int64_t out_n) {
    const int64_t count = layout.count;
    std::vector<float> acc(static_cast<std::size_t>(out_n), R::template identity<float>());
    if (count > 0) {
      std::vector<float> wide(static_cast<std::size_t>(in_n));
      for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = in[i].to_float();
      accumulate(wide.data(), acc.data(), layout.dims, layout.reduced, layout.rank);
    }
    const float divisor = R::kIsMean ? static_cast<float>(count) : 1.0f;  // 0 / 0 = NaN, as float
    for (int64_t i = 0; i < out_n; ++i) po[i] = T(R::kIsMean ? acc[i] / divisor : acc[i]);
  }

  // Folds the whole input (merged into `rank` runs, `reduced` marking which fold away) into `out`.
  template <class A>
  static void accumulate(const A* in, A* out, const std::array<int64_t, Shape::kMaxRank>& dims,
                         const std::array<bool, Shape::kMaxRank>& reduced, int rank) {
    if (rank == 0) {  // every dim was 1: one element
      out[0] = R::combine(out[0], in[0]);
      return;
    }
    // Output strides of the runs: row-major over the kept runs, 0 over the reduced ones.
    std::array<int64_t, Shape::kMaxRank> out_strides{};
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      out_strides[d] = reduced[d] ? 0 : stride;
      if (!reduced[d]) stride *= dims[d];
    }
    const int outer = rank - 1;
    const int64_t row = dims[outer];
    int64_t rows = 1;
    for (int d = 0; d < outer; ++d) rows *= dims[d];
    // An odometer over the outer runs carries the output offset along.
    std::array<int64_t, Shape::kMaxRank> index{};
    int64_t o = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const A* in_row = in + r * row;
      if (reduced[outer]) {
        out[o] = R::combine(out[o], reduce_row<R>(in_row, row));
      } else {
        fold_row<R>(out + o, in_row, row);
      }
      for (int d = outer - 1; d >= 0; --d) {
        o += out_strides[d];
        if (++index[d] < dims[d]) break;
        o -= out_strides[d] * dims[d];
        index[d] = 0;
      }
    }
  }

  const bool to_shape_of_;
  const std::vector<int64_t> axes_;
  const bool keep_dims_;
};

TESSERA_REGISTER_KERNEL("Sum", "CPU", ReductionOp<SumReducer>);
TESSERA_REGISTER_KERNEL("SumToShapeOf", "CPU", ReductionOp<SumReducer>);
TESSERA_REGISTER_KERNEL("Mean", "CPU", ReductionOp<MeanReducer>);
TESSERA_REGISTER_KERNEL("Max", "CPU", ReductionOp<MaxReducer>);
TESSERA_REGISTER_KERNEL("Min", "CPU", ReductionOp<MinReducer>);
TESSERA_REGISTER_KERNEL("Prod", "CPU", ReductionOp<ProdReducer>);

}  // namespace
}  // namespace tessera::internal
