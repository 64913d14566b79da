// CUDA kernels for the reductions Sum, Mean, Max, Min and Prod over any set of axes, with the semantics of
// kernels/reduction_ops.cc: integer sums wrap around (they accumulate in the unsigned type), the
// mean of integers is the sum divided by the count truncated toward zero, the mean of floating
// point values divides in the accumulation type, Max and Min propagate NaN, integer products wrap
// (the unsigned type, as sums), and the minimum (product) of nothing is +inf or INT_MAX (1). float16 and bfloat16 are
// widened to float32 as they are read, accumulated there, and each result is rounded once.
//
// Note [GPU reductions]
// The op kernel merges the input's dims into runs of kept and reduced dims (ReduceGeometry). Each
// output element's reduction is split into `slices` contiguous ranges of its reduced elements, and
// each (output, slice) pair, a "unit", is folded by a group of threads:
// * when the input's innermost run is reduced (rows), a group of up to 256 threads walks the row
//   together (coalesced reads), then combines through warp shuffles (groups of up to 32 threads,
//   several per warp) or through shared memory (one group per block);
// * when the innermost run is kept (columns), a group is one thread, and neighbouring threads fold
//   neighbouring outputs, so each step of the reduction reads consecutive addresses.
// Slices are added when outputs alone give too few threads to fill the GPU (a full reduction, a
// few long columns); a second kernel then combines each output's slices (and divides for Mean).
// Like CUB's segmented reduction (one block per segment), a unit is handled by one group; unlike
// it, segments need not be contiguous, so no transpose is needed for reductions over outer axes.
// A whole contiguous input (a full reduction) goes to CUB's DeviceReduce instead, and many long
// contiguous rows to its DeviceSegmentedReduce: vectorized loads and no index arithmetic per
// element; CUB's temporary storage is the op's scratch. The results go straight into the output
// when it holds them as they are; the slices' partial results, and every float32 result of a
// 16-bit reduction, go to the scratch instead (ahead of CUB's storage), from which a last kernel
// (finalize) combines and rounds them into the output (Layout).
#include <cstdint>
#include <limits>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

// Integers accumulate in their unsigned type (wrapping), the 16-bit floats in float32.
template <class T>
struct SumOp {
  using A = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                        std::type_identity<Accumulate<T>>>::type;
  __device__ static A identity() { return A{0}; }
  static A host_identity() { return A{0}; }
  __device__ static A combine(A acc, A x) { return acc + x; }
};

// The identity of Max (kLowest: the lowest value, -inf for the floats) or of Min (the highest, +inf),
// on the device (from bit patterns: numeric_limits is host code) and on the host.
template <class A, bool kLowest>
struct Extreme {
  __device__ static A device() {
    if constexpr (std::is_same_v<A, float>) {
      return __int_as_float(kLowest ? static_cast<int>(0xff800000u) : 0x7f800000);  // -inf : +inf
    } else if constexpr (std::is_same_v<A, double>) {
      return __longlong_as_double(kLowest ? static_cast<long long>(0xfff0000000000000ull)
                                          : 0x7ff0000000000000ll);  // -inf : +inf
    } else if constexpr (std::is_same_v<A, int32_t>) {
      return kLowest ? INT32_MIN : INT32_MAX;
    } else {
      return kLowest ? INT64_MIN : INT64_MAX;
    }
  }
  static A host() {
    if constexpr (std::is_floating_point_v<A>) {
      return kLowest ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return kLowest ? std::numeric_limits<A>::min() : std::numeric_limits<A>::max();
    }
  }
};

template <class T>
struct MaxOp {
  using A = Accumulate<T>;
  __device__ static A identity() { return Extreme<A, true>::device(); }
  static A host_identity() { return Extreme<A, true>::host(); }
  // `x != x` is the NaN test: once NaN, the accumulator stays NaN (whichever side holds it).
  __device__ static A combine(A acc, A x) { return (x > acc || x != x) ? x : acc; }
};

