// GPU kernels (device type "GPU") of Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool,
// AvgPool, MaxPoolGrad and AvgPoolGrad, float32 and float64 (registered so: the CPU kernels' other
// dtypes, float16, bfloat16 and MaxPool's integers, are placed on the CPU). Each checks its inputs with
// core/conv_ops.h as the CPU kernel does (kernels/conv_ops.cc, same messages), then launches on the
// compute stream and is done, stream-ordered (Note [GPU kernels] in gpu_op_kernel.cc). The
// convolutions are Note [Convolution as im2col and GEMM] (kernels/conv_ops.cc): im2col and col2im
// kernels (conv_kernels.cu) around cuBLAS, chunk after chunk on the one stream, one scratch buffer
// for every chunk (stream order keeps a chunk from overwriting the one before while it is in use).
#include <algorithm>
#include <cstdint>

#include <cublas_v2.h>

#include "core/conv_ops.h"
#include "core/op_registry.h"
#include "device/cuda/conv_launch.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

// The most bytes of patches one chunk holds: larger than the CPU's, as a GPU wants big products.
constexpr int64_t kPatchBytes = int64_t{64} << 20;

// Row-major c[m, n] = op(a)[m, k] * op(b)[k, n] + beta * c on `handle` (already on the stream), every
// dim checked to fit an int (Window2D::check_gemm_dims, chunk_rows). cuBLAS is column-major: it
// sees each row-major matrix as its transpose, so the operands swap and the transposes stay.
Status gemm(cublasContext* handle, DType dtype, bool tf32, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
            const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  const cublasMath_t mode = dtype == DType::Float32 && tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  // The handle is shared: each call sets its own mode.
  if (const cublasStatus_t s = cublasSetMathMode(handle, mode); s != CUBLAS_STATUS_SUCCESS) {
    return cublas_status(s, "cublasSetMathMode");
  }
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto in = static_cast<int>(n);
  const auto im = static_cast<int>(m);
  const auto ik = static_cast<int>(k);
  if (dtype == DType::Float64) {
    const double one = 1.0;
    return cublas_status(cublasDgemm(handle, op_b, op_a, in, im, ik, &one, static_cast<const double*>(b),
                                     static_cast<int>(ldb), static_cast<const double*>(a), static_cast<int>(lda), &beta,
                                     static_cast<double*>(c), static_cast<int>(ldc)),
                         "cublasDgemm");
  }
  const float one = 1.0f;
  const auto fbeta = static_cast<float>(beta);
  return cublas_status(cublasSgemm(handle, op_b, op_a, in, im, ik, &one, static_cast<const float*>(b),
                                   static_cast<int>(ldb), static_cast<const float*>(a), static_cast<int>(lda), &fbeta,
                                   static_cast<float*>(c), static_cast<int>(ldc)),
                       "cublasSgemm");
}

// What one convolution launch needs after run() returns: plain values and device pointers.
struct ConvLaunch {
  Window2D w;
  DType dtype;
  bool tf32;
  int64_t chunk;   // output rows per chunk
  const void* x;   // the input (forward, filter gradient)
  const void* f;   // the filter (forward, input gradient)
  const void* dy;  // the output's gradient (gradients)
  void* patches;   // chunk * K scratch; null for a pointwise window where the input is its own
  void* out;
};

