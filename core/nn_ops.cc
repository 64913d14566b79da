// Op definitions and constructors for the neural-network ops: Softmax, LogSoftmax,
// SparseSoftmaxCrossEntropyWithLogits, SoftmaxCrossEntropyWithLogits, BiasAdd, L2Loss, Dropout,
// TruncatedNormal and StopGradient, and the gradient kernels BiasAddGrad, ReluGrad, TanhGrad,
// SigmoidGrad, SqrtGrad and GatherGrad. Shapes and dtypes are inferred here, when the graph is
// built, with the arithmetic of core/nn_ops.h that the kernels repeat on concrete shapes. The
// cross entropies have TensorFlow's two outputs (loss, backprop) and Dropout two (y, mask): their
// gradients read the second. The gradient functions of these ops, and of Relu, Tanh, Sigmoid, Sqrt
// and GatherV2 (whose gradient kernels are here), follow TensorFlow's nn_grad.py, math_grad.py and
// array_grad.py (GatherV2's gradient is dense here: GatherGrad, not IndexedSlices).
#include "core/nn_ops.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/common_shape_fns.h"
#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "core/select_ops.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {

RowView rows_of(const Shape& s) {
  RowView v;
  v.cols = s.rank() == 0 ? 1 : s.dim(-1);
  v.rows = v.cols == 0 ? 0 : s.num_elements() / v.cols;
  return v;
}

Status softmax_check(const Shape& logits) {
  if (logits.rank() == 0) return errors::invalid_argument("logits must have at least 1 dimension, got shape []");
  return Status();
}

StatusOr<Shape> sparse_xent_shape(const Shape& labels, const Shape& logits) {
  if (!logits.unknown_rank() && logits.rank() != 2) {
    return errors::invalid_argument("logits must be 2-D, got shape {}", logits.to_string());
  }
  if (!labels.unknown_rank() && labels.rank() != 1) {
    return errors::invalid_argument("labels must be 1-D, got shape {}", labels.to_string());
  }
  Shape out = logits.unknown_rank() ? Shape{-1, -1} : logits;
  const int64_t batch = labels.unknown_rank() ? -1 : labels.dim(0);
  if (batch >= 0 && out.dim(0) >= 0 && batch != out.dim(0)) {
    return errors::invalid_argument(
        "logits and labels must have the same first dimension, got logits shape {} and labels shape {}",
        logits.to_string(), labels.to_string());
  }
  if (out.dim(0) < 0) out.set_dim(0, batch);
  if (out.dim(0) > 0 && out.dim(1) == 0) {
    return errors::invalid_argument("must have at least one class, got logits shape {}", out.to_string());
  }
  return out;
}

StatusOr<Shape> xent_shape(const Shape& labels, const Shape& logits) {
  for (const Shape* s : {&logits, &labels}) {
    if (!s->unknown_rank() && s->rank() != 2) {
      return errors::invalid_argument("logits and labels must be 2-D, got shape {}", s->to_string());
    }
  }
  auto merged = same_shape(logits, labels);
  if (!merged.ok()) {
    return errors::invalid_argument("logits and labels must have the same shape, got logits {} and labels {}",
                                    logits.to_string(), labels.to_string());
  }
  return merged.value().unknown_rank() ? Shape{-1, -1} : merged.value();
}

std::string label_out_of_range(int64_t i, int64_t label, int64_t classes) {
  return fmt::format("received a label value of {} (labels[{}]) which is outside the valid range of [0, {})", label, i,
                     classes);
}

StatusOr<Shape> bias_add_shape(const Shape& value, const Shape& bias) {
  if (!value.unknown_rank() && value.rank() < 2) {
    return errors::invalid_argument("value must be at least 2-D, got shape {}", value.to_string());
  }
  if (!bias.unknown_rank() && bias.rank() != 1) {
    return errors::invalid_argument("bias must be 1-D, got shape {}", bias.to_string());
  }
  if (value.unknown_rank()) return value;
  Shape out = value;
  const int64_t c = bias.unknown_rank() ? -1 : bias.dim(0);
  if (c >= 0 && out.dim(-1) >= 0 && c != out.dim(-1)) {
    return errors::invalid_argument("bias of shape {} must match the last dimension of value of shape {}",
                                    bias.to_string(), value.to_string());
  }
  if (out.dim(-1) < 0) out.set_dim(out.rank() - 1, c);
  return out;
}

