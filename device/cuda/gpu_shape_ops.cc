// GPU kernels (device type "GPU") of the shape ops: Reshape, ExpandDims and Squeeze (the input's
// device buffer, relabelled: nothing is launched), Transpose, ConcatV2, Split, Slice, Tile, Pad
// (strided copies, shape_kernels.cu), Fill, ZerosLike, OnesLike, Shape and Size. Each checks its
// input's shape with core/shape_ops.h, as the CPU kernel does (kernels/shape_ops.cc, same
// messages and the same cases of sharing the input: most through the same function of
// core/shape_op_kernels.h), then launches on the compute stream and is done, stream-ordered
// (Note [GPU kernels] in gpu_op_kernel.cc). Every dtype.
#include <cstring>
#include <utility>
#include <vector>

#include "core/op_registry.h"
#include "core/shape_op_kernels.h"
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

// `out` zeroed on the stream; nothing for no bytes.
void launch_zero(GpuRun& r, Tensor& out, const char* what) {
  if (out.bytes() == 0) return;
  r.launch([check = r.launch_check, po = out.raw_mutable_data(), bytes = out.bytes(), what](cudaStream_t s) {
    check->check(cudaMemsetAsync(po, 0, bytes, s), what);
  });
}

// The `copy` of core/shape_op_kernels.h's compute_* on the GPU: launch_copy on `r` for `op`.
auto launcher(GpuRun& r, const char* op) {
  return [&r, op](Tensor& out, const Tensor& in, const StridedCopy& c) { launch_copy(r, c, in, out, op); };
}

// A view of input 0 with the shape relabel_shape_fn gives (Reshape, ExpandDims, Squeeze): no data
// moves, nothing is launched. Thread-safe: run() keeps no state between runs.
class RelabelGpuOp final : public GpuOpKernel {
 public:
  explicit RelabelGpuOp(const Node& n) : GpuOpKernel(n), shape_of_(relabel_shape_fn(n)) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun&) override { compute_relabel(ctx, shape_of_(ctx.input(0).shape())); }

 private:
  const RelabelShapeFn shape_of_;
};

// ReshapeToShapeOf(y, x): y's buffer with x's shape; only x's shape is read.
class ReshapeToShapeOfGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  bool needs_inputs_on_device() const override { return false; }
  void run(OpKernelContext& ctx, GpuRun&) override {
    compute_relabel(ctx, reshape_to_shape(ctx.input(0).shape(), ctx.input(1).shape()));
  }
};

// out = transpose(x, perm). Thread-safe.
class TransposeGpuOp final : public GpuOpKernel {
 public:
  explicit TransposeGpuOp(const Node& n) : GpuOpKernel(n), perm_(n.attr<std::vector<int64_t>>("perm")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { compute_transpose(ctx, perm_, launcher(r, "Transpose")); }

 private:
  const std::vector<int64_t> perm_;
};

// out = concat(inputs, axis): one copy per input into its columns of the output's rows.
// Thread-safe.
class ConcatGpuOp final : public AxisGpuOpKernel {
 public:
  using AxisGpuOpKernel::AxisGpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { compute_concat(ctx, axis_, launcher(r, "ConcatV2")); }
};

// outputs = split(x, num, axis): one copy per output from its columns of the input's rows.
// Thread-safe.
class SplitGpuOp final : public AxisGpuOpKernel {
 public:
  explicit SplitGpuOp(const Node& n) : AxisGpuOpKernel(n), num_(n.attr<int64_t>("num_split")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { compute_split(ctx, num_, axis_, launcher(r, "Split")); }

 private:
  const int64_t num_;
};

// out = x[begin : begin + size]. Thread-safe.
class SliceGpuOp final : public GpuOpKernel {
 public:
  explicit SliceGpuOp(const Node& n)
      : GpuOpKernel(n), begin_(n.attr<std::vector<int64_t>>("begin")), size_(n.attr<std::vector<int64_t>>("size")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { compute_slice(ctx, begin_, size_, launcher(r, "Slice")); }

 private:
  const std::vector<int64_t> begin_;
  const std::vector<int64_t> size_;
};

// out = tile(x, multiples). Thread-safe.
class TileGpuOp final : public GpuOpKernel {
 public:
  explicit TileGpuOp(const Node& n) : GpuOpKernel(n), multiples_(n.attr<std::vector<int64_t>>("multiples")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { compute_tile(ctx, multiples_, launcher(r, "Tile")); }

 private:
  const std::vector<int64_t> multiples_;
};

// out = x with zeros around it: the output zeroed, then x copied into its interior. Thread-safe.
class PadGpuOp final : public GpuOpKernel {
 public:
  explicit PadGpuOp(const Node& n) : GpuOpKernel(n), paddings_(n.attr<std::vector<int64_t>>("paddings")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    compute_pad(ctx, paddings_, [&r](Tensor& out) { launch_zero(r, out, "Pad"); }, launcher(r, "Pad"));
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
    if (!kOne) return launch_zero(r, out, "ZerosLike");
    launch_fill(r, out, one_bits(x.dtype()), "OnesLike");
  }
};

// The dims of input 0, written on the stream (its data is not read). Thread-safe.
class ShapeGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Shape& in = ctx.input(0).shape();
    if (Status s = shape_fits_int32(in); !s.ok()) return ctx.fail(s);
    gpu::Int32Values values;
    for (int d = 0; d < in.rank(); ++d) values.v[d] = static_cast<int32_t>(in.dim(d));
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
    const Shape& in = ctx.input(0).shape();
    if (Status s = size_fits_int32(in); !s.ok()) return ctx.fail(s);
    launch_fill(r, ctx.allocate_output(0, Shape{}), static_cast<uint64_t>(in.num_elements()), "Size");
  }
};

TESSERA_REGISTER_KERNEL("Reshape", "GPU", RelabelGpuOp);
TESSERA_REGISTER_KERNEL("ExpandDims", "GPU", RelabelGpuOp);
TESSERA_REGISTER_KERNEL("ReshapeToShapeOf", "GPU", ReshapeToShapeOfGpuOp);
TESSERA_REGISTER_KERNEL("Squeeze", "GPU", RelabelGpuOp);
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
