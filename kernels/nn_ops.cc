// CPU kernels for the neural-network ops: Softmax, LogSoftmax, SparseSoftmaxCrossEntropyWithLogits,
// SoftmaxCrossEntropyWithLogits, BiasAdd, BiasAddGrad, L2Loss, Dropout, TruncatedNormal, and the
// gradient kernels ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad and GatherGrad. (StopGradient is
// Identity's kernel: kernels/array_ops.cc.)
//
// The softmax family works row by row over the last axis, subtracting the row's maximum before
// exp so that large logits neither overflow nor lose the small ones: softmax = exp(x - max) / sum,
// log_softmax = x - max - log(sum), and the cross entropies' loss sum(labels * (log(sum) -
// (x - max))) with backprop softmax - labels. The 16-bit floats compute in float32 and round each
// result once; L2Loss accumulates in float64. Every loop runs over contiguous memory. Dropout and
// TruncatedNormal draw from the Philox stream of Note [Random streams] (kernels/random_ops.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/nn_ops.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/select_ops.h"
#include "core/wrapping_arith.h"
#include "kernels/bias_add_grad.h"
#include "kernels/dtype_visit.h"
#include "kernels/elementwise_shards.h"
#include "kernels/random_stream.h"

namespace tessera::internal {
namespace {

// x in the type it is computed in (exact).
template <class T>
Accumulate<T> up(T x) {
  return static_cast<Accumulate<T>>(x);
}

// A row's maximum and sum(exp(x - max)) (max -inf and sum 0 for an empty row). A NaN is skipped by
// the maximum and makes the sum NaN, so the row's results are NaN, as TensorFlow's.
template <class T>
struct RowStats {
  Accumulate<T> max;
  Accumulate<T> sum = 0;
};
template <class T>
Accumulate<T> row_max(const T* x, int64_t n) {
  auto m = -std::numeric_limits<Accumulate<T>>::infinity();
  for (int64_t j = 0; j < n; ++j) m = up(x[j]) > m ? up(x[j]) : m;
  return m;
}
template <class T>
RowStats<T> row_stats(const T* x, int64_t n) {
  RowStats<T> s;
  s.max = row_max(x, n);
  for (int64_t j = 0; j < n; ++j) s.sum += std::exp(up(x[j]) - s.max);
  return s;
}

template <bool kLog, class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  using A = Accumulate<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    if constexpr (!kLog && std::is_same_v<T, A>) {  // one exp per element: kept in y, then scaled
      const A m = row_max(xr, cols);
      A sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        yr[j] = std::exp(xr[j] - m);
        sum += yr[j];
      }
      const A inv = A{1} / sum;
      for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
    } else {
      const RowStats<T> s = row_stats(xr, cols);
      if constexpr (kLog) {
        const A log_sum = std::log(s.sum);
        for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(up(xr[j]) - s.max - log_sum);
      } else {
        const A inv = A{1} / s.sum;
        for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(std::exp(up(xr[j]) - s.max) * inv);
      }
    }
  }
}

// Softmax and LogSoftmax over the last axis. Thread-safe: compute() keeps no state.
template <bool kLog>
class SoftmaxOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (Status s = softmax_check(x.shape()); !s.ok()) return ctx.fail(s);
    Tensor& y = ctx.allocate_output(0, x.shape());
    const RowView v = rows_of(x.shape());
    visit_floating_or_fail(ctx, x.dtype(), [&](auto type) {
      using T = decltype(type);
      softmax_rows<kLog>(x.data<T>(), y.mutable_data<T>(), v.rows, v.cols);
    });
  }
};

TESSERA_REGISTER_KERNEL("Softmax", "CPU", SoftmaxOp<false>);
TESSERA_REGISTER_KERNEL("LogSoftmax", "CPU", SoftmaxOp<true>);

