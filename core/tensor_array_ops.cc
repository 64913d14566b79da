// Note [Tensor arrays]
// ~~~~~~~~~~~~~~~~~~~~
// TensorFlow 1's TensorArray is a resource (a handle to per-step state) whose ops thread a
// scalar "flow" tensor for ordering; TensorFlow 2's functional loops replaced it with TensorList,
// a value. tessera's is a value too, and the plainest one: the stacked tensor itself,
// [size, element shape...]. So
//   * write and scatter are pure ops (TensorArrayScatter: the array with rows set), which a while
//     loop carries as an ordinary loop variable, and their gradients are ordinary gradients (the
//     rows' gradients read back; the array's gradient with those rows zeroed);
//   * a loop does not copy the array per write: the While hands a loop variable to the body's
//     step as the step's only reference (Note [While loops] in core/while_ops.cc), and the write,
//     its only reader, takes over its buffer (Note [Forwarded inputs] in core/executor.cc);
//   * a loop's gradient needs no history of an array that its body only writes (each iteration's
//     value is then never read again): such a loop variable keeps none, so the gradient of a loop
//     that writes n elements costs O(n) memory, not O(n^2) (write_only_loop_variable).
// Before the first write of an array whose element shape is unknown, its value is [size, 0]; the
// first write allocates [size, element shape...] zeros, which is also why an element never
// written reads as zeros (TF2's TensorList) rather than raising (TF1). Read and stack know
// statically what element shape the graph promised (attr "element_shape"): an array still
// [size, 0] whose element shape is not known to be [0] was never written, an error.
// The ops run on the host (a request for an accelerator means its task's CPU), like a loop.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/tensor_array_ops.h"

#include "core/gradients.h"
#include "core/nn_ops.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "tessera/ops.h"
#include "tessera/tensor_array.h"

namespace tessera {
namespace internal {
namespace {

bool is_index_dtype(DType d) { return d == DType::Int32 || d == DType::Int64; }

// [d0] + element.
Shape prepend(int64_t d0, const Shape& element) {
  if (element.unknown_rank()) return Shape::unknown();
  std::vector<int64_t> dims{d0};
  for (int64_t d : element.dims()) dims.push_back(d);
  return Shape(dims);
}

Status expect_array(ShapeContext& c, int i) {
  const Shape& s = c.input_shape(i);
  if (!s.unknown_rank() && s.rank() < 1) return c.invalid("input {} is a scalar, not a TensorArray's value", i);
  return Status();
}

// Input i: an int32 or int64 scalar or vector.
Status expect_indices(ShapeContext& c, int i) {
  if (!is_index_dtype(c.input_dtype(i))) {
    return c.invalid("indices must be int32 or int64, got {}", dtype_name(c.input_dtype(i)));
  }
  const Shape& s = c.input_shape(i);
  if (!s.unknown_rank() && s.rank() > 1) {
    return c.invalid("indices must be a scalar or a vector, got shape {}", s.to_string());
  }
  return Status();
}

Status new_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  if (!is_index_dtype(c.input_dtype(0))) return c.invalid("size must be int32 or int64");
  const Shape& element = c.attr<Shape>("element_shape");
  c.add_output(c.attr<DType>("dtype"), element.fully_defined() ? prepend(-1, element) : Shape::unknown());
  return Status();
}

// (array, indices, value) -> array.
Status scatter_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 3));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  TESSERA_RETURN_IF_ERROR(expect_indices(c, 1));
  if (c.input_dtype(2) != c.input_dtype(0)) {
    return c.invalid("the value is {}, the TensorArray holds {}", dtype_name(c.input_dtype(2)),
                     dtype_name(c.input_dtype(0)));
  }
  const Shape& idx = c.input_shape(1);
  const Shape& value = c.input_shape(2);
  Shape element = Shape::unknown();
  if (!idx.unknown_rank() && !value.unknown_rank()) {
    if (idx.rank() == 1) {
      if (value.rank() < 1) return c.invalid("scatter's value must have a row per index, got a scalar");
      element = value.sub_shape(1);
    } else {
      element = value;
    }
  }
  const Shape& in = c.input_shape(0);
  const int64_t d0 = !in.unknown_rank() && !c.attr<bool>("dynamic_size") ? in.dim(0) : -1;
  c.add_output(c.input_dtype(0), prepend(d0, element));
  return Status();
}

