// Op definitions, constructors and gradients of the scans Cumsum and Cumprod, as TensorFlow's:
// inputs x and axis (an int32 or int64 scalar tensor, negative counting from the end), attrs
// exclusive and reverse. Shapes and dtypes are checked here when the graph is built; the axis's
// value too where a constant gives it (the int overloads of the builders make one), else by the
// kernel when the op runs, with the same message (core/scan_ops.h).
#include "core/scan_ops.h"

#include <optional>
#include <string>
#include <utility>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "core/shape_ops.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {

Status check_scan_dtype(DType x) {
  if (x != DType::Float32 && x != DType::Float64 && x != DType::Int32 && x != DType::Int64) {
    return errors::invalid_argument("x must be float32, float64, int32 or int64, got {}", dtype_name(x));
  }
  return Status();
}

Status check_scan_axis_input(DType axis, const Shape& shape) {
  if (axis != DType::Int32 && axis != DType::Int64) {
    return errors::invalid_argument("axis must be int32 or int64, got {}", dtype_name(axis));
  }
  if (!shape.unknown_rank() && shape.rank() != 0) {
    return errors::invalid_argument("axis must be a scalar, got shape {}", shape.to_string());
  }
  return Status();
}

StatusOr<int> resolve_scan_axis(int64_t axis, const Shape& x) {
  return resolve_axis(axis, x.rank(), "an input of shape " + x.to_string());
}

StatusOr<int> scan_axis(const Tensor& axis, const Shape& x) {
  TESSERA_RETURN_IF_ERROR(check_scan_axis_input(axis.dtype(), axis.shape()));
  const int64_t value = axis.dtype() == DType::Int32 ? int64_t{axis.scalar<int32_t>()} : axis.scalar<int64_t>();
  return resolve_scan_axis(value, x);
}

ScanGeometry scan_geometry(const Shape& x, int axis) {
  ScanGeometry g;
  for (int d = 0; d < axis; ++d) g.outer *= x.dim(d);
  g.len = x.dim(axis);
  for (int d = axis + 1; d < x.rank(); ++d) g.inner *= x.dim(d);
  return g;
}

namespace {

// The axis's value where the graph fixes it: the input is a Const (nodes are immutable once
// added, so reading its attr while the graph adds this node is safe). Only a spec the graph is
// adding names its inputs: a device that reruns the shape function on run-time shapes (SIM) does not.
std::optional<int64_t> constant_axis(const ShapeContext& c) {
  if (c.spec().inputs.size() != 2 || c.spec().inputs[1].is_null()) return std::nullopt;
  const Node* n = c.spec().inputs[1].node();
  if (n->type != "Const") return std::nullopt;
  const Tensor& v = n->attr<Tensor>("value");
  if (v.dtype() == DType::Int32) return v.scalar<int32_t>();
  return v.scalar<int64_t>();
}

Status scan_shape(ShapeContext& c) {
  if (c.num_inputs() != 2) return c.invalid("expects 2 inputs (x, axis), got {}", c.num_inputs());
  const Shape& x = c.input_shape(0);
  if (Status s = check_scan_dtype(c.input_dtype(0)); !s.ok()) return c.invalid("{}", s.message());
  if (Status s = check_scan_axis_input(c.input_dtype(1), c.input_shape(1)); !s.ok()) {
    return c.invalid("{}", s.message());
  }
  // A fed or computed axis, or an unknown rank, is left for the kernel to check.
  if (const auto axis = constant_axis(c); axis && !x.unknown_rank()) {
    if (auto a = resolve_scan_axis(*axis, x); !a.ok()) return c.invalid("{}", a.status().message());
  }
  c.add_output(c.input_dtype(0), x);
  return Status();
}

TESSERA_REGISTER_OPS(scan_shape, "Cumsum", "Cumprod");

// ---- Gradients (TensorFlow's math_grad.py) ----

using Grads = std::vector<Output>;

// Each x[j] adds to the outputs on the other side of it: the same scan of dy, the other way.
TESSERA_REGISTER_GRADIENT("Cumsum", [](const GradContext& c) -> Grads {
  const bool exclusive = c.node().attr<bool>("exclusive");
  const bool reverse = c.node().attr<bool>("reverse");
  return {ops::cumsum(c.grad(0), c.input(1), exclusive, !reverse), Output()};
});

// TF's _CumprodGrad: sum over the outputs y[k] that x[j] takes part in of dy[k] * y[k] / x[j]. As
// TensorFlow's (div_no_nan), it is 0 where x is 0 (the true value there is not computed: the
// gradient of reduce_prod, core/math_grad.cc, is exact at zeros).
TESSERA_REGISTER_GRADIENT("Cumprod", [](const GradContext& c) -> Grads {
  const Output x = c.input(0);
  const Output axis = c.input(1);
  const bool exclusive = c.node().attr<bool>("exclusive");
  const bool reverse = c.node().attr<bool>("reverse");
  const Output summed = ops::cumsum(ops::mul(c.output(0), c.grad(0)), axis, exclusive, !reverse);
  const Output zero = ops::equal(x, ops::zeros_like(x));
  const Output safe_x = ops::where(zero, ops::ones_like(x), x);  // no 0/0 even where unselected
  return {ops::where(zero, ops::zeros_like(x), ops::div(summed, safe_x)), Output()};
});

}  // namespace
}  // namespace internal

namespace ops {

namespace {

Output scan(const char* what, const char* type, Output x, Output axis, bool exclusive, bool reverse,
            std::string name) {
  internal::checked_node(axis, what);
  NodeSpec spec{type, std::move(name)};
  spec.attrs["exclusive"] = exclusive;
  spec.attrs["reverse"] = reverse;
  return add_op(what, std::move(spec), {x, axis});
}

Output scan(const char* what, const char* type, Output x, int axis, bool exclusive, bool reverse, std::string name) {
  Graph& g = *internal::checked_node(x, what)->graph->owner;
  return scan(what, type, x, constant(g, int32_t{axis}), exclusive, reverse, std::move(name));
}

}  // namespace

Output cumsum(Output x, int axis, bool exclusive, bool reverse, std::string name) {
  return scan("cumsum", "Cumsum", x, axis, exclusive, reverse, std::move(name));
}
Output cumsum(Output x, Output axis, bool exclusive, bool reverse, std::string name) {
  return scan("cumsum", "Cumsum", x, axis, exclusive, reverse, std::move(name));
}
Output cumprod(Output x, int axis, bool exclusive, bool reverse, std::string name) {
  return scan("cumprod", "Cumprod", x, axis, exclusive, reverse, std::move(name));
}
Output cumprod(Output x, Output axis, bool exclusive, bool reverse, std::string name) {
  return scan("cumprod", "Cumprod", x, axis, exclusive, reverse, std::move(name));
}

}  // namespace ops
}  // namespace tessera