template <class T>
struct MinOp {
  using A = Accumulate<T>;
  __device__ static A identity() { return Extreme<A, false>::device(); }
  static A host_identity() { return Extreme<A, false>::host(); }
  __device__ static A combine(A acc, A x) { return (x < acc || x != x) ? x : acc; }
};

template <class T>
struct ProdOp {
  using A = typename SumOp<T>::A;
  __device__ static A identity() { return A{1}; }
  static A host_identity() { return A{1}; }
  __device__ static A combine(A acc, A x) { return acc * x; }
};

// An input element as the accumulator type A: widened (the 16-bit floats) or the same bits seen
// unsigned (integer sums); floats as they are.
template <class A, class T>
__host__ __device__ __forceinline__ A load(T x) {
  return static_cast<A>(widen(x));
}

// load as a functor, for CUB's input iterator.
template <class A, class T>
struct Load {
  __host__ __device__ A operator()(T x) const { return load<A>(x); }
};

// The input as CUB reads it: the buffer itself where T is stored as A (same size: signed and
// unsigned views may alias), else each element loaded as it is read (the 16-bit floats).
template <class Op, class T>
auto cub_input(const void* in) {
  using A = typename Op::A;
  if constexpr (sizeof(A) == sizeof(T)) {
    return static_cast<const A*>(in);
  } else {
    return thrust::make_transform_iterator(static_cast<const T*>(in), Load<A, T>{});
  }
}

// Op::combine as CUB's reduction functor.
template <class Op>
struct CubCombine {
  __device__ __forceinline__ typename Op::A operator()(const typename Op::A& acc, const typename Op::A& x) const {
    return Op::combine(acc, x);
  }
};

// A whole contiguous input folded into one value: CUB's device-wide reduction (vectorized loads,
// one pass plus a tiny second one).
bool whole_contiguous(const ReduceGeometry& g) {
  return g.out_count == 1 && g.outer_rank == 0 && g.inner_stride == 1 && g.inner == g.count && g.count > 0;
}

template <class Op, class T>
cudaError_t cub_reduce(void* scratch, std::size_t* bytes, const void* in, typename Op::A* out, int64_t count,
                       cudaStream_t stream) {
  return cub::DeviceReduce::Reduce(scratch, *bytes, cub_input<Op, T>(in), out, count, CubCombine<Op>{},
                                   Op::host_identity(), stream);
}

// Many long contiguous rows, each folded into one value: CUB's segmented reduction (a block per
// row, vectorized loads). Fewer rows than the GPU has room for, or short rows, stay with the
// groups and slices of Note [GPU reductions].
bool contiguous_rows(const ReduceGeometry& g, int sm_count) {
  return g.outer_rank == 0 && g.inner_stride == 1 && g.kept_rank == 1 && g.kept_strides[0] == g.inner &&
         g.inner >= 1024 && g.out_count >= 2 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1);
}

struct RowStart {
  int64_t row;
  __host__ __device__ int64_t operator()(int64_t i) const { return i * row; }
};

template <class Op, class T>
cudaError_t cub_segmented_reduce(void* scratch, std::size_t* bytes, const void* in, typename Op::A* out,
                                 const ReduceGeometry& g, cudaStream_t stream) {
  auto begins = thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(0), RowStart{g.inner});
  auto ends = thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(1), RowStart{g.inner});
  return cub::DeviceSegmentedReduce::Reduce(scratch, *bytes, cub_input<Op, T>(in), out, g.out_count, begins, ends,
                                            CubCombine<Op>{}, Op::host_identity(), stream);
}

// The bytes of CUB's temporary storage for `g` of `Op`.
template <class Op, class T>
std::size_t cub_op_scratch_bytes(const ReduceGeometry& g, bool rows) {
  std::size_t bytes = 0;
  if (rows) {
    (void)cub_segmented_reduce<Op, T>(nullptr, &bytes, nullptr, nullptr, g, nullptr);
  } else {
    (void)cub_reduce<Op, T>(nullptr, &bytes, nullptr, nullptr, g.count, nullptr);
  }
  return bytes;
}

