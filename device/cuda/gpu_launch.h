// The CUDA kernels' launchers: plain C++ entry points into the .cu files of device/cuda/, which
// the GPU op kernels (gpu_math_ops.cc) call from a CudaStream launch. Nothing here knows tessera's
// Tensor or Status, so the .cu files compile with nvcc alone, quickly, and the op kernels (shape
// checks, dtype dispatch, errors) stay ordinary C++.
//
//   gpu::launch_unary(gpu::UnaryKind::kExp, gpu::Elem::kF32, x, y, n, stream);   // async
//
// Every launcher is asynchronous on `stream` and returns the launch error (cudaSuccess when the
// launch went in). Semantics are the CPU kernels' (kernels/*.cc), element for element.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace tessera::internal::gpu {

inline constexpr int kMaxDims = 8;

// The element types: kF16 and kBF16 are IEEE binary16 and bfloat16 (__half, __nv_bfloat16 on the
// device; the bits of core/half.h's float16_t and bfloat16_t), computed in float32 and rounded once.
enum class Elem : int { kF32, kF64, kI32, kI64, kBool, kF16, kBF16 };

// ---- Elementwise (cwise_kernels.cu) ----

enum class BinaryKind : int { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };
enum class UnaryKind : int {
  kNeg, kRelu, kSquare, kExp, kLog, kSqrt, kTanh, kSigmoid, kFloor, kSin, kCos,
  kAbs, kSign, kRelu6, kRsqrt, kReciprocal, kSoftplus, kElu,
};

// How the two inputs of a binary op map onto the output. kSame, kScalarA, kScalarB: contiguous
// loops (vectorized); kGeneral: out[i] = f(a[ia], b[ib]) with ia, ib from i through the dims and
// strides (0 where an input is broadcast), outermost first.
enum class BroadcastKind : int { kSame, kScalarA, kScalarB, kGeneral };
struct BroadcastGeometry {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
  int64_t b_strides[kMaxDims] = {};
};

// out[0, n) = op(a, b). For kDiv on integers, a zero divisor sets *zero_divisor (a device int) to
// 1 and yields 0; zero_divisor may be null for the other ops.
cudaError_t launch_binary(BinaryKind op, Elem elem, BroadcastKind kind, const BroadcastGeometry& geometry,
                          const void* a, const void* b, void* out, int64_t n, int* zero_divisor,
                          cudaStream_t stream);
// out[0, n) = op(x). The floating point only ops must not be asked for integers.
cudaError_t launch_unary(UnaryKind op, Elem elem, const void* x, void* out, int64_t n, cudaStream_t stream);

// ---- Cast (cast_kernels.cu) ----

// out[0, n) = x converted as kernels/cast_op.cc converts; from != to.
cudaError_t launch_cast(Elem from, Elem to, const void* x, void* out, int64_t n, cudaStream_t stream);

// ---- MatMul for integers (matmul_kernels.cu); floating point goes to cuBLAS ----

// c[m,n] = op(a) * op(b), row-major, products and sums wrapping around. m, n, k > 0.
cudaError_t launch_integer_matmul(Elem elem, const void* a, const void* b, void* c, int64_t m, int64_t k,
                                  int64_t n, bool transpose_a, bool transpose_b, cudaStream_t stream);

// ---- Reductions (reduction_kernels.cu) ----

enum class ReduceKind : int { kSum, kMean, kMax, kMin, kProd };

// The input as runs of dims (adjacent dims of one kind merged, size-1 dims dropped): the kept runs
// and the reduced runs, each with its input stride, outermost first; the innermost reduced run is
// kept apart (`inner`) because the kernels walk it as a loop.
struct ReduceGeometry {
  int64_t out_count = 1;  // product of the kept dims
  int64_t count = 1;      // input elements folded into each output element
  int kept_rank = 0;
  int64_t kept_dims[kMaxDims] = {};
  int64_t kept_strides[kMaxDims] = {};
  int outer_rank = 0;  // reduced runs other than the innermost one
  int64_t outer_dims[kMaxDims] = {};
  int64_t outer_strides[kMaxDims] = {};
  int64_t inner = 1;         // length of the innermost reduced run
  int64_t inner_stride = 1;  // its input stride (1: the input's innermost run is reduced)
};

