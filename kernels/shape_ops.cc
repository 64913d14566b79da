// CPU kernels of the shape ops: Reshape, ExpandDims and Squeeze (the input's buffer, relabelled),
// Transpose, ConcatV2, Split, Slice, Tile, Pad (copies), Fill, ZerosLike, OnesLike, Shape and Size.
//
// Every dtype: the copies move elements by their size alone (1, 2, 4 or 8 bytes), strings by
// assignment. Each kernel checks its input's shape with the arithmetic the op's shape function
// used at graph-build time (core/shape_ops.h, same messages; the checks and plans the GPU kernels
// share are in core/shape_op_kernels.h), and walks the StridedCopy it makes
// (strings: element by element): nested loops whose innermost run is one memcpy when both sides
// are contiguous there, and whose two loops of a transpose go in 32 x 32 blocks, so that neither
// side leaves the cache between uses. An op that would copy its input unchanged (a slice of all
// of it, multiples all 1, no padding, one piece) shares its buffer instead, as TensorFlow's
// kernels do.
#include "core/shape_ops.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/shape_op_kernels.h"

namespace tessera::internal {
namespace {

// n elements of kSize bytes, dst and src stepping by their strides (in elements).
template <std::size_t kSize>
void copy_run(char* __restrict dst, int64_t dst_stride, const char* __restrict src, int64_t src_stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_stride * kSize, src + i * src_stride * kSize, kSize);
}

// dst[r * dst_row + c] = src[r + c * src_col] for r < rows, c < cols (a transpose), in square
// blocks: the block's rows of src stay in cache while its columns are written.
template <std::size_t kSize>
void copy_blocked(char* __restrict dst, int64_t dst_row, const char* __restrict src, int64_t src_col, int64_t rows,
                  int64_t cols) {
  constexpr int64_t kBlock = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t r1 = std::min(rows, r0 + kBlock);
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c)
          std::memcpy(dst + (r * dst_row + c) * kSize, src + (r + c * src_col) * kSize, kSize);
      }
    }
  }
}

// Calls fn(dst_offset, src_offset) for every index of the loops `loops` of `c` (outermost first):
// an odometer carries both offsets along.
template <class Fn>
void for_each_offset(const StridedCopy& c, const std::vector<int>& loops, Fn&& fn) {
  const int m = static_cast<int>(loops.size());
  int64_t total = 1;
  for (int l : loops) total *= c.dims[static_cast<std::size_t>(l)];
  std::array<int64_t, StridedCopy::kMaxDims> index{};
  int64_t dst_off = 0;
  int64_t src_off = 0;
  for (int64_t i = 0; i < total; ++i) {
    fn(dst_off, src_off);
    for (int k = m - 1; k >= 0; --k) {
      const auto l = static_cast<std::size_t>(loops[static_cast<std::size_t>(k)]);
      dst_off += c.dst_strides[l];
      src_off += c.src_strides[l];
      if (++index[static_cast<std::size_t>(k)] < c.dims[l]) break;
      dst_off -= c.dst_strides[l] * c.dims[l];
      src_off -= c.src_strides[l] * c.dims[l];
      index[static_cast<std::size_t>(k)] = 0;
    }
  }
}

// Strings are objects, not bytes: `c` between string buffers, one assignment per element.
void strided_copy_strings(std::string* dst, const std::string* src, const StridedCopy& c) {
  std::vector<int> loops(static_cast<std::size_t>(c.rank));
  for (int k = 0; k < c.rank; ++k) loops[static_cast<std::size_t>(k)] = k;
  dst += c.dst_offset;
  src += c.src_offset;
  for_each_offset(c, loops, [&](int64_t dst_off, int64_t src_off) { dst[dst_off] = src[src_off]; });
}

