// Direct float32 convolution with AVX-512 for windows of few values (a first layer's: one or three
// input channels), forward and the filter's gradient (Note [Direct convolution] in
// kernels/conv_direct.cc). kernels/conv_ops.cc takes it where direct_conv_applies() and im2col +
// GEMM otherwise.
#pragma once

#include <cstdint>
#include <functional>

#include "core/conv_ops.h"
#include "kernels/conv_epilogue.h"

namespace tessera::internal {

class OpKernelContext;

// A patch of at most 32 values (k_h * k_w * in_c), 16 to 64 output channels, float32, on a CPU
// with AVX-512F.
bool direct_conv_applies(const Window2D& w, DType dtype);

// As conv2d and conv2d_backprop_filter of kernels/conv_ops.cc (NHWC input and output, HWIO filter);
// `w` must satisfy direct_conv_applies(). The outputs are overwritten.
void direct_conv2d(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* f, float* out,
                   const BiasRelu<float>& epilogue);
void direct_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const float* x, const float* dy,
                                   float* df);

// Image n's gradient (out_h * out_w * out_c values): in a tensor, or made into `scratch` (as many
// values, the calling thread's own). Called from the pool's threads at once.
using ImageGradient = std::function<const float*(int64_t n, float* scratch)>;

// The filter's gradient as direct_conv2d_backprop_filter makes it, and in the same pass over each
// image's dy BiasAddGrad's part sums (kernels/bias_add_grad.h: `bias_sums` [parts, out_c], zeroed
// by the caller, which finishes them). Needs direct_filter_parts_hold_bias_parts(w) (so that each
// bias part is summed on one thread, its rows in order: BiasAddGrad's bits); bias_sums may be null.
void direct_conv2d_backprop_filter_bias(const OpKernelContext& ctx, const Window2D& w, const float* x,
                                        const ImageGradient& dy_of, float* df, float* bias_sums);
bool direct_filter_parts_hold_bias_parts(const Window2D& w);

}  // namespace tessera::internal