StatusOr<Shape> bias_add_grad_shape(const Shape& dy) {
  if (dy.unknown_rank()) return Shape{-1};
  if (dy.rank() < 2) return errors::invalid_argument("dy must be at least 2-D, got shape {}", dy.to_string());
  return Shape{dy.dim(-1)};
}

Status same_dtypes(const Tensor& a, const Tensor& b, int i, int j) {
  if (a.dtype() == b.dtype()) return Status();
  return errors::invalid_argument("inputs {} and {} must have the same dtype, got {} and {}", i, j,
                                  dtype_name(a.dtype()), dtype_name(b.dtype()));
}

StatusOr<Shape> same_shape(const Shape& a, const Shape& b) {
  if (a.unknown_rank()) return b;
  if (b.unknown_rank()) return a;
  bool same = a.rank() == b.rank();
  Shape out = a;
  for (int d = 0; same && d < a.rank(); ++d) {
    if (a.dim(d) >= 0 && b.dim(d) >= 0 && a.dim(d) != b.dim(d)) same = false;
    if (same && a.dim(d) < 0) out.set_dim(d, b.dim(d));
  }
  if (!same) return errors::invalid_argument("inputs must have one shape, got {} and {}", a.to_string(), b.to_string());
  return out;
}

Status gather_grad_check(const Shape& dy, const Shape& indices, const Shape& params, int64_t axis) {
  auto want = gather_shape(params, indices, axis);
  if (!want.ok()) return want.status();
  if (!same_shape(dy, want.value()).ok()) {
    return errors::invalid_argument("dy of shape {} is not the shape {} of a gather from params of shape {}",
                                    dy.to_string(), want.value().to_string(), params.to_string());
  }
  return Status();
}

StatusOr<Shape> sparse_xent_kernel_shape(const Tensor& labels, const Tensor& logits) {
  if (labels.dtype() != DType::Int32 && labels.dtype() != DType::Int64) {
    return errors::invalid_argument("labels must be int32 or int64, got {}", dtype_name(labels.dtype()));
  }
  return sparse_xent_shape(labels.shape(), logits.shape());
}

Status grad_inputs_check(const Tensor& a, const Tensor& b) {
  TESSERA_RETURN_IF_ERROR(same_dtypes(a, b, 0, 1));
  return same_shape(a.shape(), b.shape()).status();
}

StatusOr<GatherGeometry> gather_grad_geometry(const Tensor& dy, const Tensor& indices, const Tensor& params,
                                              int64_t axis) {
  TESSERA_RETURN_IF_ERROR(same_dtypes(dy, params, 0, 2));
  auto geometry = gather_geometry(params, indices, axis);
  if (!geometry.ok()) return geometry.status();
  TESSERA_RETURN_IF_ERROR(gather_grad_check(dy.shape(), indices.shape(), params.shape(), axis));
  return geometry;
}

Status keep_prob_check(double keep_prob) {
  if (!(keep_prob > 0 && keep_prob <= 1)) {
    return errors::invalid_argument("keep_prob must be in (0, 1], got {}", keep_prob);
  }
  return Status();
}

namespace {

Status expect_floating(const ShapeContext& c, int i, const char* what) {
  if (!dtype_is_floating(c.input_dtype(i))) {
    return c.invalid("{} must be floating point, got {}", what, dtype_name(c.input_dtype(i)));
  }
  return Status();
}

Status expect_number(const ShapeContext& c, int i, const char* what) {
  if (c.input_dtype(i) == DType::Bool) return c.invalid("{} must be a number, got bool (cast it first)", what);
  return Status();
}

Status expect_same_dtype(const ShapeContext& c, int i, int j) {
  if (c.input_dtype(i) != c.input_dtype(j)) {
    return c.invalid("inputs {} and {} must have the same dtype, got {} and {}", i, j, dtype_name(c.input_dtype(i)),
                     dtype_name(c.input_dtype(j)));
  }
  return Status();
}

Status softmax_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_floating(c, 0, "logits"));
  const Status s = softmax_check(c.input_shape(0));
  if (!s.ok()) return c.invalid("{}", s.message());
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

