// CPU kernel for Cast between any two of the seven dtypes.
//
// Conversions follow C++ except where C++ leaves them undefined: to bool is `x != 0` (NaN is
// true), from bool gives 0 or 1, and floating point to integer truncates toward zero but saturates
// at the integer's range, NaN giving 0 (TensorFlow inherits whatever the hardware does there).
// Integer narrowing wraps (two's complement, defined since C++20). float16 and bfloat16 convert
// through float32: to them, the value is first made a float32 (float64 and int64 round there).
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

template <class To, class From>
To convert(From x) {
  if constexpr (is_16bit_float<From>) {
    return convert<To>(x.to_float());
  } else if constexpr (is_16bit_float<To>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Compared in double, where every bound below is exact: 2^31, 2^63, -2^31 - 1 and -2^63 are.
    const double d = static_cast<double>(x);
    constexpr double kTooLarge = 2.0 * static_cast<double>(std::numeric_limits<To>::max() / 2 + 1);
    if (d != d) return To{0};
    if (d >= kTooLarge) return std::numeric_limits<To>::max();
    if (!(d > static_cast<double>(std::numeric_limits<To>::min()) - 1.0)) {
      return std::numeric_limits<To>::min();
    }
    return static_cast<To>(d);
  } else {
    return static_cast<To>(x);
  }
}

template <class To, class From>
void convert_loop(To* __restrict out, const From* __restrict in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<To>(in[i]);
}

// Converts input 0 to the "dtype" attr. Thread-safe: compute() keeps no state between runs.
class CastOp : public OpKernel {
 public:
  explicit CastOp(const Node& n) : OpKernel(n), to_(n.output_dtypes[0]) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == to_) {  // nothing to convert: share the buffer, as Identity does
      ctx.set_output(0, x);
      return;
    }
    Tensor& out = ctx.allocate_output(0, x.shape());
    // Never a string: Cast's shape function refuses them.
    visit_dtype(x.dtype(), [&](auto from) {
      visit_dtype(to_, [&](auto to) {
        using From = decltype(from);
        using To = decltype(to);
        convert_loop(out.mutable_data<To>(), x.data<From>(), x.num_elements());
      });
    });
  }

  // A cast to the input's own dtype copies nothing, whatever the size.
  bool is_expensive() const override {
    const Endpoint& in = node().inputs[0];
    return in.node->output_dtypes[in.index] != to_ && OpKernel::is_expensive();
  }

 private:
  const DType to_;
};

TESSERA_REGISTER_KERNEL("Cast", "CPU", CastOp);

}  // namespace
}  // namespace tessera::internal
