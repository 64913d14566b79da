// GPU kernels (device type "GPU") of the neural-network ops: Softmax, LogSoftmax, the two cross
// entropies, BiasAdd, BiasAddGrad, L2Loss, the gradient kernels ReluGrad, TanhGrad, SigmoidGrad,
// SqrtGrad and GatherGrad, Dropout and TruncatedNormal (StopGradient is Identity's kernel:
// gpu_state_ops.cc). Each checks its inputs with core/nn_ops.h as the CPU kernel does
// (kernels/nn_ops.cc, same messages), then launches nn_kernels.cu on the compute stream and is
// done, stream-ordered (Note [GPU kernels] in gpu_op_kernel.cc). A sparse label or a GatherGrad
// index out of range is found on the device: a flag read back after the run fails the op naming
// the first one, as the CPU kernel does (GatherV2 in gpu_select_ops.cc is the model).
#include <atomic>

#include "core/nn_ops.h"
#include "core/op_registry.h"
#include "core/random_seed.h"
#include "core/select_ops.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

Status unsupported(DType dtype) { return errors::invalid_argument("unsupported dtype {}", dtype_name(dtype)); }

// The kernels with no state are functions (StatelessGpuOp); the others classes.

// The checks of a two-input op in the CPU kernel's order: inputs 0 and 1 of one dtype, then the
// output shape that `shape_of` gives for their shapes.
template <class ShapeFn>
StatusOr<Shape> same_dtype_shape(const Tensor& a, const Tensor& b, ShapeFn&& shape_of) {
  if (Status s = same_dtypes(a, b, 0, 1); !s.ok()) return s;
  return shape_of(a.shape(), b.shape());
}

// Softmax and LogSoftmax over the last axis.
template <bool kLog>
void softmax_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& x = ctx.input(0);
  if (Status s = softmax_check(x.shape()); !s.ok()) return ctx.fail(s);
  if (!dtype_is_floating(x.dtype())) return ctx.fail(unsupported(x.dtype()));
  Tensor& y = ctx.allocate_output(0, x.shape());
  const RowView v = rows_of(x.shape());
  if (v.rows == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(x.dtype()), px = x.raw_data(), py = y.raw_mutable_data(), v](
               cudaStream_t s) {
    check->check(gpu::launch_softmax(kLog, elem, px, py, v.rows, v.cols, s), kLog ? "LogSoftmax" : "Softmax");
  });
}

// SparseSoftmaxCrossEntropyWithLogits (labels, logits).
void sparse_xent_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& labels = ctx.input(0);
  const Tensor& logits = ctx.input(1);
  auto shape = sparse_xent_kernel_shape(labels, logits);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (!dtype_is_floating(logits.dtype())) return ctx.fail(unsupported(logits.dtype()));
  const int64_t batch = shape.value().dim(0);
  const int64_t classes = shape.value().dim(1);
  Tensor& loss = ctx.allocate_output(0, Shape{batch});
  Tensor& backprop = ctx.allocate_output(1, shape.value());
  if (batch == 0) return;
  auto report = BadIndexReport::make(ctx, r);
  if (!report.ok()) return ctx.fail(report.status());
  r.launch([check = r.launch_check, elem = gpu_elem(logits.dtype()), wide = labels.dtype() == DType::Int64,
            pl = labels.raw_data(), px = logits.raw_data(), ploss = loss.raw_mutable_data(),
            pb = backprop.raw_mutable_data(), batch, classes, report = report.value()](cudaStream_t s) {
    cudaError_t e = report->reset(s);
    if (e == cudaSuccess) {
      e = gpu::launch_sparse_xent(elem, wide, pl, px, ploss, pb, batch, classes, report->device, s);
    }
    if (e == cudaSuccess) e = report->read_back(s);
    check->check(e, "SparseSoftmaxCrossEntropyWithLogits");
  });
  r.finish = [report = report.value(), batch, classes]() -> Status {
    const auto [row, label] = report->result();
    if (row >= 0 && row < batch) return errors::invalid_argument("{}", label_out_of_range(row, label, classes));
    return Status();
  };
}

// SoftmaxCrossEntropyWithLogits (labels, logits).
void xent_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& labels = ctx.input(0);
  const Tensor& logits = ctx.input(1);
  auto shape = same_dtype_shape(labels, logits, xent_shape);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (!dtype_is_floating(logits.dtype())) return ctx.fail(unsupported(logits.dtype()));
  const int64_t batch = shape.value().dim(0);
  Tensor& loss = ctx.allocate_output(0, Shape{batch});
  Tensor& backprop = ctx.allocate_output(1, shape.value());
  if (batch == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(logits.dtype()), py = labels.raw_data(), px = logits.raw_data(),
            ploss = loss.raw_mutable_data(), pb = backprop.raw_mutable_data(), batch,
            classes = shape.value().dim(1)](cudaStream_t s) {
    check->check(gpu::launch_xent(elem, py, px, ploss, pb, batch, classes, s), "SoftmaxCrossEntropyWithLogits");
  });
}

