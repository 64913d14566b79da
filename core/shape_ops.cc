// Op definitions and constructors for the shape ops: Reshape, Transpose, ConcatV2, Split, Slice,
// ExpandDims, Squeeze, Tile, Pad, Fill, ZerosLike, OnesLike, Shape and Size. Shapes are inferred
// here, when the graph is built, with the arithmetic of core/shape_ops.h that the kernels repeat
// on concrete shapes at run time (what a partial shape leaves open is checked there). Each op
// keeps its arguments as attrs (perm, begin and size, paddings, axis, ...), as TensorFlow's
// gradient functions read them.
#include "core/shape_ops.h"

#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/node.h"
#include "core/op_registry.h"
#include "core/shape_util.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {

namespace {

Status invalid(std::string message) { return Status(ErrorCode::kInvalidArgument, std::move(message)); }

// The product of `dims` (all >= 0), which checked_shape has already found to fit.
int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == 0) return 0;
    if (d > 0 && __builtin_mul_overflow(n, d, &n)) return -1;  // not reached after checked_shape
  }
  return n;
}

std::string input_named(const Shape& in) { return "an input of shape " + in.to_string(); }

}  // namespace

StatusOr<Shape> checked_shape(const std::vector<int64_t>& dims) {
  try {
    return Shape(dims);
  } catch (...) {
    return status_from_current_exception();
  }
}

StatusOr<int> resolve_axis(int64_t axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= rank) {
    return errors::invalid_argument("axis {} is out of range [{}, {}) for {}", axis, -rank, rank, what);
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

StatusOr<Shape> reshape_shape(const Shape& in, const std::vector<int64_t>& shape) {
  int inferred = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) return errors::invalid_argument("only one dimension of shape {} may be -1", dims_list(shape));
      inferred = static_cast<int>(i);
    } else if (shape[i] < -1) {
      return errors::invalid_argument("shape {} has a negative dimension {} (only -1, inferred, is allowed)",
                                      dims_list(shape), shape[i]);
    }
  }
  auto out = checked_shape(shape);  // the rank, and the product of the given dims
  if (!out.ok()) return out.status();
  std::vector<int64_t> given;
  for (int64_t d : shape) {
    if (d >= 0) given.push_back(d);
  }
  const int64_t known = product(given);
  const int64_t n = in.num_elements();  // -1 while unknown
  if (inferred >= 0) {
    if (known == 0) {
      return errors::invalid_argument("cannot infer the -1 of shape {}: the other dimensions multiply to 0",
                                      dims_list(shape));
    }
    if (n < 0) return out;
    if (n % known != 0) {
      return errors::invalid_argument(
          "cannot reshape a tensor of shape {} ({} elements) to shape {}: {} is not a multiple of {}", in.to_string(),
          n, dims_list(shape), n, known);
    }
    out.value().set_dim(inferred, n / known);
    return out;
  }
  if (n >= 0 && n != known) {
    return errors::invalid_argument("cannot reshape a tensor of shape {} ({} elements) to shape {} ({} elements)",
                                    in.to_string(), n, dims_list(shape), known);
  }
  if (n < 0 && !in.unknown_rank()) {
    // A partly known input: its known dims must divide the requested count.
    std::vector<int64_t> in_known;
    for (int64_t d : in.dims()) {
      if (d >= 0) in_known.push_back(d);
    }
    const int64_t part = product(in_known);
    if ((part == 0 && known != 0) || (part > 0 && known % part != 0)) {
      return errors::invalid_argument("cannot reshape a tensor of shape {} to shape {} ({} elements)", in.to_string(),
                                      dims_list(shape), known);
    }
  }
  return out;
}

