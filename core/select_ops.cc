// Op definitions and constructors for the comparisons (Equal, NotEqual, Less, LessEqual, Greater,
// GreaterEqual), the logical ops (LogicalAnd, LogicalOr, LogicalNot), SelectV2 (where), GatherV2,
// OneHot, ArgMax, ArgMin and AddN. Shapes and dtypes are inferred here, when the graph is built,
// with the arithmetic of core/select_ops.h that the kernels repeat on concrete shapes (what a
// partial shape leaves open, and the values of indices, are checked there). Each op keeps its
// arguments as attrs (axis, depth, on_value, off_value), as TensorFlow's gradient functions read them.
#include "core/select_ops.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/broadcast.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "core/shape_ops.h"
#include "core/shape_util.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {

StatusOr<Shape> gather_shape(const Shape& params, const Shape& indices, int64_t axis) {
  if (params.unknown_rank()) return Shape::unknown();
  if (params.rank() == 0) return errors::invalid_argument("params must be at least a vector, got shape []");
  auto a = resolve_axis(axis, params.rank(), "params of shape " + params.to_string());
  if (!a.ok()) return a.status();
  if (indices.unknown_rank()) return Shape::unknown();
  std::vector<int64_t> dims;
  for (int d = 0; d < a.value(); ++d) dims.push_back(params.dim(d));
  for (int d = 0; d < indices.rank(); ++d) dims.push_back(indices.dim(d));
  for (int d = a.value() + 1; d < params.rank(); ++d) dims.push_back(params.dim(d));
  return checked_shape(dims);
}

Status index_out_of_range(int64_t i, int64_t v, int64_t limit) {
  return errors::invalid_argument("indices[{}] = {} is not in [0, {})", i, v, limit);
}

Status check_indices(const Tensor& indices, int64_t m, int64_t limit) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = index_at(indices, i);
    if (v < 0 || v >= limit) return index_out_of_range(i, v, limit);
  }
  return Status();
}

StatusOr<GatherGeometry> gather_geometry(const Tensor& params, const Tensor& indices, int64_t axis) {
  if (indices.dtype() != DType::Int32 && indices.dtype() != DType::Int64) {
    return errors::invalid_argument("indices must be int32 or int64, got {}", dtype_name(indices.dtype()));
  }
  auto shape = gather_shape(params.shape(), indices.shape(), axis);
  if (!shape.ok()) return shape.status();
  GatherGeometry g;
  g.out = std::move(shape).value();
  const int a = static_cast<int>(axis < 0 ? axis + params.shape().rank() : axis);
  for (int d = 0; d < a; ++d) g.outer *= params.shape().dim(d);
  for (int d = a + 1; d < params.shape().rank(); ++d) g.inner *= params.shape().dim(d);
  g.limit = params.shape().dim(a);
  g.m = indices.num_elements();
  return g;
}

StatusOr<Shape> arg_reduce_shape(const Shape& in, int64_t axis) {
  if (in.unknown_rank()) return Shape::unknown();
  if (in.rank() == 0) return errors::invalid_argument("the input must be at least a vector, got shape []");
  auto a = resolve_axis(axis, in.rank(), "an input of shape " + in.to_string());
  if (!a.ok()) return a.status();
  if (in.dim(a.value()) == 0) {
    return errors::invalid_argument("reduction axis {} is empty in shape {}", a.value(), in.to_string());
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < in.rank(); ++d) {
    if (d != a.value()) dims.push_back(in.dim(d));
  }
  return checked_shape(dims);
}

StatusOr<ArgReduceGeometry> arg_reduce_geometry(const Shape& in, int64_t axis) {
  auto shape = arg_reduce_shape(in, axis);
  if (!shape.ok()) return shape.status();
  ArgReduceGeometry g;
  g.out = std::move(shape).value();
  const int a = static_cast<int>(axis < 0 ? axis + in.rank() : axis);
  for (int d = 0; d < a; ++d) g.outer *= in.dim(d);
  for (int d = a + 1; d < in.rank(); ++d) g.inner *= in.dim(d);
  g.n = in.dim(a);
  return g;
}

