// CUDA kernels for the elementwise ops, with the semantics of kernels/cwise_ops.cc: NumPy
// broadcasting; integer +, -, *, negation and squaring wrap around; integer division truncates,
// MIN / -1 wraps to MIN and x / 0 raises a device flag (the op then fails), as does an integer to a
// negative power; Maximum and Minimum
// return NaN when either input is. float16 and bfloat16 compute each element in float32 and round
// the result once (to nearest even), as the CPU kernels do.
//
// Contiguous cases (same shapes, one side a single value) are grid-stride loops over 16-byte
// vectors when every stepped pointer is 16-byte aligned (device tensors are: chunks are 256-byte
// aligned), with a scalar tail. A matrix with a vector broadcast over its rows or columns (a bias
// add) runs rows on the grid's y dimension and columns on its threads, with no division per
// element; any other broadcast walks the output index through the merged dims and per-input
// strides, in 32-bit index arithmetic when the output is below 2^31 elements.
#include <cmath>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

// ---- Binary functors: apply(a, b, zero_divisor_flag) ----

struct AddFn {
  template <class T> __device__ static T apply(T a, T b, int*) { return wrapping_add(a, b); }
};
struct SubFn {
  template <class T> __device__ static T apply(T a, T b, int*) { return wrapping_sub(a, b); }
};
struct MulFn {
  template <class T> __device__ static T apply(T a, T b, int*) { return wrapping_mul(a, b); }
};
struct DivFn {
  template <class T> __device__ static T apply(T a, T b, int* zero) {
    if constexpr (std::is_integral_v<T>) {
      if (b == T{0}) {
        *zero = 1;  // every thread that sees one writes the same value
        return T{0};
      }
      return floor_div(a, b);  // TF1's tf.div: Python 2's `/`, rounded down
    } else {
      return a / b;
    }
  }
};
struct MaximumFn {
  template <class T> __device__ static T apply(T a, T b, int*) { return (a > b || a != a) ? a : b; }
};
struct MinimumFn {
  template <class T> __device__ static T apply(T a, T b, int*) { return (a < b || a != a) ? a : b; }
};
struct PowFn {
  // A negative integer exponent raises the device flag (the op then fails, as the CPU kernel does
  // before computing any element); integers square and multiply, wrapping around.
  template <class T> __device__ static T apply(T a, T b, int* negative) {
    if constexpr (std::is_integral_v<T>) {
      if (b < T{0}) {
        *negative = 1;
        return T{0};
      }
      T result = 1;
      for (T base = a; b > 0; b >>= 1) {
        if (b & 1) result = wrapping_mul(result, base);
        if (b > 1) base = wrapping_mul(base, base);
      }
      return result;
    } else if constexpr (std::is_same_v<T, float>) {
      return powf(a, b);
    } else {
      return pow(a, b);
    }
  }
};

// Fn on two stored values: computed in Accumulate<T>, then stored as T (one rounding for the
// 16-bit floats; nothing to do for the others).
template <class Fn, class T>
__device__ __forceinline__ T apply_binary(T a, T b, int* zero) {
  return narrow<T>(Fn::apply(widen(a), widen(b), zero));
}

// out[i] = f(a[i or 0], b[i or 0]): kAStep / kBStep say whether each input advances.
template <class Fn, class T, bool kAStep, bool kBStep>
__global__ void contiguous_binary(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                  int64_t n, int* zero, bool vectorized) {
  constexpr int N = 16 / sizeof(T);
  const int64_t start = global_thread();
  const int64_t step = grid_threads();
  const T a0 = kAStep ? T{} : a[0];
  const T b0 = kBStep ? T{} : b[0];
  int64_t tail = 0;
  if (vectorized) {
    using V = Vec<T, N>;
    const int64_t nv = n / N;
    for (int64_t i = start; i < nv; i += step) {
      V va{};
      V vb{};
      if constexpr (kAStep) va = reinterpret_cast<const V*>(a)[i];
      if constexpr (kBStep) vb = reinterpret_cast<const V*>(b)[i];
      V vo;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        vo.v[j] = apply_binary<Fn>(kAStep ? va.v[j] : a0, kBStep ? vb.v[j] : b0, zero);
      }
      reinterpret_cast<V*>(out)[i] = vo;
    }
    tail = nv * N;
  }
  for (int64_t i = tail + start; i < n; i += step) {
    out[i] = apply_binary<Fn>(kAStep ? a[i] : a0, kBStep ? b[i] : b0, zero);
  }
}