StatusOr<std::vector<int>> transpose_perm(const std::vector<int64_t>& perm, int rank) {
  std::vector<int> p(static_cast<std::size_t>(rank));
  if (perm.empty()) {
    for (int i = 0; i < rank; ++i) p[static_cast<std::size_t>(i)] = rank - 1 - i;
    return p;
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    return errors::invalid_argument("perm {} has {} entries, the input has rank {}", dims_list(perm), perm.size(), rank);
  }
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    const int64_t d = perm[i];
    if (d < 0 || d >= rank) {
      return errors::invalid_argument("perm {} is not a permutation of [0, {}): {} is out of range", dims_list(perm), rank,
                                      d);
    }
    if (seen[static_cast<std::size_t>(d)]) {
      return errors::invalid_argument("perm {} is not a permutation of [0, {}): {} appears twice", dims_list(perm), rank, d);
    }
    seen[static_cast<std::size_t>(d)] = true;
    p[i] = static_cast<int>(d);
  }
  return p;
}

StatusOr<Shape> transpose_shape(const Shape& in, const std::vector<int64_t>& perm) {
  if (in.unknown_rank()) {
    if (perm.empty()) return Shape::unknown();
    auto p = transpose_perm(perm, static_cast<int>(perm.size()));  // a permutation of its own size
    if (!p.ok()) return p.status();
    return checked_shape(std::vector<int64_t>(perm.size(), -1));
  }
  auto p = transpose_perm(perm, in.rank());
  if (!p.ok()) return p.status();
  std::vector<int64_t> dims;
  for (int d : p.value()) dims.push_back(in.dim(d));
  return checked_shape(dims);
}

StatusOr<Shape> concat_shape(const std::vector<Shape>& ins, int64_t axis) {
  if (ins.empty()) return invalid("needs at least one input");
  int ref = -1;  // the first input of known rank
  for (std::size_t k = 0; k < ins.size(); ++k) {
    if (ins[k].unknown_rank()) continue;
    if (ref < 0) {
      ref = static_cast<int>(k);
    } else if (ins[k].rank() != ins[static_cast<std::size_t>(ref)].rank()) {
      return errors::invalid_argument("inputs must have one rank: input {} has shape {}, input {} has shape {}", ref,
                                      ins[static_cast<std::size_t>(ref)].to_string(), k, ins[k].to_string());
    }
  }
  if (ref < 0) return Shape::unknown();
  const Shape& first = ins[static_cast<std::size_t>(ref)];
  const int rank = first.rank();
  if (rank == 0) return errors::invalid_argument("cannot concatenate scalars (input {} has shape [])", ref);
  auto a = resolve_axis(axis, rank, fmt::format("inputs of rank {}", rank));
  if (!a.ok()) return a.status();
  std::vector<int64_t> dims(static_cast<std::size_t>(rank), -1);
  std::vector<int> from(static_cast<std::size_t>(rank), -1);  // the input a known dim came from
  int64_t along = 0;
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    if (s.unknown_rank()) {
      along = -1;
      continue;
    }
    for (int d = 0; d < rank; ++d) {
      const int64_t x = s.dim(d);
      if (d == a.value()) {
        if (x < 0 || along < 0) {
          along = -1;
        } else if (__builtin_add_overflow(along, x, &along)) {
          return errors::invalid_argument("the output's dimension {} overflows int64", d);
        }
        continue;
      }
      const auto ud = static_cast<std::size_t>(d);
      if (x < 0) continue;
      if (dims[ud] < 0) {
        dims[ud] = x;
        from[ud] = static_cast<int>(k);
      } else if (dims[ud] != x) {
        return errors::invalid_argument(
            "input {} has shape {} and input {} has shape {}: dimension {} differs (only the axis, {}, may)", from[ud],
            ins[static_cast<std::size_t>(from[ud])].to_string(), k, s.to_string(), d, a.value());
      }
    }
  }
  dims[static_cast<std::size_t>(a.value())] = along;
  return checked_shape(dims);
}

