// The shape arithmetic of the neural-network ops (Softmax, LogSoftmax, the two cross entropies,
// BiasAdd and BiasAddGrad, the elementwise gradient kernels, GatherGrad, Dropout), shared by their
// definitions (core/nn_ops.cc, at graph-build time, on partial shapes) and their kernels
// (kernels/nn_ops.cc, device/cuda/gpu_nn_ops.cc, on concrete shapes), so that a check gives the
// same message wherever it is made. Errors are InvalidArgument without the op's name (callers
// prefix it); an unknown dim or rank is left for the kernel to check. Also the internal builders
// of the gradient kernels, which the gradient functions use and the public API does not offer.
//
//   bias_add_shape(Shape{4, 3}, Shape{3});            // [4,3]
//   sparse_xent_shape(Shape{2}, Shape{-1, 5});       // [2,5]: the backprop's (the loss is [2])
//   auto dx = internal::relu_grad(dy, x);            // in a gradient function
#pragma once

#include <cstdint>
#include <string>

#include "core/select_ops.h"
#include "core/status.h"
#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// A concrete tensor as rows of its last axis (the class axis of the softmax family, the channel
// axis of BiasAdd): `rows` = the product of the other dims (0 when there are no columns).
struct RowView {
  int64_t rows = 0;
  int64_t cols = 0;
};
RowView rows_of(const Shape& s);

// Softmax, LogSoftmax: logits of rank >= 1.
Status softmax_check(const Shape& logits);
// SparseSoftmaxCrossEntropyWithLogits: labels [batch], logits [batch, classes] with classes > 0
// when batch > 0. Returns the backprop's shape [batch, classes] (the loss is [batch]).
StatusOr<Shape> sparse_xent_shape(const Shape& labels, const Shape& logits);
// SoftmaxCrossEntropyWithLogits: labels and logits of one shape [batch, classes]. Returns it (the
// backprop's; the loss is [batch]).
StatusOr<Shape> xent_shape(const Shape& labels, const Shape& logits);
// The message of a sparse label outside [0, classes), at position `i` of the labels.
std::string label_out_of_range(int64_t i, int64_t label, int64_t classes);

// BiasAdd: value of rank >= 2, bias [C] where C is value's last dim; the output is value's shape.
StatusOr<Shape> bias_add_shape(const Shape& value, const Shape& bias);
// BiasAddGrad: dy of rank >= 2; the output is [C], dy's last dim.
StatusOr<Shape> bias_add_grad_shape(const Shape& dy);
// ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad: two inputs of one shape (partial shapes merged).
StatusOr<Shape> same_shape(const Shape& a, const Shape& b);
// The kernels' check that inputs i and j (tensors a and b) share a dtype.
Status same_dtypes(const Tensor& a, const Tensor& b, int i, int j);
// GatherGrad: dy must have GatherV2's output shape for params and indices along axis.
Status gather_grad_check(const Shape& dy, const Shape& indices, const Shape& params, int64_t axis);
// Dropout: keep_prob in (0, 1].
Status keep_prob_check(double keep_prob);

// The CPU and GPU kernels' checks of their concrete inputs, dtypes included:
// SparseSoftmaxCrossEntropyWithLogits: int32 or int64 labels; the backprop's shape
// (sparse_xent_shape).
StatusOr<Shape> sparse_xent_kernel_shape(const Tensor& labels, const Tensor& logits);
// ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad: inputs of one dtype and one shape.
Status grad_inputs_check(const Tensor& a, const Tensor& b);
// GatherGrad: dy of params' dtype and of the shape of a gather from params; the gather's view of
// params and indices (gather_geometry, which checks the indices' dtype).
StatusOr<GatherGeometry> gather_grad_geometry(const Tensor& dy, const Tensor& indices, const Tensor& params,
                                              int64_t axis);

// ---- The gradient kernels (op types as TensorFlow's), for the gradient functions ----

// dy where features > 0, else 0.
Output relu_grad(Output gradients, Output features, std::string name = "");
Output tanh_grad(Output y, Output dy, std::string name = "");     // dy * (1 - y^2)
Output sigmoid_grad(Output y, Output dy, std::string name = "");  // dy * y * (1 - y)
Output sqrt_grad(Output y, Output dy, std::string name = "");     // dy * 0.5 / y
// A tensor of params' (run-time) shape: zeros plus the slices of dy added at `indices` along
// `axis` (repeated indices accumulate): the gradient of GatherV2 with respect to params.
Output gather_grad(Output dy, Output indices, Output params, int64_t axis, std::string name = "");
// dy summed over every axis but the last: the gradient of BiasAdd with respect to bias.
Output bias_add_grad(Output dy, std::string name = "");

}  // namespace tessera::internal
