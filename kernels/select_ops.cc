// CPU kernels for the comparisons (Equal NotEqual Less LessEqual Greater GreaterEqual), the logical
// ops (LogicalAnd LogicalOr LogicalNot), SelectV2, GatherV2, OneHot, ArgMax, ArgMin and AddN.
//
// Broadcasting ops walk core/select_ops.h's Broadcast3 (contiguous loops when every input is the
// output's shape or a single value). The 16-bit floats compare as floats; NaN compares unequal to
// everything (so NaN != NaN is true). Equal and NotEqual compare strings byte-wise (embedded '\0'
// included) and SelectV2 copies them: only here, on the CPU, since placement keeps every op with a
// string input or output on the host. GatherV2 moves whole rows of bytes (every dtype) and checks
// every index first: one outside [0, N) fails the op naming it, as TensorFlow does. ArgMax/ArgMin
// pick the first of equal values; a NaN counts as the extreme (the first NaN wins), as numpy.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/arg_extreme.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/select_ops.h"
#include "core/shape_ops.h"
#include "core/shape_util.h"
#include "core/tensor_buffer.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

// By reference, so that a string is compared where it lies rather than copied.
template <class T>
decltype(auto) wide(const T& x) {
  if constexpr (is_16bit_float<T>) {
    return x.to_float();
  } else {
    return (x);
  }
}

struct EqualFn {
  template <class T> static bool apply(const T& a, const T& b) { return wide(a) == wide(b); }
};
struct NotEqualFn {
  template <class T> static bool apply(const T& a, const T& b) { return wide(a) != wide(b); }
};
struct LessFn {
  template <class T> static bool apply(T a, T b) { return wide(a) < wide(b); }
};
struct LessEqualFn {
  template <class T> static bool apply(T a, T b) { return wide(a) <= wide(b); }
};
struct GreaterFn {
  template <class T> static bool apply(T a, T b) { return wide(a) > wide(b); }
};
struct GreaterEqualFn {
  template <class T> static bool apply(T a, T b) { return wide(a) >= wide(b); }
};
struct LogicalAndFn {
  template <class T> static bool apply(T a, T b) { return a && b; }
};
struct LogicalOrFn {
  template <class T> static bool apply(T a, T b) { return a || b; }
};

// out[i] = Fn::apply(a[.], b[.]) with broadcasting. `Out` is bool for the comparisons.
template <class Fn, class T>
void broadcast_binary(const Broadcast3& p, const T* pa, const T* pb, bool* po) {
  const int64_t n = p.out.num_elements();
  if (p.rank <= 1) {
    const int64_t sa = p.rank == 0 ? 0 : p.strides[0][0];
    const int64_t sb = p.rank == 0 ? 0 : p.strides[1][0];
    for (int64_t i = 0; i < n; ++i) po[i] = Fn::apply(pa[i * sa], pb[i * sb]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) po[i] = Fn::apply(pa[p.offset(0, i)], pb[p.offset(1, i)]);
}

// A comparison (kOrdering: numbers only) or a logical op (kLogical: bool only). Thread-safe:
// compute() keeps no state between runs.
template <class Fn, bool kOrdering, bool kLogical>
class CompareOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    auto plan = Broadcast3::compare(a, b, kOrdering, kLogical);
    if (!plan.ok()) return ctx.fail(plan.status());
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    bool* po = out.mutable_data<bool>();
    switch (a.dtype()) {
      case DType::Float32: return broadcast_binary<Fn>(plan.value(), a.data<float>(), b.data<float>(), po);
      case DType::Float64: return broadcast_binary<Fn>(plan.value(), a.data<double>(), b.data<double>(), po);
      case DType::Int32: return broadcast_binary<Fn>(plan.value(), a.data<int32_t>(), b.data<int32_t>(), po);
      case DType::Int64: return broadcast_binary<Fn>(plan.value(), a.data<int64_t>(), b.data<int64_t>(), po);
      case DType::Bool: return broadcast_binary<Fn>(plan.value(), a.data<bool>(), b.data<bool>(), po);
      case DType::Float16:
        return broadcast_binary<Fn>(plan.value(), a.data<float16_t>(), b.data<float16_t>(), po);
      case DType::BFloat16:
        return broadcast_binary<Fn>(plan.value(), a.data<bfloat16_t>(), b.data<bfloat16_t>(), po);
      case DType::String:
        // Only Equal and NotEqual get here (Broadcast3::compare refuses strings to the others).
        if constexpr (!kOrdering && !kLogical) {
          return broadcast_binary<Fn>(plan.value(), a.data<std::string>(), b.data<std::string>(), po);
        }
        break;
    }
  }
};

