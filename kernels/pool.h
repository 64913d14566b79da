// MaxPoolGrad of one image on the CPU (kernels/pool_ops.cc), for the fused kernels that make an
// image's gradient and use it while it is in cache (_FusedConv2DBackpropFilterWithBias,
// kernels/conv_ops.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/conv_ops.h"

namespace tessera::internal {

// One per thread: it keeps a window's offsets between calls.
template <class T>
class MaxPoolGradImage {
 public:
  // `w`: the pool's window; `relu`: then ReluGrad with the pool's input as its features
  // (_FusedMaxPoolGradReluGrad).
  MaxPoolGradImage(const Window2D& w, bool relu);

  // xi: the image of the pool's input; gi: of its output's gradient; oi: of the result
  // (in_h * in_w * in_c values).
  void operator()(const T* xi, const T* gi, T* oi);

 private:
  Window2D w_;
  bool relu_;
  bool disjoint_;
  bool covered_;
  std::vector<int64_t> at_;
};

extern template class MaxPoolGradImage<float>;
extern template class MaxPoolGradImage<double>;

}  // namespace tessera::internal
