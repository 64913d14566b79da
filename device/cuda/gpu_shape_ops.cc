// GPU kernels (device type "GPU") of the shape ops: Reshape, ExpandDims and Squeeze (the input's
// device buffer, relabelled: nothing is launched), Transpose, ConcatV2, Split, Slice, Tile, Pad
// (strided copies, shape_kernels.cu), Fill, ZerosLike, OnesLike, Shape and Size. Each checks its
// input's shape with core/shape_ops.h, as the CPU kernel does (kernels/shape_ops.cc, same
// messages and the same cases of sharing the input), then launches on the compute stream and is
// done, stream-ordered (Note [GPU kernels] in gpu_op_kernel.cc). Every dtype.
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/op_registry.h"
#include "core/shape_ops.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

// Launches `c` from `src` into `dst` (device tensors of one dtype); nothing for no elements.
void launch_copy(GpuRun& r, StridedCopy c, const Tensor& src, Tensor& dst, const char* what) {
  c.simplify();
  const int64_t n = c.num_elements();
  if (n == 0) return;
  gpu::CopyGeometry g;
  g.rank = c.rank;
  for (int k = 0; k < c.rank; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    g.dims[k] = c.dims[uk];
    g.dst_strides[k] = c.dst_strides[uk];
    g.src_strides[k] = c.src_strides[uk];
  }
  const auto elem = static_cast<int64_t>(dtype_size(src.dtype()));
  const void* ps = static_cast<const char*>(src.raw_data()) + c.src_offset * elem;
  void* pd = static_cast<char*>(dst.raw_mutable_data()) + c.dst_offset * elem;
  r.launch([check = r.launch_check, g, elem, ps, pd, n, what](cudaStream_t s) {
    check->check(gpu::launch_strided_copy(static_cast<int>(elem), g, ps, pd, n, s), what);
  });
}

// A view of input 0 with the shape `shape_of` gives: no data moves, nothing is launched.
// Thread-safe: run() keeps no state between runs.
template <class Derived>
class RelabelGpuOp : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun&) override {
    const Tensor& x = ctx.input(0);
    auto shape = static_cast<const Derived*>(this)->shape_of(x.shape());
    if (!shape.ok()) return ctx.fail(shape.status());
    ctx.set_output(0, x.reshaped(shape.value()));
  }
};

class ReshapeGpuOp final : public RelabelGpuOp<ReshapeGpuOp> {
 public:
  explicit ReshapeGpuOp(const Node& n) : RelabelGpuOp(n), shape_(n.attr<std::vector<int64_t>>("shape")) {}
  StatusOr<Shape> shape_of(const Shape& in) const { return reshape_shape(in, shape_); }

 private:
  const std::vector<int64_t> shape_;
};

class ExpandDimsGpuOp final : public RelabelGpuOp<ExpandDimsGpuOp> {
 public:
  explicit ExpandDimsGpuOp(const Node& n) : RelabelGpuOp(n), axis_(n.attr<int64_t>("axis")) {}
  StatusOr<Shape> shape_of(const Shape& in) const { return expand_dims_shape(in, axis_); }

 private:
  const int64_t axis_;
};

// ReshapeToShapeOf(y, x): y's buffer with x's shape; only x's shape is read.
class ReshapeToShapeOfGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  bool needs_inputs_on_device() const override { return false; }
  void run(OpKernelContext& ctx, GpuRun&) override {
    auto shape = reshape_to_shape(ctx.input(0).shape(), ctx.input(1).shape());
    if (!shape.ok()) return ctx.fail(shape.status());
    ctx.set_output(0, ctx.input(0).reshaped(shape.value()));
  }
};

class SqueezeGpuOp final : public RelabelGpuOp<SqueezeGpuOp> {
 public:
  explicit SqueezeGpuOp(const Node& n) : RelabelGpuOp(n), axes_(n.attr<std::vector<int64_t>>("axes")) {}
  StatusOr<Shape> shape_of(const Shape& in) const { return squeeze_shape(in, axes_); }

 private:
  const std::vector<int64_t> axes_;
};

// out = transpose(x, perm). Thread-safe.
class TransposeGpuOp final : public GpuOpKernel {
 public:
  explicit TransposeGpuOp(const Node& n) : GpuOpKernel(n), perm_(n.attr<std::vector<int64_t>>("perm")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    auto perm = transpose_perm(perm_, x.shape().rank());
    if (!perm.ok()) return ctx.fail(perm.status());
    const StridedCopy c = transpose_copy(x.shape(), perm.value());
    Tensor& out = ctx.allocate_output(0, Shape(std::vector<int64_t>(c.dims.begin(), c.dims.begin() + c.rank)));
    launch_copy(r, c, x, out, "Transpose");
  }

 private:
  const std::vector<int64_t> perm_;
};

