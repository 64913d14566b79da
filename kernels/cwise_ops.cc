// CPU kernels for the elementwise ops: binary ops with NumPy broadcasting (Add, Sub, Mul, Div,
// Maximum, Minimum, Pow) and unary ops (Neg, Relu, Square, Exp, Log, Sqrt, Tanh, Sigmoid, Floor,
// Sin, Cos, Abs, Sign, Relu6, Rsqrt, Reciprocal, Softplus, Elu).
//
// Every loop is a plain loop over restrict-qualified contiguous pointers, which -O3 vectorizes; a
// broadcast is walked as rows of such loops (BroadcastPlan, core/broadcast.h). Integer semantics:
// +, -, *, negation and squaring wrap around (two's complement) instead of being undefined on
// overflow; division truncates toward zero as in C++ (-7 / 2 == -3), x / 0 fails the op with
// InvalidArgument and MIN / -1 wraps to MIN; an integer Pow multiplies (wrapping around) and a
// negative exponent fails it with InvalidArgument. Maximum and Minimum return NaN when either
// input is.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/broadcast.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/shape_util.h"
#include "core/wrapping_arith.h"
#include "kernels/dtype_visit.h"
#include "kernels/elementwise_shards.h"

namespace tessera::internal {
namespace {

// ---- Binary functors: apply(a, b) ----

struct AddFn {
  template <class T> static T apply(T a, T b) { return wrapping_add(a, b); }
};
struct SubFn {
  template <class T> static T apply(T a, T b) { return wrapping_sub(a, b); }
};
struct MulFn {
  template <class T> static T apply(T a, T b) { return wrapping_mul(a, b); }
};
struct DivFn {
  // Integer divisors are checked for 0 before any element is computed (see BinaryOp::run).
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return floor_div(a, b);  // TF1's tf.div: Python 2's `/`, rounded down
    } else {
      return a / b;
    }
  }
};
struct MaximumFn {
  // `a != a` is the NaN test (folded away for integers); written as a select so it vectorizes.
  template <class T> static T apply(T a, T b) { return (a > b || a != a) ? a : b; }
};
struct MinimumFn {
  template <class T> static T apply(T a, T b) { return (a < b || a != a) ? a : b; }
};
struct PowFn {
  // Integer exponents are checked to be >= 0 before any element is computed (BinaryOp::run).
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      T result = 1;
      for (T base = a; b > 0; b >>= 1) {  // square and multiply
        if (b & 1) result = wrapping_mul(result, base);
        if (b > 1) base = wrapping_mul(base, base);
      }
      return result;
    } else {
      using C = Accumulate<T>;  // float for the 16-bit floats
      return static_cast<T>(std::pow(static_cast<C>(a), static_cast<C>(b)));
    }
  }
};

template <class Fn, class T>
void same_shape_loop(T* __restrict out, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fn::apply(a[i], b[i]);
}
template <class Fn, class T>
void scalar_a_loop(T* __restrict out, T a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fn::apply(a, b[i]);
}
template <class Fn, class T>
void scalar_b_loop(T* __restrict out, const T* __restrict a, T b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fn::apply(a[i], b);
}
// The same loops over an output that is one of the operands (a forwarded input: Note [Forwarded
// inputs] in core/executor.cc), each with its own loop so that every pointer stays __restrict.
template <class Fn, class T>
void a_in_place_loop(T* __restrict a_out, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a_out[i] = Fn::apply(a_out[i], b[i]);
}
template <class Fn, class T>
void b_in_place_loop(const T* __restrict a, T* __restrict b_out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b_out[i] = Fn::apply(a[i], b_out[i]);
}
template <class Fn, class T>
void scalar_a_in_place_loop(T a, T* __restrict b_out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b_out[i] = Fn::apply(a, b_out[i]);
}
template <class Fn, class T>
void scalar_b_in_place_loop(T* __restrict a_out, T b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a_out[i] = Fn::apply(a_out[i], b);
}