// BiasAdd (value, bias).
void bias_add_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& value = ctx.input(0);
  const Tensor& bias = ctx.input(1);
  auto shape = same_dtype_shape(value, bias, bias_add_shape);
  if (!shape.ok()) return ctx.fail(shape.status());
  if (value.dtype() == DType::Bool) return ctx.fail(unsupported(value.dtype()));
  Tensor& out = ctx.allocate_output(0, shape.value());
  if (out.num_elements() == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(value.dtype()), pv = value.raw_data(), pb = bias.raw_data(),
            po = out.raw_mutable_data(), n = out.num_elements(), cols = bias.num_elements()](cudaStream_t s) {
    check->check(gpu::launch_bias_add(elem, pv, pb, po, n, cols, s), "BiasAdd");
  });
}

// BiasAddGrad (the output's gradient).
void bias_add_grad_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& dy = ctx.input(0);
  auto shape = bias_add_grad_shape(dy.shape());
  if (!shape.ok()) return ctx.fail(shape.status());
  if (dy.dtype() == DType::Bool) return ctx.fail(unsupported(dy.dtype()));
  Tensor& out = ctx.allocate_output(0, shape.value());
  const RowView v = rows_of(dy.shape());
  if (out.num_elements() == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(dy.dtype()), pd = dy.raw_data(), po = out.raw_mutable_data(),
            rows = v.rows, cols = out.num_elements()](cudaStream_t s) {
    check->check(gpu::launch_bias_add_grad(elem, pd, po, rows, cols, s), "BiasAddGrad");
  });
}

// L2Loss: the scratch is per run.
void l2_loss_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_floating(x.dtype())) return ctx.fail(unsupported(x.dtype()));
  Tensor& out = ctx.allocate_output(0, Shape{});
  Tensor scratch = ctx.allocate_temp(DType::Float64, Shape{gpu::kL2LossBlocks});
  r.keep_alive.push_back(scratch);
  r.launch([check = r.launch_check, elem = gpu_elem(x.dtype()), px = x.raw_data(), po = out.raw_mutable_data(),
            n = x.num_elements(), ps = scratch.mutable_data<double>()](cudaStream_t s) {
    check->check(gpu::launch_l2_loss(elem, px, po, n, ps, s), "L2Loss");
  });
}

// ReluGrad (any number) and TanhGrad, SigmoidGrad, SqrtGrad (floating point).
template <gpu::GradKind kOp>
void elementwise_grad_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (Status s = grad_inputs_check(a, b); !s.ok()) return ctx.fail(s);
  const bool ok = kOp == gpu::GradKind::kRelu ? a.dtype() != DType::Bool : dtype_is_floating(a.dtype());
  if (!ok) return ctx.fail(unsupported(a.dtype()));
  Tensor& out = ctx.allocate_output(0, a.shape());
  if (out.num_elements() == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(a.dtype()), pa = a.raw_data(), pb = b.raw_data(),
            po = out.raw_mutable_data(), n = out.num_elements()](cudaStream_t s) {
    check->check(gpu::launch_elementwise_grad(kOp, elem, pa, pb, po, n, s), "gradient kernel");
  });
}

// Thread-safe: run() keeps no state between runs.
class GatherGradGpuOp final : public AxisGpuOpKernel {
 public:
  using AxisGpuOpKernel::AxisGpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& params = ctx.input(2);
    auto geometry = gather_grad_geometry(dy, indices, params, axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    if (dy.dtype() == DType::Bool) return ctx.fail(unsupported(dy.dtype()));
    const GatherGeometry& g = geometry.value();
    Tensor& out = ctx.allocate_output(0, params.shape());
    if (g.m == 0) {  // nothing to add or check: zeros
      if (out.bytes() == 0) return;
      r.launch([check = r.launch_check, po = out.raw_mutable_data(), bytes = out.bytes()](cudaStream_t s) {
        check->check(cudaMemsetAsync(po, 0, bytes, s), "GatherGrad");
      });
      return;
    }
    auto report = BadIndexReport::make(ctx, r);
    if (!report.ok()) return ctx.fail(report.status());
    r.launch([check = r.launch_check, elem = gpu_elem(dy.dtype()), wide = indices.dtype() == DType::Int64,
              pd = dy.raw_data(), pi = indices.raw_data(), po = out.raw_mutable_data(), g, report = report.value()](
                 cudaStream_t s) {
      cudaError_t e = report->reset(s);
      if (e == cudaSuccess) {
        e = gpu::launch_gather_grad(elem, wide, pd, pi, po, g.outer, g.limit, g.m, g.inner, report->device, s);
      }
      if (e == cudaSuccess) e = report->read_back(s);
      check->check(e, "GatherGrad");
    });
    r.finish = [report = report.value(), m = g.m, limit = g.limit] { return report->index_status(m, limit); };
  }
};