StatusOr<Shape> split_shape(const Shape& in, int64_t num, int64_t axis) {
  if (num < 1) return errors::invalid_argument("num_split must be at least 1, got {}", num);
  if (num > kMaxSplitOutputs) {
    return errors::invalid_argument("num_split {} is more than the {} outputs an op may have", num, kMaxSplitOutputs);
  }
  if (in.unknown_rank()) return Shape::unknown();
  auto a = resolve_axis(axis, in.rank(), input_named(in));
  if (!a.ok()) return a.status();
  Shape out = in;
  const int64_t d = in.dim(a.value());
  if (d >= 0 && d % num != 0) {
    return errors::invalid_argument("dimension {} of shape {} (size {}) does not split evenly into {} pieces",
                                    a.value(), in.to_string(), d, num);
  }
  out.set_dim(a.value(), d < 0 ? -1 : d / num);
  return out;
}

StatusOr<Shape> slice_shape(const Shape& in, const std::vector<int64_t>& begin, const std::vector<int64_t>& size) {
  if (begin.size() != size.size() || (!in.unknown_rank() && static_cast<int64_t>(begin.size()) != in.rank())) {
    return errors::invalid_argument("begin {} and size {} must have one entry per dimension of the input (shape {})",
                                    dims_list(begin), dims_list(size), in.to_string());
  }
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < begin.size(); ++i) {
    if (begin[i] < 0) return errors::invalid_argument("begin[{}] = {} must not be negative", i, begin[i]);
    if (size[i] < -1)
      return errors::invalid_argument("size[{}] = {} must be -1 (to the end) or at least 0", i, size[i]);
    const int64_t d = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
    if (d < 0) {
      dims.push_back(size[i]);
      continue;
    }
    if (begin[i] > d) {
      return errors::invalid_argument("begin[{}] = {} is out of range [0, {}] for shape {}", i, begin[i], d,
                                      in.to_string());
    }
    if (size[i] > d - begin[i]) {
      return errors::invalid_argument("size[{}] = {} is out of range [0, {}] for begin[{}] = {} and shape {}", i,
                                      size[i], d - begin[i], i, begin[i], in.to_string());
    }
    dims.push_back(size[i] == -1 ? d - begin[i] : size[i]);
  }
  return checked_shape(dims);
}

StatusOr<Shape> expand_dims_shape(const Shape& in, int64_t axis) {
  if (in.unknown_rank()) return Shape::unknown();
  const int rank = in.rank();
  if (axis < -rank - 1 || axis > rank) {
    return errors::invalid_argument("axis {} is out of range [{}, {}] for {}", axis, -rank - 1, rank, input_named(in));
  }
  std::vector<int64_t> dims = in.dims();
  dims.insert(dims.begin() + (axis < 0 ? axis + rank + 1 : axis), 1);
  return checked_shape(dims);
}

StatusOr<Shape> reshape_to_shape(const Shape& in, const Shape& to) {
  if (in.fully_defined() && to.fully_defined() && in.num_elements() != to.num_elements()) {
    return errors::invalid_argument("cannot reshape {} elements ({}) to {}", in.num_elements(), in.to_string(),
                                    to.to_string());
  }
  return to;
}

StatusOr<Shape> squeeze_shape(const Shape& in, const std::vector<int64_t>& axes) {
  if (in.unknown_rank()) return Shape::unknown();
  const int rank = in.rank();
  std::vector<bool> squeezed(static_cast<std::size_t>(rank), false);
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) {
      if (in.dim(d) < 0) return Shape::unknown();  // squeezed or not, as it turns out
      squeezed[static_cast<std::size_t>(d)] = in.dim(d) == 1;
    }
  }
  for (int64_t axis : axes) {
    auto a = resolve_axis(axis, rank, input_named(in));
    if (!a.ok()) return a.status();
    const int64_t d = in.dim(a.value());
    if (d >= 0 && d != 1) {
      return errors::invalid_argument("cannot squeeze dimension {} of shape {}: its size is {}, not 1", a.value(),
                                      in.to_string(), d);
    }
    squeezed[static_cast<std::size_t>(a.value())] = true;
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) {
    if (!squeezed[static_cast<std::size_t>(d)]) dims.push_back(in.dim(d));
  }
  return checked_shape(dims);
}