// out[i] = f(a[ia], b[ib]), ia and ib from i through the geometry. I: the index type.
template <class Fn, class T, class I>
__global__ void general_binary(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, I n,
                               BroadcastGeometry g, int* zero) {
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I ia;
    I ib;
    strided_offsets(i, g.rank, g.dims, g.a_strides, g.b_strides, ia, ib);
    out[i] = apply_binary<Fn>(a[ia], b[ib], zero);
  }
}

// A rows x cols output where one input is the whole (contiguous) matrix and the other a vector,
// indexed by column (kByColumn: a bias, broadcast over rows) or by row (broadcast over columns).
// Rows go to blockIdx.y, columns to the x threads: no division or remainder per element, and the
// columns are read as 16-byte vectors when `vectorized` (cols a multiple of the vector width, the
// pointers 16-byte aligned). kMatrixIsA: the matrix is the op's first operand.
template <class Fn, class T, bool kMatrixIsA, bool kByColumn>
__global__ void matrix_vector_binary(const T* __restrict__ m, const T* __restrict__ v, T* __restrict__ out,
                                     int64_t rows, int64_t cols, int* zero, bool vectorized) {
  constexpr int N = 16 / sizeof(T);
  const int64_t start = global_thread();
  const int64_t step = grid_threads();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* mrow = m + r * cols;
    T* orow = out + r * cols;
    const T vr = kByColumn ? T{} : v[r];
    int64_t tail = 0;
    if (vectorized) {
      using V = Vec<T, N>;
      const int64_t nv = cols / N;
      for (int64_t i = start; i < nv; i += step) {
        const V vm = reinterpret_cast<const V*>(mrow)[i];
        V vv{};
        if constexpr (kByColumn) vv = reinterpret_cast<const V*>(v)[i];
        V vo;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const T y = kByColumn ? vv.v[j] : vr;
          vo.v[j] = kMatrixIsA ? apply_binary<Fn>(vm.v[j], y, zero) : apply_binary<Fn>(y, vm.v[j], zero);
        }
        reinterpret_cast<V*>(orow)[i] = vo;
      }
      tail = nv * N;
    }
    for (int64_t c = tail + start; c < cols; c += step) {
      const T y = kByColumn ? v[c] : vr;
      orow[c] = kMatrixIsA ? apply_binary<Fn>(mrow[c], y, zero) : apply_binary<Fn>(y, mrow[c], zero);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Which matrix-vector form a general broadcast is, if any (Note at matrix_vector_binary).
enum class MatrixVector { kNone, kBiasB, kBiasA, kRowB, kRowA };
MatrixVector matrix_vector_form(const BroadcastGeometry& g) {
  if (g.rank != 2 || g.dims[1] < 32) return MatrixVector::kNone;  // short rows leave threads idle
  const int64_t cols = g.dims[1];
  const bool a_matrix = g.a_strides[0] == cols && g.a_strides[1] == 1;
  const bool b_matrix = g.b_strides[0] == cols && g.b_strides[1] == 1;
  if (a_matrix && g.b_strides[0] == 0 && g.b_strides[1] == 1) return MatrixVector::kBiasB;
  if (b_matrix && g.a_strides[0] == 0 && g.a_strides[1] == 1) return MatrixVector::kBiasA;
  if (a_matrix && g.b_strides[0] == 1 && g.b_strides[1] == 0) return MatrixVector::kRowB;
  if (b_matrix && g.a_strides[0] == 1 && g.a_strides[1] == 0) return MatrixVector::kRowA;
  return MatrixVector::kNone;
}

template <class Fn, class T>
void launch_matrix_vector(MatrixVector form, const BroadcastGeometry& g, const T* a, const T* b, T* out, int* zero,
                          cudaStream_t stream) {
  constexpr int N = 16 / sizeof(T);
  const int64_t rows = g.dims[0];
  const int64_t cols = g.dims[1];
  const bool a_matrix = form == MatrixVector::kBiasB || form == MatrixVector::kRowB;
  const bool by_column = form == MatrixVector::kBiasB || form == MatrixVector::kBiasA;
  const T* m = a_matrix ? a : b;
  const T* v = a_matrix ? b : a;
  const bool vectorized = cols % N == 0 && aligned16(m) && aligned16(out) && (!by_column || aligned16(v));
  const int64_t per_row = vectorized ? cols / N : cols;
  const dim3 grid(blocks_for(per_row, kThreads), static_cast<unsigned int>(rows < 65535 ? rows : 65535));
  switch (form) {
    case MatrixVector::kBiasB:
      matrix_vector_binary<Fn, T, true, true><<<grid, kThreads, 0, stream>>>(m, v, out, rows, cols, zero, vectorized);
      break;
    case MatrixVector::kBiasA:
      matrix_vector_binary<Fn, T, false, true><<<grid, kThreads, 0, stream>>>(m, v, out, rows, cols, zero, vectorized);
      break;
    case MatrixVector::kRowB:
      matrix_vector_binary<Fn, T, true, false><<<grid, kThreads, 0, stream>>>(m, v, out, rows, cols, zero, vectorized);
      break;
    case MatrixVector::kRowA:
      matrix_vector_binary<Fn, T, false, false><<<grid, kThreads, 0, stream>>>(m, v, out, rows, cols, zero, vectorized);
      break;
    case MatrixVector::kNone:
      break;
  }
}

template <class Fn>
cudaError_t binary(Elem elem, BroadcastKind kind, const BroadcastGeometry& g, const void* a, const void* b,
                   void* out, int64_t n, int* zero, cudaStream_t stream) {
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      constexpr int N = 16 / sizeof(T);
      const T* pa = static_cast<const T*>(a);
      const T* pb = static_cast<const T*>(b);
      T* po = static_cast<T*>(out);
      const bool a_ok = kind == BroadcastKind::kScalarA || aligned16(a);
      const bool b_ok = kind == BroadcastKind::kScalarB || aligned16(b);
      const bool vectorized = a_ok && b_ok && aligned16(out);
      const unsigned int blocks = blocks_for(vectorized ? (n + N - 1) / N : n, kThreads);
      switch (kind) {
        case BroadcastKind::kSame:
          contiguous_binary<Fn, T, true, true><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n, zero, vectorized);
          break;
        case BroadcastKind::kScalarA:
          contiguous_binary<Fn, T, false, true><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n, zero, vectorized);
          break;
        case BroadcastKind::kScalarB:
          contiguous_binary<Fn, T, true, false><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n, zero, vectorized);
          break;
        case BroadcastKind::kGeneral:
          if (const MatrixVector form = matrix_vector_form(g); form != MatrixVector::kNone) {
            launch_matrix_vector<Fn, T>(form, g, pa, pb, po, zero, stream);
          } else if (n < (int64_t{1} << 31)) {
            general_binary<Fn, T, uint32_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
                pa, pb, po, static_cast<uint32_t>(n), g, zero);
          } else {
            general_binary<Fn, T, int64_t><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, po, n, g, zero);
          }
          break;
      }
      return cudaGetLastError();
    }
  });
}

