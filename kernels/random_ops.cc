// CPU kernels for the random ops: RandomUniform, RandomNormal and RandomShuffle.
//
// Note [Random streams]
// Each kernel owns one stream of Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy
// as 1, 2, 3", SC 2011), a counter-based generator: block i of the stream, four 32-bit words, is a
// pure function of (key, i) (kernels/random_stream.h). The key is the op's seed (seed 0: a seed
// drawn from std::random_device when the kernel is made: core/random_seed.h) and the kernel keeps
// an atomic count of the blocks it has handed out. A run reserves the blocks it needs with one
// fetch_add and computes them with no lock, so concurrent runs of a session draw disjoint values,
// each run draws new ones, and with a fixed seed the values of the n-th reservation are the same
// in every session. As in TensorFlow, two ops with the same nonzero seed produce the same stream.
// float16 and bfloat16 values are float32's of the same blocks, rounded (RandomOpBase::fill).
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"
#include "kernels/random_stream.h"

namespace tessera::internal {
namespace {

// Values uniform in [0, 1). Thread-safe, as RandomOpBase.
class RandomUniformOp : public RandomOpBase {
 public:
  using RandomOpBase::RandomOpBase;

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    switch (out.dtype()) {
      case DType::Float64:
        return fill(out.mutable_data<double>(), n, [](const Philox4x32::Block& b, std::array<double, 2>& v) {
          v[0] = uniform_double(b[0], b[1]);
          v[1] = uniform_double(b[2], b[3]);
        });
      case DType::Float16: return uniform_16bit(out.mutable_data<float16_t>(), n);
      case DType::BFloat16: return uniform_16bit(out.mutable_data<bfloat16_t>(), n);
      default: return uniform_floats(out.mutable_data<float>(), n);  // float32 (the shape function's dtypes)
    }
  }

 private:
  template <class Out>
  void uniform_floats(Out* out, int64_t n) {
    fill(out, n, [](const Philox4x32::Block& b, std::array<float, 4>& v) {
      for (int j = 0; j < 4; ++j) v[j] = uniform_float(b[j]);
    });
  }

  // float32's values rounded, except that those that round to 1 (from 1 - 2^-12 for float16, 1 -
  // 2^-9 for bfloat16) take the largest value below 1 instead: the range stays [0, 1), as
  // TensorFlow's 16-bit uniforms.
  template <class H>
  void uniform_16bit(H* out, int64_t n) {
    uniform_floats(out, n);
    for (int64_t i = 0; i < n; ++i) {
      if (out[i].to_float() >= 1.0f) out[i] = H::from_bits(static_cast<uint16_t>(out[i].bits - 1));
    }
  }
};

TESSERA_REGISTER_KERNEL("RandomUniform", "CPU", RandomUniformOp);

// Values normal with the "mean" and "stddev" attrs. Thread-safe, as RandomOpBase.
class RandomNormalOp : public RandomOpBase {
 public:
  explicit RandomNormalOp(const Node& n)
      : RandomOpBase(n), mean_(n.attr<double>("mean")), stddev_(n.attr<double>("stddev")) {}

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    switch (out.dtype()) {
      case DType::Float64: return normals(out.mutable_data<double>(), n);
      case DType::Float16: return normals(out.mutable_data<float16_t>(), n);
      case DType::BFloat16: return normals(out.mutable_data<bfloat16_t>(), n);
      default: return normals(out.mutable_data<float>(), n);  // float32 (the shape function's dtypes)
    }
  }

 private:
  // mean + stddev * z in T (float32 for the 16-bit dtypes), rounded to Out once.
  template <class Out>
  void normals(Out* out, int64_t n) {
    using T = Accumulate<Out>;
    const auto mean = static_cast<T>(mean_);
    const auto stddev = static_cast<T>(stddev_);
    fill(out, n, [&](const Philox4x32::Block& b, std::array<T, kValuesPerBlock<T>>& v) {
      const auto z = block_normals<T>(b);
      for (std::size_t j = 0; j < v.size(); ++j) v[j] = mean + stddev * z[j];
    });
  }

  const double mean_;
  const double stddev_;
};

TESSERA_REGISTER_KERNEL("RandomNormal", "CPU", RandomNormalOp);

// A uniformly random permutation of the first dimension (Fisher-Yates), rows moved as bytes so
// every dtype shares one path. Thread-safe, as RandomOpBase.
class RandomShuffleOp : public RandomOpBase {
 public:
  using RandomOpBase::RandomOpBase;

  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t rows = x.shape().rank() == 0 ? 1 : x.shape().dim(0);
    if (rows <= 1) {  // nothing to permute: share the buffer, as Identity does
      ctx.set_output(0, x);
      return;
    }
    // Step i of Fisher-Yates (i = rows-1 .. 1) picks j in [0, i] from 64 random bits: two per
    // block. Multiplying by i + 1 and keeping the high 64 bits maps them to [0, i] with a bias
    // below (i + 1) / 2^64.
    std::vector<int64_t> perm(static_cast<std::size_t>(rows));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    const uint64_t first = reserve(static_cast<uint64_t>(rows / 2));
    Philox4x32::Block block{};
    for (int64_t i = rows - 1, draw = 0; i > 0; --i, ++draw) {
      if (draw % 2 == 0) block = philox_(first + static_cast<uint64_t>(draw / 2));
      const int w = static_cast<int>(draw % 2) * 2;
      const uint64_t bits = (uint64_t{block[w]} << 32) | block[w + 1];
      const auto j = static_cast<int64_t>(
          (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
      std::swap(perm[i], perm[j]);
    }

    Tensor& out = ctx.allocate_output(0, x.shape());
    const int64_t row = x.num_elements() / rows;
    if (row == 0) return;
    for (int64_t i = 0; i < rows; ++i) copy_elements(out, i * row, x, perm[i] * row, row);
  }
};

TESSERA_REGISTER_KERNEL("RandomShuffle", "CPU", RandomShuffleOp);

}  // namespace
}  // namespace tessera::internal