StatusOr<Shape> tile_shape(const Shape& in, const std::vector<int64_t>& multiples) {
  if (!in.unknown_rank() && static_cast<int64_t>(multiples.size()) != in.rank()) {
    return errors::invalid_argument("multiples {} has {} entries, the input (shape {}) has rank {}", dims_list(multiples),
                                    multiples.size(), in.to_string(), in.rank());
  }
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < multiples.size(); ++i) {
    const int64_t m = multiples[i];
    if (m < 0) return errors::invalid_argument("multiples[{}] = {} must not be negative", i, m);
    const int64_t d = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
    int64_t out = -1;
    if (m == 0) {
      out = 0;
    } else if (d >= 0 && __builtin_mul_overflow(d, m, &out)) {
      return errors::invalid_argument("dimension {} of the output, {} * {}, overflows int64", i, d, m);
    }
    dims.push_back(out);
  }
  return checked_shape(dims);
}

StatusOr<Shape> pad_shape(const Shape& in, const std::vector<int64_t>& paddings) {
  const std::size_t pairs = paddings.size() / 2;
  if (paddings.size() % 2 != 0 || (!in.unknown_rank() && static_cast<int64_t>(pairs) != in.rank())) {
    return errors::invalid_argument("paddings has {} pairs, the input (shape {}) has rank {}", pairs, in.to_string(),
                                    in.rank());
  }
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < pairs; ++i) {
    const int64_t before = paddings[2 * i];
    const int64_t after = paddings[2 * i + 1];
    if (before < 0 || after < 0) {
      return errors::invalid_argument("paddings[{}] = ({}, {}) must not be negative", i, before, after);
    }
    const int64_t d = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
    int64_t out = -1;
    if (d >= 0 && (__builtin_add_overflow(d, before, &out) || __builtin_add_overflow(out, after, &out))) {
      return errors::invalid_argument("dimension {} of the output, {} + {} + {}, overflows int64", i, before, d, after);
    }
    dims.push_back(out);
  }
  return checked_shape(dims);
}

// ---- StridedCopy ----

int64_t StridedCopy::num_elements() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= dims[static_cast<std::size_t>(d)];
  return n;
}

void StridedCopy::simplify() {
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    if (dims[ud] == 0) {
      rank = 1;
      dims[0] = 0;
      return;
    }
    if (dims[ud] == 1) continue;  // moves no offset
    const auto p = static_cast<std::size_t>(r - 1);
    if (r > 0 && dst_strides[p] == dst_strides[ud] * dims[ud] && src_strides[p] == src_strides[ud] * dims[ud]) {
      dims[p] *= dims[ud];
      dst_strides[p] = dst_strides[ud];
      src_strides[p] = src_strides[ud];
      continue;
    }
    const auto ur = static_cast<std::size_t>(r);
    dims[ur] = dims[ud];
    dst_strides[ur] = dst_strides[ud];
    src_strides[ur] = src_strides[ud];
    ++r;
  }
  rank = r;
}

std::array<int64_t, Shape::kMaxRank> row_major_strides(const Shape& s) {
  std::array<int64_t, Shape::kMaxRank> strides{};
  int64_t stride = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = stride;
    stride *= s.dim(d);
  }
  return strides;
}

