// CPU kernels for MaxPool, AvgPool, MaxPoolGrad and AvgPoolGrad, float32 and float64, and the fused
// _FusedMaxPoolGradReluGrad (Note [Op fusion] in core/remapper.cc). float16 and bfloat16 go through
// the float32 code, widened and each result rounded back once (as the convolutions: the accuracy of
// TensorFlow's CPU kernels); MaxPool takes int32 and int64 too, as TensorFlow's (exact).
//
// Pools walk each window directly, the images sharded over the session's pool (a gradient's
// scatter stays inside its image). MaxPool takes, and MaxPoolGrad gives the gradient to, the first
// largest element of a window in row-major order (a NaN there wins only as the first element;
// Note [MaxPoolGrad in two passes]); AvgPool divides by the number of the window's elements inside
// the input. Gradients are summed where windows overlap, in output order.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/conv_ops.h"
#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/pool.h"
#include "kernels/widened.h"

namespace tessera::internal {
// A named namespace, not an anonymous one: the demo's unity build compiles this file in one unit
// with the other kernels.
namespace pooling {

// The windows of one image, in output order: visit(pos, h0, h1, w0, w1) for each output position
// `pos` (its index among the image's out_h * out_w), its window's rows [h0, h1) and columns
// [w0, w1) inside the input (the padding cut off).
template <class F>
void for_each_window(const Window2D& w, F visit) {
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    const int64_t h_begin = oh * w.stride_h - w.pad_top;
    const int64_t h0 = std::max<int64_t>(h_begin, 0);
    const int64_t h1 = std::min(h_begin + w.k_h, w.in_h);
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      const int64_t w_begin = ow * w.stride_w - w.pad_left;
      visit(oh * w.out_w + ow, h0, h1, std::max<int64_t>(w_begin, 0), std::min(w_begin + w.k_w, w.in_w));
    }
  }
}

// The offsets in an image (channels innermost) of the window's elements, in row-major order, into
// `at`; returns how many.
inline int64_t window_elements(const Window2D& w, int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t* at) {
  int64_t count = 0;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t ww = w0; ww < w1; ++ww) at[count++] = (h * w.in_w + ww) * w.in_c;
  }
  return count;
}

// Note [Max pools in registers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A max pool's window is a few rows of channels. The channels go kVecs 16-byte vectors at a time
// (GCC's vector extensions: SSE2 on any x86-64, NEON on ARM), each block's running max held in
// registers while the window's elements pass; a running max kept in memory instead (one store and
// one reload per element) made each element wait on the last one's store. The channels left over
// (fewer than a block) go one at a time. Both compute, per channel, what the definitions above
// say, with the same operations on the same values: the same bits whichever path a channel takes.
template <class T>
struct Lanes {
  using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  typedef T V __attribute__((vector_size(16)));
  typedef Bits B __attribute__((vector_size(16)));  // a comparison's result: all ones or zero
  static constexpr int kVecs = 4;
  static constexpr int64_t kPer = 16 / sizeof(T);
  static constexpr int64_t kBlock = kPer * kVecs;  // channels per block

  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
};

// The max of each channel of [c, c + kBlock) over the window's elements (xi + at[e]), into t: the
// first element's value, replaced only by a strictly larger one (a NaN there stays, a later NaN
// never enters).
template <class T>
inline void block_max(const T* xi, const int64_t* at, int64_t count, int64_t c, typename Lanes<T>::V* t) {
  using L = Lanes<T>;
#pragma GCC unroll 8
  for (int j = 0; j < L::kVecs; ++j) t[j] = L::load(xi + at[0] + c + j * L::kPer);
  for (int64_t e = 1; e < count; ++e) {
#pragma GCC unroll 8
    for (int j = 0; j < L::kVecs; ++j) {
      const typename L::V r = L::load(xi + at[e] + c + j * L::kPer);
      t[j] = r > t[j] ? r : t[j];
    }
  }
}

template <class T>
inline T scalar_max(const T* xi, const int64_t* at, int64_t count, int64_t c) {
  T t = xi[at[0] + c];
  for (int64_t e = 1; e < count; ++e) {
    const T r = xi[at[e] + c];
    t = r > t ? r : t;
  }
  return t;
}

// MaxPool's window: the max of each channel into top.
template <class T>
void max_window(const T* xi, const int64_t* at, int64_t count, int64_t channels, T* top) {
  using L = Lanes<T>;
  int64_t c = 0;
  for (; c + L::kBlock <= channels; c += L::kBlock) {
    typename L::V t[L::kVecs];
    block_max(xi, at, count, c, t);
#pragma GCC unroll 8
    for (int j = 0; j < L::kVecs; ++j) L::store(top + c + j * L::kPer, t[j]);
  }
  for (; c < channels; ++c) top[c] = scalar_max(xi, at, count, c);
}