// (array, indices) -> element or [k, element...].
Status read_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  TESSERA_RETURN_IF_ERROR(expect_indices(c, 1));
  Shape element = c.attr<Shape>("element_shape");
  const Shape& in = c.input_shape(0);
  if (element.unknown_rank() && !in.unknown_rank()) element = in.sub_shape(1);
  const Shape& idx = c.input_shape(1);
  if (idx.unknown_rank()) {
    c.add_output(c.input_dtype(0), Shape::unknown());
  } else {
    c.add_output(c.input_dtype(0), idx.rank() == 1 ? prepend(idx.dim(0), element) : element);
  }
  return Status();
}

Status stack_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  const Shape& in = c.input_shape(0);
  const Shape& element = c.attr<Shape>("element_shape");
  // The size when the graph knows it (a fixed-size array of a constant size), else -1.
  int64_t d0 = c.attr<int64_t>("size");
  if (d0 < 0 && !in.unknown_rank()) d0 = in.dim(0);
  Shape out = element.unknown_rank() ? in : prepend(d0, element);
  if (!out.unknown_rank() && d0 >= 0) out.set_dim(0, d0);
  c.add_output(c.input_dtype(0), out);
  return Status();
}

// (array, value) -> value.
Status unstack_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  if (c.input_dtype(1) != c.input_dtype(0)) {
    return c.invalid("the value is {}, the TensorArray holds {}", dtype_name(c.input_dtype(1)),
                     dtype_name(c.input_dtype(0)));
  }
  const Shape& value = c.input_shape(1);
  if (!value.unknown_rank() && value.rank() < 1) return c.invalid("cannot unstack a scalar");
  c.add_output(c.input_dtype(1), value);
  return Status();
}

Status size_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  c.add_output(DType::Int32, Shape{});
  return Status();
}

// (array, indices) -> array, those rows zero: the gradient of a write with respect to the array.
Status zero_rows_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 2));
  TESSERA_RETURN_IF_ERROR(expect_array(c, 0));
  TESSERA_RETURN_IF_ERROR(expect_indices(c, 1));
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

// Pure ops on values, run on the host (Note [Tensor arrays]).
OpDef host_op(const char* type, ShapeFn fn) {
  return OpDef{type, std::move(fn), /*stateful=*/false, /*host_only=*/true, /*host_of_request=*/true};
}
TESSERA_REGISTER_OP(host_op("TensorArrayNew", new_shape));
TESSERA_REGISTER_OP(host_op("TensorArrayScatter", scatter_shape));
TESSERA_REGISTER_OP(host_op("TensorArrayRead", read_shape));
TESSERA_REGISTER_OP(host_op("TensorArrayStack", stack_shape));
TESSERA_REGISTER_OP(host_op("TensorArrayUnstack", unstack_shape));
TESSERA_REGISTER_OP(host_op("TensorArraySize", size_shape));
TESSERA_REGISTER_OP(host_op("TensorArrayZeroRows", zero_rows_shape));

// ---- Kernels ----

int64_t index_at(const Tensor& indices, int64_t k) {
  return indices.dtype() == DType::Int32 ? indices.data<int32_t>()[k] : indices.data<int64_t>()[k];
}

