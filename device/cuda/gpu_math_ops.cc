// GPU kernels (device type "GPU") of the math ops: Add Sub Mul Div Maximum Minimum, Neg Relu
// Square Exp Log Sqrt Tanh Sigmoid Floor Sin Cos Abs Sign Relu6 Rsqrt Reciprocal Softplus Elu, Cast, MatMul, Sum Mean Max Min Prod, RandomUniform RandomNormal. Each
// checks its inputs as its CPU kernel does (kernels/*.cc, same messages), then launches the CUDA
// kernels of gpu_launch.h or cuBLAS (Note [GPU kernels] in gpu_op_kernel.cc).
#include <atomic>
#include <climits>
#include <cstring>

#include <cublas_v2.h>

#include "core/broadcast.h"
#include "core/op_registry.h"
#include "core/random_seed.h"
#include "core/shape_util.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_op_kernel.h"

namespace tessera::internal {
namespace {

// ---- Elementwise ----

// The general broadcast of `a` and `b` into `out` as merged dims with per-input strides
// (0 where an input is broadcast), outermost first; size-1 output dims dropped.
gpu::BroadcastGeometry broadcast_geometry(const Shape& a, const Shape& b, const Shape& out) {
  const int rank = out.rank();
  int64_t dims[Shape::kMaxRank];
  int64_t as[Shape::kMaxRank];
  int64_t bs[Shape::kMaxRank];
  int64_t a_stride = 1;
  int64_t b_stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const int da = d - (rank - a.rank());
    const int db = d - (rank - b.rank());
    const int64_t a_dim = da >= 0 ? a.dim(da) : 1;
    const int64_t b_dim = db >= 0 ? b.dim(db) : 1;
    dims[d] = out.dim(d);
    as[d] = a_dim == 1 ? 0 : a_stride;
    bs[d] = b_dim == 1 ? 0 : b_stride;
    a_stride *= a_dim;
    b_stride *= b_dim;
  }
  gpu::BroadcastGeometry g;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (g.rank > 0) {
      // Merge into the previous (outer) dim when both inputs walk the two as one.
      const int p = g.rank - 1;
      if (g.a_strides[p] == as[d] * dims[d] && g.b_strides[p] == bs[d] * dims[d]) {
        g.dims[p] *= dims[d];
        g.a_strides[p] = as[d];
        g.b_strides[p] = bs[d];
        continue;
      }
    }
    g.dims[g.rank] = dims[d];
    g.a_strides[g.rank] = as[d];
    g.b_strides[g.rank] = bs[d];
    ++g.rank;
  }
  if (g.rank == 0) {  // every dim 1: one element
    g.rank = 1;
    g.dims[0] = 1;
  }
  return g;
}

constexpr const char* binary_name(gpu::BinaryKind k) {
  switch (k) {
    case gpu::BinaryKind::kAdd: return "Add";
    case gpu::BinaryKind::kSub: return "Sub";
    case gpu::BinaryKind::kMul: return "Mul";
    case gpu::BinaryKind::kDiv: return "Div";
    case gpu::BinaryKind::kMaximum: return "Maximum";
    case gpu::BinaryKind::kMinimum: return "Minimum";
    case gpu::BinaryKind::kPow: return "Pow";
  }
  return "?";
}