using EqualOp = CompareOp<EqualFn, false, false>;
using NotEqualOp = CompareOp<NotEqualFn, false, false>;
using LessOp = CompareOp<LessFn, true, false>;
using LessEqualOp = CompareOp<LessEqualFn, true, false>;
using GreaterOp = CompareOp<GreaterFn, true, false>;
using GreaterEqualOp = CompareOp<GreaterEqualFn, true, false>;
using LogicalAndOp = CompareOp<LogicalAndFn, false, true>;
using LogicalOrOp = CompareOp<LogicalOrFn, false, true>;

TESSERA_REGISTER_KERNEL("Equal", "CPU", EqualOp);
TESSERA_REGISTER_KERNEL("NotEqual", "CPU", NotEqualOp);
TESSERA_REGISTER_KERNEL("Less", "CPU", LessOp);
TESSERA_REGISTER_KERNEL("LessEqual", "CPU", LessEqualOp);
TESSERA_REGISTER_KERNEL("Greater", "CPU", GreaterOp);
TESSERA_REGISTER_KERNEL("GreaterEqual", "CPU", GreaterEqualOp);
TESSERA_REGISTER_KERNEL("LogicalAnd", "CPU", LogicalAndOp);
TESSERA_REGISTER_KERNEL("LogicalOr", "CPU", LogicalOrOp);

// Thread-safe: compute() keeps no state between runs.
class LogicalNotOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::Bool) return fail_unsupported_dtype(ctx, x.dtype());
    Tensor& out = ctx.allocate_output(0, x.shape());
    const bool* px = x.data<bool>();
    bool* po = out.mutable_data<bool>();
    for (int64_t i = 0; i < x.num_elements(); ++i) po[i] = !px[i];
  }
};

TESSERA_REGISTER_KERNEL("LogicalNot", "CPU", LogicalNotOp);

// out = cond ? x : y, broadcasting among the three; moves elements as bytes (every dtype but
// string, whose elements are objects and are copied as such). Thread-safe: compute() keeps no
// state between runs.
class SelectOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    auto made = Broadcast3::select(c, x, y);
    if (!made.ok()) return ctx.fail(made.status());
    const Broadcast3& p = made.value();
    Tensor& out = ctx.allocate_output(0, p.out);
    const int64_t n = out.num_elements();
    if (n == 0) return;
    if (x.dtype() == DType::String) return select_strings(p, c, x, y, out);
    const std::size_t size = dtype_size(x.dtype());
    const bool* pc = c.data<bool>();
    const auto* px = static_cast<const char*>(x.raw_data());
    const auto* py = static_cast<const char*>(y.raw_data());
    auto* po = static_cast<char*>(out.raw_mutable_data());
    for (int64_t i = 0; i < n; ++i) {
      const bool pick = pc[p.offset(0, i)];
      const char* src = pick ? px + p.offset(1, i) * size : py + p.offset(2, i) * size;
      std::memcpy(po + i * size, src, size);
    }
  }

 private:
  static void select_strings(const Broadcast3& p, const Tensor& c, const Tensor& x, const Tensor& y, Tensor& out) {
    const bool* pc = c.data<bool>();
    const std::string* px = x.data<std::string>();
    const std::string* py = y.data<std::string>();
    std::string* po = out.mutable_data<std::string>();
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      po[i] = pc[p.offset(0, i)] ? px[p.offset(1, i)] : py[p.offset(2, i)];
    }
  }
};

TESSERA_REGISTER_KERNEL("SelectV2", "CPU", SelectOp);