// ---- Unary functors: apply(x); kFloatingOnly ops exist for the floating point types only ----

struct NegFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> __device__ static T apply(T x) { return wrapping_sub(T{0}, x); }
};
struct ReluFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> __device__ static T apply(T x) { return x < T{0} ? T{0} : x; }  // relu(NaN) = NaN
};
struct SquareFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> __device__ static T apply(T x) { return wrapping_mul(x, x); }
};
struct ExpFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return expf(x); else return exp(x);
  }
};
struct LogFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return logf(x); else return log(x);
  }
};
struct SqrtFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return sqrtf(x); else return sqrt(x);
  }
};
struct TanhFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return tanhf(x); else return tanh(x);
  }
};
struct SigmoidFn {
  static constexpr bool kFloatingOnly = true;
  // exp(-x) overflows to inf for very negative x, giving exactly 0: no NaN from inf / inf.
  template <class T> __device__ static T apply(T x) { return T{1} / (T{1} + ExpFn::apply(-x)); }
};
struct FloorFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return floorf(x); else return floor(x);
  }
};
struct SinFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return sinf(x); else return sin(x);
  }
};
struct CosFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_same_v<T, float>) return cosf(x); else return cos(x);
  }
};

struct AbsFn {
  static constexpr bool kFloatingOnly = false;
  // Integers negate wrapping (abs of the smallest value is itself), as the CPU kernel.
  template <class T> __device__ static T apply(T x) {
    if constexpr (std::is_integral_v<T>) return x < T{0} ? wrapping_sub(T{0}, x) : x;
    else if constexpr (std::is_same_v<T, float>) return fabsf(x);
    else return fabs(x);
  }
};
struct SignFn {
  static constexpr bool kFloatingOnly = false;
  template <class T> __device__ static T apply(T x) {
    if constexpr (!std::is_integral_v<T>) {
      if (x != x) return x;  // sign(NaN) = NaN
    }
    return static_cast<T>((T{0} < x) - (x < T{0}));
  }
};
struct Relu6Fn {
  static constexpr bool kFloatingOnly = false;
  template <class T> __device__ static T apply(T x) { return x < T{0} ? T{0} : (x > T{6} ? T{6} : x); }
};
struct RsqrtFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) { return T{1} / SqrtFn::apply(x); }
};
struct ReciprocalFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) { return T{1} / x; }
};
struct SoftplusFn {
  static constexpr bool kFloatingOnly = true;
  // The CPU kernel's thresholds: log(epsilon) + 2 of the type computed in.
  template <class T> __device__ static T apply(T x) {
    // The epsilons of float and double (std::numeric_limits is host code).
    const T epsilon = std::is_same_v<T, float> ? T(1.1920928955078125e-07) : T(2.220446049250313e-16);
    const T threshold = LogFn::apply(epsilon) + T{2};
    if (x > -threshold) return x;
    if (x < threshold) return ExpFn::apply(x);
    return LogFn::apply(ExpFn::apply(x) + T{1});
  }
};
struct EluFn {
  static constexpr bool kFloatingOnly = true;
  template <class T> __device__ static T apply(T x) { return x < T{0} ? ExpFn::apply(x) - T{1} : x; }
};