// Note [Random streams] in kernels/random_ops.cc, on the GPU: the same key and block reservation
// as the CPU kernel, so a seed gives the same masks. Thread-safe: reserve is one atomic add.
class DropoutGpuOp final : public GpuOpKernel {
 public:
  explicit DropoutGpuOp(const Node& n)
      : GpuOpKernel(n), key_(random_key(n)), keep_prob_(n.attr<double>("keep_prob")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (!dtype_is_floating(x.dtype())) return ctx.fail(unsupported(x.dtype()));
    Tensor& y = ctx.allocate_output(0, x.shape());
    Tensor& mask = ctx.allocate_output(1, x.shape());
    const int64_t n = x.num_elements();
    const uint64_t first = next_block_.fetch_add(static_cast<uint64_t>((n + 3) / 4), std::memory_order_relaxed);
    if (n == 0) return;
    r.launch([check = r.launch_check, elem = gpu_elem(x.dtype()), px = x.raw_data(), py = y.raw_mutable_data(),
              pm = mask.raw_mutable_data(), n, keep = static_cast<float>(keep_prob_), scale = 1.0 / keep_prob_,
              key = key_, first](cudaStream_t s) {
      check->check(gpu::launch_dropout(elem, px, py, pm, n, keep, scale, key, first, s), "Dropout");
    });
  }

 private:
  const uint64_t key_;
  const double keep_prob_;
  std::atomic<uint64_t> next_block_{0};
};

// As DropoutGpuOp: one reservation of a block per group of values. Thread-safe.
class TruncatedNormalGpuOp final : public GpuOpKernel {
 public:
  explicit TruncatedNormalGpuOp(const Node& n) : GpuOpKernel(n), key_(random_key(n)) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return ctx.fail(unsupported(out.dtype()));
    const int64_t n = out.num_elements();
    const int64_t per_block = out.dtype() == DType::Float32 ? 4 : 2;
    const uint64_t first =
        next_block_.fetch_add(static_cast<uint64_t>((n + per_block - 1) / per_block), std::memory_order_relaxed);
    if (n == 0) return;
    r.launch([check = r.launch_check, elem = gpu_elem(out.dtype()), po = out.raw_mutable_data(), n, key = key_,
              first](cudaStream_t s) {
      check->check(gpu::launch_truncated_normal(elem, po, n, key, first, s), "TruncatedNormal");
    });
  }

 private:
  const uint64_t key_;
  std::atomic<uint64_t> next_block_{0};
};

using gpu::GradKind;

TESSERA_REGISTER_KERNEL("Softmax", "GPU", StatelessGpuOp<softmax_gpu<false>>);
TESSERA_REGISTER_KERNEL("LogSoftmax", "GPU", StatelessGpuOp<softmax_gpu<true>>);
TESSERA_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", "GPU", StatelessGpuOp<sparse_xent_gpu>);
TESSERA_REGISTER_KERNEL("SoftmaxCrossEntropyWithLogits", "GPU", StatelessGpuOp<xent_gpu>);
TESSERA_REGISTER_KERNEL("BiasAdd", "GPU", StatelessGpuOp<bias_add_gpu>);
TESSERA_REGISTER_KERNEL("BiasAddGrad", "GPU", StatelessGpuOp<bias_add_grad_gpu>);
TESSERA_REGISTER_KERNEL("L2Loss", "GPU", StatelessGpuOp<l2_loss_gpu>);
TESSERA_REGISTER_KERNEL("ReluGrad", "GPU", StatelessGpuOp<elementwise_grad_gpu<GradKind::kRelu>>);
TESSERA_REGISTER_KERNEL("TanhGrad", "GPU", StatelessGpuOp<elementwise_grad_gpu<GradKind::kTanh>>);
TESSERA_REGISTER_KERNEL("SigmoidGrad", "GPU", StatelessGpuOp<elementwise_grad_gpu<GradKind::kSigmoid>>);
TESSERA_REGISTER_KERNEL("SqrtGrad", "GPU", StatelessGpuOp<elementwise_grad_gpu<GradKind::kSqrt>>);
TESSERA_REGISTER_KERNEL("GatherGrad", "GPU", GatherGradGpuOp);
TESSERA_REGISTER_KERNEL("Dropout", "GPU", DropoutGpuOp);
TESSERA_REGISTER_TYPED_KERNEL("TruncatedNormal", "GPU", TruncatedNormalGpuOp, DType::Float32, DType::Float64);

}  // namespace
}  // namespace tessera::internal