StatusOr<Shape> one_hot_shape(const Shape& indices, int64_t depth) {
  if (depth < 0) return errors::invalid_argument("depth must be non-negative, got {}", depth);
  if (indices.unknown_rank()) return Shape::unknown();
  std::vector<int64_t> dims = indices.dims();
  dims.push_back(depth);
  return checked_shape(dims);
}

StatusOr<Shape> one_hot_output_shape(const Tensor& indices, int64_t depth) {
  if (indices.dtype() != DType::Int32 && indices.dtype() != DType::Int64) {
    return errors::invalid_argument("indices must be int32 or int64, got {}", dtype_name(indices.dtype()));
  }
  return one_hot_shape(indices.shape(), depth);
}

Status add_n_input_check(const Tensor& first, const Tensor& input, int k) {
  if (input.dtype() != first.dtype() || input.shape() != first.shape()) {
    return errors::invalid_argument("inputs must have one shape and dtype: input 0 is {} {}, input {} is {} {}",
                                    dtype_name(first.dtype()), first.shape().to_string(), k,
                                    dtype_name(input.dtype()), input.shape().to_string());
  }
  return Status();
}

StatusOr<Broadcast3> Broadcast3::make(const Shape& a, const Shape& b, const Shape& c) {
  auto ab = broadcast_shapes(a, b);
  if (!ab.ok()) return ab.status();
  auto out = broadcast_shapes(ab.value(), c);
  if (!out.ok()) {
    return errors::invalid_argument("incompatible shapes {}, {} and {}", a.to_string(), b.to_string(), c.to_string());
  }
  Broadcast3 r;
  r.out = out.value();
  const Shape* in[3] = {&a, &b, &c};
  const int rank = r.out.rank();
  std::array<std::array<int64_t, Shape::kMaxRank>, 3> full{};
  for (int k = 0; k < 3; ++k) {
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int dk = d - (rank - in[k]->rank());
      const int64_t dim = dk >= 0 ? in[k]->dim(dk) : 1;
      full[k][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  for (int d = 0; d < rank; ++d) {
    const int64_t n = r.out.dim(d);
    if (n == 1) continue;
    if (r.rank > 0) {  // merge into the previous dim when every input walks the two as one
      const int p = r.rank - 1;
      bool merge = true;
      for (int k = 0; k < 3; ++k) merge = merge && r.strides[k][p] == full[k][d] * n;
      if (merge) {
        r.dims[p] *= n;
        for (int k = 0; k < 3; ++k) r.strides[k][p] = full[k][d];
        continue;
      }
    }
    r.dims[r.rank] = n;
    for (int k = 0; k < 3; ++k) r.strides[k][r.rank] = full[k][d];
    ++r.rank;
  }
  return r;
}

StatusOr<Broadcast3> Broadcast3::compare(const Tensor& a, const Tensor& b, bool ordering, bool logical) {
  TESSERA_RETURN_IF_ERROR(check_same_dtype(a, b));
  auto plan = make(a.shape(), b.shape(), Shape{});
  if (!plan.ok()) return plan.status();
  const bool unordered = a.dtype() == DType::Bool || a.dtype() == DType::String;
  const bool ok_dtype = logical ? a.dtype() == DType::Bool : !(ordering && unordered);
  if (!ok_dtype) return errors::invalid_argument("unsupported dtype {}", dtype_name(a.dtype()));
  return plan;
}

StatusOr<Broadcast3> Broadcast3::select(const Tensor& cond, const Tensor& x, const Tensor& y) {
  if (cond.dtype() != DType::Bool || x.dtype() != y.dtype()) {
    return errors::invalid_argument("cond must be bool and x, y of one dtype, got {}, {} and {}",
                                    dtype_name(cond.dtype()), dtype_name(x.dtype()), dtype_name(y.dtype()));
  }
  auto plan = make(cond.shape(), x.shape(), y.shape());
  if (!plan.ok()) {
    return errors::invalid_argument("incompatible shapes {}, {} and {}", cond.shape().to_string(),
                                    x.shape().to_string(), y.shape().to_string());
  }
  return plan;
}

namespace {

Status expect_index_dtype(const ShapeContext& c, int i, const char* what) {
  const DType d = c.input_dtype(i);
  if (d != DType::Int32 && d != DType::Int64) return c.invalid("{} must be int32 or int64, got {}", what, dtype_name(d));
  return Status();
}

// Strings (host-only, no arithmetic) are refused by the orderings, ArgMax/ArgMin and AddN here;
// Equal, NotEqual and SelectV2 take them, as TensorFlow's do (placement keeps them on the host).
Status refuse_string(const ShapeContext& c, int i) {
  if (c.input_dtype(i) == DType::String) return c.invalid("string tensors are not supported (input {})", i);
  return Status();
}

// Equal and NotEqual take any dtype (bool and string too: strings compare byte-wise); the
// orderings numbers only.
template <bool kOrdering>
Status compare_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  if constexpr (kOrdering) TESSERA_RETURN_IF_ERROR(refuse_string(c, 0));
  if (c.input_dtype(0) != c.input_dtype(1)) {
    return c.invalid("inputs must have the same dtype, got {} and {}", dtype_name(c.input_dtype(0)),
                     dtype_name(c.input_dtype(1)));
  }
  if (kOrdering && c.input_dtype(0) == DType::Bool) return c.invalid("bool tensors are not ordered (cast them first)");
  return add_shaped(c, DType::Bool, broadcast_shapes(c.input_shape(0), c.input_shape(1)));
}

Status logical_fn(ShapeContext& c) {
  const int n = c.op_type() == "LogicalNot" ? 1 : 2;
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, n));
  for (int i = 0; i < n; ++i) {
    if (c.input_dtype(i) != DType::Bool) return c.invalid("input {} must be bool, got {}", i, dtype_name(c.input_dtype(i)));
  }
  if (n == 1) return add_shaped(c, DType::Bool, c.input_shape(0));
  return add_shaped(c, DType::Bool, broadcast_shapes(c.input_shape(0), c.input_shape(1)));
}

