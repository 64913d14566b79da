// Winograd's F(2x2, 3x3) and F(4x4, 3x3) for the CPU's 3x3 stride-1 convolutions and both their gradients (Note
// [Winograd convolution] in kernels/conv_winograd.cc). kernels/conv_ops.cc picks it when
// winograd_applies() and takes im2col + GEMM otherwise.
#pragma once

#include "core/conv_ops.h"
#include "kernels/conv_epilogue.h"

namespace tessera::internal {

class OpKernelContext;

// A 3x3 window with stride 1, enough channels in and out (8), and an output of
// two rows and two columns at least (smaller ones waste most of a 4x4 tile).
bool winograd_applies(const Window2D& w);
// The output tile's side that `w` takes, 2 or 4 (whichever makes fewer products), or 0 where
// Winograd does not apply.
int winograd_tile(const Window2D& w);

// As conv2d, conv2d_backprop_input and conv2d_backprop_filter of kernels/conv_ops.cc: NHWC input
// and output, HWIO filter, float or double; `w` must satisfy winograd_applies(). The outputs are
// overwritten.
// winograd_conv2d finishes each tile with `epilogue` (a fused convolution's bias and ReLU).
template <class T>
void winograd_conv2d(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* f, T* out,
                     const BiasRelu<T>& epilogue = {});
template <class T>
void winograd_conv2d_backprop_input(const OpKernelContext& ctx, const Window2D& w, const T* f, const T* dy, T* dx);
template <class T>
void winograd_conv2d_backprop_filter(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* dy, T* df);

}  // namespace tessera::internal
