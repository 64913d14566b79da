// GPU kernels (device type "GPU") of the scans Cumsum and Cumprod. The dtypes and the axis's dtype
// and shape are checked on the host with core/scan_ops.h, as the CPU kernel does (same messages);
// the axis's value is read by the kernel on the device (it may be fed or computed), which records
// one out of range in a flag read back after the run: the op then fails with the message
// resolve_scan_axis gives on the CPU (GatherV2's bad index in gpu_select_ops.cc is the model).
// Launched on the compute stream and done at once, stream-ordered (Note [GPU kernels] in
// gpu_op_kernel.cc).
#include "core/op_registry.h"
#include "core/scan_ops.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

static_assert(Shape::kMaxRank <= gpu::kMaxDims, "a scan's shape travels in gpu::ScanShape");

// Thread-safe: run() keeps no state between runs.
template <gpu::ScanKind kOp>
class ScanGpuOp final : public GpuOpKernel {
 public:
  explicit ScanGpuOp(const Node& n)
      : GpuOpKernel(n), exclusive_(n.attr<bool>("exclusive")), reverse_(n.attr<bool>("reverse")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    const Tensor& axis = ctx.input(1);
    if (Status s = check_scan_dtype(x.dtype()); !s.ok()) return ctx.fail(s);
    if (Status s = check_scan_axis_input(axis.dtype(), axis.shape()); !s.ok()) return ctx.fail(s);
    gpu::ScanShape shape;
    shape.rank = x.shape().rank();
    for (int d = 0; d < shape.rank; ++d) shape.dims[d] = x.shape().dim(d);
    Tensor& out = ctx.allocate_output(0, x.shape());
    auto report = BadIndexReport::make(ctx, r);
    if (!report.ok()) return ctx.fail(report.status());
    // Launched even with no elements: the axis is checked all the same, as on the CPU.
    r.launch([check = r.launch_check, shape, elem = gpu_elem(x.dtype()), pa = axis.raw_data(),
              wide = axis.dtype() == DType::Int64, exclusive = exclusive_, reverse = reverse_, px = x.raw_data(),
              po = out.raw_mutable_data(), n = x.num_elements(), report = report.value()](cudaStream_t s) {
      cudaError_t e = report->reset(s, 0);  // a flag (the first value) down: no bad axis
      if (e == cudaSuccess) {
        e = gpu::launch_scan(kOp, elem, shape, pa, wide, exclusive, reverse, px, po, n, report->device, s);
      }
      if (e == cudaSuccess) e = report->read_back(s);
      check->check(e, kOp == gpu::ScanKind::kSum ? "Cumsum" : "Cumprod");
    });
    r.finish = [report = report.value(), x_shape = x.shape()]() -> Status {
      const auto [flag, axis_value] = report->result();
      if (flag != 0) return resolve_scan_axis(axis_value, x_shape).status();
      return Status();
    };
  }

 private:
  const bool exclusive_;
  const bool reverse_;
};

TESSERA_REGISTER_KERNEL("Cumsum", "GPU", ScanGpuOp<gpu::ScanKind::kSum>);
TESSERA_REGISTER_KERNEL("Cumprod", "GPU", ScanGpuOp<gpu::ScanKind::kProd>);

}  // namespace
}  // namespace tessera::internal