// Outputs: loss [batch] and backprop [batch, classes].
Status add_xent_outputs(ShapeContext& c, const StatusOr<Shape>& backprop) {
  if (!backprop.ok()) return c.invalid("{}", backprop.status().message());
  c.add_output(c.input_dtype(1), Shape{backprop.value().dim(0)});
  c.add_output(c.input_dtype(1), backprop.value());
  return Status();
}

Status sparse_xent_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  if (c.input_dtype(0) != DType::Int32 && c.input_dtype(0) != DType::Int64) {
    return c.invalid("labels must be int32 or int64, got {}", dtype_name(c.input_dtype(0)));
  }
  TESSERA_RETURN_IF_ERROR(expect_floating(c, 1, "logits"));
  return add_xent_outputs(c, sparse_xent_shape(c.input_shape(0), c.input_shape(1)));
}

Status xent_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_floating(c, 1, "logits"));
  TESSERA_RETURN_IF_ERROR(expect_same_dtype(c, 0, 1));
  return add_xent_outputs(c, xent_shape(c.input_shape(0), c.input_shape(1)));
}

Status bias_add_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_number(c, 0, "value"));
  TESSERA_RETURN_IF_ERROR(expect_same_dtype(c, 0, 1));
  return add_shaped(c, c.input_dtype(0), bias_add_shape(c.input_shape(0), c.input_shape(1)));
}

Status bias_add_grad_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_number(c, 0, "dy"));
  return add_shaped(c, c.input_dtype(0), bias_add_grad_shape(c.input_shape(0)));
}

Status l2_loss_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_floating(c, 0, "x"));
  c.add_output(c.input_dtype(0), Shape{});
  return Status();
}

// Outputs: y and the mask, both of x's dtype and shape.
Status dropout_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_floating(c, 0, "x"));
  const Status s = keep_prob_check(c.attr<double>("keep_prob"));
  if (!s.ok()) return c.invalid("{}", s.message());
  c.add_output(c.input_dtype(0), c.input_shape(0));
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

// ReluGrad (numbers) and TanhGrad, SigmoidGrad, SqrtGrad (floating point): two inputs of one
// dtype and shape.
template <bool kFloating>
Status elementwise_grad_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(kFloating ? expect_floating(c, 0, "input 0") : expect_number(c, 0, "input 0"));
  TESSERA_RETURN_IF_ERROR(expect_same_dtype(c, 0, 1));
  return add_shaped(c, c.input_dtype(0), same_shape(c.input_shape(0), c.input_shape(1)));
}

// Inputs: dy, indices, params (read for its shape only).
Status gather_grad_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 3));
  if (c.input_dtype(1) != DType::Int32 && c.input_dtype(1) != DType::Int64) {
    return c.invalid("indices must be int32 or int64, got {}", dtype_name(c.input_dtype(1)));
  }
  TESSERA_RETURN_IF_ERROR(expect_number(c, 0, "dy"));
  TESSERA_RETURN_IF_ERROR(expect_same_dtype(c, 0, 2));
  const Status s = gather_grad_check(c.input_shape(0), c.input_shape(1), c.input_shape(2), c.attr<int64_t>("axis"));
  if (!s.ok()) return c.invalid("{}", s.message());
  c.add_output(c.input_dtype(2), c.input_shape(2));
  return Status();
}

