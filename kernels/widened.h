// float16 and bfloat16 through the float32 code of a CPU kernel that has none of its own (the
// convolutions and pools: kernels/conv_ops.cc, kernels/pool_ops.cc): the inputs widened to float32
// (exactly), the float32 result rounded back once.
//
//   std::vector<float> x = widened<float16_t>(ctx.input(0));
//   std::vector<float> y(out.num_elements());
//   ... the float32 kernel from x.data() into y.data() ...
//   round_into<float16_t>(y, out);
#pragma once

#include <cstddef>
#include <vector>

#include "core/half.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// The values of `t`, of H's dtype, as float32.
template <class H>
std::vector<float> widened(const Tensor& t) {
  const H* in = t.data<H>();
  std::vector<float> out(static_cast<std::size_t>(t.num_elements()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = in[i].to_float();
  return out;
}

// `values` rounded to H into `out`, of H's dtype and as many elements.
template <class H>
void round_into(const std::vector<float>& values, Tensor& out) {
  H* po = out.mutable_data<H>();
  for (std::size_t i = 0; i < values.size(); ++i) po[i] = H(values[i]);
}

}  // namespace tessera::internal
