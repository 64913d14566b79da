// CUDA kernels for the reductions Sum, Mean and Max over any set of axes, with the semantics of
// kernels/reduction_ops.cc: integer sums wrap around (they accumulate in the unsigned type), the
// mean of integers is the sum divided by the count truncated toward zero, the mean of floating
// point values divides in the value type, and Max propagates NaN.
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
// element; CUB's temporary storage is the op's scratch.
#include <cstdint>
#include <limits>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "device/cuda/gpu_common.cuh"

namespace tessera::internal::gpu {
namespace {

template <class T>
struct SumOp {
  using A = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>, std::type_identity<T>>::type;
  __device__ static A identity() { return A{0}; }
  static A host_identity() { return A{0}; }
  __device__ static A combine(A acc, A x) { return acc + x; }
};

template <class T>
struct MaxOp {
  using A = T;
  __device__ static A identity() {
    if constexpr (std::is_same_v<T, float>) {
      return __int_as_float(static_cast<int>(0xff800000u));  // -inf
    } else if constexpr (std::is_same_v<T, double>) {
      return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));  // -inf
    } else if constexpr (std::is_same_v<T, int32_t>) {
      return INT32_MIN;
    } else {
      return INT64_MIN;
    }
  }
  static A host_identity() {
    if constexpr (std::is_floating_point_v<T>) {
      return -std::numeric_limits<T>::infinity();
    } else {
      return std::numeric_limits<T>::min();
    }
  }
  // `x != x` is the NaN test: once NaN, the accumulator stays NaN (whichever side holds it).
  __device__ static A combine(A acc, A x) { return (x > acc || x != x) ? x : acc; }
};

// Op::combine as CUB's reduction functor.
template <class Op>
struct CubCombine {
  __device__ __forceinline__ typename Op::A operator()(const typename Op::A& acc, const typename Op::A& x) const {
    return Op::combine(acc, x);
  }
};

// A whole contiguous input folded into one value: CUB's device-wide reduction (vectorized loads,
// one pass plus a tiny second one), into `out`; Mean then divides in place (finalize).
bool whole_contiguous(const ReduceGeometry& g) {
  return g.out_count == 1 && g.outer_rank == 0 && g.inner_stride == 1 && g.inner == g.count && g.count > 0;
}

template <class Op>
cudaError_t cub_reduce(void* scratch, std::size_t* bytes, const void* in, void* out, int64_t count,
                       cudaStream_t stream) {
  using A = typename Op::A;
  return cub::DeviceReduce::Reduce(scratch, *bytes, static_cast<const A*>(in), static_cast<A*>(out), count,
                                   CubCombine<Op>{}, Op::host_identity(), stream);
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

template <class Op>
cudaError_t cub_segmented_reduce(void* scratch, std::size_t* bytes, const void* in, void* out,
                                 const ReduceGeometry& g, cudaStream_t stream) {
  using A = typename Op::A;
  auto begins = thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(0), RowStart{g.inner});
  auto ends = thrust::make_transform_iterator(thrust::make_counting_iterator<int64_t>(1), RowStart{g.inner});
  return cub::DeviceSegmentedReduce::Reduce(scratch, *bytes, static_cast<const A*>(in), static_cast<A*>(out),
                                            g.out_count, begins, ends, CubCombine<Op>{}, Op::host_identity(),
                                            stream);
}

