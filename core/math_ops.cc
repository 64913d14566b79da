// Op definitions and constructors for math: elementwise ops (NumPy broadcasting, core/broadcast.h),
// MatMul, reductions, Cast and the random ops. Shapes and dtypes are inferred here, when the graph
// is built; what a partial shape leaves open is checked by the kernels (kernels/*_ops.cc).
#include <cstdint>
#include <string>
#include <vector>

#include "core/broadcast.h"
#include "core/common_shape_fns.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

// Arithmetic is defined on numbers only: a bool tensor has to be cast first, as in TensorFlow; a
// string tensor cannot be.
Status expect_number(const ShapeContext& c, DType dtype) {
  if (dtype == DType::Bool) return c.invalid("bool tensors are not supported (cast them first)");
  if (dtype == DType::String) return c.invalid("string tensors are not supported (arithmetic needs numbers)");
  return Status();
}

// Both inputs of a binary op share one dtype: there is no implicit promotion, as in TensorFlow.
Status expect_same_dtypes(const ShapeContext& c) {
  if (c.input_dtype(0) != c.input_dtype(1)) {
    return c.invalid("inputs must have the same dtype, got {} and {}", dtype_name(c.input_dtype(0)),
                     dtype_name(c.input_dtype(1)));
  }
  return expect_number(c, c.input_dtype(0));
}

Status binary_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_same_dtypes(c));
  auto out = broadcast_shapes(c.input_shape(0), c.input_shape(1));
  if (!out.ok()) return c.invalid("{}", out.status().message());
  c.add_output(c.input_dtype(0), out.value());
  return Status();
}

Status unary_shape(ShapeContext& c, bool floating_only) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const DType dtype = c.input_dtype(0);
  if (floating_only && !dtype_is_floating(dtype)) {
    return c.invalid("needs a floating point input, got {}", dtype_name(dtype));
  }
  TESSERA_RETURN_IF_ERROR(expect_number(c, dtype));
  c.add_output(dtype, c.input_shape(0));
  return Status();
}
Status numeric_unary_shape(ShapeContext& c) { return unary_shape(c, false); }
Status floating_unary_shape(ShapeContext& c) { return unary_shape(c, true); }

Status matmul_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_same_dtypes(c));
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  if (!a.unknown_rank() && a.rank() != 2) {
    return c.invalid("a must be a matrix, got shape {}", a.to_string());
  }
  if (!b.unknown_rank() && b.rank() != 2) {
    return c.invalid("b must be a matrix, got shape {}", b.to_string());
  }
  const bool ta = c.attr<bool>("transpose_a");
  const bool tb = c.attr<bool>("transpose_b");
  // Dims of op(a) = [m, k] and op(b) = [k, n]; -1 where unknown.
  auto dim = [](const Shape& s, int i) { return s.unknown_rank() ? int64_t{-1} : s.dim(i); };
  const int64_t m = dim(a, ta ? 1 : 0);
  const int64_t ka = dim(a, ta ? 0 : 1);
  const int64_t kb = dim(b, tb ? 1 : 0);
  const int64_t n = dim(b, tb ? 0 : 1);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c.invalid(
        "inner dimensions differ: incompatible shapes {} and {} (transpose_a={}, transpose_b={})",
        a.to_string(), b.to_string(), ta, tb);
  }
  c.add_output(c.input_dtype(0), Shape{m, n});
  return Status();
}

Status reduction_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const DType dtype = c.input_dtype(0);
  TESSERA_RETURN_IF_ERROR(expect_number(c, dtype));
  const auto& axes = c.attr<std::vector<int64_t>>("axes");
  const bool keep_dims = c.attr<bool>("keep_dims");
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    // Reducing everything away leaves a scalar whatever the rank was.
    c.add_output(dtype, axes.empty() && !keep_dims ? Shape{} : Shape::unknown());
    return Status();
  }
  auto mask = reduction_mask(axes, in.rank());
  if (!mask.ok()) return c.invalid("{} (input shape {})", mask.status().message(), in.to_string());
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!mask.value()[i]) {
      out.append(in.dim(i));
    } else if (keep_dims) {
      out.append(1);
    }
  }
  c.add_output(dtype, out);
  return Status();
}

Status cast_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  // As TensorFlow's Cast: strings are parsed (decode_csv) rather than cast.
  if (c.input_dtype(0) == DType::String || c.attr<DType>("dtype") == DType::String) {
    return c.invalid("cannot cast {} to {}: string tensors are not cast", dtype_name(c.input_dtype(0)),
                     dtype_name(c.attr<DType>("dtype")));
  }
  c.add_output(c.attr<DType>("dtype"), c.input_shape(0));
  return Status();
}

TESSERA_REGISTER_OPS(binary_shape, "Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow");
TESSERA_REGISTER_OPS(numeric_unary_shape, "Neg", "Relu", "Square", "Abs", "Sign", "Relu6");
TESSERA_REGISTER_OPS(floating_unary_shape, "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Floor", "Sin", "Cos", "Rsqrt",
                     "Reciprocal", "Softplus", "Elu");
TESSERA_REGISTER_OP(OpDef{"MatMul", matmul_shape});
TESSERA_REGISTER_OPS(reduction_shape, "Sum", "Mean", "Max", "Min", "Prod");
TESSERA_REGISTER_OP(OpDef{"Cast", cast_shape});
// Random ops are stateful: each keeps its position in its random stream for the life of a session,
// so they must never be deduplicated or constant-folded.
TESSERA_REGISTER_OP(OpDef{"RandomUniform", random_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"RandomNormal", random_shape, /*stateful=*/true});
TESSERA_REGISTER_OP(OpDef{"RandomShuffle", same_as_input_shape, /*stateful=*/true});

}  // namespace
}  // namespace internal