// Copies `rows` rows of `row_elems` elements from src (from row `from`) to dst (at row `to`).
void copy_rows(const Tensor& src, int64_t from, Tensor& dst, int64_t to, int64_t rows, int64_t row_elems) {
  const int64_t n = rows * row_elems;
  if (n == 0) return;
  if (src.dtype() == DType::String) {
    const auto* s = src.data<std::string>() + from * row_elems;
    auto* d = dst.mutable_data<std::string>() + to * row_elems;
    std::copy(s, s + n, d);
    return;
  }
  const std::size_t esize = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_mutable_data()) + static_cast<std::size_t>(to * row_elems) * esize,
              static_cast<const char*>(src.raw_data()) + static_cast<std::size_t>(from * row_elems) * esize,
              static_cast<std::size_t>(n) * esize);
}

void zero_row(Tensor& t, int64_t row, int64_t row_elems) {
  if (row_elems == 0) return;
  if (t.dtype() == DType::String) {
    auto* d = t.mutable_data<std::string>() + row * row_elems;
    std::fill(d, d + row_elems, std::string());
    return;
  }
  const std::size_t esize = dtype_size(t.dtype());
  std::memset(static_cast<char*>(t.raw_mutable_data()) + static_cast<std::size_t>(row * row_elems) * esize, 0,
              static_cast<std::size_t>(row_elems) * esize);
}

// The indices of `indices` (a scalar or a vector), each in [0, limit) unless `grow` (then only
// non-negative); false after failing `ctx`.
bool checked_indices(OpKernelContext& ctx, const Tensor& indices, int64_t limit, bool grow, std::vector<int64_t>* out) {
  if (indices.shape().rank() > 1) {
    ctx.fail(ErrorCode::kInvalidArgument, "indices must be a scalar or a vector, got shape {}",
             indices.shape().to_string());
    return false;
  }
  for (int64_t k = 0; k < indices.num_elements(); ++k) {
    const int64_t i = index_at(indices, k);
    if (i < 0 || (!grow && i >= limit)) {
      ctx.fail(ErrorCode::kInvalidArgument, "index {} is out of range for a TensorArray of size {}", i, limit);
      return false;
    }
    out->push_back(i);
  }
  return true;
}

bool checked_array(OpKernelContext& ctx, const Tensor& array) {
  if (array.shape().rank() < 1) {
    ctx.fail(ErrorCode::kInvalidArgument, "input 0 is a scalar, not a TensorArray's value");
    return false;
  }
  return true;
}

// Whether `array`, of the element shape the graph promised (`element`), has had no write yet.
bool never_written(const Tensor& array, const Shape& element) {
  return array.shape().rank() == 2 && array.shape().dim(1) == 0 && array.shape().dim(0) > 0 &&
         !(element.fully_defined() && element == Shape{0});
}

class NewOp final : public OpKernel {
 public:
  explicit NewOp(const Node& n)
      : OpKernel(n), dtype_(n.attr<DType>("dtype")), element_(n.attr<Shape>("element_shape")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& size = ctx.input(0);
    if (size.shape().rank() != 0) {
      return ctx.fail(ErrorCode::kInvalidArgument, "size must be a scalar, got shape {}", size.shape().to_string());
    }
    const int64_t n = index_at(size, 0);
    if (n < 0) return ctx.fail(ErrorCode::kInvalidArgument, "size must not be negative, got {}", n);
    ctx.set_output(0, Tensor::zeros(dtype_, element_.fully_defined() ? prepend(n, element_) : Shape{n, 0}));
  }

 private:
  DType dtype_;
  Shape element_;
};
TESSERA_REGISTER_KERNEL("TensorArrayNew", "CPU", NewOp);

