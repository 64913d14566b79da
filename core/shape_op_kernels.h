// The device-independent half of the shape ops' kernels, shared by the CPU kernels
// (kernels/shape_ops.cc) and the GPU kernels (device/cuda/gpu_shape_ops.cc), so that both check
// their inputs alike (core/shape_ops.h, the op definitions' messages), share their input in the
// same cases, and plan the same copies. Each compute_* function fails the op, or sets input 0 as
// the output where the op would copy it unchanged, or allocates the outputs and calls
// `copy(out, in, c)` for each StridedCopy `c` of elements from `in` into `out`: the device's way
// of moving them (a loop on the host, a launch on the GPU).
//
//   void compute(OpKernelContext& ctx) override {
//     compute_slice(ctx, begin_, size_, [](Tensor& out, const Tensor& in, const StridedCopy& c) { ... });
//   }
#pragma once

#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/half.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/shape_ops.h"

namespace tessera::internal {

// Reshape, ExpandDims, Squeeze and ReshapeToShapeOf: input 0's buffer with `shape` (no data moves).
inline void compute_relabel(OpKernelContext& ctx, const StatusOr<Shape>& shape) {
  if (!shape.ok()) return ctx.fail(shape.status());
  ctx.set_output(0, ctx.input(0).reshaped(shape.value()));
}

// The shape a relabelling node `n` (Reshape, ExpandDims or Squeeze) gives its input's shape,
// with n's attrs bound.
using RelabelShapeFn = std::function<StatusOr<Shape>(const Shape&)>;
inline RelabelShapeFn relabel_shape_fn(const Node& n) {
  if (n.type == "Reshape") {
    return [shape = n.attr<std::vector<int64_t>>("shape")](const Shape& in) { return reshape_shape(in, shape); };
  }
  if (n.type == "ExpandDims") {
    return [axis = n.attr<int64_t>("axis")](const Shape& in) { return expand_dims_shape(in, axis); };
  }
  TESSERA_CHECK(n.type == "Squeeze");
  return [axes = n.attr<std::vector<int64_t>>("axes")](const Shape& in) { return squeeze_shape(in, axes); };
}

// Transpose: out = transpose(x, perm).
template <class Copy>
void compute_transpose(OpKernelContext& ctx, const std::vector<int64_t>& perm_attr, Copy&& copy) {
  const Tensor& x = ctx.input(0);
  auto perm = transpose_perm(perm_attr, x.shape().rank());
  if (!perm.ok()) return ctx.fail(perm.status());
  const StridedCopy c = transpose_copy(x.shape(), perm.value());
  Tensor& out = ctx.allocate_output(0, Shape(std::vector<int64_t>(c.dims.begin(), c.dims.begin() + c.rank)));
  copy(out, x, c);
}

// ConcatV2: each input's rows into their columns of the output's rows.
template <class Copy>
void compute_concat(OpKernelContext& ctx, int64_t axis_attr, Copy&& copy) {
  std::vector<Shape> shapes;
  for (int k = 0; k < ctx.num_inputs(); ++k) shapes.push_back(ctx.input(k).shape());
  auto shape = concat_shape(shapes, axis_attr);
  if (!shape.ok()) return ctx.fail(shape.status());
  const Shape& out_shape = shape.value();
  if (ctx.num_inputs() == 1) return ctx.set_output(0, ctx.input(0));
  const int axis = resolve_axis(axis_attr, out_shape.rank(), "").value();
  Tensor& out = ctx.allocate_output(0, out_shape);
  const int64_t outer = out_shape.sub_shape(0, axis).num_elements();
  const int64_t total = out_shape.sub_shape(axis).num_elements();
  int64_t offset = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const Tensor& in = ctx.input(k);
    const int64_t width = in.shape().sub_shape(axis).num_elements();
    copy(out, in, rows_copy(outer, width, total, offset, true));
    offset += width;
  }
}