// The largest of every op's (one size serves them all).
template <class T>
std::size_t cub_scratch_bytes(const ReduceGeometry& g, bool rows) {
  const std::size_t sizes[] = {cub_op_scratch_bytes<SumOp<T>, T>(g, rows), cub_op_scratch_bytes<MaxOp<T>, T>(g, rows),
                               cub_op_scratch_bytes<MinOp<T>, T>(g, rows), cub_op_scratch_bytes<ProdOp<T>, T>(g, rows)};
  std::size_t most = 0;
  for (std::size_t b : sizes) most = b > most ? b : most;
  return most;
}

// Input offset of output element o: its index decomposed over the kept runs.
__device__ __forceinline__ int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  int64_t offset = 0;
  for (int d = g.kept_rank - 1; d >= 0; --d) {
    const int64_t index = o % g.kept_dims[d];
    o /= g.kept_dims[d];
    offset += index * g.kept_strides[d];
  }
  return offset;
}

// Input offset (relative to the output's) of reduced element r: its index within the innermost
// reduced run and its index decomposed over the other reduced runs.
__device__ __forceinline__ int64_t reduced_offset(const ReduceGeometry& g, int64_t r) {
  if (g.outer_rank == 0) return r * g.inner_stride;
  int64_t rest = r / g.inner;
  int64_t offset = (r - rest * g.inner) * g.inner_stride;
  for (int d = g.outer_rank - 1; d >= 0; --d) {
    const int64_t index = rest % g.outer_dims[d];
    rest /= g.outer_dims[d];
    offset += index * g.outer_strides[d];
  }
  return offset;
}

template <class Op, class T>
__device__ __forceinline__ typename Op::A fold(const T* in, const ReduceGeometry& g, int64_t unit, int64_t slice_len,
                                               int lane, int group) {
  using A = typename Op::A;
  const int64_t o = unit % g.out_count;
  const int64_t s = unit / g.out_count;
  const int64_t base = kept_offset(g, o);
  const int64_t begin = s * slice_len;
  const int64_t end = begin + slice_len < g.count ? begin + slice_len : g.count;
  A acc = Op::identity();
  for (int64_t r = begin + lane; r < end; r += group) {
    acc = Op::combine(acc, load<A>(in[base + reduced_offset(g, r)]));
  }
  return acc;
}

// Groups of `group` threads (a power of two up to 32) per unit, several groups per warp. The loop
// bound is the same for a whole warp, so every lane takes part in every shuffle.
template <class Op, class T>
__global__ void reduce_groups(const T* __restrict__ in, typename Op::A* out, ReduceGeometry g, int group,
                              int64_t units, int64_t slice_len) {
  using A = typename Op::A;
  const int lane = static_cast<int>(threadIdx.x) & (group - 1);
  const int groups_per_warp = 32 / group;
  const int group_in_warp = (static_cast<int>(threadIdx.x) & 31) / group;
  const int64_t warp = global_thread() / 32;
  const int64_t warps = grid_threads() / 32;
  for (int64_t first = warp * groups_per_warp; first < units; first += warps * groups_per_warp) {
    const int64_t unit = first + group_in_warp;
    A acc = unit < units ? fold<Op>(in, g, unit, slice_len, lane, group) : Op::identity();
    for (int offset = group / 2; offset > 0; offset /= 2) {
      acc = Op::combine(acc, __shfl_down_sync(0xffffffffu, acc, offset, group));
    }
    if (unit < units && lane == 0) out[unit] = acc;
  }
}

// One unit per block (blockDim.x threads, a multiple of 32): warp shuffles, then shared memory.
template <class Op, class T>
__global__ void reduce_blocks(const T* __restrict__ in, typename Op::A* out, ReduceGeometry g, int64_t units,
                              int64_t slice_len) {
  using A = typename Op::A;
  __shared__ A warp_results[32];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    A acc = fold<Op>(in, g, unit, slice_len, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    for (int offset = 16; offset > 0; offset /= 2) acc = Op::combine(acc, __shfl_down_sync(0xffffffffu, acc, offset));
    if (lane == 0) warp_results[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < warps ? warp_results[lane] : Op::identity();
      for (int offset = 16; offset > 0; offset /= 2) acc = Op::combine(acc, __shfl_down_sync(0xffffffffu, acc, offset));
      if (lane == 0) out[unit] = acc;
    }
    __syncthreads();  // warp_results is reused by the next unit
  }
}