class ScatterOp final : public OpKernel {
 public:
  explicit ScatterOp(const Node& n) : OpKernel(n), grow_(n.attr<bool>("dynamic_size")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& array = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& value = ctx.input(2);
    if (!checked_array(ctx, array)) return;
    const int64_t size = array.shape().dim(0);
    std::vector<int64_t> idx;
    if (!checked_indices(ctx, indices, size, grow_, &idx)) return;
    Shape element = value.shape();
    if (indices.shape().rank() == 1) {
      if (value.shape().rank() < 1 || value.shape().dim(0) != static_cast<int64_t>(idx.size())) {
        return ctx.fail(ErrorCode::kInvalidArgument, "scatter of {} indices needs a value of {} rows, got shape {}",
                        idx.size(), idx.size(), value.shape().to_string());
      }
      element = value.shape().sub_shape(1);
      std::unordered_set<int64_t> seen;
      for (int64_t i : idx) {
        if (!seen.insert(i).second) {
          return ctx.fail(ErrorCode::kInvalidArgument, "scatter names index {} twice", i);
        }
      }
    }
    int64_t new_size = size;
    for (int64_t i : idx) new_size = std::max(new_size, i + 1);
    const Shape have = array.shape().sub_shape(1);
    // An array still [size, 0] takes the first value's shape (Note [Tensor arrays]).
    const bool allocated = array.num_elements() > 0 || have == element;
    if (allocated && have != element) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "cannot write a value of shape {} to a TensorArray whose elements have shape {}",
                      element.to_string(), have.to_string());
    }
    const int64_t row = element.num_elements();
    const Shape out_shape = prepend(new_size, element);
    if (allocated && new_size == size) {
      // Over the array's own buffer when the step holds its only reference (Note [Tensor arrays]);
      // forwarding nulls the input, which is read only when it was not forwarded.
      const void* before = array.raw_data();
      Tensor& out = ctx.forward_input_or_allocate_output({0}, 0, out_shape);
      if (out.raw_data() != before) copy_rows(ctx.input(0), 0, out, 0, size, row);
      for (std::size_t k = 0; k < idx.size(); ++k) copy_rows(value, static_cast<int64_t>(k), out, idx[k], 1, row);
      return;
    }
    Tensor out = Tensor::zeros(array.dtype(), out_shape);
    if (allocated) copy_rows(array, 0, out, 0, size, row);
    for (std::size_t k = 0; k < idx.size(); ++k) copy_rows(value, static_cast<int64_t>(k), out, idx[k], 1, row);
    ctx.set_output(0, std::move(out));
  }

 private:
  bool grow_;
};
TESSERA_REGISTER_KERNEL("TensorArrayScatter", "CPU", ScatterOp);

class ReadOp final : public OpKernel {
 public:
  explicit ReadOp(const Node& n) : OpKernel(n), element_(n.attr<Shape>("element_shape")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& array = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    if (!checked_array(ctx, array)) return;
    const int64_t size = array.shape().dim(0);
    std::vector<int64_t> idx;
    if (!checked_indices(ctx, indices, size, false, &idx)) return;
    if (!idx.empty() && never_written(array, element_)) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "reads index {} of a TensorArray of size {} none of whose elements has been written "
                      "(its element shape is unknown)",
                      idx.front(), size);
    }
    const Shape element = array.shape().sub_shape(1);
    const int64_t row = element.num_elements();
    Tensor& out =
        ctx.allocate_output(0, indices.shape().rank() == 1 ? prepend(static_cast<int64_t>(idx.size()), element) : element);
    for (std::size_t k = 0; k < idx.size(); ++k) copy_rows(array, idx[k], out, static_cast<int64_t>(k), 1, row);
  }

 private:
  Shape element_;
};
TESSERA_REGISTER_KERNEL("TensorArrayRead", "CPU", ReadOp);

