// What a fused convolution (_FusedConv2D, Note [Op fusion] in core/remapper.cc) does to its output
// rows once their products are made, while they are still in cache: + bias along the channels,
// then ReLU, the arithmetic of BiasAdd and Relu (kernels/nn_ops.cc, kernels/cwise_ops.cc) bit for
// bit. A default one (no bias) does nothing: the plain Conv2D.
#pragma once

#include <cstdint>

namespace tessera::internal {

template <class T>
struct BiasRelu {
  const T* bias = nullptr;  // [channels]; null: nothing to do
  bool relu = false;

  // rows [n, channels], finished in place.
  void operator()(T* rows, int64_t n, int64_t channels) const {
    if (bias == nullptr) return;
    for (int64_t r = 0; r < n; ++r) {
      T* __restrict row = rows + r * channels;
      const T* __restrict b = bias;
      if (relu) {
        for (int64_t c = 0; c < channels; ++c) {
          const T v = row[c] + b[c];
          row[c] = v < T{0} ? T{0} : v;  // relu(NaN) = NaN, as Relu's
        }
      } else {
        for (int64_t c = 0; c < channels; ++c) row[c] += b[c];
      }
    }
  }
};

}  // namespace tessera::internal
