// CPU kernels of the scans Cumsum and Cumprod (float32, float64, int32, int64; SIM runs them too).
//
// x is viewed as [outer, len, inner] (core/scan_ops.h) and scanned a row of `inner` elements at a
// time: each output row combines the row before it (in scan order) with one input row, so the
// inner loops are contiguous and vectorize. Every line folds from the identity in scan order,
// acc = op(acc, x), exactly as the GPU kernel does, so both give the same bits. Integers are
// combined in their unsigned type: overflow wraps instead of being undefined.
#include <cstdint>
#include <type_traits>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/scan_ops.h"

namespace tessera::internal {
namespace {

template <class T>
using Wrapping = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>, std::type_identity<T>>::type;

struct SumFn {
  template <class A> static A identity() { return A{0}; }
  template <class A> static A apply(A a, A b) { return a + b; }
};
struct ProdFn {
  template <class A> static A identity() { return A{1}; }
  template <class A> static A apply(A a, A b) { return a * b; }
};

template <class Fn, class T>
void scan(const T* px, T* py, const ScanGeometry& g, bool exclusive, bool reverse) {
  using A = Wrapping<T>;
  const auto* x = reinterpret_cast<const A*>(px);
  auto* y = reinterpret_cast<A*>(py);
  const A id = Fn::template identity<A>();
  const int64_t inner = g.inner;
  for (int64_t o = 0; o < g.outer; ++o) {
    const A* xo = x + o * g.len * inner;
    A* yo = y + o * g.len * inner;
    for (int64_t s = 0; s < g.len; ++s) {
      const int64_t j = reverse ? g.len - 1 - s : s;
      A* yj = yo + j * inner;
      if (s == 0) {
        const A* xj = xo + j * inner;
        for (int64_t i = 0; i < inner; ++i) yj[i] = exclusive ? id : Fn::apply(id, xj[i]);
        continue;
      }
      const int64_t prev = reverse ? j + 1 : j - 1;
      const A* yp = yo + prev * inner;
      // Inclusive: y[j] = y[prev] op x[j]; exclusive: y[j] = y[prev] op x[prev].
      const A* src = xo + (exclusive ? prev : j) * inner;
      for (int64_t i = 0; i < inner; ++i) yj[i] = Fn::apply(yp[i], src[i]);
    }
  }
}

// Thread-safe: compute() keeps no state between runs.
template <class Fn>
class ScanOp : public OpKernel {
 public:
  explicit ScanOp(const Node& n)
      : OpKernel(n), exclusive_(n.attr<bool>("exclusive")), reverse_(n.attr<bool>("reverse")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (Status s = check_scan_dtype(x.dtype()); !s.ok()) return ctx.fail(s);
    auto axis = scan_axis(ctx.input(1), x.shape());
    if (!axis.ok()) return ctx.fail(axis.status());
    Tensor& y = ctx.allocate_output(0, x.shape());
    if (y.num_elements() == 0) return;
    const ScanGeometry g = scan_geometry(x.shape(), axis.value());
    switch (x.dtype()) {
      case DType::Float32: return scan<Fn>(x.data<float>(), y.mutable_data<float>(), g, exclusive_, reverse_);
      case DType::Float64: return scan<Fn>(x.data<double>(), y.mutable_data<double>(), g, exclusive_, reverse_);
      case DType::Int32: return scan<Fn>(x.data<int32_t>(), y.mutable_data<int32_t>(), g, exclusive_, reverse_);
      case DType::Int64: return scan<Fn>(x.data<int64_t>(), y.mutable_data<int64_t>(), g, exclusive_, reverse_);
      default: break;  // refused by check_scan_dtype
    }
  }

 private:
  const bool exclusive_;
  const bool reverse_;
};

TESSERA_REGISTER_KERNEL("Cumsum", "CPU", ScanOp<SumFn>);
TESSERA_REGISTER_KERNEL("Cumprod", "CPU", ScanOp<ProdFn>);

}  // namespace
}  // namespace tessera::internal