TESSERA_REGISTER_OPS(softmax_fn, "Softmax", "LogSoftmax");
TESSERA_REGISTER_OP(OpDef{"SparseSoftmaxCrossEntropyWithLogits", sparse_xent_fn});
TESSERA_REGISTER_OP(OpDef{"SoftmaxCrossEntropyWithLogits", xent_fn});
TESSERA_REGISTER_OP(OpDef{"BiasAdd", bias_add_fn});
TESSERA_REGISTER_OP(OpDef{"BiasAddGrad", bias_add_grad_fn});
TESSERA_REGISTER_OP(OpDef{"L2Loss", l2_loss_fn});
// Random ops are stateful: each keeps its position in its random stream for the life of a session.
TESSERA_REGISTER_OP(OpDef{"Dropout", dropout_fn, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"TruncatedNormal", random_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"StopGradient", same_as_input_shape});
TESSERA_REGISTER_OP(OpDef{"ReluGrad", elementwise_grad_fn<false>});
TESSERA_REGISTER_OPS(elementwise_grad_fn<true>, "TanhGrad", "SigmoidGrad", "SqrtGrad");
TESSERA_REGISTER_OP(OpDef{"GatherGrad", gather_grad_fn});

// ---- Gradients ----

using Grads = std::vector<Output>;

// The gradient of softmax's output y for dy flowing into it: (dy - sum(dy * y)) * y along the
// last axis.
Output softmax_backward(Output y, Output dy) {
  return ops::mul(ops::sub(dy, ops::reduce_sum(ops::mul(dy, y), {-1}, /*keep_dims=*/true)), y);
}

// The cross entropies' gradient with respect to the logits: the loss's gradient times the
// backprop, plus, where a gradient flows into the backprop (a second derivative), that gradient
// through the softmax the backprop holds.
Output xent_logits_grad(const GradContext& c) {
  Output g = ops::mul(ops::expand_dims(c.grad(0), -1), c.output(1));
  if (c.has_grad(1)) g = ops::add(g, softmax_backward(ops::softmax(c.input(1)), c.grad(1)));
  return g;
}

TESSERA_REGISTER_GRADIENT("Softmax", [](const GradContext& c) -> Grads {
  return {softmax_backward(c.output(0), c.grad(0))};
});
TESSERA_REGISTER_GRADIENT("LogSoftmax", [](const GradContext& c) -> Grads {
  // dx = dy - exp(y) * sum(dy) along the last axis.
  const Output dy = c.grad(0);
  return {ops::sub(dy, ops::mul(ops::exp(c.output(0)), ops::reduce_sum(dy, {-1}, /*keep_dims=*/true)))};
});
TESSERA_REGISTER_GRADIENT("SparseSoftmaxCrossEntropyWithLogits", [](const GradContext& c) -> Grads {
  return {Output(), xent_logits_grad(c)};  // labels are indices
});
TESSERA_REGISTER_GRADIENT("SoftmaxCrossEntropyWithLogits", [](const GradContext& c) -> Grads {
  // d loss / d labels = -log_softmax(logits); d backprop / d labels = -1.
  Output labels = ops::mul(ops::expand_dims(c.grad(0), -1), ops::neg(ops::log_softmax(c.input(1))));
  if (c.has_grad(1)) labels = ops::sub(labels, c.grad(1));
  return {labels, xent_logits_grad(c)};
});
TESSERA_REGISTER_GRADIENT("BiasAdd", [](const GradContext& c) -> Grads {
  return {c.grad(0), bias_add_grad(c.grad(0))};
});
TESSERA_REGISTER_GRADIENT("L2Loss", [](const GradContext& c) -> Grads { return {ops::mul(c.input(0), c.grad(0))}; });
TESSERA_REGISTER_GRADIENT("Dropout", [](const GradContext& c) -> Grads { return {ops::mul(c.grad(0), c.output(1))}; });
TESSERA_REGISTER_GRADIENT("Relu", [](const GradContext& c) -> Grads { return {relu_grad(c.grad(0), c.output(0))}; });
TESSERA_REGISTER_GRADIENT("Tanh", [](const GradContext& c) -> Grads { return {tanh_grad(c.output(0), c.grad(0))}; });
TESSERA_REGISTER_GRADIENT("Sigmoid", [](const GradContext& c) -> Grads {
  return {sigmoid_grad(c.output(0), c.grad(0))};
});
TESSERA_REGISTER_GRADIENT("Sqrt", [](const GradContext& c) -> Grads { return {sqrt_grad(c.output(0), c.grad(0))}; });
TESSERA_REGISTER_GRADIENT("GatherV2", [](const GradContext& c) -> Grads {
  return {gather_grad(c.grad(0), c.input(1), c.input(0), c.node().attr<int64_t>("axis")), Output()};
});
TESSERA_NOT_DIFFERENTIABLE("StopGradient");
TESSERA_NOT_DIFFERENTIABLE("TruncatedNormal");

}  // namespace