// An output element from its accumulated value: integers back to T (unsigned to signed: the two's
// complement value) and, for Mean, divided by the count truncating toward zero; floating point
// divided in A for Mean (count 0: 0 / 0 = NaN, as the CPU kernel), then stored as T (the one
// rounding of a 16-bit float).
template <class T, bool kMean, class A>
__device__ __forceinline__ T finish(A acc, int64_t count) {
  if constexpr (std::is_integral_v<T>) {
    const T v = static_cast<T>(acc);
    return kMean ? static_cast<T>(static_cast<int64_t>(v) / count) : v;
  } else {
    return narrow<T>(kMean ? acc / static_cast<A>(count) : acc);
  }
}

// out[o] = the combination of the slices' partial results, finished. May run in place (partials
// == out, one slice, A the size of T): each thread reads its element before writing it.
template <class Op, class T, bool kMean>
__global__ void finalize(const typename Op::A* partials, T* out, int64_t out_count, int64_t slices, int64_t count) {
  using A = typename Op::A;
  for (int64_t o = global_thread(); o < out_count; o += grid_threads()) {
    A acc = partials[o];
    for (int64_t s = 1; s < slices; ++s) acc = Op::combine(acc, partials[s * out_count + o]);
    out[o] = finish<T, kMean>(acc, count);
  }
}

struct Plan {
  int group = 1;  // threads per unit: 1..32 (groups in warps) or 64..256 (one per block)
  int64_t slices = 1;
};

Plan make_plan(const ReduceGeometry& g, int sm_count) {
  Plan p;
  const bool rows = g.inner_stride == 1 && g.inner > 1;
  if (rows) {
    const int64_t want = g.inner < 256 ? g.inner : 256;
    while (p.group < want) p.group *= 2;
  }
  const int64_t target = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * 2048;
  const int64_t threads = g.out_count * p.group;
  if (threads < target) {
    const int64_t by_threads = (target + threads - 1) / threads;
    const int64_t by_work = g.count / (static_cast<int64_t>(p.group) * 64);  // >= 64 elements per thread
    int64_t slices = by_threads < by_work ? by_threads : by_work;
    if (slices > 1024) slices = 1024;
    if (slices > 1) p.slices = slices;
  }
  return p;
}

// Where a reduction's results go (Note [GPU reductions]): CUB or the groups fold the input into
// `slices` results per output element (one with CUB), straight into the output when it holds them
// as they are (one slice, A the size of T), else into the scratch, ahead of CUB's storage.
struct Layout {
  bool cub = false;    // CUB folds the input (else the groups, by `plan`)
  bool whole = false;  // CUB's device-wide reduction (else its segmented one), when cub
  Plan plan;
  bool direct = true;             // the results are written into the output
  std::size_t results_bytes = 0;  // the results' scratch bytes (a multiple of 256) when !direct
};

template <class T>
Layout make_layout(const ReduceGeometry& g, int sm_count) {
  Layout l;
  l.whole = whole_contiguous(g);
  l.cub = l.whole || contiguous_rows(g, sm_count);
  if (!l.cub) l.plan = make_plan(g, sm_count);
  l.direct = l.plan.slices == 1 && sizeof(Accumulate<T>) == sizeof(T);
  if (!l.direct) {
    const auto bytes = static_cast<std::size_t>(l.plan.slices * g.out_count) * sizeof(Accumulate<T>);
    l.results_bytes = (bytes + 255) / 256 * 256;  // CUB's storage after them stays aligned
  }
  return l;
}

