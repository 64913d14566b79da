// The dims of one window op (a convolution or a pool) over an NHWC input: core/conv_ops.h's
// Window2D, and as the GPU kernels take them (device/cuda/conv_launch.h). A plain struct of
// integers, so that device code can include it.
#pragma once

#include <cstdint>

namespace tessera::internal {

// The input, the window (and, for a convolution, the filter's out channels), the strides, the
// output's size and the padding before. Thread safety: a value.
struct WindowDims {
  int64_t batch = 0, in_h = 0, in_w = 0, in_c = 0;  // the input
  int64_t k_h = 0, k_w = 0, out_c = 0;               // the window, the filter's out channels
  int64_t stride_h = 1, stride_w = 1;
  int64_t out_h = 0, out_w = 0;
  int64_t pad_top = 0;   // rows of zeros (pools: of nothing) before the input's first row
  int64_t pad_left = 0;  // the same for columns
};

}  // namespace tessera::internal