// Performs `c` from `in`'s elements to `out`'s (one dtype). The innermost loop is one memcpy when
// both sides are contiguous along it; when only the destination is and an outer loop reads
// contiguously (a transpose), those two loops go in blocks.
void strided_copy(Tensor& out, const Tensor& in, StridedCopy c) {
  c.simplify();
  if (c.num_elements() == 0) return;
  if (in.dtype() == DType::String) {
    return strided_copy_strings(out.mutable_data<std::string>(), in.data<std::string>(), c);
  }
  const std::size_t elem = dtype_size(in.dtype());
  void* dst = out.raw_mutable_data();
  const void* src = in.raw_data();
  char* d = static_cast<char*>(dst) + c.dst_offset * static_cast<int64_t>(elem);
  const char* s = static_cast<const char*>(src) + c.src_offset * static_cast<int64_t>(elem);
  if (c.rank == 0) {
    std::memcpy(d, s, elem);
    return;
  }
  const int inner = c.rank - 1;
  const int64_t n = c.dims[static_cast<std::size_t>(inner)];
  const int64_t ds = c.dst_strides[static_cast<std::size_t>(inner)];
  const int64_t ss = c.src_strides[static_cast<std::size_t>(inner)];
  const auto bytes = static_cast<int64_t>(elem);
  int across = -1;  // an outer loop that reads contiguously
  for (int k = 0; k < inner && ds == 1 && ss != 1; ++k) {
    if (c.src_strides[static_cast<std::size_t>(k)] == 1) across = k;
  }
  std::vector<int> loops;
  for (int k = 0; k < inner; ++k) {
    if (k != across) loops.push_back(k);
  }
  if (across >= 0) {
    const auto a = static_cast<std::size_t>(across);
    const int64_t rows = c.dims[a];
    const int64_t dst_row = c.dst_strides[a];
    for_each_offset(c, loops, [&](int64_t dst_off, int64_t src_off) {
      char* to = d + dst_off * bytes;
      const char* from = s + src_off * bytes;
      switch (elem) {
        case 1: return copy_blocked<1>(to, dst_row, from, ss, rows, n);
        case 2: return copy_blocked<2>(to, dst_row, from, ss, rows, n);
        case 4: return copy_blocked<4>(to, dst_row, from, ss, rows, n);
        default: return copy_blocked<8>(to, dst_row, from, ss, rows, n);
      }
    });
    return;
  }
  for_each_offset(c, loops, [&](int64_t dst_off, int64_t src_off) {
    char* to = d + dst_off * bytes;
    const char* from = s + src_off * bytes;
    if (ds == 1 && ss == 1) {
      std::memcpy(to, from, static_cast<std::size_t>(n * bytes));
      return;
    }
    switch (elem) {
      case 1: return copy_run<1>(to, ds, from, ss, n);
      case 2: return copy_run<2>(to, ds, from, ss, n);
      case 4: return copy_run<4>(to, ds, from, ss, n);
      default: return copy_run<8>(to, ds, from, ss, n);
    }
  });
}

// Every element of `out` set to the `elem` bytes at `value`.
void fill_bytes(Tensor& out, const void* value, std::size_t elem) {
  char* p = static_cast<char*>(out.raw_mutable_data());
  const int64_t n = out.num_elements();
  const auto* v = static_cast<const unsigned char*>(value);
  bool all_same_byte = true;
  for (std::size_t i = 1; i < elem; ++i) all_same_byte = all_same_byte && v[i] == v[0];
  if (all_same_byte) {  // zeros, bools, and whatever else is one repeated byte
    std::memset(p, v[0], out.bytes());
    return;
  }
  switch (elem) {
    case 2: return copy_run<2>(p, 1, static_cast<const char*>(value), 0, n);
    case 4: return copy_run<4>(p, 1, static_cast<const char*>(value), 0, n);
    default: return copy_run<8>(p, 1, static_cast<const char*>(value), 0, n);
  }
}

// A view of input 0 with the shape relabel_shape_fn gives (Reshape, ExpandDims, Squeeze): no data
// moves. Thread-safe: compute() keeps no state between runs.
class RelabelOp final : public OpKernel {
 public:
  explicit RelabelOp(const Node& n) : OpKernel(n), shape_of_(relabel_shape_fn(n)) {}
  void compute(OpKernelContext& ctx) override { compute_relabel(ctx, shape_of_(ctx.input(0).shape())); }
  bool is_expensive() const override { return false; }

 private:
  const RelabelShapeFn shape_of_;
};

TESSERA_REGISTER_KERNEL("Reshape", "CPU", RelabelOp);
TESSERA_REGISTER_KERNEL("ExpandDims", "CPU", RelabelOp);
TESSERA_REGISTER_KERNEL("Squeeze", "CPU", RelabelOp);

// ReshapeToShapeOf(y, x): y's buffer with x's shape. Thread-safe.
class ReshapeToShapeOfOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    compute_relabel(ctx, reshape_to_shape(ctx.input(0).shape(), ctx.input(1).shape()));
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("ReshapeToShapeOf", "CPU", ReshapeToShapeOfOp);

// out = transpose(x, perm). Thread-safe.
class TransposeOp final : public OpKernel {
 public:
  explicit TransposeOp(const Node& n) : OpKernel(n), perm_(n.attr<std::vector<int64_t>>("perm")) {}
  void compute(OpKernelContext& ctx) override { compute_transpose(ctx, perm_, strided_copy); }

 private:
  const std::vector<int64_t> perm_;
};

TESSERA_REGISTER_KERNEL("Transpose", "CPU", TransposeOp);