// Split: each output's rows from its columns of the input's rows.
template <class Copy>
void compute_split(OpKernelContext& ctx, int64_t num, int64_t axis_attr, Copy&& copy) {
  const Tensor& x = ctx.input(0);
  auto shape = split_shape(x.shape(), num, axis_attr);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (num == 1) return ctx.set_output(0, x);
  const Shape& piece = shape.value();
  const int axis = resolve_axis(axis_attr, piece.rank(), "").value();
  const int64_t outer = piece.sub_shape(0, axis).num_elements();
  const int64_t width = piece.sub_shape(axis).num_elements();
  for (int k = 0; k < ctx.num_outputs(); ++k) {
    Tensor& out = ctx.allocate_output(k, piece);
    copy(out, x, rows_copy(outer, width, width * num, k * width, false));
  }
}

// Slice: out = x[begin : begin + size]; all of it (begin 0) is x itself.
template <class Copy>
void compute_slice(OpKernelContext& ctx, const std::vector<int64_t>& begin, const std::vector<int64_t>& size,
                   Copy&& copy) {
  const Tensor& x = ctx.input(0);
  auto shape = slice_shape(x.shape(), begin, size);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (shape.value() == x.shape()) return ctx.set_output(0, x);
  Tensor& out = ctx.allocate_output(0, shape.value());
  copy(out, x, slice_copy(x.shape(), begin, out.shape()));
}

// Tile: out = tile(x, multiples); every multiple 1 (or nothing to copy) is x itself.
template <class Copy>
void compute_tile(OpKernelContext& ctx, const std::vector<int64_t>& multiples, Copy&& copy) {
  const Tensor& x = ctx.input(0);
  auto shape = tile_shape(x.shape(), multiples);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (shape.value() == x.shape()) return ctx.set_output(0, x);
  Tensor& out = ctx.allocate_output(0, shape.value());
  copy(out, x, tile_copy(x.shape(), multiples));
}

// Pad: out = x with zeros around it, `zero(out)` first; no padding is x itself.
template <class Zero, class Copy>
void compute_pad(OpKernelContext& ctx, const std::vector<int64_t>& paddings, Zero&& zero, Copy&& copy) {
  const Tensor& x = ctx.input(0);
  auto shape = pad_shape(x.shape(), paddings);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (shape.value() == x.shape()) return ctx.set_output(0, x);
  Tensor& out = ctx.allocate_output(0, shape.value());
  zero(out);
  copy(out, x, pad_copy(x.shape(), paddings, out.shape()));
}

// Shape: InvalidArgument when a dim of `in` does not fit the int32 output.
inline Status shape_fits_int32(const Shape& in) {
  for (int d = 0; d < in.rank(); ++d) {
    if (in.dim(d) > INT32_MAX) {
      return errors::invalid_argument("dimension {} of shape {} does not fit the int32 output", d, in.to_string());
    }
  }
  return Status();
}

// Size: InvalidArgument when the element count of `in` does not fit the int32 output.
inline Status size_fits_int32(const Shape& in) {
  if (in.num_elements() > INT32_MAX) {
    return errors::invalid_argument("shape {} has {} elements, more than the int32 output holds", in.to_string(),
                                    in.num_elements());
  }
  return Status();
}

// OnesLike: the one of `dtype`, as its bits (none for strings, which have no ones).
inline uint64_t one_bits(DType dtype) {
  uint64_t bits = 0;
  auto put = [&bits](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (dtype) {
    case DType::Float32: put(1.0f); break;
    case DType::Float64: put(1.0); break;
    case DType::Int32: put(int32_t{1}); break;
    case DType::Int64: put(int64_t{1}); break;
    case DType::Bool: put(true); break;
    case DType::Float16: put(float16_t(1.0f)); break;
    case DType::BFloat16: put(bfloat16_t(1.0f)); break;
    case DType::String: break;  // refused by OnesLike's shape function, and never on a GPU
  }
  return bits;
}

}  // namespace tessera::internal