// Note [MaxPoolGrad in two passes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// MaxPoolGrad gives each window's gradient, channel by channel, to the window's first largest
// element in row-major order (a NaN wins only as the first element). Carrying that element's index
// through one pass is a 64-bit blend per value that does not vectorize; so two passes over the
// window: the first takes the max as MaxPool does, the second gives the gradient to the first
// element equal to it and marks the channel taken. That is the same element: one equal to the max
// before it would have stayed the max, as nothing after it was strictly larger. A NaN max comes
// only from the first element, which the second pass tests for (NaN equals nothing). -0.0 and
// +0.0 are equal: the first of them wins. Bit masks, not selects: (grad & hit) is the gradient
// or +0.0.
// Windows that do not overlap (stride >= window, the common case) give each input element at most
// one gradient, so each window writes its own elements (0 + g: a sum into zeros, -0.0 landing as
// +0.0) and no image is zeroed first, unless some element is in no window. Overlapping windows add
// into a zeroed image, in output order.
// _FusedMaxPoolGradReluGrad (kRelu) then takes ReluGrad's (x > 0 ? d : +0.0) over the same values,
// as each window is written, or in a pass over the image after the sums of overlapping windows.
enum class Give { kWrite, kWriteRelu, kAdd };

template <class T, Give kGive>
void give_window(const T* xi, const int64_t* at, int64_t count, int64_t channels, const T* gi, T* oi) {
  using L = Lanes<T>;
  using V = typename L::V;
  using B = typename L::B;
  int64_t c = 0;
  for (; c + L::kBlock <= channels; c += L::kBlock) {
    V t[L::kVecs];
    block_max(xi, at, count, c, t);
    B taken[L::kVecs] = {};
    for (int64_t e = 0; e < count; ++e) {
#pragma GCC unroll 8
      for (int j = 0; j < L::kVecs; ++j) {
        const int64_t k = c + j * L::kPer;
        const V r = L::load(xi + at[e] + k);
        B hit = (B)(r == t[j]);
        if (e == 0) hit |= (B)(t[j] != t[j]);
        hit &= ~taken[j];
        taken[j] |= hit;
        const V g = (V)((B)L::load(gi + k) & hit);
        if constexpr (kGive == Give::kAdd) {
          L::store(oi + at[e] + k, L::load(oi + at[e] + k) + g);
        } else if constexpr (kGive == Give::kWriteRelu) {
          L::store(oi + at[e] + k, (V)((B)(V{} + g) & (B)(r > V{})));
        } else {
          L::store(oi + at[e] + k, V{} + g);
        }
      }
    }
  }
  for (; c < channels; ++c) {
    const T t = scalar_max(xi, at, count, c);
    bool taken = false;
    for (int64_t e = 0; e < count; ++e) {
      const T r = xi[at[e] + c];
      const bool hit = !taken && (r == t || (e == 0 && t != t));
      taken = taken || hit;
      const T g = hit ? gi[c] : T{0};
      T& d = oi[at[e] + c];
      if constexpr (kGive == Give::kAdd) {
        d += g;
      } else if constexpr (kGive == Give::kWriteRelu) {
        d = r > T{0} ? T{0} + g : T{0};
      } else {
        d = T{0} + g;
      }
    }
  }
}

