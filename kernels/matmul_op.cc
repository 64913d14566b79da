// CPU kernel for MatMul: C = op(A) * op(B), op = transpose or not. float32 and float64 go to
// OpenBLAS (kernels/blas.h: sharded over the session's pool when big); int32 and int64 (which BLAS
// lacks) use a blocked loop whose integer products and sums wrap around on overflow. float16 and
// bfloat16 are widened to float32 for sgemm (float32 accumulation, as cuBLAS's float32 compute
// type) and each result is rounded back once.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/shape_util.h"
#include "kernels/blas.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

// C[m,n] = op(A)[m,k] * op(B)[k,n] for integers. The loops run i, p, j so that the innermost loop
// streams a row of B into a row of C (contiguous, vectorized); blocking p and j keeps the panel of
// B that one row of A visits in cache across the rows of A. Arithmetic is on the unsigned type,
// where overflow wraps instead of being undefined (signed and unsigned may alias).
template <class T>
void integer_matmul(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, bool ta,
                    bool tb) {
  using U = std::make_unsigned_t<T>;
  std::vector<T> b_transposed;
  if (tb) {  // the inner loop wants rows of op(B): transpose B once, up front
    b_transposed.resize(static_cast<std::size_t>(k * n));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) b_transposed[p * n + j] = b[j * k + p];
    }
    b = b_transposed.data();
  }
  const U* ua = reinterpret_cast<const U*>(a);
  const U* ub = reinterpret_cast<const U*>(b);
  U* uc = reinterpret_cast<U*>(c);
  std::fill(uc, uc + m * n, U{0});
  constexpr int64_t kBlockP = 128;
  constexpr int64_t kBlockJ = 512;
  for (int64_t p0 = 0; p0 < k; p0 += kBlockP) {
    const int64_t p1 = std::min(k, p0 + kBlockP);
    for (int64_t j0 = 0; j0 < n; j0 += kBlockJ) {
      const int64_t j1 = std::min(n, j0 + kBlockJ);
      for (int64_t i = 0; i < m; ++i) {
        U* __restrict c_row = uc + i * n;
        for (int64_t p = p0; p < p1; ++p) {
          const U a_ip = ta ? ua[p * m + i] : ua[i * k + p];
          const U* __restrict b_row = ub + p * n;
          for (int64_t j = j0; j < j1; ++j) c_row[j] += a_ip * b_row[j];
        }
      }
    }
  }
}

// out = op(a) * op(b) for rank-2 a and b of one dtype. Thread-safe: compute() keeps no state
// between runs (OpenBLAS may be called from several threads at once).
class MatMulOp : public OpKernel {
 public:
  explicit MatMulOp(const Node& n)
      : OpKernel(n), transpose_a_(n.attr<bool>("transpose_a")),
        transpose_b_(n.attr<bool>("transpose_b")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    // Ranks and dims that were unknown when the graph was built are checked here.
    auto dims = matmul_dims(a, b, transpose_a_, transpose_b_);
    if (!dims.ok()) return ctx.fail(dims.status());
    const auto [m, k, n] = dims.value();
    Tensor& out = ctx.allocate_output(0, Shape{m, n});
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum; BLAS also rejects a leading dimension of 0
      std::memset(out.raw_mutable_data(), 0, out.bytes());
      return;
    }
    switch (a.dtype()) {
      case DType::Float32:
      case DType::Float64:
        return blas_matmul(ctx, a, b, out, m, k, n);
      case DType::Float16: return widened_matmul<float16_t>(ctx, a, b, out, m, k, n);
      case DType::BFloat16: return widened_matmul<bfloat16_t>(ctx, a, b, out, m, k, n);
      case DType::Int32:
        return integer_matmul(a.data<int32_t>(), b.data<int32_t>(), out.mutable_data<int32_t>(), m,
                              k, n, transpose_a_, transpose_b_);
      case DType::Int64:
        return integer_matmul(a.data<int64_t>(), b.data<int64_t>(), out.mutable_data<int64_t>(), m,
                              k, n, transpose_a_, transpose_b_);
      case DType::Bool:
      case DType::String: break;
    }
    fail_unsupported_dtype(ctx, a.dtype());
  }

  // The work is m*n*k multiply-adds, which the output size alone (the default) underestimates.
  bool is_expensive() const override {
    const Shape& out = node().output_shapes[0];
    const Endpoint& a = node().inputs[0];
    const Shape& a_shape = a.node->output_shapes[a.index];
    const int64_t mn = out.num_elements();
    const int64_t k = a_shape.unknown_rank() ? -1 : a_shape.dim(transpose_a_ ? 0 : 1);
    constexpr int64_t kInlineMultiplyAdds = 1 << 15;
    return mn < 0 || k < 0 || mn * k > kInlineMultiplyAdds;
  }

 private:
  template <class T>
  void widened_matmul(OpKernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out, int64_t m,
                      int64_t k, int64_t n) const {
    auto widen = [](const Tensor& t) {
      Tensor wide(DType::Float32, t.shape());
      const T* in = t.data<T>();
      float* w = wide.mutable_data<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) w[i] = in[i].to_float();
      return wide;
    };
    Tensor c(DType::Float32, out.shape());
    blas_matmul(ctx, widen(a), widen(b), c, m, k, n);
    const float* pc = c.data<float>();
    T* po = out.mutable_data<T>();
    for (int64_t i = 0; i < m * n; ++i) po[i] = T(pc[i]);
  }

  void blas_matmul(OpKernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out, int64_t m,
                   int64_t k, int64_t n) const {
    const int64_t lda = a.shape().dim(1);
    const int64_t ldb = b.shape().dim(1);
    for (int64_t d : {m, k, n}) {
      if (d > INT_MAX) {
        return ctx.fail(ErrorCode::kInvalidArgument, "dimension {} is too large for BLAS", d);
      }
    }
    if (out.dtype() == DType::Float32) {
      gemm(&ctx, transpose_a_, transpose_b_, m, n, k, a.data<float>(), lda, b.data<float>(), ldb, 0.0f,
           out.mutable_data<float>(), n);
    } else {
      gemm(&ctx, transpose_a_, transpose_b_, m, n, k, a.data<double>(), lda, b.data<double>(), ldb, 0.0,
           out.mutable_data<double>(), n);
    }
  }

  const bool transpose_a_;
  const bool transpose_b_;
};

TESSERA_REGISTER_KERNEL("MatMul", "CPU", MatMulOp);

}  // namespace
}  // namespace tessera::internal