namespace ops {

namespace {

Output unary(const char* what, const char* type, Output x, std::string name) {
  return add_op(what, NodeSpec{type, std::move(name)}, {x});
}

Output reduction(const char* what, const char* type, Output x, const std::vector<int>& axes,
                 bool keep_dims, std::string name) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs["axes"] = std::vector<int64_t>(axes.begin(), axes.end());
  spec.attrs["keep_dims"] = keep_dims;
  return add_op(what, std::move(spec), {x});
}

NodeSpec random_spec(const char* type, const Shape& shape, DType dtype, uint64_t seed,
                     std::string name) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs["shape"] = shape;
  spec.attrs["dtype"] = dtype;
  spec.attrs["seed"] = static_cast<int64_t>(seed);  // attrs hold int64_t; the bits are kept
  return spec;
}

}  // namespace

Output add(Output a, Output b, std::string name) {
  return add_binary_op("add", "Add", a, b, std::move(name));
}
Output sub(Output a, Output b, std::string name) {
  return add_binary_op("sub", "Sub", a, b, std::move(name));
}
Output mul(Output a, Output b, std::string name) {
  return add_binary_op("mul", "Mul", a, b, std::move(name));
}
Output div(Output a, Output b, std::string name) {
  return add_binary_op("div", "Div", a, b, std::move(name));
}
Output maximum(Output a, Output b, std::string name) {
  return add_binary_op("maximum", "Maximum", a, b, std::move(name));
}
Output minimum(Output a, Output b, std::string name) {
  return add_binary_op("minimum", "Minimum", a, b, std::move(name));
}
Output pow(Output x, Output y, std::string name) { return add_binary_op("pow", "Pow", x, y, std::move(name)); }

Output neg(Output x, std::string name) { return unary("neg", "Neg", x, std::move(name)); }
Output relu(Output x, std::string name) { return unary("relu", "Relu", x, std::move(name)); }
Output exp(Output x, std::string name) { return unary("exp", "Exp", x, std::move(name)); }
Output log(Output x, std::string name) { return unary("log", "Log", x, std::move(name)); }
Output sqrt(Output x, std::string name) { return unary("sqrt", "Sqrt", x, std::move(name)); }
Output tanh(Output x, std::string name) { return unary("tanh", "Tanh", x, std::move(name)); }
Output sigmoid(Output x, std::string name) {
  return unary("sigmoid", "Sigmoid", x, std::move(name));
}
Output square(Output x, std::string name) { return unary("square", "Square", x, std::move(name)); }
Output floor(Output x, std::string name) { return unary("floor", "Floor", x, std::move(name)); }
Output sin(Output x, std::string name) { return unary("sin", "Sin", x, std::move(name)); }
Output cos(Output x, std::string name) { return unary("cos", "Cos", x, std::move(name)); }
Output abs(Output x, std::string name) { return unary("abs", "Abs", x, std::move(name)); }
Output sign(Output x, std::string name) { return unary("sign", "Sign", x, std::move(name)); }
Output rsqrt(Output x, std::string name) { return unary("rsqrt", "Rsqrt", x, std::move(name)); }
Output reciprocal(Output x, std::string name) { return unary("reciprocal", "Reciprocal", x, std::move(name)); }
Output softplus(Output x, std::string name) { return unary("softplus", "Softplus", x, std::move(name)); }
Output elu(Output x, std::string name) { return unary("elu", "Elu", x, std::move(name)); }
Output relu6(Output x, std::string name) { return unary("relu6", "Relu6", x, std::move(name)); }

Output matmul(Output a, Output b, bool transpose_a, bool transpose_b, std::string name) {
  NodeSpec spec{"MatMul", std::move(name)};
  spec.attrs["transpose_a"] = transpose_a;
  spec.attrs["transpose_b"] = transpose_b;
  return add_op("matmul", std::move(spec), {a, b});
}

Output reduce_sum(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  return reduction("reduce_sum", "Sum", x, axes, keep_dims, std::move(name));
}
Output reduce_mean(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  return reduction("reduce_mean", "Mean", x, axes, keep_dims, std::move(name));
}
Output reduce_max(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  return reduction("reduce_max", "Max", x, axes, keep_dims, std::move(name));
}
Output reduce_min(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  return reduction("reduce_min", "Min", x, axes, keep_dims, std::move(name));
}
Output reduce_prod(Output x, std::vector<int> axes, bool keep_dims, std::string name) {
  return reduction("reduce_prod", "Prod", x, axes, keep_dims, std::move(name));
}

Output cast(Output x, DType dtype, std::string name) {
  NodeSpec spec{"Cast", std::move(name)};
  spec.attrs["dtype"] = dtype;
  return add_op("cast", std::move(spec), {x});
}

Output random_uniform(Graph& g, Shape shape, DType dtype, uint64_t seed, std::string name) {
  NodeSpec spec = random_spec("RandomUniform", shape, dtype, seed, std::move(name));
  return Output(g.impl().add_node(std::move(spec)), 0);
}

Output random_normal(Graph& g, Shape shape, DType dtype, uint64_t seed, float mean, float stddev,
                     std::string name) {
  NodeSpec spec = random_spec("RandomNormal", shape, dtype, seed, std::move(name));
  spec.attrs["mean"] = static_cast<double>(mean);
  spec.attrs["stddev"] = static_cast<double>(stddev);
  return Output(g.impl().add_node(std::move(spec)), 0);
}

Output random_shuffle(Output x, uint64_t seed, std::string name) {
  NodeSpec spec{"RandomShuffle", std::move(name)};
  spec.attrs["seed"] = static_cast<int64_t>(seed);
  return add_op("random_shuffle", std::move(spec), {x});
}

}  // namespace ops
}  // namespace tessera