class StackOp final : public OpKernel {
 public:
  explicit StackOp(const Node& n)
      : OpKernel(n), element_(n.attr<Shape>("element_shape")), size_(n.attr<int64_t>("size")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& array = ctx.input(0);
    if (!checked_array(ctx, array)) return;
    if (size_ >= 0 && array.shape().dim(0) != size_) {
      return ctx.fail(ErrorCode::kInvalidArgument, "the TensorArray has {} elements, its graph says {}",
                      array.shape().dim(0), size_);
    }
    if (never_written(array, element_)) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "stacks a TensorArray of size {} none of whose elements has been written (its element shape "
                      "is unknown)",
                      array.shape().dim(0));
    }
    if (array.shape().dim(0) == 0 && !element_.unknown_rank() && array.shape().sub_shape(1) != element_) {
      // An empty array: [0, element shape...] where the graph knows it.
      if (!element_.fully_defined()) {
        return ctx.fail(ErrorCode::kInvalidArgument,
                        "stacks an empty TensorArray whose element shape {} is not fully defined",
                        element_.to_string());
      }
      return ctx.set_output(0, Tensor(array.dtype(), prepend(0, element_)));
    }
    ctx.set_output(0, array);
  }

 private:
  Shape element_;
  int64_t size_;
};
TESSERA_REGISTER_KERNEL("TensorArrayStack", "CPU", StackOp);

class UnstackOp final : public OpKernel {
 public:
  explicit UnstackOp(const Node& n) : OpKernel(n), grow_(n.attr<bool>("dynamic_size")) {}
  void compute(OpKernelContext& ctx) override {
    const Tensor& array = ctx.input(0);
    const Tensor& value = ctx.input(1);
    if (!checked_array(ctx, array)) return;
    if (value.shape().rank() < 1) return ctx.fail(ErrorCode::kInvalidArgument, "cannot unstack a scalar");
    if (!grow_ && value.shape().dim(0) != array.shape().dim(0)) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "the value to unstack has {} rows, the TensorArray {} elements (and no dynamic_size)",
                      value.shape().dim(0), array.shape().dim(0));
    }
    if (grow_ && value.shape().dim(0) < array.shape().dim(0)) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "the value to unstack has {} rows, fewer than the TensorArray's {} elements",
                      value.shape().dim(0), array.shape().dim(0));
    }
    ctx.set_output(0, value);
  }

 private:
  bool grow_;
};
TESSERA_REGISTER_KERNEL("TensorArrayUnstack", "CPU", UnstackOp);

class SizeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    if (!checked_array(ctx, ctx.input(0))) return;
    ctx.set_output(0, Tensor::scalar<int32_t>(static_cast<int32_t>(ctx.input(0).shape().dim(0))));
  }
};
TESSERA_REGISTER_KERNEL("TensorArraySize", "CPU", SizeOp);

class ZeroRowsOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& array = ctx.input(0);
    if (!checked_array(ctx, array)) return;
    const int64_t size = array.shape().dim(0);
    std::vector<int64_t> idx;
    if (!checked_indices(ctx, ctx.input(1), size, false, &idx)) return;
    const int64_t row = array.shape().sub_shape(1).num_elements();
    const void* before = array.raw_data();
    const Shape shape = array.shape();
    Tensor& out = ctx.forward_input_or_allocate_output({0}, 0, shape);
    if (out.raw_data() != before) copy_rows(ctx.input(0), 0, out, 0, size, row);
    for (int64_t i : idx) zero_row(out, i, row);
  }
};
TESSERA_REGISTER_KERNEL("TensorArrayZeroRows", "CPU", ZeroRowsOp);

// ---- Gradients ----

using Grads = std::vector<Output>;

Output read_op(Output array, Output indices, const Shape& element, std::string name) {
  internal::NodeSpec spec{"TensorArrayRead", std::move(name)};
  spec.attrs["element_shape"] = element;
  return add_op("TensorArray.read", std::move(spec), {std::move(array), std::move(indices)});
}

Output zero_rows(Output array, Output indices) {
  return add_op("TensorArray gradient", NodeSpec{"TensorArrayZeroRows", "TensorArrayZeroRows"},
                {std::move(array), std::move(indices)});
}