// out = op(a, b) with NumPy broadcasting (a StatelessGpuOp).
template <gpu::BinaryKind kOp>
void binary_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != b.dtype()) {
    return ctx.fail(ErrorCode::kInvalidArgument, "inputs must have the same dtype, got {} and {}",
                    dtype_name(a.dtype()), dtype_name(b.dtype()));
  }
  if (a.dtype() == DType::Bool) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", "bool");
  gpu::BroadcastKind kind = gpu::BroadcastKind::kSame;
  gpu::BroadcastGeometry geometry;
  Shape out_shape;
  // The CPU kernel's order of cases, so that the same inputs fail with the same message.
  if (a.shape() == b.shape() || a.shape().rank() == 0 || b.shape().rank() == 0) {
    const bool scalar_a = a.shape().rank() == 0 && b.shape().rank() != 0;
    const bool scalar_b = b.shape().rank() == 0 && !scalar_a && a.shape() != b.shape();
    out_shape = scalar_a ? b.shape() : a.shape();
    kind = scalar_a ? gpu::BroadcastKind::kScalarA
                    : (scalar_b ? gpu::BroadcastKind::kScalarB : gpu::BroadcastKind::kSame);
  } else {
    auto made = BroadcastPlan::make(a.shape(), b.shape());
    if (!made.ok()) return ctx.fail(made.status());
    out_shape = made.value().out_shape();
    switch (made.value().kind()) {
      case BroadcastPlan::Kind::kSameShape: kind = gpu::BroadcastKind::kSame; break;
      case BroadcastPlan::Kind::kScalarA: kind = gpu::BroadcastKind::kScalarA; break;
      case BroadcastPlan::Kind::kScalarB: kind = gpu::BroadcastKind::kScalarB; break;
      case BroadcastPlan::Kind::kGeneral:
        kind = gpu::BroadcastKind::kGeneral;
        geometry = broadcast_geometry(a.shape(), b.shape(), out_shape);
        break;
    }
  }
  Tensor& out = ctx.allocate_output(0, out_shape);
  const int64_t n = out.num_elements();
  if (n == 0) return;
  const gpu::Elem elem = gpu_elem(a.dtype());
  const void* pa = a.raw_data();
  const void* pb = b.raw_data();
  void* po = out.raw_mutable_data();
  // Integer Div and Pow can fail: a zero divisor, a negative exponent.
  const bool check_flag =
      (kOp == gpu::BinaryKind::kDiv || kOp == gpu::BinaryKind::kPow) && !dtype_is_floating(a.dtype());
  if (!check_flag) {
    r.launch([check = r.launch_check, kind, geometry, elem, pa, pb, po, n](cudaStream_t s) {
      check->check(gpu::launch_binary(kOp, elem, kind, geometry, pa, pb, po, n, nullptr, s), binary_name(kOp));
    });
    return;
  }
  // The kernel raises a device flag on a zero divisor or a negative exponent (with a non-empty
  // output every divisor and exponent is used, so this is the CPU kernel's check), read back after
  // the run.
  Tensor flag = ctx.allocate_temp(DType::Int32, Shape{});
  auto staged = r.device.staging().acquire(sizeof(int));
  if (!staged.ok()) return ctx.fail(staged.status());
  auto readback = std::make_shared<PinnedStagingPool::Buffer>(std::move(staged).value());
  int* flag_ptr = flag.mutable_data<int32_t>();
  r.keep_alive.push_back(flag);
  r.launch([check = r.launch_check, kind, geometry, elem, pa, pb, po, n, flag_ptr, readback](cudaStream_t s) {
    cudaError_t e = cudaMemsetAsync(flag_ptr, 0, sizeof(int), s);
    if (e == cudaSuccess) e = gpu::launch_binary(kOp, elem, kind, geometry, pa, pb, po, n, flag_ptr, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(readback->data(), flag_ptr, sizeof(int), cudaMemcpyDeviceToHost, s);
    check->check(e, binary_name(kOp));
  });
  r.finish = [readback]() -> Status {
    int flagged = 0;
    std::memcpy(&flagged, readback->data(), sizeof(int));
    readback->release();
    if (flagged == 0) return Status();
    return kOp == gpu::BinaryKind::kDiv
               ? errors::invalid_argument("integer division by zero")
               : errors::invalid_argument("Integers to negative integer powers are not allowed");
  };
}

// out = op(x) (a StatelessGpuOp).
template <gpu::UnaryKind kOp, bool kFloatingOnly>
void unary_gpu(OpKernelContext& ctx, GpuRun& r) {
  const Tensor& x = ctx.input(0);
  const bool supported = dtype_is_floating(x.dtype()) ||
                         (!kFloatingOnly && (x.dtype() == DType::Int32 || x.dtype() == DType::Int64));
  if (!supported) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", dtype_name(x.dtype()));
  Tensor& out = ctx.allocate_output(0, x.shape());
  const int64_t n = out.num_elements();
  if (n == 0) return;
  r.launch([check = r.launch_check, elem = gpu_elem(x.dtype()), px = x.raw_data(), po = out.raw_mutable_data(), n](cudaStream_t s) {
    check->check(gpu::launch_unary(kOp, elem, px, po, n, s), "unary op");
  });
}

