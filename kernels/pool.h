// MaxPoolGrad on the CPU (kernels/pool_ops.cc), of one image for the fused kernels that make an
// image's gradient and use it while it is in cache (_FusedConv2DBackpropFilterWithBias,
// kernels/conv_ops.cc), and of all images.
#pragma once

#include <cstdint>
#include <vector>

#include "core/conv_ops.h"

namespace tessera::internal {

class OpKernelContext;

// How many images ahead a walk over images asks for the next one's values (prefetch()).
inline constexpr int64_t kPrefetchImages = 2;

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

  // Asks for an image's xi and gi ahead of the call that reads them. MaxPoolGrad reads an
  // activation written long before (in the forward pass), which has left the cache; its loads
  // waited on memory one window at a time until the images kPrefetchImages ahead were asked for
  // (benchmarks/README.md, "Pools").
  void prefetch(const T* xi, const T* gi) const;

 private:
  Window2D w_;
  bool relu_;
  bool disjoint_;
  bool covered_;
  std::vector<int64_t> at_;
};

extern template class MaxPoolGradImage<float>;
extern template class MaxPoolGradImage<double>;

// MaxPoolGrad (then ReluGrad where `relu`) of every image, sharded over ctx's pool: x the pool's
// input, grad its output's gradient, out as x.
template <class T>
void max_pool_grad(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out, bool relu);

extern template void max_pool_grad<float>(const OpKernelContext&, const Window2D&, const float*, const float*, float*,
                                          bool);
extern template void max_pool_grad<double>(const OpKernelContext&, const Window2D&, const double*, const double*,
                                           double*, bool);

}  // namespace tessera::internal