Status select_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 3));
  if (c.input_dtype(0) != DType::Bool) return c.invalid("cond must be bool, got {}", dtype_name(c.input_dtype(0)));
  if (c.input_dtype(1) != c.input_dtype(2)) {
    return c.invalid("x and y must have the same dtype, got {} and {}", dtype_name(c.input_dtype(1)),
                     dtype_name(c.input_dtype(2)));
  }
  auto xy = broadcast_shapes(c.input_shape(1), c.input_shape(2));
  if (!xy.ok()) return c.invalid("{}", xy.status().message());
  auto out = broadcast_shapes(c.input_shape(0), xy.value());
  if (!out.ok()) {
    return c.invalid("incompatible shapes {}, {} and {}", c.input_shape(0).to_string(), c.input_shape(1).to_string(),
                     c.input_shape(2).to_string());
  }
  c.add_output(c.input_dtype(1), out.value());
  return Status();
}

Status gather_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_index_dtype(c, 1, "indices"));
  return add_shaped(c, c.input_dtype(0), gather_shape(c.input_shape(0), c.input_shape(1), c.attr<int64_t>("axis")));
}

Status one_hot_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_index_dtype(c, 0, "indices"));
  return add_shaped(c, DType::Float32, one_hot_shape(c.input_shape(0), c.attr<int64_t>("depth")));
}

Status arg_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(refuse_string(c, 0));
  if (c.input_dtype(0) == DType::Bool) return c.invalid("bool tensors are not ordered (cast them first)");
  return add_shaped(c, DType::Int64, arg_reduce_shape(c.input_shape(0), c.attr<int64_t>("axis")));
}

Status add_n_fn(ShapeContext& c) {
  if (c.num_inputs() < 1) return c.invalid("needs at least one input");
  const DType dtype = c.input_dtype(0);
  if (dtype == DType::Bool) return c.invalid("bool tensors are not supported (cast them first)");
  TESSERA_RETURN_IF_ERROR(refuse_string(c, 0));
  Shape merged = c.input_shape(0);
  for (int k = 1; k < c.num_inputs(); ++k) {
    if (c.input_dtype(k) != dtype) {
      return c.invalid("inputs must have one dtype: input 0 is {}, input {} is {}", dtype_name(dtype), k,
                       dtype_name(c.input_dtype(k)));
    }
    const Shape& s = c.input_shape(k);
    if (s.unknown_rank()) continue;
    if (merged.unknown_rank()) {
      merged = s;
      continue;
    }
    bool same = merged.rank() == s.rank();
    for (int d = 0; same && d < s.rank(); ++d) {
      if (merged.dim(d) >= 0 && s.dim(d) >= 0 && merged.dim(d) != s.dim(d)) same = false;
      if (same && merged.dim(d) < 0) merged.set_dim(d, s.dim(d));
    }
    if (!same) {
      return c.invalid("inputs must have one shape: input 0 has shape {}, input {} has shape {}",
                       c.input_shape(0).to_string(), k, s.to_string());
    }
  }
  c.add_output(dtype, merged);
  return Status();
}

