// GPU kernels (device type "GPU") of the comparisons, the logical ops, SelectV2, GatherV2, OneHot,
// ArgMax, ArgMin and AddN. Each checks its inputs with core/select_ops.h as the CPU kernel does
// (kernels/select_ops.cc, same messages), then launches select_kernels.cu on the compute stream and
// is done, stream-ordered (Note [GPU kernels] in gpu_op_kernel.cc). GatherV2's indices are checked
// on the device: a flag read back after the run fails the op naming the first bad index, as the
// CPU kernel does (Div's zero divisor in gpu_math_ops.cc is the model).
#include <utility>
#include <vector>

#include "core/op_registry.h"
#include "core/select_ops.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

gpu::SelectGeometry select_geometry(const Broadcast3& b) {
  gpu::SelectGeometry g;
  g.rank = b.rank;
  for (int d = 0; d < b.rank; ++d) {
    g.dims[d] = b.dims[static_cast<std::size_t>(d)];
    for (int k = 0; k < 3; ++k) g.strides[k][d] = b.strides[static_cast<std::size_t>(k)][static_cast<std::size_t>(d)];
  }
  return g;
}

// bool out = op(a, b) with broadcasting. Thread-safe: run() keeps no state between runs.
template <gpu::CompareKind kOp>
class CompareGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    constexpr bool kLogical = kOp == gpu::CompareKind::kLogicalAnd || kOp == gpu::CompareKind::kLogicalOr;
    constexpr bool kOrdering = !kLogical && kOp != gpu::CompareKind::kEqual && kOp != gpu::CompareKind::kNotEqual;
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    auto plan = Broadcast3::compare(a, b, kOrdering, kLogical);
    if (!plan.ok()) return ctx.fail(plan.status());
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    const int64_t n = out.num_elements();
    if (n == 0) return;
    r.launch([check = r.launch_check, g = select_geometry(plan.value()), elem = gpu_elem(a.dtype()), pa = a.raw_data(),
              pb = b.raw_data(), po = out.mutable_data<bool>(), n](cudaStream_t s) {
      check->check(gpu::launch_compare(kOp, elem, g, pa, pb, po, n, s), "comparison");
    });
  }
};

// Thread-safe: run() keeps no state between runs.
class LogicalNotGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::Bool) {
      return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", dtype_name(x.dtype()));
    }
    Tensor& out = ctx.allocate_output(0, x.shape());
    if (out.num_elements() == 0) return;
    r.launch([check = r.launch_check, px = x.data<bool>(), po = out.mutable_data<bool>(), n = out.num_elements()](
                 cudaStream_t s) { check->check(gpu::launch_logical_not(px, po, n, s), "LogicalNot"); });
  }
};

// Thread-safe: run() keeps no state between runs.
class SelectGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    auto made = Broadcast3::select(c, x, y);
    if (!made.ok()) return ctx.fail(made.status());
    Tensor& out = ctx.allocate_output(0, made.value().out);
    const int64_t n = out.num_elements();
    if (n == 0) return;
    r.launch([check = r.launch_check, g = select_geometry(made.value()), bytes = static_cast<int>(dtype_size(x.dtype())),
              pc = c.data<bool>(), px = x.raw_data(), py = y.raw_data(), po = out.raw_mutable_data(), n](cudaStream_t s) {
      check->check(gpu::launch_select(bytes, g, pc, px, py, po, n, s), "SelectV2");
    });
  }
};

// Thread-safe: run() keeps no state between runs.
class GatherGpuOp final : public AxisGpuOpKernel {
 public:
  using AxisGpuOpKernel::AxisGpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& params = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    auto geometry = gather_geometry(params, indices, axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    const GatherGeometry& g = geometry.value();
    const int64_t outer = g.outer, limit = g.limit, m = g.m, inner = g.inner;
    Tensor& out = ctx.allocate_output(0, g.out);
    if (m == 0) return;  // no index to check, nothing to move
    auto report = BadIndexReport::make(ctx, r);
    if (!report.ok()) return ctx.fail(report.status());
    r.launch([check = r.launch_check, bytes = static_cast<int>(dtype_size(params.dtype())),
              wide = indices.dtype() == DType::Int64, pp = params.raw_data(), pi = indices.raw_data(),
              po = out.raw_mutable_data(), outer, limit, m, inner, report = report.value()](cudaStream_t s) {
      cudaError_t e = report->reset(s);
      if (e == cudaSuccess) e = gpu::launch_gather(bytes, wide, pp, pi, po, outer, limit, m, inner, report->device, s);
      if (e == cudaSuccess) e = report->read_back(s);
      check->check(e, "GatherV2");
    });
    r.finish = [report = report.value(), m, limit] { return report->index_status(m, limit); };
  }
};

