// Gradient functions of the math ops (core/math_ops.cc), the graph's basic ops and the variable
// ops, as TensorFlow's math_grad.py and array_grad.py define them. Relu, Tanh, Sigmoid and Sqrt
// have theirs beside their gradient kernels (core/nn_ops.cc).
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/broadcast.h"
#include "core/gradients.h"

namespace tessera::internal {
namespace {

using Grads = std::vector<Output>;

// ---- Elementwise binary ops (NumPy broadcasting: each side's gradient summed to its shape) ----

Grads both_reduced(const GradContext& c, Output gx, Output gy) {
  return {reduce_to_shape_of(gx, c.input(0)), reduce_to_shape_of(gy, c.input(1))};
}

TESSERA_REGISTER_GRADIENT("Add", [](const GradContext& c) { return both_reduced(c, c.grad(0), c.grad(0)); });
TESSERA_REGISTER_GRADIENT("Sub", [](const GradContext& c) { return both_reduced(c, c.grad(0), ops::neg(c.grad(0))); });
TESSERA_REGISTER_GRADIENT("Mul", [](const GradContext& c) {
  return both_reduced(c, ops::mul(c.grad(0), c.input(1)), ops::mul(c.input(0), c.grad(0)));
});
TESSERA_REGISTER_GRADIENT("Div", [](const GradContext& c) {
  const Output x = c.input(0);
  const Output y = c.input(1);
  // d(x/y)/dy = -x / y^2, computed as (-x / y) / y as TensorFlow does (no overflow of y^2).
  return both_reduced(c, ops::div(c.grad(0), y), ops::mul(c.grad(0), ops::div(ops::div(ops::neg(x), y), y)));
});

// The gradient goes to x where `x_wins` (ties to x, as TensorFlow), else to y.
Grads select_grad(const GradContext& c, Output x_wins) {
  const Output g = c.grad(0);
  const Output zeros = ops::zeros_like(g);
  return both_reduced(c, ops::where(x_wins, g, zeros), ops::where(x_wins, zeros, g));
}
TESSERA_REGISTER_GRADIENT("Maximum", [](const GradContext& c) {
  return select_grad(c, ops::greater_equal(c.input(0), c.input(1)));
});
TESSERA_REGISTER_GRADIENT("Minimum", [](const GradContext& c) {
  return select_grad(c, ops::less_equal(c.input(0), c.input(1)));
});
TESSERA_REGISTER_GRADIENT("Pow", [](const GradContext& c) {
  const Output x = c.input(0);
  const Output y = c.input(1);
  const Output g = c.grad(0);
  const Output gx = ops::mul(g, ops::mul(y, ops::pow(x, ops::sub(y, constant_like(y, 1.0)))));
  // d(x^y)/dy = x^y log(x), taken as 0 where x <= 0 (TensorFlow's mask: no false singularity at 0).
  const Output positive = ops::greater(x, ops::zeros_like(x));
  const Output log_x = ops::where(positive, ops::log(ops::where(positive, x, ops::ones_like(x))), ops::zeros_like(x));
  return both_reduced(c, gx, ops::mul(g, ops::mul(c.output(0), log_x)));
});

// ---- Elementwise unary ops ----

TESSERA_REGISTER_GRADIENT("Neg", [](const GradContext& c) -> Grads { return {ops::neg(c.grad(0))}; });
TESSERA_REGISTER_GRADIENT("Square", [](const GradContext& c) -> Grads {
  return {ops::mul(c.grad(0), ops::mul(c.input(0), constant_like(c.input(0), 2.0)))};
});
TESSERA_REGISTER_GRADIENT("Exp", [](const GradContext& c) -> Grads { return {ops::mul(c.grad(0), c.output(0))}; });
TESSERA_REGISTER_GRADIENT("Log", [](const GradContext& c) -> Grads { return {ops::div(c.grad(0), c.input(0))}; });
TESSERA_REGISTER_GRADIENT("Sin", [](const GradContext& c) -> Grads { return {ops::mul(c.grad(0), ops::cos(c.input(0)))}; });
TESSERA_REGISTER_GRADIENT("Cos", [](const GradContext& c) -> Grads {
  return {ops::neg(ops::mul(c.grad(0), ops::sin(c.input(0))))};
});
TESSERA_REGISTER_GRADIENT("Abs", [](const GradContext& c) -> Grads { return {ops::mul(c.grad(0), ops::sign(c.input(0)))}; });
TESSERA_REGISTER_GRADIENT("Sign", [](const GradContext& c) -> Grads { return {ops::zeros_like(c.input(0))}; });
TESSERA_REGISTER_GRADIENT("Relu6", [](const GradContext& c) -> Grads {
  const Output x = c.input(0);
  const Output inside = ops::logical_and(ops::greater(x, ops::zeros_like(x)), ops::less(x, constant_like(x, 6.0)));
  return {ops::where(inside, c.grad(0), ops::zeros_like(c.grad(0)))};
});
// d(x^-1/2)/dx = -y^3 / 2 and d(1/x)/dx = -y^2, from the output y as TensorFlow's RsqrtGrad and
// ReciprocalGrad compute them.
TESSERA_REGISTER_GRADIENT("Rsqrt", [](const GradContext& c) -> Grads {
  const Output y = c.output(0);
  return {ops::mul(c.grad(0), ops::mul(constant_like(y, -0.5), ops::mul(y, ops::square(y))))};
});
TESSERA_REGISTER_GRADIENT("Reciprocal", [](const GradContext& c) -> Grads {
  return {ops::neg(ops::mul(c.grad(0), ops::square(c.output(0))))};
});
TESSERA_REGISTER_GRADIENT("Softplus", [](const GradContext& c) -> Grads {
  return {ops::mul(c.grad(0), ops::sigmoid(c.input(0)))};
});
// g where the output is >= 0, else g * (y + 1) = g * exp(x) (TensorFlow's EluGrad).
TESSERA_REGISTER_GRADIENT("Elu", [](const GradContext& c) -> Grads {
  const Output y = c.output(0);
  const Output g = c.grad(0);
  return {ops::where(ops::less(y, ops::zeros_like(y)), ops::mul(g, ops::add(y, constant_like(y, 1.0))), g)};
});
TESSERA_REGISTER_GRADIENT("Identity", [](const GradContext& c) -> Grads { return {c.grad(0)}; });
TESSERA_REGISTER_GRADIENT("Cast", [](const GradContext& c) -> Grads {
  const DType from = c.input(0).dtype();
  if (!dtype_is_floating(from) || !dtype_is_floating(c.output(0).dtype())) return {Output()};
  return {ops::cast(c.grad(0), from)};
});
TESSERA_REGISTER_GRADIENT("AddN", [](const GradContext& c) { return Grads(c.num_inputs(), c.grad(0)); });

// ---- MatMul ----

TESSERA_REGISTER_GRADIENT("MatMul", [](const GradContext& c) -> Grads {
  const bool ta = c.node().attr<bool>("transpose_a");
  const bool tb = c.node().attr<bool>("transpose_b");
  const Output a = c.input(0);
  const Output b = c.input(1);
  const Output g = c.grad(0);
  if (!ta && !tb) return {ops::matmul(g, b, false, true), ops::matmul(a, g, true, false)};
  if (!ta && tb) return {ops::matmul(g, b), ops::matmul(g, a, true, false)};
  if (ta && !tb) return {ops::matmul(b, g, false, true), ops::matmul(a, g)};
  return {ops::matmul(b, g, true, true), ops::matmul(g, a, true, true)};
});

// ---- Reductions ----

// `y` (shaped like the reduction's output) with size-1 dims where the reduction removed dims, so
// that it broadcasts against the input.
Output with_reduced_dims_kept(const GradContext& c, Output y) {
  const auto& axes = c.node().attr<std::vector<int64_t>>("axes");
  if (c.node().attr<bool>("keep_dims") || axes.empty()) return y;  // already so, or a scalar
  const Shape in = c.input(0).shape();
  if (in.unknown_rank()) {
    throw InvalidArgumentError(fmt::format(
        "gradients: the gradient of {} over axes needs its input's rank known when the graph is built",
        c.node().debug_name()));
  }
  std::vector<int64_t> sorted;
  for (int64_t a : axes) sorted.push_back(a < 0 ? a + in.rank() : a);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t a : sorted) y = ops::expand_dims(y, static_cast<int>(a));
  return y;
}

// The reduction's gradient spread over every input element it summed.
Output spread(const GradContext& c) {
  return ops::add(ops::zeros_like(c.input(0)), with_reduced_dims_kept(c, c.grad(0)));
}

TESSERA_REGISTER_GRADIENT("Sum", [](const GradContext& c) -> Grads { return {spread(c)}; });
TESSERA_REGISTER_GRADIENT("Mean", [](const GradContext& c) -> Grads {
  const Output x = c.input(0);
  const Output y = c.output(0);
  Output count;
  if (x.shape().fully_defined() && y.shape().fully_defined()) {
    const int64_t n = x.shape().num_elements() / std::max<int64_t>(y.shape().num_elements(), 1);
    count = constant_like(x, static_cast<double>(n));
  } else {
    Graph& g = c.graph();
    const Output n = ops::div(ops::size(x), ops::maximum(ops::size(y), ops::constant(g, int32_t{1})));
    count = ops::cast(n, x.dtype());
  }
  return {ops::div(spread(c), count)};
});
// Shared equally among the elements equal to the extremum, as TensorFlow does.
Grads extremum_grad(const GradContext& c) {
  const Output x = c.input(0);
  const Output hit = ops::cast(ops::equal(x, with_reduced_dims_kept(c, c.output(0))), x.dtype());
  const auto& axes = c.node().attr<std::vector<int64_t>>("axes");
  const Output count = ops::reduce_sum(hit, std::vector<int>(axes.begin(), axes.end()), /*keep_dims=*/true);
  return {ops::div(ops::mul(hit, with_reduced_dims_kept(c, c.grad(0))), count)};
}
TESSERA_REGISTER_GRADIENT("Max", extremum_grad);
TESSERA_REGISTER_GRADIENT("Min", extremum_grad);

// For each element of `t`, the product of the other elements of its line along `axis`: the
// exclusive products from the front and from the back, multiplied. No division, so zeros are exact.
Output product_of_others(Output t, int axis) {
  return ops::mul(ops::cumprod(t, axis, /*exclusive=*/true),
                  ops::cumprod(t, axis, /*exclusive=*/true, /*reverse=*/true));
}

[[noreturn]] void prod_grad_needs(const GradContext& c, const char* what) {
  throw InvalidArgumentError(
      fmt::format("gradients: the gradient of {} over several axes needs {} when the graph is built",
                  c.node().debug_name(), what));
}

// Each element's product_of_others over the elements it was multiplied with (TF's _ProdGrad). One
// axis is scanned in place; all axes as one flat line; several (rank known) are moved to the
// front and merged into one, which needs the merged dims or the others known to reshape.
Output prod_of_others_in_reduction(const GradContext& c) {
  const Output x = c.input(0);
  const auto& axes = c.node().attr<std::vector<int64_t>>("axes");
  const Shape in = x.shape();
  if (axes.size() == 1) return product_of_others(x, static_cast<int>(axes[0]));
  auto flat = [&] { return reshape_to_shape_of(product_of_others(ops::reshape(x, {-1}), 0), x); };
  if (axes.empty()) return flat();
  if (in.unknown_rank()) prod_grad_needs(c, "its input's rank known");
  auto mask = reduction_mask(axes, in.rank());
  mask.status().raise();  // the forward op's shape function has accepted the axes
  std::vector<int> perm;
  std::vector<int> others;
  int64_t reduced_num = 1;
  int64_t other_num = 1;
  for (int d = 0; d < in.rank(); ++d) {
    const bool reduced = mask.value()[static_cast<std::size_t>(d)];
    (reduced ? perm : others).push_back(d);
    int64_t& num = reduced ? reduced_num : other_num;
    num = in.dim(d) < 0 || num < 0 ? -1 : num * in.dim(d);
  }
  if (others.empty()) return flat();
  if (reduced_num == 0 || other_num == 0) return ops::zeros_like(x);  // no elements: nothing to compute
  if (reduced_num < 0 && other_num < 0) prod_grad_needs(c, "the reduced dims or the others known");
  perm.insert(perm.end(), others.begin(), others.end());
  const bool in_front = std::is_sorted(perm.begin(), perm.end());  // the reduced dims lead already
  const Output moved = in_front ? x : ops::transpose(x, perm);
  // [reduced, others], one -1 inferred when the op runs where a side is not known yet.
  const Output lines = ops::reshape(moved, {reduced_num, reduced_num < 0 ? other_num : -1});
  const Output y = reshape_to_shape_of(product_of_others(lines, 0), moved);
  if (in_front) return y;
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return ops::transpose(y, inverse);
}

TESSERA_REGISTER_GRADIENT("Prod", [](const GradContext& c) -> Grads {
  return {ops::mul(spread(c), prod_of_others_in_reduction(c))};
});

// The gradient sums of SumToShapeOf and ReshapeToShapeOf (second-order gradients).
TESSERA_REGISTER_GRADIENT("SumToShapeOf", [](const GradContext& c) -> Grads {
  return {ops::add(ops::zeros_like(c.input(0)), c.grad(0)), Output()};
});
TESSERA_REGISTER_GRADIENT("ReshapeToShapeOf", [](const GradContext& c) -> Grads {
  return {reshape_to_shape_of(c.grad(0), c.input(0)), Output()};
});

// ---- Ops no gradient passes through ----

TESSERA_NOT_DIFFERENTIABLE("Const");
TESSERA_NOT_DIFFERENTIABLE("Floor");  // TensorFlow's _FloorGrad returns None
TESSERA_NOT_DIFFERENTIABLE("Placeholder");
TESSERA_NOT_DIFFERENTIABLE("NoOp");
TESSERA_NOT_DIFFERENTIABLE("RandomUniform");
TESSERA_NOT_DIFFERENTIABLE("RandomNormal");
TESSERA_NOT_DIFFERENTIABLE("VariableV2");
TESSERA_NOT_DIFFERENTIABLE("_ReadVariable");
TESSERA_NOT_DIFFERENTIABLE("Assign");
TESSERA_NOT_DIFFERENTIABLE("AssignAdd");
TESSERA_NOT_DIFFERENTIABLE("AssignSub");

}  // namespace
}  // namespace tessera::internal