// The products of ConvKind over every chunk, on `handle` and `s` (Note [Convolution as im2col and
// GEMM]). Returns the first failure.
template <ConvKind kKind>
Status run_chunks(cublasContext* handle, cudaStream_t s, const ConvLaunch& l) {
  const Window2D& w = l.w;
  const int64_t k = w.patch_size();
  const int64_t o = w.out_c;
  const int64_t bytes = static_cast<int64_t>(dtype_size(l.dtype));
  const gpu::ConvGeometry g = w;  // the dims alone
  const gpu::Elem elem = gpu_elem(l.dtype);
  auto at = [bytes](const void* p, int64_t elements) { return static_cast<const char*>(p) + elements * bytes; };
  auto at_mut = [bytes](void* p, int64_t elements) { return static_cast<char*>(p) + elements * bytes; };
  if (kKind == ConvKind::kBackpropInput && !w.pointwise()) {
    if (cudaError_t e =
            cudaMemsetAsync(l.out, 0, static_cast<std::size_t>(w.batch * w.in_h * w.in_w * w.in_c * bytes), s);
        e != cudaSuccess) {
      return cuda_error(e, "Conv2DBackpropInput");
    }
  }
  for (int64_t row0 = 0; row0 < w.out_pixels(); row0 += l.chunk) {
    const int64_t rows = std::min(l.chunk, w.out_pixels() - row0);
    const void* patches = w.pointwise() ? at(l.x, row0 * k) : l.patches;
    if (kKind != ConvKind::kBackpropInput && !w.pointwise()) {
      if (cudaError_t e = gpu::launch_im2col(elem, g, l.x, row0, rows, l.patches, s); e != cudaSuccess) {
        return cuda_error(e, "im2col");
      }
    }
    Status st;
    if constexpr (kKind == ConvKind::kForward) {
      st = gemm(handle, l.dtype, l.tf32, false, false, rows, o, k, patches, k, l.f, o, 0.0, at_mut(l.out, row0 * o), o);
    } else if constexpr (kKind == ConvKind::kBackpropFilter) {
      st = gemm(handle, l.dtype, l.tf32, true, false, k, o, rows, patches, k, at(l.dy, row0 * o), o,
                row0 == 0 ? 0.0 : 1.0, l.out, o);
    } else if (w.pointwise()) {  // the patches' gradient is dx itself
      st = gemm(handle, l.dtype, l.tf32, false, true, rows, k, o, at(l.dy, row0 * o), o, l.f, o, 0.0,
                at_mut(l.out, row0 * k), k);
    } else {
      st = gemm(handle, l.dtype, l.tf32, false, true, rows, k, o, at(l.dy, row0 * o), o, l.f, o, 0.0, l.patches, k);
      if (st.ok()) {
        if (cudaError_t e = gpu::launch_col2im_add(elem, g, l.patches, row0, rows, l.out, s); e != cudaSuccess) {
          return cuda_error(e, "col2im");
        }
      }
    }
    if (!st.ok()) return st;
  }
  return Status();
}

StatusOr<WindowPlan> plan_window(ConvKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx) {
  return plan_conv(kind, attrs, ctx);
}
StatusOr<WindowPlan> plan_window(PoolKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx) {
  return plan_pool(kind, attrs, ctx);
}

// The start every window op (convolution or pool) shares with its CPU kernel: the attrs read once,
// the op planned (failing as the CPU kernel fails), output 0 allocated; launch() then issues the
// work, for a non-empty output only. Thread-safe: run() keeps no state between runs.
template <class Kind, Kind kKind>
class WindowGpuOp : public GpuOpKernel {
 public:
  explicit WindowGpuOp(const Node& n) : GpuOpKernel(n), attrs_(WindowAttrs::of(n.attrs)) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) final {
    auto plan = plan_window(kKind, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status());
    // The dtypes of the registration, of cuBLAS's sgemm and dgemm and of the pools' launches.
    if (const DType d = ctx.input(0).dtype(); d != DType::Float32 && d != DType::Float64) {
      return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", dtype_name(d));
    }
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    launch(ctx, r, plan.value().window, out);
  }
  virtual void launch(OpKernelContext& ctx, GpuRun& r, const Window2D& w, Tensor& out) = 0;

 private:
  const WindowAttrs attrs_;
};

// Conv2D (input, filter), Conv2DBackpropInput (input: read for its shape, filter, out_backprop),
// Conv2DBackpropFilter (input, filter: read for its shape, out_backprop). Thread-safe (cuBLAS calls
// are serialized by the device).
template <ConvKind kKind>
class ConvGpuOp final : public WindowGpuOp<ConvKind, kKind> {
 public:
  using WindowGpuOp<ConvKind, kKind>::WindowGpuOp;