// out = concat(inputs, axis): one copy per input into its columns of the output's rows.
// Thread-safe.
class ConcatGpuOp final : public GpuOpKernel {
 public:
  explicit ConcatGpuOp(const Node& n) : GpuOpKernel(n), axis_(n.attr<int64_t>("axis")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    std::vector<Shape> shapes;
    for (int k = 0; k < ctx.num_inputs(); ++k) shapes.push_back(ctx.input(k).shape());
    auto shape = concat_shape(shapes, axis_);
    if (!shape.ok()) return ctx.fail(shape.status());
    const Shape& out_shape = shape.value();
    if (ctx.num_inputs() == 1) return ctx.set_output(0, ctx.input(0));
    const int axis = resolve_axis(axis_, out_shape.rank(), "").value();
    Tensor& out = ctx.allocate_output(0, out_shape);
    const int64_t outer = out_shape.sub_shape(0, axis).num_elements();
    const int64_t total = out_shape.sub_shape(axis).num_elements();
    int64_t offset = 0;
    for (int k = 0; k < ctx.num_inputs(); ++k) {
      const Tensor& in = ctx.input(k);
      const int64_t width = in.shape().sub_shape(axis).num_elements();
      launch_copy(r, rows_copy(outer, width, total, offset, true), in, out, "ConcatV2");
      offset += width;
    }
  }

 private:
  const int64_t axis_;
};

// outputs = split(x, num, axis): one copy per output from its columns of the input's rows.
// Thread-safe.
class SplitGpuOp final : public GpuOpKernel {
 public:
  explicit SplitGpuOp(const Node& n)
      : GpuOpKernel(n), num_(n.attr<int64_t>("num_split")), axis_(n.attr<int64_t>("axis")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    auto shape = split_shape(x.shape(), num_, axis_);
    if (!shape.ok()) return ctx.fail(shape.status());
    if (num_ == 1) return ctx.set_output(0, x);
    const Shape& piece = shape.value();
    const int axis = resolve_axis(axis_, piece.rank(), "").value();
    const int64_t outer = piece.sub_shape(0, axis).num_elements();
    const int64_t width = piece.sub_shape(axis).num_elements();
    for (int k = 0; k < ctx.num_outputs(); ++k) {
      Tensor& out = ctx.allocate_output(k, piece);
      launch_copy(r, rows_copy(outer, width, width * num_, k * width, false), x, out, "Split");
    }
  }

 private:
  const int64_t num_;
  const int64_t axis_;
};

// out = x[begin : begin + size]. Thread-safe.
class SliceGpuOp final : public GpuOpKernel {
 public:
  explicit SliceGpuOp(const Node& n)
      : GpuOpKernel(n), begin_(n.attr<std::vector<int64_t>>("begin")), size_(n.attr<std::vector<int64_t>>("size")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    auto shape = slice_shape(x.shape(), begin_, size_);
    if (!shape.ok()) return ctx.fail(shape.status());
    if (shape.value() == x.shape()) return ctx.set_output(0, x);
    Tensor& out = ctx.allocate_output(0, shape.value());
    launch_copy(r, slice_copy(x.shape(), begin_, out.shape()), x, out, "Slice");
  }

 private:
  const std::vector<int64_t> begin_;
  const std::vector<int64_t> size_;
};

// out = tile(x, multiples). Thread-safe.
class TileGpuOp final : public GpuOpKernel {
 public:
  explicit TileGpuOp(const Node& n) : GpuOpKernel(n), multiples_(n.attr<std::vector<int64_t>>("multiples")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    auto shape = tile_shape(x.shape(), multiples_);
    if (!shape.ok()) return ctx.fail(shape.status());
    if (shape.value() == x.shape()) return ctx.set_output(0, x);
    Tensor& out = ctx.allocate_output(0, shape.value());
    launch_copy(r, tile_copy(x.shape(), multiples_), x, out, "Tile");
  }

 private:
  const std::vector<int64_t> multiples_;
};

// out = x with zeros around it: the output zeroed, then x copied into its interior. Thread-safe.
class PadGpuOp final : public GpuOpKernel {
 public:
  explicit PadGpuOp(const Node& n) : GpuOpKernel(n), paddings_(n.attr<std::vector<int64_t>>("paddings")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    auto shape = pad_shape(x.shape(), paddings_);
    if (!shape.ok()) return ctx.fail(shape.status());
    if (shape.value() == x.shape()) return ctx.set_output(0, x);
    Tensor& out = ctx.allocate_output(0, shape.value());
    if (out.bytes() == 0) return;
    r.launch([check = r.launch_check, po = out.raw_mutable_data(), bytes = out.bytes()](cudaStream_t s) {
      check->check(cudaMemsetAsync(po, 0, bytes, s), "Pad");
    });
    launch_copy(r, pad_copy(x.shape(), paddings_, out.shape()), x, out, "Pad");
  }