// Scratch bytes launch_reduce needs for this geometry on a device with `sm_count` SMs.
std::size_t reduce_scratch_bytes(Elem elem, const ReduceGeometry& geometry, int sm_count);
// out[0, out_count) = the reduction; out_count > 0. Mean of integers needs count > 0, Max too
// (Min and Prod of nothing give their identity: +inf or the largest integer, 1).
// The 16-bit floats accumulate in float32 and each result is rounded once.
// `scratch` holds reduce_scratch_bytes(...) bytes of device memory (may be null when that is 0).
cudaError_t launch_reduce(ReduceKind op, Elem elem, const ReduceGeometry& geometry, const void* in, void* out,
                          void* scratch, int sm_count, cudaStream_t stream);

// ---- Random (random_kernels.cu): Philox4x32-10 as kernels/random_ops.cc ----

// out[0, n) from blocks first_block, first_block + 1, ... of the stream keyed by `key`. kF32 and
// kF64 only (the ops have no 16-bit form).
cudaError_t launch_random_uniform(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                  cudaStream_t stream);
cudaError_t launch_random_normal(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                 double mean, double stddev, cudaStream_t stream);

// ---- Shape ops (shape_kernels.cu) ----

inline constexpr int kMaxCopyDims = 2 * kMaxDims;

// A copy as nested loops over dims (outermost first): element (i_0, ..., i_{rank-1}) goes from
// src[sum i_d * src_strides[d]] to dst[sum i_d * dst_strides[d]], strides in elements, the
// pointers already at the copy's offsets: core/shape_ops.h's StridedCopy once simplified.
struct CopyGeometry {
  int rank = 0;
  int64_t dims[kMaxCopyDims] = {};
  int64_t dst_strides[kMaxCopyDims] = {};
  int64_t src_strides[kMaxCopyDims] = {};
};

// The copy of `geometry`'s elements of `elem_bytes` bytes (1, 2, 4 or 8: any dtype); n of them.
cudaError_t launch_strided_copy(int elem_bytes, const CopyGeometry& geometry, const void* src, void* dst, int64_t n,
                                cudaStream_t stream);
// out[0, n) = the value whose bits are the low `elem_bytes` bytes of `bits`.
cudaError_t launch_fill(int elem_bytes, uint64_t bits, void* out, int64_t n, cudaStream_t stream);
// int32 out[0, n) = values.v[0, n), n <= kMaxDims: Shape's dims, written on the stream.
struct Int32Values {
  int32_t v[kMaxDims] = {};
};
cudaError_t launch_write_int32(const Int32Values& values, int n, void* out, cudaStream_t stream);

// ---- Comparisons, logical and selection ops (select_kernels.cu) ----

enum class CompareKind : int { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual, kLogicalAnd, kLogicalOr };

// Up to three inputs broadcast onto the output: merged dims, outermost first, and each input's
// element stride along them (0 where broadcast); core/select_ops.h's Broadcast3. Rank 0: one element.
struct SelectGeometry {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
};

// bool out[0, n) = op(a, b) (inputs 0 and 1 of `geometry`); kLogical* take kBool only.
cudaError_t launch_compare(CompareKind op, Elem elem, const SelectGeometry& geometry, const void* a, const void* b,
                           bool* out, int64_t n, cudaStream_t stream);
cudaError_t launch_logical_not(const bool* x, bool* out, int64_t n, cudaStream_t stream);
// out[0, n) = cond ? x : y, elements of `elem_bytes` bytes (1, 2, 4 or 8: any dtype).
cudaError_t launch_select(int elem_bytes, const SelectGeometry& geometry, const bool* cond, const void* x,
                          const void* y, void* out, int64_t n, cudaStream_t stream);
// out[o, i, :] = params[o, indices[i], :] for o < outer, i < m, rows of `inner` elements of
// `elem_bytes` bytes. An index outside [0, limit) zeroes its row and records, in bad[0] (a device
// int64, set to INT64_MAX before), the least such position i, then bad[1] = indices[bad[0]].
cudaError_t launch_gather(int elem_bytes, bool int64_indices, const void* params, const void* indices, void* out,
                          int64_t outer, int64_t limit, int64_t m, int64_t inner, int64_t* bad, cudaStream_t stream);
// float out[n, depth] = indices[i] == d ? on : off.
cudaError_t launch_one_hot(bool int64_indices, const void* indices, float* out, int64_t n, int64_t depth, float on,
                           float off, cudaStream_t stream);
// int64 out[o, j] = the first k < n where x[o, k, j] is the largest (smallest) value; NaN wins.
cudaError_t launch_arg_reduce(bool max, Elem elem, const void* x, int64_t* out, int64_t outer, int64_t n,
                              int64_t inner, cudaStream_t stream);
// out[0, n) = the sum of `count` inputs (1 <= count <= kMaxAddN); out may be one of them.
inline constexpr int kMaxAddN = 32;
struct AddNInputs {
  const void* p[kMaxAddN] = {};
  int count = 0;
};
cudaError_t launch_add_n(Elem elem, const AddNInputs& inputs, void* out, int64_t n, cudaStream_t stream);