// MaxPool, AvgPool and AvgPoolGrad, image by image, each output position's window walked with the
// channels innermost, so each step is a contiguous run of in_c values.
template <PoolKind kKind, class T>
void pool(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out, bool relu) {
  if constexpr (kKind == PoolKind::kMaxGrad) {
    return max_pool_grad(ctx, w, x, grad, out, relu);
  } else {
    const int64_t channels = w.in_c;
    const int64_t image_in = w.in_h * w.in_w * channels;
    const int64_t image_out = w.out_h * w.out_w * channels;
    const int64_t image_work = std::max<int64_t>(1, image_out * w.k_h * w.k_w);
    ctx.parallel_for(w.batch, std::max<int64_t>(1, (int64_t{1} << 16) / image_work), [&](int64_t n0, int64_t n1) {
      std::vector<T> best(static_cast<std::size_t>(channels));
      std::vector<int64_t> at(static_cast<std::size_t>(w.k_h * w.k_w));
      for (int64_t n = n0; n < n1; ++n) {
        const T* xi = x + n * image_in;
        T* oi = out + (kKind == PoolKind::kAvgGrad ? n * image_in : n * image_out);
        if constexpr (kKind == PoolKind::kAvgGrad) std::fill(oi, oi + image_in, T{0});
        auto offset = [&](int64_t h, int64_t ww) { return (h * w.in_w + ww) * channels; };
        for_each_window(w, [&](int64_t pos, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
          const int64_t o = pos * channels;  // within the image
          if constexpr (kKind == PoolKind::kMax) {
            max_window(xi, at.data(), window_elements(w, h0, h1, w0, w1, at.data()), channels, oi + o);
          } else {
            const T count = static_cast<T>((h1 - h0) * (w1 - w0));
            if constexpr (kKind == PoolKind::kAvg) {
              std::fill(best.begin(), best.end(), T{0});
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t ww = w0; ww < w1; ++ww) {
                  const T* row = xi + offset(h, ww);
                  for (int64_t c = 0; c < channels; ++c) best[c] += row[c];
                }
              }
              for (int64_t c = 0; c < channels; ++c) oi[o + c] = best[c] / count;
            } else {
              const T* gi = grad + n * image_out + o;
              for (int64_t c = 0; c < channels; ++c) best[c] = gi[c] / count;
              for (int64_t h = h0; h < h1; ++h) {
                for (int64_t ww = w0; ww < w1; ++ww) {
                  T* row = oi + offset(h, ww);
                  for (int64_t c = 0; c < channels; ++c) row[c] += best[c];
                }
              }
            }
          }
        });
      }
    });
  }
}

// MaxPool and AvgPool (input), MaxPoolGrad (orig_input, orig_output, grad) and AvgPoolGrad
// (orig_input: read for its shape, grad); _FusedMaxPoolGradReluGrad (MaxPoolGrad's inputs; Note
// [Op fusion] in core/remapper.cc): MaxPoolGrad, then ReluGrad with orig_input as its features.
// Thread-safe: compute() keeps no state between runs.
template <PoolKind kKind>
class PoolOp final : public OpKernel {
 public:
  explicit PoolOp(const Node& n)
      : OpKernel(n), attrs_(WindowAttrs::of(n.attrs)), relu_(n.type == "_FusedMaxPoolGradReluGrad") {}

  void compute(OpKernelContext& ctx) override {
    auto plan = plan_pool(kKind, attrs_, ctx);
    if (!plan.ok()) return ctx.fail(plan.status());
    Tensor& out = ctx.allocate_output(0, plan.value().out);
    if (out.num_elements() == 0) return;
    const Window2D& w = plan.value().window;
    switch (ctx.input(0).dtype()) {
      case DType::Float64: return run<double>(ctx, w, out);
      case DType::Float16: return run_widened<float16_t>(ctx, w, out);
      case DType::BFloat16: return run_widened<bfloat16_t>(ctx, w, out);
      case DType::Int32:
      case DType::Int64:
        if constexpr (kKind == PoolKind::kMax) {  // plan_pool takes the integers for MaxPool only
          return ctx.input(0).dtype() == DType::Int32 ? run<int32_t>(ctx, w, out) : run<int64_t>(ctx, w, out);
        }
        break;
      default: break;
    }
    run<float>(ctx, w, out);  // float32 (plan_pool's dtypes)
  }

 private:
  // The gradient input: MaxPoolGrad's (orig_input, orig_output, grad), AvgPoolGrad's (orig_input, grad).
  static const Tensor* grad_of(const OpKernelContext& ctx) {
    return kKind == PoolKind::kMaxGrad ? &ctx.input(2) : kKind == PoolKind::kAvgGrad ? &ctx.input(1) : nullptr;
  }

  template <class T>
  void run(const OpKernelContext& ctx, const Window2D& w, Tensor& out) const {
    const Tensor* grad = grad_of(ctx);
    pool<kKind>(ctx, w, ctx.input(0).data<T>(), grad ? grad->data<T>() : nullptr, out.mutable_data<T>(), relu_);
  }

  // float16 and bfloat16: the float32 pool of the widened input (and gradient), rounded once.
  template <class H>
  void run_widened(const OpKernelContext& ctx, const Window2D& w, Tensor& out) const {
    const std::vector<float> x = widened<H>(ctx.input(0));
    const Tensor* grad = grad_of(ctx);
    const std::vector<float> g = grad ? widened<H>(*grad) : std::vector<float>();
    std::vector<float> result(static_cast<std::size_t>(out.num_elements()));
    pool<kKind>(ctx, w, x.data(), grad ? g.data() : nullptr, result.data(), relu_);
    round_into<H>(result, out);
  }