// Thread-safe: run() keeps no state between runs.
class OneHotGpuOp final : public GpuOpKernel {
 public:
  explicit OneHotGpuOp(const Node& n)
      : GpuOpKernel(n), depth_(n.attr<int64_t>("depth")), on_(static_cast<float>(n.attr<double>("on_value"))),
        off_(static_cast<float>(n.attr<double>("off_value"))) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& indices = ctx.input(0);
    auto shape = one_hot_output_shape(indices, depth_);
    if (!shape.ok()) return ctx.fail(shape.status());
    Tensor& out = ctx.allocate_output(0, shape.value());
    if (out.num_elements() == 0) return;
    r.launch([check = r.launch_check, wide = indices.dtype() == DType::Int64, pi = indices.raw_data(),
              po = out.mutable_data<float>(), n = indices.num_elements(), depth = depth_, on = on_,
              off = off_](cudaStream_t s) {
      check->check(gpu::launch_one_hot(wide, pi, po, n, depth, on, off, s), "OneHot");
    });
  }

 private:
  const int64_t depth_;
  const float on_;
  const float off_;
};

// Thread-safe: run() keeps no state between runs.
template <bool kMax>
class ArgGpuOp final : public AxisGpuOpKernel {
 public:
  using AxisGpuOpKernel::AxisGpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::Bool) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", "bool");
    auto geometry = arg_reduce_geometry(x.shape(), axis_);
    if (!geometry.ok()) return ctx.fail(geometry.status());
    const ArgReduceGeometry& g = geometry.value();
    Tensor& out = ctx.allocate_output(0, g.out);
    if (out.num_elements() == 0) return;
    r.launch([check = r.launch_check, elem = gpu_elem(x.dtype()), px = x.raw_data(), po = out.mutable_data<int64_t>(),
              outer = g.outer, n = g.n, inner = g.inner](cudaStream_t s) {
      check->check(gpu::launch_arg_reduce(kMax, elem, px, po, outer, n, inner, s), kMax ? "ArgMax" : "ArgMin");
    });
  }
};

// Sums up to kMaxAddN inputs per launch; more are folded into the output launch after launch.
// Thread-safe: run() keeps no state between runs.
class AddNGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& first = ctx.input(0);
    for (int k = 1; k < ctx.num_inputs(); ++k) {
      if (Status s = add_n_input_check(first, ctx.input(k), k); !s.ok()) return ctx.fail(s);
    }
    if (first.dtype() == DType::Bool) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", "bool");
    Tensor& out = ctx.allocate_output(0, first.shape());
    const int64_t n = out.num_elements();
    if (n == 0) return;
    std::vector<gpu::AddNInputs> launches;
    for (int k = 0; k < ctx.num_inputs();) {
      gpu::AddNInputs in;
      if (!launches.empty()) in.p[in.count++] = out.raw_data();  // the running sum
      while (in.count < gpu::kMaxAddN && k < ctx.num_inputs()) in.p[in.count++] = ctx.input(k++).raw_data();
      launches.push_back(in);
    }
    r.launch([check = r.launch_check, launches = std::move(launches), elem = gpu_elem(first.dtype()),
              po = out.raw_mutable_data(), n](cudaStream_t s) {
      for (const gpu::AddNInputs& in : launches) {
        const cudaError_t e = gpu::launch_add_n(elem, in, po, n, s);
        if (e != cudaSuccess) return check->check(e, "AddN");
      }
    });
  }
};

using gpu::CompareKind;

TESSERA_REGISTER_KERNEL("Equal", "GPU", CompareGpuOp<CompareKind::kEqual>);
TESSERA_REGISTER_KERNEL("NotEqual", "GPU", CompareGpuOp<CompareKind::kNotEqual>);
TESSERA_REGISTER_KERNEL("Less", "GPU", CompareGpuOp<CompareKind::kLess>);
TESSERA_REGISTER_KERNEL("LessEqual", "GPU", CompareGpuOp<CompareKind::kLessEqual>);
TESSERA_REGISTER_KERNEL("Greater", "GPU", CompareGpuOp<CompareKind::kGreater>);
TESSERA_REGISTER_KERNEL("GreaterEqual", "GPU", CompareGpuOp<CompareKind::kGreaterEqual>);
TESSERA_REGISTER_KERNEL("LogicalAnd", "GPU", CompareGpuOp<CompareKind::kLogicalAnd>);
TESSERA_REGISTER_KERNEL("LogicalOr", "GPU", CompareGpuOp<CompareKind::kLogicalOr>);
TESSERA_REGISTER_KERNEL("LogicalNot", "GPU", LogicalNotGpuOp);
TESSERA_REGISTER_KERNEL("SelectV2", "GPU", SelectGpuOp);
TESSERA_REGISTER_KERNEL("GatherV2", "GPU", GatherGpuOp);
TESSERA_REGISTER_KERNEL("OneHot", "GPU", OneHotGpuOp);
TESSERA_REGISTER_KERNEL("ArgMax", "GPU", ArgGpuOp<true>);
TESSERA_REGISTER_KERNEL("ArgMin", "GPU", ArgGpuOp<false>);
TESSERA_REGISTER_KERNEL("AddN", "GPU", AddNGpuOp);

}  // namespace
}  // namespace tessera::internal
