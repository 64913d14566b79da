// Symbolic differentiation, as TensorFlow 1's tf.gradients: the backward pass is built into the
// graph as ops, which sessions run like any other.
//
//   auto x = ops::placeholder(g, DType::Float32, {-1, 4});
//   Variable w(g, Tensor::zeros(DType::Float32, {4, 1}), "w");
//   auto loss = ops::reduce_mean(ops::square(ops::matmul(x, w.value())));
//   Output dw = gradients({loss}, {w.value()})[0];   // d loss / d w, shaped like w
//
// gradients(ys, xs, grad_ys) returns, for each x, the sum over ys of d y / d x weighted by grad_ys
// (ones shaped like each y when grad_ys is empty): the same dtype and shape as x. An x that no y
// depends on through differentiable floating point paths gets a null Output (TF's None); integer
// tensors carry no gradient, and stop_gradient cuts a path. A path through an op type that has no
// gradient function raises InvalidArgumentError naming the op. The new ops are named
// "gradients/<op>_grad/..." and request the device of the op they differentiate.
#pragma once

#include <vector>

#include "tessera/graph.h"

namespace tessera {

std::vector<Output> gradients(const std::vector<Output>& ys, const std::vector<Output>& xs,
                              const std::vector<Output>& grad_ys = {});

}  // namespace tessera