namespace {

// A copy of a block of `block`'s dims between row-major `src` and `dst` of its rank, both offsets
// 0: what a slice (the block is the output) and a pad (the block is the input) share.
StridedCopy block_copy(const Shape& block, const Shape& src, const Shape& dst) {
  StridedCopy c;
  const auto src_strides = row_major_strides(src);
  const auto dst_strides = row_major_strides(dst);
  c.rank = block.rank();
  for (int d = 0; d < c.rank; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    c.dims[ud] = block.dim(d);
    c.dst_strides[ud] = dst_strides[ud];
    c.src_strides[ud] = src_strides[ud];
  }
  return c;
}

}  // namespace

StridedCopy slice_copy(const Shape& in, const std::vector<int64_t>& begin, const Shape& out) {
  StridedCopy c = block_copy(out, in, out);
  for (std::size_t d = 0; d < static_cast<std::size_t>(c.rank); ++d) c.src_offset += begin[d] * c.src_strides[d];
  return c;
}

StridedCopy transpose_copy(const Shape& in, const std::vector<int>& perm) {
  StridedCopy c;
  const auto in_strides = row_major_strides(in);
  c.rank = in.rank();
  int64_t stride = 1;
  for (int d = c.rank - 1; d >= 0; --d) {
    const auto ud = static_cast<std::size_t>(d);
    c.dims[ud] = in.dim(perm[ud]);
    c.dst_strides[ud] = stride;
    c.src_strides[ud] = in_strides[static_cast<std::size_t>(perm[ud])];
    stride *= c.dims[ud];
  }
  return c;
}

StridedCopy tile_copy(const Shape& in, const std::vector<int64_t>& multiples) {
  // Output dim d is multiples[d] copies of in.dim(d): two loops, the copy outside the element, in
  // the output's row-major order.
  StridedCopy c;
  const auto in_strides = row_major_strides(in);
  c.rank = 2 * in.rank();
  int64_t stride = 1;
  for (int d = in.rank() - 1; d >= 0; --d) {
    const auto ud = static_cast<std::size_t>(d);
    const int64_t n = in.dim(d);
    c.dims[2 * ud] = multiples[ud];
    c.dims[2 * ud + 1] = n;
    c.dst_strides[2 * ud] = n * stride;
    c.dst_strides[2 * ud + 1] = stride;
    c.src_strides[2 * ud] = 0;
    c.src_strides[2 * ud + 1] = in_strides[ud];
    stride *= n * multiples[ud];
  }
  return c;
}

StridedCopy pad_copy(const Shape& in, const std::vector<int64_t>& paddings, const Shape& out) {
  StridedCopy c = block_copy(in, in, out);
  for (std::size_t d = 0; d < static_cast<std::size_t>(c.rank); ++d) c.dst_offset += paddings[2 * d] * c.dst_strides[d];
  return c;
}

StridedCopy rows_copy(int64_t outer, int64_t width, int64_t total, int64_t offset, bool into_whole) {
  StridedCopy c;
  c.rank = 2;
  c.dims = {outer, width};
  if (into_whole) {
    c.dst_strides = {total, 1};
    c.src_strides = {width, 1};
    c.dst_offset = offset;
  } else {
    c.dst_strides = {width, 1};
    c.src_strides = {total, 1};
    c.src_offset = offset;
  }
  return c;
}

// ---- Shape functions ----

namespace {

using Dims = std::vector<int64_t>;

Status reshape_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  return add_shaped(c, c.input_dtype(0), reshape_shape(c.input_shape(0), c.attr<Dims>("shape")));
}

Status transpose_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  return add_shaped(c, c.input_dtype(0), transpose_shape(c.input_shape(0), c.attr<Dims>("perm")));
}

Status concat_fn(ShapeContext& c) {
  if (c.num_inputs() < 1) return c.invalid("needs at least one input");
  std::vector<Shape> shapes;
  for (int k = 0; k < c.num_inputs(); ++k) {
    if (c.input_dtype(k) != c.input_dtype(0)) {
      return c.invalid("inputs must have one dtype: input 0 is {}, input {} is {}", dtype_name(c.input_dtype(0)), k,
                       dtype_name(c.input_dtype(k)));
    }
    shapes.push_back(c.input_shape(k));
  }
  return add_shaped(c, c.input_dtype(0), concat_shape(shapes, c.attr<int64_t>("axis")));
}