// The frame both cross entropies share: loss [batch] and backprop `shape` [batch, classes], each
// row's RowStats taken over its logits; row(r, logits_row, stats, backprop_row) fills the backprop
// row and returns the row's loss in the computation type.
template <class RowFn>
void xent_rows(OpKernelContext& ctx, const Tensor& logits, const Shape& shape, RowFn&& row) {
  const int64_t batch = shape.dim(0);
  const int64_t classes = shape.dim(1);
  Tensor& loss = ctx.allocate_output(0, Shape{batch});
  Tensor& backprop = ctx.allocate_output(1, shape);
  visit_floating_or_fail(ctx, logits.dtype(), [&](auto type) {
    using T = decltype(type);
    const T* pl = logits.data<T>();
    T* pb = backprop.mutable_data<T>();
    T* loss_out = loss.mutable_data<T>();
    for (int64_t r = 0; r < batch; ++r) {
      const T* lr = pl + r * classes;
      loss_out[r] = static_cast<T>(row(r, lr, row_stats(lr, classes), pb + r * classes));
    }
  });
}

// SparseSoftmaxCrossEntropyWithLogits: loss [batch], backprop [batch, classes]. Every label is
// checked before anything is computed. Thread-safe: compute() keeps no state.
class SparseXentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& labels = ctx.input(0);
    const Tensor& logits = ctx.input(1);
    auto shape = sparse_xent_kernel_shape(labels, logits);
    if (!shape.ok()) return ctx.fail(shape.status());
    const int64_t batch = shape.value().dim(0);
    const int64_t classes = shape.value().dim(1);
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t k = index_at(labels, i);
      if (k < 0 || k >= classes) {
        return ctx.fail(errors::invalid_argument("{}", label_out_of_range(i, k, classes)));
      }
    }
    xent_rows(ctx, logits, shape.value(), [&]<class T>(int64_t r, const T* lr, const RowStats<T>& s, T* br) {
      using A = Accumulate<T>;
      const int64_t k = index_at(labels, r);
      for (int64_t j = 0; j < classes; ++j) {
        br[j] = static_cast<T>(std::exp(up(lr[j]) - s.max) / s.sum - (j == k ? A{1} : A{0}));
      }
      return std::log(s.sum) - (up(lr[k]) - s.max);
    });
  }
};

TESSERA_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "CPU", SparseXentOp);

// SoftmaxCrossEntropyWithLogits: loss [batch], backprop [batch, classes]. Thread-safe.
class XentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& labels = ctx.input(0);
    const Tensor& logits = ctx.input(1);
    if (Status s = same_dtypes(labels, logits, 0, 1); !s.ok()) return ctx.fail(s);
    auto shape = xent_shape(labels.shape(), logits.shape());
    if (!shape.ok()) return ctx.fail(shape.status());
    const int64_t classes = shape.value().dim(1);
    xent_rows(ctx, logits, shape.value(), [&]<class T>(int64_t r, const T* lr, const RowStats<T>& s, T* br) {
      using A = Accumulate<T>;
      const T* yr = labels.data<T>() + r * classes;
      const A log_sum = std::log(s.sum);
      A total = 0;
      for (int64_t j = 0; j < classes; ++j) {
        const A shifted = up(lr[j]) - s.max;
        br[j] = static_cast<T>(std::exp(shifted) / s.sum - up(yr[j]));
        total += up(yr[j]) * (log_sum - shifted);
      }
      return total;  // the row's loss
    });
  }
};

TESSERA_REGISTER_KERNEL("SoftmaxCrossEntropyWithLogits", "CPU", XentOp);

// value + bias along the last dim. Thread-safe: compute() keeps no state.
class BiasAddOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& value = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    if (Status s = same_dtypes(value, bias, 0, 1); !s.ok()) return ctx.fail(s);
    auto shape = bias_add_shape(value.shape(), bias.shape());
    if (!shape.ok()) return ctx.fail(shape.status());
    Tensor& out = ctx.allocate_output(0, shape.value());
    const RowView v = rows_of(value.shape());
    visit_number_or_fail(ctx, value.dtype(), [&](auto type) {
      using T = decltype(type);
      const T* px = value.data<T>();
      const T* pb = bias.data<T>();
      T* po = out.mutable_data<T>();
      for_each_shard(ctx, v.rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = px + r * v.cols;
          T* out_row = po + r * v.cols;
          for (int64_t c = 0; c < v.cols; ++c) out_row[c] = static_cast<T>(wrapping_add(up(xr[c]), up(pb[c])));
        }
      }, v.cols);
    });
  }
};

