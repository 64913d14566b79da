// The window arithmetic of the convolution and pooling ops (Conv2D, MaxPool, AvgPool and their
// gradient ops), shared by their definitions (core/conv_ops.cc, at graph-build time, on partial
// shapes) and their kernels (kernels/conv_ops.cc, device/cuda/gpu_conv_ops.cc, on concrete shapes),
// so that a check gives the same message wherever it is made. Errors are InvalidArgument without
// the op's name (callers prefix it); an unknown dim gives an unknown dim, left for the kernel.
//
//   WindowAttrs a = WindowAttrs::of(node.attrs);   // strides [1,1,1,1], padding "VALID"
//   auto w = a.conv2d(Shape{1, 4, 4, 3}, Shape{2, 2, 3, 8});   // w.value().out_shape(): [1,3,3,8]
//   auto p = a.conv2d(Shape{-1, 4, 4, 3}, Shape::unknown());    // [?,?,?,?]: the kernel checks
//
// Layouts are TensorFlow's defaults: NHWC inputs and outputs, HWIO filters. SAME padding is TF's:
// out = ceil(in / stride), pad_total = max((out - 1) * stride + k - in, 0), pad_before =
// pad_total / 2 (the extra one after); VALID: out = (in - k) / stride + 1, which needs k <= in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/status.h"
#include "core/window_dims.h"
#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class OpKernelContext;

// One window op over an NHWC input, every dim -1 where unknown (shape inference). A pool's window
// is ksize's and its output keeps the input's channels (out_c == in_c). Thread safety: a value.
struct Window2D : WindowDims {
  Shape in_shape() const { return Shape{batch, in_h, in_w, in_c}; }
  Shape out_shape() const { return Shape{batch, out_h, out_w, out_c}; }
  Shape filter_shape() const { return Shape{k_h, k_w, in_c, out_c}; }
  // The im2col view of a convolution: out_pixels() rows (one per output position) of patch_size()
  // values (the window's, ordered height, width, channel: the filter's rows), times the filter as a
  // [patch_size, out_c] matrix, is the output as an [out_pixels, out_c] matrix.
  int64_t patch_size() const { return k_h * k_w * in_c; }
  int64_t out_pixels() const { return batch * out_h * out_w; }
  // A 1x1 window with stride 1: the input itself is the im2col matrix.
  bool pointwise() const { return k_h == 1 && k_w == 1 && stride_h == 1 && stride_w == 1; }
  // How many rows of patches of `elem_bytes` each fit `max_bytes`: at least one, at most every
  // row, and within BLAS's int (Note [Convolution as im2col and GEMM] in kernels/conv_ops.cc).
  int64_t chunk_rows(int64_t max_bytes, int64_t elem_bytes) const;
  // InvalidArgument "dimension D is too large for BLAS" unless patch_size() and out_c fit an int.
  Status check_gemm_dims() const;
};

// A window op's attrs as its node keeps them: "strides", "padding" and, for pools, "ksize".
struct WindowAttrs {
  std::vector<int64_t> ksize;  // empty for the convolutions
  std::vector<int64_t> strides;
  std::string padding;

  static WindowAttrs of(const AttrMap& attrs);

  // Conv2D of `input` (NHWC) with `filter` (HWIO): strides [1, h, w, 1] with h, w >= 1; padding
  // "SAME" or "VALID"; the filter's in channels equal the input's; for VALID a window no larger
  // than the input. An unknown rank is taken as four unknown dims.
  StatusOr<Window2D> conv2d(const Shape& input, const Shape& filter) const;
  // MaxPool and AvgPool of `input` (NHWC): ksize as strides (4 entries, batch and channel 1).
  StatusOr<Window2D> pool(const Shape& input) const;
};

// Which convolution a kernel computes: Conv2D, or its gradient with respect to the input or the
// filter; which pool, or its gradient.
enum class ConvKind { kForward, kBackpropInput, kBackpropFilter };
enum class PoolKind { kMax, kAvg, kMaxGrad, kAvgGrad };

// What a kernel checks before it computes (its inputs' shapes, known for sure only now, and
// dtype), the same on every device: the window, and the output's shape (the window's output, or
// the forward op's input or filter for a gradient).
struct WindowPlan {
  Window2D window;
  Shape out;
};
StatusOr<WindowPlan> plan_conv(ConvKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx);
StatusOr<WindowPlan> plan_pool(PoolKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx);

// InvalidArgument "<what> has shape S, expected W" unless `got` and `want` may be the same shape
// (unknown dims match anything): a gradient op's check of its incoming gradient's shape.
Status expect_shape(const Shape& got, const Shape& want, const char* what);

// The internal gradient ops, built by the gradient functions. Where TensorFlow passes an input's
// shape as an int32 tensor (input_sizes, filter_sizes, orig_input_shape), these take the tensor
// itself and read only its shape: the shape is then on the host wherever the tensor lives (a GPU
// kernel needs no copy back and no sync to size its output), and known to shape inference
// whenever the forward op's was.
//   Conv2DBackpropInput(input, filter, out_backprop): the gradient with respect to `input`.
//   Conv2DBackpropFilter(input, filter, out_backprop): the gradient with respect to `filter`.
//   MaxPoolGrad(orig_input, orig_output, grad): grad of each window to the first of its maxima
//   (in row-major order over the window), summed where windows overlap (TF's CPU rule).
//   AvgPoolGrad(orig_input, grad): grad / (in-bounds elements of the window) to each of them.
Output conv2d_backprop_input(Output input, Output filter, Output out_backprop, std::vector<int64_t> strides,
                             std::string padding, std::string name = "");
Output conv2d_backprop_filter(Output input, Output filter, Output out_backprop, std::vector<int64_t> strides,
                              std::string padding, std::string name = "");
Output max_pool_grad(Output orig_input, Output orig_output, Output grad, std::vector<int64_t> ksize,
                     std::vector<int64_t> strides, std::string padding, std::string name = "");
Output avg_pool_grad(Output orig_input, Output grad, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                     std::string padding, std::string name = "");

}  // namespace tessera::internal