// out = Fn::apply(a, b) elementwise, with NumPy broadcasting. Thread-safe: compute() keeps no
// state between runs.
template <class Fn>
class BinaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (Status s = check_same_dtype(a, b); !s.ok()) return ctx.fail(s);
    visit_number_or_fail(ctx, a.dtype(), [&](auto zero) { run<decltype(zero)>(ctx, a, b); });
  }

 private:
  // Integer division by zero and an integer to a negative power fail the op. With a non-empty
  // output every element of b is used.
  template <class T>
  static bool check_b(OpKernelContext& ctx, const T* pb, int64_t nb) {
    if constexpr (std::is_same_v<Fn, DivFn> && std::is_integral_v<T>) {
      for (int64_t i = 0; i < nb; ++i) {
        if (pb[i] == 0) {
          ctx.fail(ErrorCode::kInvalidArgument, "integer division by zero");
          return false;
        }
      }
    }
    if constexpr (std::is_same_v<Fn, PowFn> && std::is_integral_v<T>) {
      for (int64_t i = 0; i < nb; ++i) {
        if (pb[i] < 0) {
          ctx.fail(ErrorCode::kInvalidArgument, "Integers to negative integer powers are not allowed");
          return false;
        }
      }
    }
    return true;
  }

  template <class T>
  void run(OpKernelContext& ctx, const Tensor& a, const Tensor& b) {
    const T* pa;
    const T* pb;
    // The common cases need no plan: one side a rank-0 scalar, or equal shapes (the rank tests
    // first: they are inline, the shape comparison is not).
    const bool rank0_a = a.shape().rank() == 0;
    const bool rank0_b = b.shape().rank() == 0;
    if (rank0_a || rank0_b || a.shape() == b.shape()) {
      const bool scalar_a = rank0_a && !rank0_b;
      const bool scalar_b = rank0_b && !rank0_a;
      const Shape& shape = scalar_a ? b.shape() : a.shape();
      if ((scalar_a ? b : a).num_elements() == 0) {
        ctx.allocate_output(0, shape);
        return;
      }
      // The pointers first: an input the output takes over reads as null afterwards.
      pa = a.data<T>();
      pb = b.data<T>();
      if (!check_b<T>(ctx, pb, b.num_elements())) return;
      // Over an input of the output's shape that nobody reads again (Note [Forwarded inputs]).
      Tensor& out = scalar_a   ? ctx.forward_input_or_allocate_output({1}, 0, shape)
                    : scalar_b ? ctx.forward_input_or_allocate_output({0}, 0, shape)
                               : ctx.forward_input_or_allocate_output({0, 1}, 0, shape);
      T* po = out.mutable_data<T>();
      if (out.num_elements() == 1) {  // two scalars: no loop to choose (po may be pa or pb)
        po[0] = Fn::apply(pa[0], pb[0]);
        return;
      }
      // Note [Sharding the elementwise kernels] (kernels/elementwise_shards.h).
      for_each_shard(ctx, out.num_elements(), [&](int64_t i, int64_t end) {
        const int64_t n = end - i;
        if (scalar_a) return po == pb ? scalar_a_in_place_loop<Fn>(pa[0], po + i, n) : scalar_a_loop<Fn>(po + i, pa[0], pb + i, n);
        if (scalar_b) return po == pa ? scalar_b_in_place_loop<Fn>(po + i, pb[0], n) : scalar_b_loop<Fn>(po + i, pa + i, pb[0], n);
        if (po == pa) return a_in_place_loop<Fn>(po + i, pb + i, n);
        if (po == pb) return b_in_place_loop<Fn>(pa + i, po + i, n);
        same_shape_loop<Fn>(po + i, pa + i, pb + i, n);
      });
      return;
    }
    // Unknown dims passed graph construction; this is where they are checked.
    auto made = BroadcastPlan::make(a.shape(), b.shape());
    if (!made.ok()) return ctx.fail(made.status());
    const BroadcastPlan& plan = made.value();
    Tensor& out = ctx.allocate_output(0, plan.out_shape());
    const int64_t n = out.num_elements();
    if (n == 0) return;
    pa = a.data<T>();
    pb = b.data<T>();
    T* po = out.mutable_data<T>();
    if (!check_b<T>(ctx, pb, b.num_elements())) return;
    switch (plan.kind()) {
      case BroadcastPlan::Kind::kSameShape: return same_shape_loop<Fn>(po, pa, pb, n);
      case BroadcastPlan::Kind::kScalarA: return scalar_a_loop<Fn>(po, pa[0], pb, n);
      case BroadcastPlan::Kind::kScalarB: return scalar_b_loop<Fn>(po, pa, pb[0], n);
      case BroadcastPlan::Kind::kGeneral: break;
    }
    const int64_t row = plan.row_size();
    const bool a_moves = plan.a_row_stride() != 0;
    const bool b_moves = plan.b_row_stride() != 0;
    plan.for_each_row([&](int64_t o, int64_t ia, int64_t ib) {
      if (a_moves && b_moves) {
        same_shape_loop<Fn>(po + o, pa + ia, pb + ib, row);
      } else if (b_moves) {
        scalar_a_loop<Fn>(po + o, pa[ia], pb + ib, row);
      } else {
        scalar_b_loop<Fn>(po + o, pa + ia, pb[ib], row);
      }
    });
  }
};