 protected:
  void launch(OpKernelContext& ctx, GpuRun& r, const Window2D& w, Tensor& out) override {
    const Tensor& x = ctx.input(0);
    void* po = out.raw_mutable_data();
    // No products to sum (no input channels, or no output positions): zeros.
    if (w.patch_size() == 0 || w.out_pixels() == 0 || w.out_c == 0) {
      r.launch([check = r.launch_check, po, bytes = out.bytes()](cudaStream_t s) {
        check->check(cudaMemsetAsync(po, 0, bytes, s), "convolution");
      });
      return;
    }
    ConvLaunch l{.w = w,
                 .dtype = x.dtype(),
                 .tf32 = ctx.allow_tf32(),
                 .chunk = w.chunk_rows(kPatchBytes, static_cast<int64_t>(dtype_size(x.dtype()))),
                 .x = x.raw_data(),
                 .f = ctx.input(1).raw_data(),
                 .dy = kKind == ConvKind::kForward ? nullptr : ctx.input(2).raw_data(),
                 .patches = nullptr,
                 .out = po};
    if (!w.pointwise()) {
      Tensor scratch = ctx.allocate_temp(x.dtype(), Shape{l.chunk * w.patch_size()});
      l.patches = scratch.raw_mutable_data();
      r.keep_alive.push_back(std::move(scratch));
    }
    CudaDevice* device = &r.device;
    r.launch([check = r.launch_check, device, l](cudaStream_t s) {
      check->report(device->with_cublas(s, [&](cublasContext* handle) { return run_chunks<kKind>(handle, s, l); }));
    });
  }
};

// MaxPool and AvgPool (input), MaxPoolGrad (orig_input, orig_output, grad) and AvgPoolGrad
// (orig_input: read for its shape, grad). Thread-safe.
template <PoolKind kKind>
class PoolGpuOp final : public WindowGpuOp<PoolKind, kKind> {
 public:
  using WindowGpuOp<PoolKind, kKind>::WindowGpuOp;

 protected:
  void launch(OpKernelContext& ctx, GpuRun& r, const Window2D& w, Tensor& out) override {
    const Tensor& x = ctx.input(0);
    const Tensor* dy = kKind == PoolKind::kMaxGrad   ? &ctx.input(2)
                       : kKind == PoolKind::kAvgGrad ? &ctx.input(1)
                                                     : nullptr;
    int64_t* argmax = nullptr;
    if (kKind == PoolKind::kMaxGrad) {
      Tensor t = ctx.allocate_temp(DType::Int64, w.out_shape());
      argmax = t.mutable_data<int64_t>();
      r.keep_alive.push_back(std::move(t));
    }
    r.launch([check = r.launch_check, g = gpu::ConvGeometry(w), elem = gpu_elem(x.dtype()), px = x.raw_data(),
              pdy = dy ? dy->raw_data() : nullptr, argmax, po = out.raw_mutable_data()](cudaStream_t s) {
      switch (kKind) {
        case PoolKind::kMax:
          return check->check(gpu::launch_pool(true, elem, g, px, po, s), "MaxPool");
        case PoolKind::kAvg:
          return check->check(gpu::launch_pool(false, elem, g, px, po, s), "AvgPool");
        case PoolKind::kMaxGrad:
          return check->check(gpu::launch_max_pool_grad(elem, g, px, pdy, argmax, po, s), "MaxPoolGrad");
        case PoolKind::kAvgGrad:
          return check->check(gpu::launch_avg_pool_grad(elem, g, pdy, po, s), "AvgPoolGrad");
      }
    });
  }
};

#define TESSERA_REGISTER_WINDOW_GPU_KERNEL(type, Class) \
  TESSERA_REGISTER_TYPED_KERNEL(type, "GPU", Class, DType::Float32, DType::Float64)
TESSERA_REGISTER_WINDOW_GPU_KERNEL("Conv2D", ConvGpuOp<ConvKind::kForward>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("Conv2DBackpropInput", ConvGpuOp<ConvKind::kBackpropInput>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("Conv2DBackpropFilter", ConvGpuOp<ConvKind::kBackpropFilter>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("MaxPool", PoolGpuOp<PoolKind::kMax>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("AvgPool", PoolGpuOp<PoolKind::kAvg>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("MaxPoolGrad", PoolGpuOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_WINDOW_GPU_KERNEL("AvgPoolGrad", PoolGpuOp<PoolKind::kAvgGrad>);
#undef TESSERA_REGISTER_WINDOW_GPU_KERNEL

}  // namespace
}  // namespace tessera::internal