// Fn on a stored value, computed and stored as apply_binary does.
template <class Fn, class T>
__device__ __forceinline__ T apply_unary(T x) {
  return narrow<T>(Fn::apply(widen(x)));
}

template <class Fn, class T>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n, bool vectorized) {
  constexpr int N = 16 / sizeof(T);
  const int64_t start = global_thread();
  const int64_t step = grid_threads();
  int64_t tail = 0;
  if (vectorized) {
    using V = Vec<T, N>;
    const int64_t nv = n / N;
    for (int64_t i = start; i < nv; i += step) {
      const V vx = reinterpret_cast<const V*>(x)[i];
      V vo;
#pragma unroll
      for (int j = 0; j < N; ++j) vo.v[j] = apply_unary<Fn>(vx.v[j]);
      reinterpret_cast<V*>(out)[i] = vo;
    }
    tail = nv * N;
  }
  for (int64_t i = tail + start; i < n; i += step) out[i] = apply_unary<Fn>(x[i]);
}

template <class Fn>
cudaError_t unary(Elem elem, const void* x, void* out, int64_t n, cudaStream_t stream) {
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool> || (Fn::kFloatingOnly && !is_floating<T>)) {
      return cudaErrorInvalidValue;
    } else {
      constexpr int N = 16 / sizeof(T);
      const bool vectorized = aligned16(x) && aligned16(out);
      unary_kernel<Fn, T><<<blocks_for(vectorized ? (n + N - 1) / N : n, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(out), n, vectorized);
      return cudaGetLastError();
    }
  });
}

}  // namespace

cudaError_t launch_binary(BinaryKind op, Elem elem, BroadcastKind kind, const BroadcastGeometry& geometry,
                          const void* a, const void* b, void* out, int64_t n, int* zero_divisor,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case BinaryKind::kAdd: return binary<AddFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kSub: return binary<SubFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kMul: return binary<MulFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kDiv: return binary<DivFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kMaximum: return binary<MaximumFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kMinimum: return binary<MinimumFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
    case BinaryKind::kPow: return binary<PowFn>(elem, kind, geometry, a, b, out, n, zero_divisor, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_unary(UnaryKind op, Elem elem, const void* x, void* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case UnaryKind::kNeg: return unary<NegFn>(elem, x, out, n, stream);
    case UnaryKind::kRelu: return unary<ReluFn>(elem, x, out, n, stream);
    case UnaryKind::kSquare: return unary<SquareFn>(elem, x, out, n, stream);
    case UnaryKind::kExp: return unary<ExpFn>(elem, x, out, n, stream);
    case UnaryKind::kLog: return unary<LogFn>(elem, x, out, n, stream);
    case UnaryKind::kSqrt: return unary<SqrtFn>(elem, x, out, n, stream);
    case UnaryKind::kTanh: return unary<TanhFn>(elem, x, out, n, stream);
    case UnaryKind::kSigmoid: return unary<SigmoidFn>(elem, x, out, n, stream);
    case UnaryKind::kFloor: return unary<FloorFn>(elem, x, out, n, stream);
    case UnaryKind::kSin: return unary<SinFn>(elem, x, out, n, stream);
    case UnaryKind::kCos: return unary<CosFn>(elem, x, out, n, stream);
    case UnaryKind::kAbs: return unary<AbsFn>(elem, x, out, n, stream);
    case UnaryKind::kSign: return unary<SignFn>(elem, x, out, n, stream);
    case UnaryKind::kRelu6: return unary<Relu6Fn>(elem, x, out, n, stream);
    case UnaryKind::kRsqrt: return unary<RsqrtFn>(elem, x, out, n, stream);
    case UnaryKind::kReciprocal: return unary<ReciprocalFn>(elem, x, out, n, stream);
    case UnaryKind::kSoftplus: return unary<SoftplusFn>(elem, x, out, n, stream);
    case UnaryKind::kElu: return unary<EluFn>(elem, x, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::internal::gpu
