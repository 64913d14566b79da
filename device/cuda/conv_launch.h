// The launchers of the convolution and pooling kernels (conv_kernels.cu), in the manner of
// gpu_launch.h: plain C++ entry points, asynchronous on `stream`, returning the launch error. The
// GPU op kernels (gpu_conv_ops.cc) check shapes and run the matrix products with cuBLAS; these do
// the rest. Semantics are kernels/conv_ops.cc's (Note [Convolution as im2col and GEMM] there).
//
//   gpu::launch_im2col(gpu::Elem::kF32, g, x, row0, rows, patches, stream);   // then a GEMM
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/window_dims.h"
#include "device/cuda/gpu_launch.h"

namespace tessera::internal::gpu {

// core/conv_ops.h's Window2D, every dim known.
using ConvGeometry = WindowDims;

// kF32 and kF64 only.
// patches[rows, k_h * k_w * in_c] = the windows of output positions [row0, row0 + rows) of x
// (height, width, channel order; zeros in the padding).
cudaError_t launch_im2col(Elem elem, const ConvGeometry& g, const void* x, int64_t row0, int64_t rows, void* patches,
                          cudaStream_t stream);
// dx += the patches of output positions [row0, row0 + rows) added back where they were taken
// from (padding dropped). Each thread sums the patches of one dx element: no atomics, the same
// sums on every run.
cudaError_t launch_col2im_add(Elem elem, const ConvGeometry& g, const void* patches, int64_t row0, int64_t rows,
                              void* dx, cudaStream_t stream);

// y = MaxPool (the first largest element of each window, row-major) or AvgPool (the mean over
// the window's elements inside the input) of x; out_c == in_c.
cudaError_t launch_pool(bool max, Elem elem, const ConvGeometry& g, const void* x, void* y, cudaStream_t stream);
// dx = MaxPoolGrad: dy of each window to its first largest element of x, summed where windows
// overlap in output order (as the CPU kernel). `argmax` is device scratch of one int64 per output.
cudaError_t launch_max_pool_grad(Elem elem, const ConvGeometry& g, const void* x, const void* dy, int64_t* argmax,
                                 void* dx, cudaStream_t stream);
// dx = AvgPoolGrad: dy of each window / its in-bounds size to each of its elements, in output order.
cudaError_t launch_avg_pool_grad(Elem elem, const ConvGeometry& g, const void* dy, void* dx, cudaStream_t stream);

}  // namespace tessera::internal::gpu