Output relu_grad(Output gradients, Output features, std::string name) {
  return add_op("relu_grad", NodeSpec{"ReluGrad", std::move(name)}, {gradients, features});
}
Output tanh_grad(Output y, Output dy, std::string name) {
  return add_op("tanh_grad", NodeSpec{"TanhGrad", std::move(name)}, {y, dy});
}
Output sigmoid_grad(Output y, Output dy, std::string name) {
  return add_op("sigmoid_grad", NodeSpec{"SigmoidGrad", std::move(name)}, {y, dy});
}
Output sqrt_grad(Output y, Output dy, std::string name) {
  return add_op("sqrt_grad", NodeSpec{"SqrtGrad", std::move(name)}, {y, dy});
}
Output gather_grad(Output dy, Output indices, Output params, int64_t axis, std::string name) {
  NodeSpec spec{"GatherGrad", std::move(name)};
  spec.attrs["axis"] = axis;
  return add_op("gather_grad", std::move(spec), {dy, indices, params});
}
Output bias_add_grad(Output dy, std::string name) {
  return add_op("bias_add_grad", NodeSpec{"BiasAddGrad", std::move(name)}, {dy});
}

}  // namespace internal

namespace ops {

Output softmax(Output logits, std::string name) {
  return add_op("softmax", NodeSpec{"Softmax", std::move(name)}, {logits});
}
Output log_softmax(Output logits, std::string name) {
  return add_op("log_softmax", NodeSpec{"LogSoftmax", std::move(name)}, {logits});
}

Output sparse_softmax_cross_entropy_with_logits(Output labels, Output logits, std::string name) {
  return add_op("sparse_softmax_cross_entropy_with_logits",
                NodeSpec{"SparseSoftmaxCrossEntropyWithLogits", std::move(name)}, {labels, logits});
}
Output softmax_cross_entropy_with_logits(Output labels, Output logits, std::string name) {
  return add_op("softmax_cross_entropy_with_logits", NodeSpec{"SoftmaxCrossEntropyWithLogits", std::move(name)},
                {labels, logits});
}

Output bias_add(Output value, Output bias, std::string name) {
  return add_op("bias_add", NodeSpec{"BiasAdd", std::move(name)}, {value, bias});
}

Output l2_loss(Output x, std::string name) { return add_op("l2_loss", NodeSpec{"L2Loss", std::move(name)}, {x}); }

Output dropout(Output x, float keep_prob, uint64_t seed, std::string name) {
  NodeSpec spec{"Dropout", std::move(name)};
  spec.attrs["keep_prob"] = static_cast<double>(keep_prob);
  spec.attrs["seed"] = static_cast<int64_t>(seed);  // attrs hold int64_t; the bits are kept
  return add_op("dropout", std::move(spec), {x});
}

Output truncated_normal(Graph& g, Shape shape, DType dtype, uint64_t seed, std::string name) {
  NodeSpec spec{"TruncatedNormal", std::move(name)};
  spec.attrs["shape"] = std::move(shape);
  spec.attrs["dtype"] = dtype;
  spec.attrs["seed"] = static_cast<int64_t>(seed);
  return Output(g.impl().add_node(std::move(spec)), 0);
}

Output stop_gradient(Output x, std::string name) {
  return add_op("stop_gradient", NodeSpec{"StopGradient", std::move(name)}, {x});
}

}  // namespace ops
}  // namespace tessera