TESSERA_REGISTER_KERNEL("Add", "CPU", BinaryOp<AddFn>);
TESSERA_REGISTER_KERNEL("Sub", "CPU", BinaryOp<SubFn>);
TESSERA_REGISTER_KERNEL("Mul", "CPU", BinaryOp<MulFn>);
TESSERA_REGISTER_KERNEL("Div", "CPU", BinaryOp<DivFn>);
TESSERA_REGISTER_KERNEL("Maximum", "CPU", BinaryOp<MaximumFn>);
TESSERA_REGISTER_KERNEL("Minimum", "CPU", BinaryOp<MinimumFn>);
TESSERA_REGISTER_KERNEL("Pow", "CPU", BinaryOp<PowFn>);

// ---- Unary functors: apply(x); kFloatingOnly ops exist for the floating point dtypes only ----

struct NegFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> static T apply(T x) { return wrapping_sub(T{0}, x); }
};
struct ReluFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> static T apply(T x) { return x < T{0} ? T{0} : x; }  // relu(NaN) = NaN
};
struct SquareFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> static T apply(T x) { return wrapping_mul(x, x); }
};
struct ExpFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::exp(x); }
};
struct LogFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::log(x); }
};
struct SqrtFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::sqrt(x); }
};
// Note [Vectorized exp, tanh and sigmoid]
// glibc's tanhf (through expm1f) and expf are a call per element, which the compiler cannot
// vectorize: an LSTM's training step spent a third of its working time in them. The float forms
// here are straight-line code that -O3 vectorizes (4 lanes at the SSE2 baseline), as Eigen's
// (TensorFlow's) are, and stay within 4 ulp of the exact values (tests/kernels_test.cc):
//  * exp: x = k ln2 + r with |r| <= ln2 / 2 (Cody and Waite's two-part ln2, k rounded by adding
//    1.5 2^23), exp(r) by its Taylor polynomial to r^7 (truncation below 1e-8 relative), times
//    2^k as two powers of two built in the exponent bits (each normal); inf above 88.7228, 0 below
//    -87.3365 (where expf's results are denormals, which kernels flush), NaN for NaN.
//  * tanh: for |x| < 0.5, x P(x^2) with P its Taylor series to x^15 (truncation below 1e-8);
//    otherwise sign(x) (1 - t) / (1 + t) with t = exp(-2|x|) <= 0.37, so nothing cancels.
//  * sigmoid: 1 / (1 + exp(-x)).
// Float64 keeps the library's functions.
[[gnu::always_inline]] inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
[[gnu::always_inline]] inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