  const WindowAttrs attrs_;
  const bool relu_;
};

TESSERA_REGISTER_KERNEL("MaxPool", "CPU", PoolOp<PoolKind::kMax>);
TESSERA_REGISTER_KERNEL("AvgPool", "CPU", PoolOp<PoolKind::kAvg>);
TESSERA_REGISTER_KERNEL("MaxPoolGrad", "CPU", PoolOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_KERNEL("_FusedMaxPoolGradReluGrad", "CPU", PoolOp<PoolKind::kMaxGrad>);
TESSERA_REGISTER_KERNEL("AvgPoolGrad", "CPU", PoolOp<PoolKind::kAvgGrad>);

}  // namespace pooling

template <class T>
MaxPoolGradImage<T>::MaxPoolGradImage(const Window2D& w, bool relu)
    : w_(w),
      relu_(relu),
      disjoint_(w.stride_h >= w.k_h && w.stride_w >= w.k_w),
      // Disjoint windows with stride == window are contiguous from the first (which starts at or
      // before the input's first row and column): they cover the input if the last one reaches its
      // end.
      covered_(w.stride_h == w.k_h && w.stride_w == w.k_w && (w.out_h - 1) * w.stride_h - w.pad_top + w.k_h >= w.in_h &&
               (w.out_w - 1) * w.stride_w - w.pad_left + w.k_w >= w.in_w),
      at_(static_cast<std::size_t>(w.k_h * w.k_w)) {}

template <class T>
void MaxPoolGradImage<T>::operator()(const T* xi, const T* gi, T* oi) {
  using pooling::Give;
  const int64_t channels = w_.in_c;
  const int64_t image_in = w_.in_h * w_.in_w * channels;
  if (!(disjoint_ && covered_)) std::fill(oi, oi + image_in, T{0});
  int64_t* at = at_.data();
  pooling::for_each_window(w_, [&](int64_t pos, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    const int64_t count = pooling::window_elements(w_, h0, h1, w0, w1, at);
    const T* g = gi + pos * channels;
    if (!disjoint_) {
      pooling::give_window<T, Give::kAdd>(xi, at, count, channels, g, oi);
    } else if (relu_) {
      pooling::give_window<T, Give::kWriteRelu>(xi, at, count, channels, g, oi);
    } else {
      pooling::give_window<T, Give::kWrite>(xi, at, count, channels, g, oi);
    }
  });
  // Elements in no window are zeros either way; sums of overlapping windows are masked here.
  if (relu_ && !disjoint_) {
    for (int64_t i = 0; i < image_in; ++i) oi[i] = xi[i] > T{0} ? oi[i] : T{0};
  }
}

template <class T>
void MaxPoolGradImage<T>::prefetch(const T* xi, const T* gi) const {
  constexpr int64_t kLine = 64 / sizeof(T);
  const int64_t image_in = w_.in_h * w_.in_w * w_.in_c;
  const int64_t image_out = w_.out_h * w_.out_w * w_.in_c;
  for (int64_t i = 0; i < image_in; i += kLine) __builtin_prefetch(xi + i, 0, 1);
  for (int64_t i = 0; i < image_out; i += kLine) __builtin_prefetch(gi + i, 0, 1);
}

template <class T>
void max_pool_grad(const OpKernelContext& ctx, const Window2D& w, const T* x, const T* grad, T* out, bool relu) {
  const int64_t image_in = w.in_h * w.in_w * w.in_c;
  const int64_t image_out = w.out_h * w.out_w * w.in_c;
  const int64_t image_work = std::max<int64_t>(1, image_out * w.k_h * w.k_w);
  ctx.parallel_for(w.batch, std::max<int64_t>(1, (int64_t{1} << 16) / image_work), [&](int64_t n0, int64_t n1) {
    MaxPoolGradImage<T> image(w, relu);
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t ahead = n + kPrefetchImages;
      if (ahead < n1) image.prefetch(x + ahead * image_in, grad + ahead * image_out);
      image(x + n * image_in, grad + n * image_out, out + n * image_in);
    }
  });
}

template class MaxPoolGradImage<float>;
template class MaxPoolGradImage<double>;
template void max_pool_grad<float>(const OpKernelContext&, const Window2D&, const float*, const float*, float*, bool);
template void max_pool_grad<double>(const OpKernelContext&, const Window2D&, const double*, const double*, double*,
                                    bool);

}  // namespace tessera::internal