// ---- Cast ----

// Converts input 0 to the "dtype" attr; the same dtype shares the buffer. Thread-safe.
class CastGpuOp final : public GpuOpKernel {
 public:
  explicit CastGpuOp(const Node& n) : GpuOpKernel(n), to_(n.output_dtypes[0]) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == to_) {
      ctx.set_output(0, x);
      return;
    }
    Tensor& out = ctx.allocate_output(0, x.shape());
    const int64_t n = out.num_elements();
    if (n == 0) return;
    r.launch([check = r.launch_check, from = gpu_elem(x.dtype()), to = gpu_elem(to_), px = x.raw_data(), po = out.raw_mutable_data(),
              n](cudaStream_t s) { check->check(gpu::launch_cast(from, to, px, po, n, s), "Cast"); });
  }

 private:
  const DType to_;
};

// ---- MatMul ----

// A row-major c[m,n] = op(a)[m,k] * op(b)[k,n] of a floating point dtype, its dims checked to fit
// cuBLAS's int.
struct Gemm {
  DType dtype;
  bool ta;
  bool tb;
  int m;
  int k;
  int n;
  int lda;
  int ldb;
  const void* a;
  const void* b;
  void* c;
};

// The cuBLAS math mode of a product. float32 may use TF32 tensor cores (SessionOptions::allow_tf32);
// the 16-bit floats use tensor cores with float32 accumulation, and reductions across a split k
// stay in float32 too (cuBLAS may otherwise add partial sums in the 16-bit output type), so each
// result is rounded once, as the CPU kernel rounds sgemm's.
cublasMath_t math_mode(DType dtype, bool tf32) {
  if (dtype == DType::Float32) return tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  if (dtype == DType::Float64) return CUBLAS_DEFAULT_MATH;
  return static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

// Runs `g` on `handle` (already on the launch stream): Sgemm, Dgemm, or for the 16-bit floats
// GemmEx with 16-bit inputs and output and float32 compute.
Status run_gemm(cublasContext* handle, const Gemm& g, bool tf32) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS sees each stored
  // row-major matrix as its transpose, so the operands swap and the transposes stay.
  const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // The handle is shared: each call sets its own mode.
  const cublasStatus_t mode = cublasSetMathMode(handle, math_mode(g.dtype, tf32));
  if (mode != CUBLAS_STATUS_SUCCESS) return cublas_status(mode, "cublasSetMathMode");
  if (g.dtype == DType::Float64) {
    const double one = 1.0;
    const double zero = 0.0;
    return cublas_status(cublasDgemm(handle, op_b, op_a, g.n, g.m, g.k, &one, static_cast<const double*>(g.b), g.ldb,
                                     static_cast<const double*>(g.a), g.lda, &zero, static_cast<double*>(g.c), g.n),
                         "cublasDgemm");
  }
  const float one = 1.0f;
  const float zero = 0.0f;
  if (g.dtype == DType::Float32) {
    return cublas_status(cublasSgemm(handle, op_b, op_a, g.n, g.m, g.k, &one, static_cast<const float*>(g.b), g.ldb,
                                     static_cast<const float*>(g.a), g.lda, &zero, static_cast<float*>(g.c), g.n),
                         "cublasSgemm");
  }
  const cudaDataType_t type = g.dtype == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
  return cublas_status(cublasGemmEx(handle, op_b, op_a, g.n, g.m, g.k, &one, g.b, type, g.ldb, g.a, type, g.lda, &zero,
                                    g.c, type, g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
}

// out = op(a) * op(b): cuBLAS for the floating point dtypes, a tiled kernel for integers.
// Thread-safe (cuBLAS calls are serialized by the device).
class MatMulGpuOp final : public GpuOpKernel {
 public:
  explicit MatMulGpuOp(const Node& n)
      : GpuOpKernel(n), transpose_a_(n.attr<bool>("transpose_a")), transpose_b_(n.attr<bool>("transpose_b")) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    auto dims = matmul_dims(a, b, transpose_a_, transpose_b_);
    if (!dims.ok()) return ctx.fail(dims.status());
    const auto [m, k, n] = dims.value();
    if (a.dtype() == DType::Bool) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", "bool");
    const bool floating = dtype_is_floating(a.dtype());
    if (floating) {
      for (int64_t d : {m, k, n}) {
        if (d > INT_MAX) return ctx.fail(ErrorCode::kInvalidArgument, "dimension {} is too large for BLAS", d);
      }
    }
    Tensor& out = ctx.allocate_output(0, Shape{m, n});
    if (m == 0 || n == 0) return;
    void* pc = out.raw_mutable_data();
    if (k == 0) {  // an empty sum; BLAS also rejects a leading dimension of 0
      r.launch([check = r.launch_check, pc, bytes = out.bytes()](cudaStream_t s) {
        check->check(cudaMemsetAsync(pc, 0, bytes, s), "MatMul");
      });
      return;
    }
    const void* pa = a.raw_data();
    const void* pb = b.raw_data();
    const bool ta = transpose_a_;
    const bool tb = transpose_b_;
    if (!floating) {
      r.launch([check = r.launch_check, elem = gpu_elem(a.dtype()), pa, pb, pc, m, k, n, ta, tb](cudaStream_t s) {
        check->check(gpu::launch_integer_matmul(elem, pa, pb, pc, m, k, n, ta, tb, s), "MatMul");
      });
      return;
    }
    const Gemm gemm{.dtype = a.dtype(), .ta = ta, .tb = tb, .m = static_cast<int>(m), .k = static_cast<int>(k),
                    .n = static_cast<int>(n), .lda = static_cast<int>(a.shape().dim(1)),
                    .ldb = static_cast<int>(b.shape().dim(1)), .a = pa, .b = pb, .c = pc};
    CudaDevice* device = &r.device;
    r.launch([check = r.launch_check, device, gemm, tf32 = ctx.allow_tf32()](cudaStream_t s) {
      check->report(device->with_cublas(s, [&](cublasContext* handle) { return run_gemm(handle, gemm, tf32); }));
    });
  }

 private:
  const bool transpose_a_;
  const bool transpose_b_;
};

// ---- Reductions ----

// Reduces input 0 over the "axes" attr, keeping size-1 dims when "keep_dims" is set. The checks
// and the merged runs are kernels/reduction_ops.cc's; the GPU plan is Note [GPU reductions] in
// reduction_kernels.cu. Thread-safe: run() keeps no state between runs.
template <gpu::ReduceKind kOp>
class ReductionGpuOp final : public GpuOpKernel {
 public:
  explicit ReductionGpuOp(const Node& n)
      : GpuOpKernel(n), to_shape_of_(n.type == "SumToShapeOf"),
        axes_(n.attr_or<std::vector<int64_t>>("axes", {})), keep_dims_(n.attr_or<bool>("keep_dims", false)) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::Bool) return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", "bool");
    const Shape& in_shape = x.shape();
    auto mask_or = to_shape_of_ ? sum_to_shape_mask(in_shape, ctx.input(1).shape()) : reduction_mask(axes_, in_shape.rank());
    if (!mask_or.ok()) {
      return ctx.fail(ErrorCode::kInvalidArgument, "{} (input shape {})", mask_or.status().message(),
                      in_shape.to_string());
    }
    ReductionLayout layout = reduction_layout(in_shape, mask_or.value(), keep_dims_ || to_shape_of_);
    if (to_shape_of_) {
      if (layout.count == 1) return ctx.set_output(0, x.reshaped(ctx.input(1).shape()));  // nothing to sum
      layout.out_shape = ctx.input(1).shape();
    }
    const int64_t count = layout.count;
    const auto& dims = layout.dims;
    const auto& reduced = layout.reduced;
    const int rank = layout.rank;
    Tensor& out = ctx.allocate_output(0, layout.out_shape);
    const int64_t out_n = out.num_elements();
    if (out_n == 0) return;
    const bool integral = !dtype_is_floating(x.dtype());
    if (count == 0 && kOp == gpu::ReduceKind::kMax) {
      return ctx.fail(ErrorCode::kInvalidArgument, "the maximum of an empty set is undefined (input shape {})",
                      in_shape.to_string());
    }
    if (count == 0 && kOp == gpu::ReduceKind::kMean && integral) {
      return ctx.fail(ErrorCode::kInvalidArgument,
                      "the integer mean of an empty set divides by zero (input shape {})", in_shape.to_string());
    }
    gpu::ReduceGeometry g;
    g.out_count = out_n;
    g.count = count;
    int64_t strides[Shape::kMaxRank] = {};
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
    int last_reduced = -1;
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) last_reduced = d;
    }
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d]) {
        g.kept_dims[g.kept_rank] = dims[d];
        g.kept_strides[g.kept_rank] = strides[d];
        ++g.kept_rank;
      } else if (d != last_reduced) {
        g.outer_dims[g.outer_rank] = dims[d];
        g.outer_strides[g.outer_rank] = strides[d];
        ++g.outer_rank;
      }
    }
    if (last_reduced >= 0) {
      g.inner = dims[last_reduced];
      g.inner_stride = strides[last_reduced];
    }
    const gpu::Elem elem = gpu_elem(x.dtype());
    const int sms = r.device.multiprocessor_count();
    // The scratch size of a whole reduction is CUB's for the current device: make it this one.
    if (Status s = r.device.make_current(); !s.ok()) return ctx.fail(s);
    void* scratch = nullptr;
    if (const std::size_t bytes = gpu::reduce_scratch_bytes(elem, g, sms); bytes > 0) {
      Tensor t = ctx.allocate_temp(DType::Int64, Shape{static_cast<int64_t>((bytes + 7) / 8)});
      scratch = t.raw_mutable_data();
      r.keep_alive.push_back(std::move(t));
    }
    r.launch([check = r.launch_check, g, elem, px = x.raw_data(), po = out.raw_mutable_data(), scratch, sms](cudaStream_t s) {
      check->check(gpu::launch_reduce(kOp, elem, g, px, po, scratch, sms, s), "reduction");
    });
  }

 private:
  const bool to_shape_of_;  // SumToShapeOf (core/gradients.h): the axes from input 1's shape
  const std::vector<int64_t> axes_;
  const bool keep_dims_;
};