// out = concat(inputs, axis): each input's rows copied into their columns of the output's rows.
// Thread-safe.
class ConcatOp final : public OpKernel {
 public:
  explicit ConcatOp(const Node& n) : OpKernel(n), axis_(n.attr<int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override { compute_concat(ctx, axis_, strided_copy); }

 private:
  const int64_t axis_;
};

TESSERA_REGISTER_KERNEL("ConcatV2", "CPU", ConcatOp);

// outputs = split(x, num, axis): each output's rows copied from its columns of the input's rows.
// Thread-safe.
class SplitOp final : public OpKernel {
 public:
  explicit SplitOp(const Node& n) : OpKernel(n), num_(n.attr<int64_t>("num_split")), axis_(n.attr<int64_t>("axis")) {}
  void compute(OpKernelContext& ctx) override { compute_split(ctx, num_, axis_, strided_copy); }

 private:
  const int64_t num_;
  const int64_t axis_;
};

TESSERA_REGISTER_KERNEL("Split", "CPU", SplitOp);

// out = x[begin : begin + size]. Thread-safe.
class SliceOp final : public OpKernel {
 public:
  explicit SliceOp(const Node& n)
      : OpKernel(n), begin_(n.attr<std::vector<int64_t>>("begin")), size_(n.attr<std::vector<int64_t>>("size")) {}
  void compute(OpKernelContext& ctx) override { compute_slice(ctx, begin_, size_, strided_copy); }

 private:
  const std::vector<int64_t> begin_;
  const std::vector<int64_t> size_;
};

TESSERA_REGISTER_KERNEL("Slice", "CPU", SliceOp);

// out = tile(x, multiples). Thread-safe.
class TileOp final : public OpKernel {
 public:
  explicit TileOp(const Node& n) : OpKernel(n), multiples_(n.attr<std::vector<int64_t>>("multiples")) {}
  void compute(OpKernelContext& ctx) override { compute_tile(ctx, multiples_, strided_copy); }

 private:
  const std::vector<int64_t> multiples_;
};

TESSERA_REGISTER_KERNEL("Tile", "CPU", TileOp);

// out = x with zeros around it. Zero bits are 0, +0.0 and false in every number dtype; strings are
// allocated empty, TensorFlow's zero string. Thread-safe.
class PadOp final : public OpKernel {
 public:
  explicit PadOp(const Node& n) : OpKernel(n), paddings_(n.attr<std::vector<int64_t>>("paddings")) {}
  void compute(OpKernelContext& ctx) override {
    auto zero = [](Tensor& out) {
      if (out.dtype() != DType::String && out.bytes() > 0) std::memset(out.raw_mutable_data(), 0, out.bytes());
    };
    compute_pad(ctx, paddings_, zero, strided_copy);
  }

 private:
  const std::vector<int64_t> paddings_;
};

TESSERA_REGISTER_KERNEL("Pad", "CPU", PadOp);

// The "shape" attr filled with the scalar "value" attr. Thread-safe.
class FillOp final : public OpKernel {
 public:
  explicit FillOp(const Node& n) : OpKernel(n), shape_(n.attr<Shape>("shape")), value_(n.attr<Tensor>("value")) {}
  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, shape_);
    if (out.dtype() == DType::String) {
      std::fill_n(out.mutable_data<std::string>(), out.num_elements(), value_.scalar<std::string>());
      return;
    }
    fill_bytes(out, value_.raw_data(), dtype_size(value_.dtype()));
  }

 private:
  const Shape shape_;
  const Tensor value_;
};

TESSERA_REGISTER_KERNEL("Fill", "CPU", FillOp);

// Zeros (kOne false) or ones of input 0's dtype and shape. Thread-safe.
template <bool kOne>
class FillLikeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.shape());
    if (x.dtype() == DType::String) return;  // zeros: the empty strings it was allocated with
    const uint64_t bits = kOne ? one_bits(x.dtype()) : 0;
    fill_bytes(out, &bits, dtype_size(x.dtype()));
  }
};

TESSERA_REGISTER_KERNEL("ZerosLike", "CPU", FillLikeOp<false>);
TESSERA_REGISTER_KERNEL("OnesLike", "CPU", FillLikeOp<true>);

// The dims of input 0 (its data is not read). Thread-safe.
class ShapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Shape& in = ctx.input(0).shape();
    if (Status s = shape_fits_int32(in); !s.ok()) return ctx.fail(s);
    int32_t* p = ctx.allocate_output(0, Shape{in.rank()}).mutable_data<int32_t>();
    for (int d = 0; d < in.rank(); ++d) p[d] = static_cast<int32_t>(in.dim(d));
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("Shape", "CPU", ShapeOp);

// The element count of input 0. Thread-safe.
class SizeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Shape& in = ctx.input(0).shape();
    if (Status s = size_fits_int32(in); !s.ok()) return ctx.fail(s);
    ctx.allocate_output(0, Shape{}).mutable_data<int32_t>()[0] = static_cast<int32_t>(in.num_elements());
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("Size", "CPU", SizeOp);

}  // namespace
}  // namespace tessera::internal