[[gnu::always_inline]] inline float vector_exp(float x) {
  constexpr float kHi = 88.72283f, kLo = -87.33654f;
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float xc = x < kLo ? kLo : x;          // (NaN passes both)
  xc = xc > kHi ? kHi : xc;
  const float shifted = xc * 1.44269504f + kShift;
  const float kf = shifted - kShift;
  const auto k = static_cast<int32_t>(float_to_bits(shifted) - float_to_bits(kShift));  // kf as an integer
  const float r = (xc - kf * 0.693359375f) - kf * -2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t half = k >> 1;
  const float s1 = bits_to_float(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = bits_to_float(static_cast<uint32_t>(k - half + 127) << 23);
  float y = p * s1 * s2;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x < kLo ? 0.0f : y;
}

[[gnu::always_inline]] inline float vector_tanh(float x) {
  const float a = x < 0 ? -x : x;  // (NaN stays NaN)
  const float x2 = x * x;
  float p = -929569.0f / 638512875;
  p = p * x2 + 21844.0f / 6081075;
  p = p * x2 - 1382.0f / 155925;
  p = p * x2 + 62.0f / 2835;
  p = p * x2 - 17.0f / 315;
  p = p * x2 + 2.0f / 15;
  p = p * x2 - 1.0f / 3;
  const float small = x * (1.0f + x2 * p);  // (-0 stays -0)
  const float t = vector_exp(-2.0f * a);
  float big = (1.0f - t) / (1.0f + t);
  big = x < 0 ? -big : big;
  return a < 0.5f ? small : big;
}

struct TanhFn {
  static constexpr bool kFloatingOnly = true;
  [[gnu::always_inline]] static float apply(float x) { return vector_tanh(x); }
  static double apply(double x) { return std::tanh(x); }
};
struct FloorFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::floor(x); }
};
struct SinFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::sin(x); }
};
struct CosFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return std::cos(x); }
};
struct SigmoidFn {
  static constexpr bool kFloatingOnly = true;
  // exp(-x) overflows to inf for very negative x, giving exactly 0: no NaN from inf / inf.
  [[gnu::always_inline]] static float apply(float x) { return 1.0f / (1.0f + vector_exp(-x)); }
  static double apply(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};
struct AbsFn {
  static constexpr bool kFloatingOnly = false;
  // Integers negate wrapping: the smallest value is its own absolute value, as in TensorFlow.
  template <class T> static T apply(T x) {
    if constexpr (std::is_integral_v<T>) return x < T{0} ? wrapping_sub(T{0}, x) : x;
    else return std::fabs(x);
  }
};
struct SignFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> static T apply(T x) {
    if constexpr (!std::is_integral_v<T>) {
      if (x != x) return x;  // sign(NaN) = NaN
    }
    return static_cast<T>((T{0} < x) - (x < T{0}));
  }
};
struct Relu6Fn {
  static constexpr bool kFloatingOnly = false;
  template <class T> static T apply(T x) { return x < T{0} ? T{0} : (x > T{6} ? T{6} : x); }  // NaN stays
};
struct RsqrtFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return T{1} / std::sqrt(x); }
};
struct ReciprocalFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return T{1} / x; }
};
struct SoftplusFn {
  static constexpr bool kFloatingOnly = true;
  // TensorFlow's thresholds: past log(epsilon) + 2 either way, log(1 + exp(x)) is x or exp(x) to
  // the type's precision, and exp(x) would overflow (or lose everything) computing it directly.
  template <class T> static T apply(T x) {
    const T threshold = std::log(std::numeric_limits<T>::epsilon()) + T{2};
    if (x > -threshold) return x;
    if (x < threshold) return std::exp(x);
    return std::log(std::exp(x) + T{1});
  }
};
struct EluFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> static T apply(T x) { return x < T{0} ? std::exp(x) - T{1} : x; }  // as TensorFlow's
};