// ---- Random ----

// Note [Random streams] in kernels/random_ops.cc, on the GPU: the same key, the same atomic block
// reservation, the same blocks to values. Thread-safe: reserve is one atomic add.
template <bool kNormal>
class RandomGpuOp final : public GpuOpKernel {
 public:
  explicit RandomGpuOp(const Node& n)
      : GpuOpKernel(n),
        key_(random_key(n)),
        mean_(kNormal ? n.attr<double>("mean") : 0.0),
        stddev_(kNormal ? n.attr<double>("stddev") : 1.0) {}

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    const int64_t per_block = out.dtype() == DType::Float32 ? 4 : 2;
    // As the registration: the GPU's Philox streams are float32's and float64's only.
    if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) {
      return ctx.fail(ErrorCode::kInvalidArgument, "unsupported dtype {}", dtype_name(out.dtype()));
    }
    const uint64_t first = next_block_.fetch_add(static_cast<uint64_t>((n + per_block - 1) / per_block),
                                                 std::memory_order_relaxed);
    if (n == 0) return;
    r.launch([check = r.launch_check, elem = gpu_elem(out.dtype()), po = out.raw_mutable_data(), n, key = key_, first,
              mean = mean_, stddev = stddev_](cudaStream_t s) {
      const cudaError_t e = kNormal ? gpu::launch_random_normal(elem, po, n, key, first, mean, stddev, s)
                                    : gpu::launch_random_uniform(elem, po, n, key, first, s);
      check->check(e, kNormal ? "RandomNormal" : "RandomUniform");
    });
  }

 private:
  const uint64_t key_;
  const double mean_;
  const double stddev_;
  std::atomic<uint64_t> next_block_{0};
};