Status split_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const int64_t num = c.attr<int64_t>("num_split");
  auto piece = split_shape(c.input_shape(0), num, c.attr<int64_t>("axis"));
  if (!piece.ok()) return c.invalid("{}", piece.status().message());
  for (int64_t k = 0; k < num; ++k) c.add_output(c.input_dtype(0), piece.value());
  return Status();
}

Status slice_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  return add_shaped(c, c.input_dtype(0), slice_shape(c.input_shape(0), c.attr<Dims>("begin"), c.attr<Dims>("size")));
}

// Input 0's dtype, the shape `shape_of` makes of input 0's shape and the attr `attr`: the ops that
// reshape their one input as one attr says.
template <class A, class F>
Status reshaped_by_attr(ShapeContext& c, F shape_of, const char* attr) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  return add_shaped(c, c.input_dtype(0), shape_of(c.input_shape(0), c.attr<A>(attr)));
}

Status expand_dims_fn(ShapeContext& c) { return reshaped_by_attr<int64_t>(c, expand_dims_shape, "axis"); }
Status squeeze_fn(ShapeContext& c) { return reshaped_by_attr<Dims>(c, squeeze_shape, "axes"); }
Status tile_fn(ShapeContext& c) { return reshaped_by_attr<Dims>(c, tile_shape, "multiples"); }
Status pad_fn(ShapeContext& c) { return reshaped_by_attr<Dims>(c, pad_shape, "paddings"); }

Status fill_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 0));
  const Tensor& value = c.attr<Tensor>("value");
  const Shape& shape = c.attr<Shape>("shape");
  if (value.shape().rank() != 0) return c.invalid("value must be a scalar, got shape {}", value.shape().to_string());
  if (!shape.fully_defined()) return c.invalid("shape {} must be fully defined", shape.to_string());
  c.add_output(value.dtype(), shape);
  return Status();
}

Status like_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  // zeros_like of strings is empty strings (as TensorFlow); strings have no one.
  if (c.op_type() == "OnesLike" && c.input_dtype(0) == DType::String) {
    return c.invalid("string tensors have no ones (input dtype string)");
  }
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

Status shape_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const Shape& in = c.input_shape(0);
  for (int d = 0; d < (in.unknown_rank() ? 0 : in.rank()); ++d) {
    if (in.dim(d) > INT32_MAX) {
      return c.invalid("dimension {} of shape {} does not fit the int32 output", d, in.to_string());
    }
  }
  c.add_output(DType::Int32, Shape{in.unknown_rank() ? -1 : in.rank()});
  return Status();
}

Status size_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  const Shape& in = c.input_shape(0);
  if (in.num_elements() > INT32_MAX) {
    return c.invalid("shape {} has {} elements, more than the int32 output holds", in.to_string(), in.num_elements());
  }
  c.add_output(DType::Int32, Shape{});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"Reshape", reshape_fn});
TESSERA_REGISTER_OP(OpDef{"Transpose", transpose_fn});
TESSERA_REGISTER_OP(OpDef{"ConcatV2", concat_fn});
TESSERA_REGISTER_OP(OpDef{"Split", split_fn});
TESSERA_REGISTER_OP(OpDef{"Slice", slice_fn});
TESSERA_REGISTER_OP(OpDef{"ExpandDims", expand_dims_fn});
TESSERA_REGISTER_OP(OpDef{"Squeeze", squeeze_fn});
TESSERA_REGISTER_OP(OpDef{"Tile", tile_fn});
TESSERA_REGISTER_OP(OpDef{"Pad", pad_fn});
TESSERA_REGISTER_OP(OpDef{"Fill", fill_fn});
TESSERA_REGISTER_OPS(like_fn, "ZerosLike", "OnesLike");
TESSERA_REGISTER_OP(OpDef{"Shape", shape_fn});
TESSERA_REGISTER_OP(OpDef{"Size", size_fn});

}  // namespace
}  // namespace internal