TESSERA_REGISTER_KERNEL("BiasAdd", "CPU", BiasAddOp);

// dy summed over all but the last axis, in the computation type. Thread-safe.
class BiasAddGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    auto shape = bias_add_grad_shape(dy.shape());
    if (!shape.ok()) return ctx.fail(shape.status());
    Tensor& out = ctx.allocate_output(0, shape.value());
    const RowView v = rows_of(dy.shape());
    visit_number_or_fail(ctx, dy.dtype(), [&](auto type) {
      using T = decltype(type);
      bias_add_grad(ctx, dy.data<T>(), v.rows, v.cols, out.mutable_data<T>());
    });
  }
};

TESSERA_REGISTER_KERNEL("BiasAddGrad", "CPU", BiasAddGradOp);

// sum(x^2) / 2, accumulated in float64. Thread-safe.
class L2LossOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, Shape{});
    visit_floating_or_fail(ctx, x.dtype(), [&](auto type) {
      using T = decltype(type);
      const T* px = x.data<T>();
      double sum = 0;
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const auto v = static_cast<double>(up(px[i]));
        sum += v * v;
      }
      out.mutable_data<T>()[0] = static_cast<T>(sum / 2);
    });
  }
};

TESSERA_REGISTER_KERNEL("L2Loss", "CPU", L2LossOp);

// ---- Elementwise gradients: apply(a, b) in the computation type ----

struct ReluGradFn {  // (gradients, features)
  template <class A> static A apply(A dy, A x) { return x > A{0} ? dy : A{0}; }
};
struct TanhGradFn {  // (y, dy)
  template <class A> static A apply(A y, A dy) { return dy * (A{1} - y * y); }
};
struct SigmoidGradFn {  // (y, dy)
  template <class A> static A apply(A y, A dy) { return dy * y * (A{1} - y); }
};
struct SqrtGradFn {  // (y, dy)
  template <class A> static A apply(A y, A dy) { return dy * A{0.5} / y; }
};

// out = Fn::apply(a, b) over two inputs of one dtype and shape (numbers, or kFloating: floating
// point only). Thread-safe.
template <class Fn, bool kFloating>
class ElementwiseGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (Status s = grad_inputs_check(a, b); !s.ok()) return ctx.fail(s);
    Tensor& out = ctx.allocate_output(0, a.shape());
    auto run = [&](auto type) {
      using T = decltype(type);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.mutable_data<T>();
      for_each_shard(ctx, a.num_elements(), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) po[i] = static_cast<T>(Fn::apply(up(pa[i]), up(pb[i])));
      });
    };
    if constexpr (kFloating) {
      visit_floating_or_fail(ctx, a.dtype(), run);
    } else {
      visit_number_or_fail(ctx, a.dtype(), run);
    }
  }
};

using ReluGradOp = ElementwiseGradOp<ReluGradFn, false>;
using TanhGradOp = ElementwiseGradOp<TanhGradFn, true>;
using SigmoidGradOp = ElementwiseGradOp<SigmoidGradFn, true>;
using SqrtGradOp = ElementwiseGradOp<SqrtGradFn, true>;

TESSERA_REGISTER_KERNEL("ReluGrad", "CPU", ReluGradOp);
TESSERA_REGISTER_KERNEL("TanhGrad", "CPU", TanhGradOp);
TESSERA_REGISTER_KERNEL("SigmoidGrad", "CPU", SigmoidGradOp);
TESSERA_REGISTER_KERNEL("SqrtGrad", "CPU", SqrtGradOp);