// A write's gradient: the rows' gradients for the value, the rest for the array it wrote into.
// Neither reads the array written into, so a loop need not keep its history
// (write_only_loop_variable).
TESSERA_REGISTER_GRADIENT("TensorArrayScatter", [](const GradContext& c) -> Grads {
  const Output dy = c.grad(0);
  return {zero_rows(dy, c.input(1)), Output(), read_op(dy, c.input(1), c.input(2).shape(), "TensorArrayReadGrad")};
});
TESSERA_REGISTER_GRADIENT("TensorArrayRead", [](const GradContext& c) -> Grads {
  return {gather_grad(c.grad(0), c.input(1), c.input(0), 0, ""), Output()};
});
TESSERA_REGISTER_GRADIENT("TensorArrayStack", [](const GradContext& c) -> Grads { return {c.grad(0)}; });
TESSERA_REGISTER_GRADIENT("TensorArrayUnstack", [](const GradContext& c) -> Grads { return {Output(), c.grad(0)}; });
TESSERA_REGISTER_GRADIENT("TensorArrayZeroRows",
                          [](const GradContext& c) -> Grads { return {zero_rows(c.grad(0), c.input(1)), Output()}; });
TESSERA_NOT_DIFFERENTIABLE("TensorArrayNew");
TESSERA_NOT_DIFFERENTIABLE("TensorArraySize");

}  // namespace

bool write_only_loop_variable(const WhileFrame& frame, const Node* arg) {
  for (const Node* n : frame.nodes) {
    for (std::size_t j = 0; j < n->inputs.size(); ++j) {
      if (n->inputs[j].node != arg) continue;
      if (n->type != "TensorArrayScatter" || j != 0) return false;
    }
    for (const Node* dep : n->control_inputs) {
      if (dep == arg) return false;
    }
  }
  if (frame.cond.node() == arg) return false;
  return true;
}

}  // namespace internal

// ---- TensorArray ----

struct TensorArray::State {
  DType dtype;
  bool dynamic_size;
  Shape element_shape;
  std::string name;  // the TensorArrayNew's node, for messages
  int64_t size;      // a fixed size the graph knows (a constant), else -1
};

namespace {

// What is known of both `a` and `b`; false when they conflict.
bool merge_shapes(const Shape& a, const Shape& b, Shape* out) {
  if (a.unknown_rank()) return *out = b, true;
  if (b.unknown_rank()) return *out = a, true;
  if (a.rank() != b.rank()) return false;
  std::vector<int64_t> dims;
  for (int i = 0; i < a.rank(); ++i) {
    if (a.dim(i) >= 0 && b.dim(i) >= 0 && a.dim(i) != b.dim(i)) return false;
    dims.push_back(a.dim(i) >= 0 ? a.dim(i) : b.dim(i));
  }
  *out = Shape(dims);
  return true;
}

Output as_index(Output index) {
  if (index.is_null()) throw InvalidArgumentError("TensorArray: the index is null");
  if (!internal::is_index_dtype(index.dtype())) {
    throw InvalidArgumentError(
        fmt::format("TensorArray: index {} is {}, not int32 or int64", index.name(), dtype_name(index.dtype())));
  }
  return index;
}

}  // namespace

TensorArray::TensorArray(Graph& g, DType dtype, Output size, TensorArrayOptions options) {
  if (size.is_null()) throw InvalidArgumentError("TensorArray: size is null");
  if (!dtype_is_valid(dtype)) throw InvalidArgumentError("TensorArray: invalid dtype");
  internal::NodeSpec spec{"TensorArrayNew", options.name.empty() ? std::string("TensorArray") : options.name};
  spec.attrs["dtype"] = dtype;
  spec.attrs["element_shape"] = options.element_shape;
  if (&size.op().graph() != &g) throw InvalidArgumentError("TensorArray: size is a tensor of another graph");
  flow_ = internal::add_op("TensorArray", std::move(spec), {size});
  int64_t known = -1;
  const internal::Node* s = size.node();
  if (!options.dynamic_size && s->type == "Const" && s->output_shapes[0].rank() == 0) {
    const Tensor& v = s->attr<Tensor>("value");
    known = v.dtype() == DType::Int32 ? v.scalar<int32_t>() : v.scalar<int64_t>();
  }
  state_ = std::make_shared<State>(
      State{dtype, options.dynamic_size, options.element_shape, flow_.op().name(), known});
}