template <class Fn, class T>
void unary_loop(T* __restrict out, const T* __restrict x, int64_t n) {
  using C = Accumulate<T>;  // float for the 16-bit floats (std::exp has no overload for them)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(Fn::apply(static_cast<C>(x[i])));
}
template <class Fn, class T>
void unary_in_place_loop(T* __restrict x_out, int64_t n) {
  using C = Accumulate<T>;
  for (int64_t i = 0; i < n; ++i) x_out[i] = static_cast<T>(Fn::apply(static_cast<C>(x_out[i])));
}

// out = Fn::apply(x) elementwise. Thread-safe: compute() keeps no state between runs.
template <class Fn>
class UnaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto run_as = [&](auto zero) { run<decltype(zero)>(ctx, x); };
    if constexpr (Fn::kFloatingOnly) {
      visit_floating_or_fail(ctx, x.dtype(), run_as);
    } else {
      visit_number_or_fail(ctx, x.dtype(), run_as);
    }
  }

 private:
  template <class T>
  void run(OpKernelContext& ctx, const Tensor& x) {
    if (x.num_elements() == 0) {
      ctx.allocate_output(0, x.shape());
      return;
    }
    const T* px = x.data<T>();  // before x may be forwarded (it then reads as null)
    Tensor& out = ctx.forward_input_or_allocate_output({0}, 0, x.shape());
    T* po = out.mutable_data<T>();
    for_each_shard(ctx, out.num_elements(), [&](int64_t i, int64_t end) {
      if (po == px) return unary_in_place_loop<Fn>(po + i, end - i);
      unary_loop<Fn>(po + i, px + i, end - i);
    });
  }
};

TESSERA_REGISTER_KERNEL("Neg", "CPU", UnaryOp<NegFn>);
TESSERA_REGISTER_KERNEL("Relu", "CPU", UnaryOp<ReluFn>);
TESSERA_REGISTER_KERNEL("Square", "CPU", UnaryOp<SquareFn>);
TESSERA_REGISTER_KERNEL("Exp", "CPU", UnaryOp<ExpFn>);
TESSERA_REGISTER_KERNEL("Log", "CPU", UnaryOp<LogFn>);
TESSERA_REGISTER_KERNEL("Sqrt", "CPU", UnaryOp<SqrtFn>);
TESSERA_REGISTER_KERNEL("Tanh", "CPU", UnaryOp<TanhFn>);
TESSERA_REGISTER_KERNEL("Sigmoid", "CPU", UnaryOp<SigmoidFn>);
TESSERA_REGISTER_KERNEL("Floor", "CPU", UnaryOp<FloorFn>);
TESSERA_REGISTER_KERNEL("Sin", "CPU", UnaryOp<SinFn>);
TESSERA_REGISTER_KERNEL("Cos", "CPU", UnaryOp<CosFn>);
TESSERA_REGISTER_KERNEL("Abs", "CPU", UnaryOp<AbsFn>);
TESSERA_REGISTER_KERNEL("Sign", "CPU", UnaryOp<SignFn>);
TESSERA_REGISTER_KERNEL("Relu6", "CPU", UnaryOp<Relu6Fn>);
TESSERA_REGISTER_KERNEL("Rsqrt", "CPU", UnaryOp<RsqrtFn>);
TESSERA_REGISTER_KERNEL("Reciprocal", "CPU", UnaryOp<ReciprocalFn>);
TESSERA_REGISTER_KERNEL("Softplus", "CPU", UnaryOp<SoftplusFn>);
TESSERA_REGISTER_KERNEL("Elu", "CPU", UnaryOp<EluFn>);

}  // namespace
}  // namespace tessera::internal