// out[outer, m, inner] = params[outer, indices[m], inner]. Thread-safe.
class GatherOp : public OpKernel {
 public:
  explicit GatherOp(const Node& n) : OpKernel(n), axis_(n.attr<int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& params = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    auto geometry = gather_geometry(params, indices, axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    const GatherGeometry& g = geometry.value();
    if (Status s = check_indices(indices, g.m, g.limit); !s.ok()) return ctx.fail(s);
    Tensor& out = ctx.allocate_output(0, g.out);
    if (out.num_elements() == 0) return;
    for (int64_t o = 0; o < g.outer; ++o) {
      for (int64_t i = 0; i < g.m; ++i) {
        copy_elements(out, (o * g.m + i) * g.inner, params, (o * g.limit + index_at(indices, i)) * g.inner, g.inner);
      }
    }
  }

 private:
  const int64_t axis_;
};

TESSERA_REGISTER_KERNEL("GatherV2", "CPU", GatherOp);

// float32 out[..., d] = indices[...] == d ? on : off. Thread-safe.
class OneHotOp : public OpKernel {
 public:
  explicit OneHotOp(const Node& n)
      : OpKernel(n), depth_(n.attr<int64_t>("depth")), on_(static_cast<float>(n.attr<double>("on_value"))),
        off_(static_cast<float>(n.attr<double>("off_value"))) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& indices = ctx.input(0);
    auto shape = one_hot_output_shape(indices, depth_);
    if (!shape.ok()) return ctx.fail(shape.status());
    Tensor& out = ctx.allocate_output(0, shape.value());
    float* po = out.mutable_data<float>();
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      const int64_t v = index_at(indices, i);
      for (int64_t d = 0; d < depth_; ++d) po[i * depth_ + d] = v == d ? on_ : off_;
    }
  }

 private:
  const int64_t depth_;
  const float on_;
  const float off_;
};

TESSERA_REGISTER_KERNEL("OneHot", "CPU", OneHotOp);

// int64 out[outer, inner] = the first position along `axis` of the extreme value. Thread-safe.
template <bool kMax>
class ArgOp : public OpKernel {
 public:
  explicit ArgOp(const Node& n) : OpKernel(n), axis_(n.attr<int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    visit_number_or_fail(ctx, x.dtype(), [&](auto zero) { run<decltype(zero)>(ctx, x); });
  }

 private:
  template <class T>
  void run(OpKernelContext& ctx, const Tensor& x) {
    auto geometry = arg_reduce_geometry(x.shape(), axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    const ArgReduceGeometry& g = geometry.value();
    const int64_t outer = g.outer, n = g.n, inner = g.inner;
    Tensor& out = ctx.allocate_output(0, g.out);
    const T* px = x.data<T>();
    int64_t* po = out.mutable_data<int64_t>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) {
        po[o * inner + j] = arg_extreme<kMax>(px + o * n * inner + j, n, inner, [](T v) { return wide(v); });
      }
    }
  }

  const int64_t axis_;
};

TESSERA_REGISTER_KERNEL("ArgMax", "CPU", ArgOp<true>);
TESSERA_REGISTER_KERNEL("ArgMin", "CPU", ArgOp<false>);

// out = the sum of the inputs, one shape and dtype; integers wrap. Thread-safe.
class AddNOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    for (int k = 1; k < ctx.num_inputs(); ++k) {
      if (Status s = add_n_input_check(first, ctx.input(k), k); !s.ok()) return ctx.fail(s);
    }
    visit_number_or_fail(ctx, first.dtype(), [&](auto zero) { run<decltype(zero)>(ctx); });
  }

 private:
  // The 16-bit floats add in float32 and round once; integers add in the unsigned type (wrap).
  template <class T>
  void run(OpKernelContext& ctx) {
    Tensor& out = ctx.allocate_output(0, ctx.input(0).shape());
    const int64_t n = out.num_elements();
    using A = std::conditional_t<is_16bit_float<T>, float,
                                 typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                                             std::type_identity<T>>::type>;
    T* po = out.mutable_data<T>();
    for (int64_t i = 0; i < n; ++i) {
      A acc = static_cast<A>(wide(ctx.input(0).data<T>()[i]));
      for (int k = 1; k < ctx.num_inputs(); ++k) acc += static_cast<A>(wide(ctx.input(k).data<T>()[i]));
      po[i] = static_cast<T>(acc);
    }
  }
};

TESSERA_REGISTER_KERNEL("AddN", "CPU", AddNOp);

}  // namespace
}  // namespace tessera::internal