// CUB folds the input into `results`, with `temp` (null when CUB needs none) as its storage.
template <class Op, class T>
cudaError_t cub_fold(const ReduceGeometry& g, bool whole, const void* in, typename Op::A* results, void* temp,
                     cudaStream_t stream) {
  auto reduce = [&](void* storage, std::size_t* bytes) {
    return whole ? cub_reduce<Op, T>(storage, bytes, in, results, g.count, stream)
                 : cub_segmented_reduce<Op, T>(storage, bytes, in, results, g, stream);
  };
  std::size_t bytes = 0;
  if (cudaError_t e = reduce(nullptr, &bytes); e != cudaSuccess) return e;
  if (bytes > 0 && temp == nullptr) return cudaErrorInvalidValue;
  return reduce(temp, &bytes);
}

// The groups fold the input into `results`: p.slices partial results per output element.
template <class Op, class T>
cudaError_t group_fold(const ReduceGeometry& g, const Plan& p, const void* in, typename Op::A* results,
                       cudaStream_t stream) {
  const int64_t slice_len = (g.count + p.slices - 1) / p.slices;
  const int64_t units = g.out_count * p.slices;
  const T* input = static_cast<const T*>(in);
  if (p.group > 32) {
    reduce_blocks<Op><<<blocks_for(units, 1), p.group, 0, stream>>>(input, results, g, units, slice_len);
  } else {
    reduce_groups<Op><<<blocks_for(units * p.group, kThreads), kThreads, 0, stream>>>(input, results, g, p.group,
                                                                                      units, slice_len);
  }
  return cudaGetLastError();
}

template <class Op, class T, bool kMean>
cudaError_t run(const ReduceGeometry& g, const Layout& l, const void* in, void* out, void* scratch,
                cudaStream_t stream) {
  using A = typename Op::A;
  A* results = static_cast<A*>(l.direct ? out : scratch);
  void* temp = scratch == nullptr ? nullptr : static_cast<char*>(scratch) + l.results_bytes;
  const cudaError_t e = l.cub ? cub_fold<Op, T>(g, l.whole, in, results, temp, stream)
                              : group_fold<Op, T>(g, l.plan, in, results, stream);
  if (e != cudaSuccess) return e;
  if (!l.direct || kMean) {
    finalize<Op, T, kMean><<<blocks_for(g.out_count, kThreads), kThreads, 0, stream>>>(
        results, static_cast<T*>(out), g.out_count, l.plan.slices, g.count);
  }
  return cudaGetLastError();
}

}  // namespace

std::size_t reduce_scratch_bytes(Elem elem, const ReduceGeometry& geometry, int sm_count) {
  std::size_t bytes = 0;
  (void)visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (!std::is_same_v<T, bool>) {
      const Layout l = make_layout<T>(geometry, sm_count);
      // CUB's temporary storage (the calling thread's current device is the one the reduction
      // will run on).
      bytes = l.results_bytes + (l.cub ? cub_scratch_bytes<T>(geometry, !l.whole) : 0);
    }
    return cudaSuccess;
  });
  return bytes;
}

cudaError_t launch_reduce(ReduceKind op, Elem elem, const ReduceGeometry& geometry, const void* in, void* out,
                          void* scratch, int sm_count, cudaStream_t stream) {
  if (geometry.out_count <= 0) return cudaSuccess;
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      const Layout l = make_layout<T>(geometry, sm_count);
      if (l.results_bytes > 0 && scratch == nullptr) return cudaErrorInvalidValue;
      switch (op) {
        case ReduceKind::kSum: return run<SumOp<T>, T, false>(geometry, l, in, out, scratch, stream);
        case ReduceKind::kMean: return run<SumOp<T>, T, true>(geometry, l, in, out, scratch, stream);
        case ReduceKind::kMax: return run<MaxOp<T>, T, false>(geometry, l, in, out, scratch, stream);
        case ReduceKind::kMin: return run<MinOp<T>, T, false>(geometry, l, in, out, scratch, stream);
        case ReduceKind::kProd: return run<ProdOp<T>, T, false>(geometry, l, in, out, scratch, stream);
      }
      return cudaErrorInvalidValue;
    }
  });
}

}  // namespace tessera::internal::gpu