 private:
  const std::vector<int64_t> paddings_;
};

// `out` filled on the stream with the value whose bits are `bits`.
void launch_fill(GpuRun& r, Tensor& out, uint64_t bits, const char* what) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  r.launch([check = r.launch_check, elem = static_cast<int>(dtype_size(out.dtype())), bits, po = out.raw_mutable_data(),
            n, what](cudaStream_t s) { check->check(gpu::launch_fill(elem, bits, po, n, s), what); });
}

// The bits of a scalar host tensor.
uint64_t bits_of(const Tensor& scalar) {
  uint64_t bits = 0;
  std::memcpy(&bits, scalar.raw_data(), dtype_size(scalar.dtype()));
  return bits;
}

// The "shape" attr filled with the scalar "value" attr (whose bits go with the launch: nothing is
// copied to the device first). Thread-safe.
class FillGpuOp final : public GpuOpKernel {
 public:
  explicit FillGpuOp(const Node& n)
      : GpuOpKernel(n), shape_(n.attr<Shape>("shape")), bits_(bits_of(n.attr<Tensor>("value"))) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { launch_fill(r, ctx.allocate_output(0, shape_), bits_, "Fill"); }

 private:
  const Shape shape_;
  const uint64_t bits_;
};

// Zeros (kOne false) or ones of input 0's dtype and shape. Thread-safe.
template <bool kOne>
class FillLikeGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.shape());
    if (!kOne) {
      if (out.bytes() == 0) return;
      r.launch([check = r.launch_check, po = out.raw_mutable_data(), bytes = out.bytes()](cudaStream_t s) {
        check->check(cudaMemsetAsync(po, 0, bytes, s), "ZerosLike");
      });
      return;
    }
    launch_fill(r, out, one_bits(x.dtype()), "OnesLike");
  }

 private:
  static uint64_t one_bits(DType dtype) {
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
      case DType::String: break;  // host memory only: never on a GPU
    }
    return bits;
  }
};

// The dims of input 0, written on the stream (its data is not read). Thread-safe.
class ShapeGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Shape& in = ctx.input(0).shape();
    gpu::Int32Values values;
    for (int d = 0; d < in.rank(); ++d) {
      if (in.dim(d) > INT32_MAX) {
        return ctx.fail(ErrorCode::kInvalidArgument, "dimension {} of shape {} does not fit the int32 output", d,
                        in.to_string());
      }
      values.v[d] = static_cast<int32_t>(in.dim(d));
    }
    Tensor& out = ctx.allocate_output(0, Shape{in.rank()});
    if (in.rank() == 0) return;
    r.launch([check = r.launch_check, values, n = in.rank(), po = out.raw_mutable_data()](cudaStream_t s) {
      check->check(gpu::launch_write_int32(values, n, po, s), "Shape");
    });
  }
};

// The element count of input 0, written on the stream. Thread-safe.
class SizeGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (x.num_elements() > INT32_MAX) {
      return ctx.fail(ErrorCode::kInvalidArgument, "shape {} has {} elements, more than the int32 output holds",
                      x.shape().to_string(), x.num_elements());
    }
    launch_fill(r, ctx.allocate_output(0, Shape{}), static_cast<uint64_t>(x.num_elements()), "Size");
  }
};

TESSERA_REGISTER_KERNEL("Reshape", "GPU", ReshapeGpuOp);
TESSERA_REGISTER_KERNEL("ExpandDims", "GPU", ExpandDimsGpuOp);
TESSERA_REGISTER_KERNEL("ReshapeToShapeOf", "GPU", ReshapeToShapeOfGpuOp);
TESSERA_REGISTER_KERNEL("Squeeze", "GPU", SqueezeGpuOp);
TESSERA_REGISTER_KERNEL("Transpose", "GPU", TransposeGpuOp);
TESSERA_REGISTER_KERNEL("ConcatV2", "GPU", ConcatGpuOp);
TESSERA_REGISTER_KERNEL("Split", "GPU", SplitGpuOp);
TESSERA_REGISTER_KERNEL("Slice", "GPU", SliceGpuOp);
TESSERA_REGISTER_KERNEL("Tile", "GPU", TileGpuOp);
TESSERA_REGISTER_KERNEL("Pad", "GPU", PadGpuOp);
TESSERA_REGISTER_KERNEL("Fill", "GPU", FillGpuOp);
TESSERA_REGISTER_KERNEL("ZerosLike", "GPU", FillLikeGpuOp<false>);
TESSERA_REGISTER_KERNEL("OnesLike", "GPU", FillLikeGpuOp<true>);
TESSERA_REGISTER_KERNEL("Shape", "GPU", ShapeGpuOp);
TESSERA_REGISTER_KERNEL("Size", "GPU", SizeGpuOp);

}  // namespace
}  // namespace tessera::internal