namespace ops {

namespace {

NodeSpec spec_with(const char* type, std::string name, const char* attr, internal::AttrValue value) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs[attr] = std::move(value);
  return spec;
}

}  // namespace

Output reshape(Output x, std::vector<int64_t> shape, std::string name) {
  return add_op("reshape", spec_with("Reshape", std::move(name), "shape", std::move(shape)), {x});
}

Output transpose(Output x, std::vector<int> perm, std::string name) {
  return add_op("transpose",
                spec_with("Transpose", std::move(name), "perm", std::vector<int64_t>(perm.begin(), perm.end())), {x});
}

Output concat(std::vector<Output> values, int axis, std::string name) {
  if (values.empty()) throw InvalidArgumentError("concat: needs at least one input");
  return add_op("concat", spec_with("ConcatV2", std::move(name), "axis", int64_t{axis}), std::move(values));
}

std::vector<Output> split(Output x, int num, int axis, std::string name) {
  NodeSpec spec = spec_with("Split", std::move(name), "axis", int64_t{axis});
  spec.attrs["num_split"] = int64_t{num};
  internal::Node* n = internal::add_op_node("split", std::move(spec), {x});
  std::vector<Output> outputs;
  for (int k = 0; k < static_cast<int>(n->output_dtypes.size()); ++k) outputs.emplace_back(n, k);
  return outputs;
}

Output slice(Output x, std::vector<int64_t> begin, std::vector<int64_t> size, std::string name) {
  NodeSpec spec = spec_with("Slice", std::move(name), "begin", std::move(begin));
  spec.attrs["size"] = std::move(size);
  return add_op("slice", std::move(spec), {x});
}

Output expand_dims(Output x, int axis, std::string name) {
  return add_op("expand_dims", spec_with("ExpandDims", std::move(name), "axis", int64_t{axis}), {x});
}

Output squeeze(Output x, std::vector<int> axes, std::string name) {
  return add_op("squeeze",
                spec_with("Squeeze", std::move(name), "axes", std::vector<int64_t>(axes.begin(), axes.end())), {x});
}

Output tile(Output x, std::vector<int64_t> multiples, std::string name) {
  return add_op("tile", spec_with("Tile", std::move(name), "multiples", std::move(multiples)), {x});
}

Output pad(Output x, std::vector<std::pair<int64_t, int64_t>> paddings, std::string name) {
  std::vector<int64_t> flat;  // [before_0, after_0, before_1, ...], as TensorFlow's [rank, 2] tensor
  for (const auto& [before, after] : paddings) {
    flat.push_back(before);
    flat.push_back(after);
  }
  return add_op("pad", spec_with("Pad", std::move(name), "paddings", std::move(flat)), {x});
}

Output fill(Graph& g, Shape shape, Tensor value, std::string name) {
  if (value.is_null()) throw InvalidArgumentError("fill: null tensor");
  NodeSpec spec = spec_with("Fill", std::move(name), "shape", shape);
  spec.attrs["value"] = std::move(value);
  return Output(g.impl().add_node(std::move(spec)), 0);
}

Output zeros_like(Output x, std::string name) {
  return add_op("zeros_like", NodeSpec{"ZerosLike", std::move(name)}, {x});
}
Output ones_like(Output x, std::string name) { return add_op("ones_like", NodeSpec{"OnesLike", std::move(name)}, {x}); }
Output shape(Output x, std::string name) { return add_op("shape", NodeSpec{"Shape", std::move(name)}, {x}); }
Output size(Output x, std::string name) { return add_op("size", NodeSpec{"Size", std::move(name)}, {x}); }

}  // namespace ops
}  // namespace tessera