// params' shape of zeros, dy's slices added at `indices` along `axis` (repeats accumulate, in
// order). Every index is checked first, as GatherV2 does. Thread-safe.
class GatherGradOp : public OpKernel {
 public:
  explicit GatherGradOp(const Node& n) : OpKernel(n), axis_(n.attr<int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& params = ctx.input(2);
    auto geometry = gather_grad_geometry(dy, indices, params, axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    const GatherGeometry& g = geometry.value();
    if (Status s = check_indices(indices, g.m, g.limit); !s.ok()) return ctx.fail(s);
    Tensor& out = ctx.allocate_output(0, params.shape());
    visit_number_or_fail(ctx, dy.dtype(), [&](auto type) {
      using T = decltype(type);
      const T* pd = dy.data<T>();
      T* po = out.mutable_data<T>();
      for (int64_t e = 0; e < out.num_elements(); ++e) po[e] = T{0};
      for (int64_t o = 0; o < g.outer; ++o) {
        for (int64_t i = 0; i < g.m; ++i) {
          const T* src = pd + (o * g.m + i) * g.inner;
          T* dst = po + (o * g.limit + index_at(indices, i)) * g.inner;
          for (int64_t j = 0; j < g.inner; ++j) dst[j] = static_cast<T>(wrapping_add(up(dst[j]), up(src[j])));
        }
      }
    });
  }

 private:
  const int64_t axis_;
};

TESSERA_REGISTER_KERNEL("GatherGrad", "CPU", GatherGradOp);

// y = x * mask, mask 1/keep_prob where the element's uniform draw (one float per Philox word) is
// below keep_prob, else 0. Thread-safe, as RandomOpBase.
class DropoutOp : public RandomOpBase {
 public:
  explicit DropoutOp(const Node& n) : RandomOpBase(n), keep_prob_(n.attr<double>("keep_prob")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0, x.shape());
    Tensor& mask = ctx.allocate_output(1, x.shape());
    const int64_t n = x.num_elements();
    const uint64_t first = reserve(static_cast<uint64_t>((n + 3) / 4));
    const auto keep = static_cast<float>(keep_prob_);
    visit_floating_or_fail(ctx, x.dtype(), [&](auto type) {
      using T = decltype(type);
      const auto scale = static_cast<T>(1.0 / keep_prob_);
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      T* pm = mask.mutable_data<T>();
      for (int64_t i = 0; i < n; i += 4) {
        const Philox4x32::Block b = philox_(first + static_cast<uint64_t>(i / 4));
        for (int64_t k = 0; k < 4 && i + k < n; ++k) {
          const T m = uniform_float(b[k]) < keep ? scale : T{0};
          pm[i + k] = m;
          py[i + k] = static_cast<T>(up(px[i + k]) * up(m));
        }
      }
    });
  }

 private:
  const double keep_prob_;
};

TESSERA_REGISTER_KERNEL("Dropout", "CPU", DropoutOp);

// Standard normals with those of magnitude 2 or more redrawn (TensorFlow's rule). Group g of
// kValuesPerBlock values takes, in order, the accepted normals of block first + g, then of the same
// block redrawn (Philox4x32's `redraw`) until the group is full: each group's values are a function
// of its block alone, as on the GPU. Thread-safe, as RandomOpBase.
class TruncatedNormalOp : public RandomOpBase {
 public:
  using RandomOpBase::RandomOpBase;
  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    switch (out.dtype()) {
      case DType::Float64: return generate(out.mutable_data<double>(), n);
      case DType::Float16: return generate(out.mutable_data<float16_t>(), n);
      case DType::BFloat16: return generate(out.mutable_data<bfloat16_t>(), n);
      default: return generate(out.mutable_data<float>(), n);  // float32 (the shape function's dtypes)
    }
  }

 private:
  // The 16-bit dtypes take float32's values, drawn and kept as float32's are, then rounded (as
  // TensorFlow's, whose rounding may give exactly 2).
  template <class Out>
  void generate(Out* out, int64_t n) {
    using T = Accumulate<Out>;
    constexpr int64_t kPerBlock = kValuesPerBlock<T>;
    const int64_t groups = (n + kPerBlock - 1) / kPerBlock;
    const uint64_t first = reserve(static_cast<uint64_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t want = std::min(kPerBlock, n - g * kPerBlock);
      int64_t filled = 0;
      for (uint32_t redraw = 0; filled < want; ++redraw) {
        for (T z : block_normals<T>(philox_(first + static_cast<uint64_t>(g), redraw))) {
          if (filled < want && std::abs(z) < T{2}) out[g * kPerBlock + filled++] = static_cast<Out>(z);
        }
      }
    }
  }
};

TESSERA_REGISTER_KERNEL("TruncatedNormal", "CPU", TruncatedNormalOp);

}  // namespace
}  // namespace tessera::internal