using gpu::BinaryKind;
using gpu::ReduceKind;
using gpu::UnaryKind;
using NegGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kNeg, false>>;
using ReluGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kRelu, false>>;
using SquareGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSquare, false>>;
using ExpGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kExp, true>>;
using LogGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kLog, true>>;
using SqrtGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSqrt, true>>;
using TanhGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kTanh, true>>;
using SigmoidGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSigmoid, true>>;
using FloorGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kFloor, true>>;
using SinGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSin, true>>;
using CosGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kCos, true>>;
using AbsGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kAbs, false>>;
using SignGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSign, false>>;
using Relu6GpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kRelu6, false>>;
using RsqrtGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kRsqrt, true>>;
using ReciprocalGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kReciprocal, true>>;
using SoftplusGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kSoftplus, true>>;
using EluGpuOp = StatelessGpuOp<unary_gpu<UnaryKind::kElu, true>>;

TESSERA_REGISTER_KERNEL("Add", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kAdd>>);
TESSERA_REGISTER_KERNEL("Sub", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kSub>>);
TESSERA_REGISTER_KERNEL("Mul", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kMul>>);
TESSERA_REGISTER_KERNEL("Div", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kDiv>>);
TESSERA_REGISTER_KERNEL("Maximum", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kMaximum>>);
TESSERA_REGISTER_KERNEL("Minimum", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kMinimum>>);
TESSERA_REGISTER_KERNEL("Pow", "GPU", StatelessGpuOp<binary_gpu<BinaryKind::kPow>>);
TESSERA_REGISTER_KERNEL("Neg", "GPU", NegGpuOp);
TESSERA_REGISTER_KERNEL("Relu", "GPU", ReluGpuOp);
TESSERA_REGISTER_KERNEL("Square", "GPU", SquareGpuOp);
TESSERA_REGISTER_KERNEL("Exp", "GPU", ExpGpuOp);
TESSERA_REGISTER_KERNEL("Log", "GPU", LogGpuOp);
TESSERA_REGISTER_KERNEL("Sqrt", "GPU", SqrtGpuOp);
TESSERA_REGISTER_KERNEL("Tanh", "GPU", TanhGpuOp);
TESSERA_REGISTER_KERNEL("Sigmoid", "GPU", SigmoidGpuOp);
TESSERA_REGISTER_KERNEL("Floor", "GPU", FloorGpuOp);
TESSERA_REGISTER_KERNEL("Sin", "GPU", SinGpuOp);
TESSERA_REGISTER_KERNEL("Cos", "GPU", CosGpuOp);
TESSERA_REGISTER_KERNEL("Abs", "GPU", AbsGpuOp);
TESSERA_REGISTER_KERNEL("Sign", "GPU", SignGpuOp);
TESSERA_REGISTER_KERNEL("Relu6", "GPU", Relu6GpuOp);
TESSERA_REGISTER_KERNEL("Rsqrt", "GPU", RsqrtGpuOp);
TESSERA_REGISTER_KERNEL("Reciprocal", "GPU", ReciprocalGpuOp);
TESSERA_REGISTER_KERNEL("Softplus", "GPU", SoftplusGpuOp);
TESSERA_REGISTER_KERNEL("Elu", "GPU", EluGpuOp);
TESSERA_REGISTER_KERNEL("Cast", "GPU", CastGpuOp);
TESSERA_REGISTER_KERNEL("MatMul", "GPU", MatMulGpuOp);
TESSERA_REGISTER_KERNEL("Sum", "GPU", ReductionGpuOp<ReduceKind::kSum>);
TESSERA_REGISTER_KERNEL("SumToShapeOf", "GPU", ReductionGpuOp<ReduceKind::kSum>);
TESSERA_REGISTER_KERNEL("Mean", "GPU", ReductionGpuOp<ReduceKind::kMean>);
TESSERA_REGISTER_KERNEL("Max", "GPU", ReductionGpuOp<ReduceKind::kMax>);
TESSERA_REGISTER_KERNEL("Min", "GPU", ReductionGpuOp<ReduceKind::kMin>);
TESSERA_REGISTER_KERNEL("Prod", "GPU", ReductionGpuOp<ReduceKind::kProd>);
// The Philox streams' dtypes; float16 and bfloat16 draws run on the CPU (kernels/random_ops.cc).
TESSERA_REGISTER_TYPED_KERNEL("RandomUniform", "GPU", RandomGpuOp<false>, DType::Float32, DType::Float64);
TESSERA_REGISTER_TYPED_KERNEL("RandomNormal", "GPU", RandomGpuOp<true>, DType::Float32, DType::Float64);

}  // namespace
}  // namespace tessera::internal