// ---- Scans (scan_kernels.cu) ----

enum class ScanKind : int { kSum, kProd };
// x's dims, row-major (rank 0: a scalar).
struct ScanShape {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
};
// out = the scan of x (kF32, kF64, kI32, kI64; n elements, n >= 0) along the axis that `axis` (a
// device int32, or int64 when int64_axis) names, read on the device so that a fed axis needs no
// host round trip: each line folds from the identity in scan order, as kernels/scan_ops.cc does,
// integers wrapping. An axis outside [-rank, rank) writes nothing and sets bad[0] = 1 and
// bad[1] = the axis (bad: two device int64s, zeroed before).
cudaError_t launch_scan(ScanKind op, Elem elem, const ScanShape& shape, const void* axis, bool int64_axis,
                        bool exclusive, bool reverse, const void* x, void* out, int64_t n, int64_t* bad,
                        cudaStream_t stream);

// ---- Neural-network ops (nn_kernels.cu): floating point elems unless said otherwise ----

// y[rows, cols] = softmax (log: log_softmax) of each row of x, one block per row (rows > 0).
cudaError_t launch_softmax(bool log, Elem elem, const void* x, void* y, int64_t rows, int64_t cols,
                           cudaStream_t stream);
// SoftmaxCrossEntropyWithLogits, one block per row: loss[rows], backprop[rows, cols]; labels as
// the logits.
cudaError_t launch_xent(Elem elem, const void* labels, const void* logits, void* loss, void* backprop, int64_t rows,
                        int64_t cols, cudaStream_t stream);
// SparseSoftmaxCrossEntropyWithLogits: int32 or int64 labels[rows]. A label outside [0, cols)
// makes its row NaN and records, in bad[0] (a device int64, set to INT64_MAX before), the least
// such row, then bad[1] = labels[bad[0]].
cudaError_t launch_sparse_xent(Elem elem, bool int64_labels, const void* labels, const void* logits, void* loss,
                               void* backprop, int64_t rows, int64_t cols, int64_t* bad, cudaStream_t stream);
// out[r, c] = value[r, c] + bias[c] (any number elem); n = rows * cols > 0.
cudaError_t launch_bias_add(Elem elem, const void* value, const void* bias, void* out, int64_t n, int64_t cols,
                            cudaStream_t stream);
// out[c] = sum over r of dy[r, c] (any number elem); cols > 0.
cudaError_t launch_bias_add_grad(Elem elem, const void* dy, void* out, int64_t rows, int64_t cols, cudaStream_t stream);
// out[0] = sum(x^2) / 2, summed in float64: per-block sums into `scratch` (kL2LossBlocks doubles
// of device memory), then one block.
inline constexpr int kL2LossBlocks = 256;
cudaError_t launch_l2_loss(Elem elem, const void* x, void* out, int64_t n, double* scratch, cudaStream_t stream);
// out[0, n) = the gradient kernel of (a, b): ReluGrad (gradients, features; any number elem),
// TanhGrad, SigmoidGrad, SqrtGrad (y, dy).
enum class GradKind : int { kRelu, kTanh, kSigmoid, kSqrt };
cudaError_t launch_elementwise_grad(GradKind op, Elem elem, const void* a, const void* b, void* out, int64_t n,
                                    cudaStream_t stream);
// out[outer, limit, inner] = zeros, then += dy[o, i, :] at row indices[i] (atomically; any number
// elem). Bad indices are skipped and reported in bad as launch_gather does (m > 0).
cudaError_t launch_gather_grad(Elem elem, bool int64_indices, const void* dy, const void* indices, void* out,
                               int64_t outer, int64_t limit, int64_t m, int64_t inner, int64_t* bad, cudaStream_t stream);
// Dropout as kernels/nn_ops.cc: mask[i] = scale where uniform_float(word i of block first + i / 4)
// < keep_prob, else 0; y = x * mask. n > 0.
cudaError_t launch_dropout(Elem elem, const void* x, void* y, void* mask, int64_t n, float keep_prob, double scale,
                           uint64_t key, uint64_t first_block, cudaStream_t stream);
// TruncatedNormal as kernels/nn_ops.cc, one thread per group of 4 floats or 2 doubles (kF32, kF64).
cudaError_t launch_truncated_normal(Elem elem, void* out, int64_t n, uint64_t key, uint64_t first_block,
                                    cudaStream_t stream);

}  // namespace tessera::internal::gpu