// The bytes of CUB's temporary storage for `g` (the larger of Sum's and Max's: one size serves).
template <class T>
std::size_t cub_scratch_bytes(const ReduceGeometry& g, bool rows) {
  std::size_t sum = 0, max = 0;
  if (rows) {
    (void)cub_segmented_reduce<SumOp<T>>(nullptr, &sum, nullptr, nullptr, g, nullptr);
    (void)cub_segmented_reduce<MaxOp<T>>(nullptr, &max, nullptr, nullptr, g, nullptr);
  } else {
    (void)cub_reduce<SumOp<T>>(nullptr, &sum, nullptr, nullptr, g.count, nullptr);
    (void)cub_reduce<MaxOp<T>>(nullptr, &max, nullptr, nullptr, g.count, nullptr);
  }
  return sum > max ? sum : max;
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

template <class Op>
__device__ __forceinline__ typename Op::A fold(const typename Op::A* in, const ReduceGeometry& g, int64_t unit,
                                               int64_t slice_len, int lane, int group) {
  using A = typename Op::A;
  const int64_t o = unit % g.out_count;
  const int64_t s = unit / g.out_count;
  const int64_t base = kept_offset(g, o);
  const int64_t begin = s * slice_len;
  const int64_t end = begin + slice_len < g.count ? begin + slice_len : g.count;
  A acc = Op::identity();
  for (int64_t r = begin + lane; r < end; r += group) acc = Op::combine(acc, in[base + reduced_offset(g, r)]);
  return acc;
}

// Groups of `group` threads (a power of two up to 32) per unit, several groups per warp. The loop
// bound is the same for a whole warp, so every lane takes part in every shuffle.
template <class Op>
__global__ void reduce_groups(const typename Op::A* __restrict__ in, typename Op::A* out, ReduceGeometry g,
                              int group, int64_t units, int64_t slice_len) {
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
template <class Op>
__global__ void reduce_blocks(const typename Op::A* __restrict__ in, typename Op::A* out, ReduceGeometry g,
                              int64_t units, int64_t slice_len) {
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

// out[o] = the combination of the slices' partial results, divided by the count for Mean. May run
// in place (partials == out, one slice): each thread reads its element before writing it.
template <class Op, class T, bool kMean>
__global__ void finalize(const typename Op::A* partials, T* out, int64_t out_count, int64_t slices, int64_t count) {
  using A = typename Op::A;
  for (int64_t o = global_thread(); o < out_count; o += grid_threads()) {
    A acc = partials[o];
    for (int64_t s = 1; s < slices; ++s) acc = Op::combine(acc, partials[s * out_count + o]);
    T v = static_cast<T>(acc);  // unsigned to signed: the two's complement value (wraps)
    if constexpr (kMean && std::is_integral_v<T>) {
      v = static_cast<T>(static_cast<int64_t>(v) / count);
    } else if constexpr (kMean) {
      v = v / static_cast<T>(count);  // count 0: 0 / 0 = NaN, as the CPU kernel
    }
    out[o] = v;
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

std::size_t elem_size(Elem elem) { return elem == Elem::kF64 || elem == Elem::kI64 ? 8 : 4; }

template <class Op, class T, bool kMean>
cudaError_t run(const ReduceGeometry& g, const Plan& p, const void* in, void* out, void* scratch, int sm_count,
                cudaStream_t stream) {
  using A = typename Op::A;
  static_assert(sizeof(A) == sizeof(T));
  const bool whole = whole_contiguous(g);
  if (whole || contiguous_rows(g, sm_count)) {
    auto reduce = [&](void* temp, std::size_t* bytes) {
      return whole ? cub_reduce<Op>(temp, bytes, in, out, g.count, stream)
                   : cub_segmented_reduce<Op>(temp, bytes, in, out, g, stream);
    };
    std::size_t bytes = 0;
    if (cudaError_t e = reduce(nullptr, &bytes); e != cudaSuccess) return e;
    if (bytes > 0 && scratch == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = reduce(scratch, &bytes); e != cudaSuccess) return e;
    if constexpr (kMean) {  // in place: each output divided by the count
      finalize<Op, T, true><<<blocks_for(g.out_count, kThreads), kThreads, 0, stream>>>(
          static_cast<A*>(out), static_cast<T*>(out), g.out_count, 1, g.count);
    }
    return cudaGetLastError();
  }
  A* partials = p.slices > 1 ? static_cast<A*>(scratch) : static_cast<A*>(out);
  const int64_t slice_len = (g.count + p.slices - 1) / p.slices;
  const int64_t units = g.out_count * p.slices;
  const A* input = static_cast<const A*>(in);  // same size; signed and unsigned views may alias
  if (p.group > 32) {
    reduce_blocks<Op><<<blocks_for(units, 1), p.group, 0, stream>>>(input, partials, g, units, slice_len);
  } else {
    reduce_groups<Op><<<blocks_for(units * p.group, kThreads), kThreads, 0, stream>>>(input, partials, g, p.group,
                                                                                      units, slice_len);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (p.slices > 1 || kMean) {
    finalize<Op, T, kMean><<<blocks_for(g.out_count, kThreads), kThreads, 0, stream>>>(
        partials, static_cast<T*>(out), g.out_count, p.slices, g.count);
  }
  return cudaGetLastError();
}

}  // namespace

std::size_t reduce_scratch_bytes(Elem elem, const ReduceGeometry& geometry, int sm_count) {
  const bool whole = whole_contiguous(geometry);
  if (whole || contiguous_rows(geometry, sm_count)) {
    // CUB's temporary storage (the calling thread's current device is the one the reduction will
    // run on).
    std::size_t bytes = 0;
    (void)visit_elem(elem, [&](auto type) -> cudaError_t {
      using T = decltype(type);
      if constexpr (!std::is_same_v<T, bool>) bytes = cub_scratch_bytes<T>(geometry, !whole);
      return cudaSuccess;
    });
    return bytes;
  }
  const Plan p = make_plan(geometry, sm_count);
  if (p.slices <= 1) return 0;
  return static_cast<std::size_t>(p.slices * geometry.out_count) * elem_size(elem);
}

cudaError_t launch_reduce(ReduceKind op, Elem elem, const ReduceGeometry& geometry, const void* in, void* out,
                          void* scratch, int sm_count, cudaStream_t stream) {
  if (geometry.out_count <= 0) return cudaSuccess;
  const Plan p = make_plan(geometry, sm_count);
  if (!whole_contiguous(geometry) && !contiguous_rows(geometry, sm_count) && p.slices > 1 && scratch == nullptr) {
    return cudaErrorInvalidValue;
  }
  return visit_elem(elem, [&](auto type) -> cudaError_t {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      switch (op) {
        case ReduceKind::kSum: return run<SumOp<T>, T, false>(geometry, p, in, out, scratch, sm_count, stream);
        case ReduceKind::kMean: return run<SumOp<T>, T, true>(geometry, p, in, out, scratch, sm_count, stream);
        case ReduceKind::kMax: return run<MaxOp<T>, T, false>(geometry, p, in, out, scratch, sm_count, stream);
      }
      return cudaErrorInvalidValue;
    }
  });
}

}  // namespace tessera::internal::gpu