namespace {
Output size_constant(Graph& g, int64_t size) {
  if (size < 0 || size > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgumentError(fmt::format("TensorArray: size {} is not in [0, 2^31)", size));
  }
  return ops::constant(g, static_cast<int32_t>(size));
}
}  // namespace

TensorArray::TensorArray(Graph& g, DType dtype, int64_t size, TensorArrayOptions options)
    : TensorArray(g, dtype, size_constant(g, size), std::move(options)) {}

DType TensorArray::dtype() const { return state_->dtype; }
Shape TensorArray::element_shape() const { return state_->element_shape; }
bool TensorArray::dynamic_size() const { return state_->dynamic_size; }

TensorArray TensorArray::with_flow(Output flow) const {
  if (flow.is_null()) throw InvalidArgumentError(fmt::format("TensorArray '{}': with_flow of a null tensor", state_->name));
  if (flow.dtype() != state_->dtype) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}' holds {}; with_flow got {} ({})", state_->name,
                                           dtype_name(state_->dtype), flow.name(), dtype_name(flow.dtype())));
  }
  return TensorArray(state_, std::move(flow));
}

void TensorArray::learn_element_shape(const Shape& shape, const char* what) const {
  Shape merged;
  if (!merge_shapes(state_->element_shape, shape, &merged)) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}': {} a value of shape {}, but its elements have shape {}",
                                           state_->name, what, shape.to_string(),
                                           state_->element_shape.to_string()));
  }
  state_->element_shape = merged;
}

TensorArray TensorArray::write(Output index, Output value, std::string name) const {
  index = as_index(std::move(index));
  if (value.is_null()) throw InvalidArgumentError(fmt::format("TensorArray '{}': write of a null value", state_->name));
  if (!index.shape().unknown_rank() && index.shape().rank() != 0) {
    throw InvalidArgumentError(
        fmt::format("TensorArray '{}': write's index must be a scalar, got {}", state_->name, index.shape().to_string()));
  }
  if (value.dtype() != state_->dtype) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}' holds {}; write got {} ({})", state_->name,
                                           dtype_name(state_->dtype), value.name(), dtype_name(value.dtype())));
  }
  learn_element_shape(value.shape(), "write of");
  internal::NodeSpec spec{"TensorArrayScatter", name.empty() ? std::string("TensorArrayWrite") : std::move(name)};
  spec.attrs["dynamic_size"] = state_->dynamic_size;
  return TensorArray(state_, internal::add_op("TensorArray.write", std::move(spec), {flow_, index, value}));
}

TensorArray TensorArray::write(int64_t index, Output value, std::string name) const {
  return write(ops::constant(flow_.op().graph(), static_cast<int32_t>(index)), std::move(value), std::move(name));
}

Output TensorArray::read(Output index, std::string name) const {
  index = as_index(std::move(index));
  if (!index.shape().unknown_rank() && index.shape().rank() != 0) {
    throw InvalidArgumentError(
        fmt::format("TensorArray '{}': read's index must be a scalar, got {}", state_->name, index.shape().to_string()));
  }
  return internal::read_op(flow_, index, state_->element_shape, name.empty() ? "TensorArrayRead" : std::move(name));
}

Output TensorArray::read(int64_t index, std::string name) const {
  return read(ops::constant(flow_.op().graph(), static_cast<int32_t>(index)), std::move(name));
}

Output TensorArray::gather(Output indices, std::string name) const {
  indices = as_index(std::move(indices));
  if (!indices.shape().unknown_rank() && indices.shape().rank() != 1) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}': gather's indices must be a vector, got {}", state_->name,
                                           indices.shape().to_string()));
  }
  return internal::read_op(flow_, indices, state_->element_shape, name.empty() ? "TensorArrayGather" : std::move(name));
}