TESSERA_REGISTER_OPS(compare_fn<false>, "Equal", "NotEqual");
TESSERA_REGISTER_OPS(compare_fn<true>, "Less", "LessEqual", "Greater", "GreaterEqual");
TESSERA_REGISTER_OPS(logical_fn, "LogicalAnd", "LogicalOr", "LogicalNot");
TESSERA_REGISTER_OP(OpDef{"SelectV2", select_fn});
TESSERA_REGISTER_OP(OpDef{"GatherV2", gather_fn});
TESSERA_REGISTER_OP(OpDef{"OneHot", one_hot_fn});
TESSERA_REGISTER_OPS(arg_fn, "ArgMax", "ArgMin");
TESSERA_REGISTER_OP(OpDef{"AddN", add_n_fn});

}  // namespace
}  // namespace internal

namespace ops {

namespace {

NodeSpec axis_spec(const char* type, std::string name, int axis) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs["axis"] = int64_t{axis};
  return spec;
}

}  // namespace

Output equal(Output a, Output b, std::string name) { return add_binary_op("equal", "Equal", a, b, std::move(name)); }
Output not_equal(Output a, Output b, std::string name) {
  return add_binary_op("not_equal", "NotEqual", a, b, std::move(name));
}
Output less(Output a, Output b, std::string name) { return add_binary_op("less", "Less", a, b, std::move(name)); }
Output less_equal(Output a, Output b, std::string name) {
  return add_binary_op("less_equal", "LessEqual", a, b, std::move(name));
}
Output greater(Output a, Output b, std::string name) { return add_binary_op("greater", "Greater", a, b, std::move(name)); }
Output greater_equal(Output a, Output b, std::string name) {
  return add_binary_op("greater_equal", "GreaterEqual", a, b, std::move(name));
}
Output logical_and(Output a, Output b, std::string name) {
  return add_binary_op("logical_and", "LogicalAnd", a, b, std::move(name));
}
Output logical_or(Output a, Output b, std::string name) {
  return add_binary_op("logical_or", "LogicalOr", a, b, std::move(name));
}
Output logical_not(Output x, std::string name) {
  return add_op("logical_not", NodeSpec{"LogicalNot", std::move(name)}, {x});
}

Output where(Output cond, Output x, Output y, std::string name) {
  return add_op("where", NodeSpec{"SelectV2", std::move(name)}, {cond, x, y});
}

Output gather(Output params, Output indices, int axis, std::string name) {
  return add_op("gather", axis_spec("GatherV2", std::move(name), axis), {params, indices});
}

Output one_hot(Output indices, int depth, float on, float off, std::string name) {
  NodeSpec spec = axis_spec("OneHot", std::move(name), -1);  // TF's default axis: a new last dim
  spec.attrs["depth"] = int64_t{depth};
  spec.attrs["on_value"] = static_cast<double>(on);
  spec.attrs["off_value"] = static_cast<double>(off);
  return add_op("one_hot", std::move(spec), {indices});
}

Output argmax(Output x, int axis, std::string name) {
  return add_op("argmax", axis_spec("ArgMax", std::move(name), axis), {x});
}
Output argmin(Output x, int axis, std::string name) {
  return add_op("argmin", axis_spec("ArgMin", std::move(name), axis), {x});
}

Output add_n(std::vector<Output> inputs, std::string name) {
  if (inputs.empty()) throw InvalidArgumentError("add_n: needs at least one input");
  return add_op("add_n", NodeSpec{"AddN", std::move(name)}, std::move(inputs));
}

}  // namespace ops
}  // namespace tessera