TensorArray TensorArray::scatter(Output indices, Output value, std::string name) const {
  indices = as_index(std::move(indices));
  if (value.is_null()) throw InvalidArgumentError(fmt::format("TensorArray '{}': scatter of a null value", state_->name));
  if (!indices.shape().unknown_rank() && indices.shape().rank() != 1) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}': scatter's indices must be a vector, got {}", state_->name,
                                           indices.shape().to_string()));
  }
  if (value.dtype() != state_->dtype) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}' holds {}; scatter got {} ({})", state_->name,
                                           dtype_name(state_->dtype), value.name(), dtype_name(value.dtype())));
  }
  const Shape vs = value.shape();
  if (!vs.unknown_rank()) {
    if (vs.rank() < 1) {
      throw InvalidArgumentError(fmt::format("TensorArray '{}': scatter of a scalar", state_->name));
    }
    learn_element_shape(vs.sub_shape(1), "scatter of rows of");
  }
  internal::NodeSpec spec{"TensorArrayScatter", name.empty() ? std::string("TensorArrayScatter") : std::move(name)};
  spec.attrs["dynamic_size"] = state_->dynamic_size;
  return TensorArray(state_, internal::add_op("TensorArray.scatter", std::move(spec), {flow_, indices, value}));
}

Output TensorArray::stack(std::string name) const {
  internal::NodeSpec spec{"TensorArrayStack", name.empty() ? std::string("TensorArrayStack") : std::move(name)};
  spec.attrs["element_shape"] = state_->element_shape;
  spec.attrs["size"] = state_->size;
  return internal::add_op("TensorArray.stack", std::move(spec), {flow_});
}

Output TensorArray::concat(std::string name) const {
  const Shape& e = state_->element_shape;
  if (e.unknown_rank() || e.rank() < 1) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}': concat needs elements of rank 1 or more, known when "
                                           "built (element shape {})",
                                           state_->name, e.to_string()));
  }
  std::vector<int64_t> dims{-1};
  for (int d = 1; d < e.rank(); ++d) {
    if (e.dim(d) < 0) {
      throw InvalidArgumentError(fmt::format("TensorArray '{}': concat needs the element shape past its first "
                                             "dimension known when built, not {}",
                                             state_->name, e.to_string()));
    }
    dims.push_back(e.dim(d));
  }
  return ops::reshape(stack(), dims, name.empty() ? std::string("TensorArrayConcat") : std::move(name));
}

TensorArray TensorArray::unstack(Output value, std::string name) const {
  if (value.is_null()) throw InvalidArgumentError(fmt::format("TensorArray '{}': unstack of a null value", state_->name));
  if (value.dtype() != state_->dtype) {
    throw InvalidArgumentError(fmt::format("TensorArray '{}' holds {}; unstack got {} ({})", state_->name,
                                           dtype_name(state_->dtype), value.name(), dtype_name(value.dtype())));
  }
  const Shape vs = value.shape();
  if (!vs.unknown_rank()) {
    if (vs.rank() < 1) throw InvalidArgumentError(fmt::format("TensorArray '{}': unstack of a scalar", state_->name));
    learn_element_shape(vs.sub_shape(1), "unstack of rows of");
  }
  internal::NodeSpec spec{"TensorArrayUnstack", name.empty() ? std::string("TensorArrayUnstack") : std::move(name)};
  spec.attrs["dynamic_size"] = state_->dynamic_size;
  return TensorArray(state_, internal::add_op("TensorArray.unstack", std::move(spec), {flow_, value}));
}

Output TensorArray::size(std::string name) const {
  return internal::add_op("TensorArray.size",
                          internal::NodeSpec{"TensorArraySize", name.empty() ? std::string("TensorArraySize") : std::move(name)},
                          {flow_});
}

}  // namespace tessera
