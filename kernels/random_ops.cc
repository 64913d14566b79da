// CPU kernels for the random ops: RandomUniform, RandomNormal and RandomShuffle.
//
// Note [Random streams]
// Each kernel owns one stream of Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy
// as 1, 2, 3", SC 2011), a counter-based generator: block i of the stream, four 32-bit words, is a
// pure function of (key, i). The key is the op's seed (seed 0: a seed drawn from std::random_device
// when the kernel is made) and the kernel keeps an atomic count of the blocks it has handed out.
// A run reserves the blocks it needs with one fetch_add and computes them with no lock, so
// concurrent runs of a session draw disjoint values, each run draws new ones, and with a fixed seed
// the values of the n-th reservation are the same in every session. As in TensorFlow, two ops
// with the same nonzero seed produce the same stream.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {
namespace {

// The Philox4x32-10 block function under one key. Thread-safe: immutable.
class Philox4x32 {
 public:
  using Block = std::array<uint32_t, 4>;

  explicit Philox4x32(uint64_t key)
      : key_{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)} {}

  // Block `index` of the stream: Philox4x32-10 of the counter (index, 0) under the key.
  Block operator()(uint64_t index) const {
    Block c{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0};
    uint32_t k0 = key_[0];
    uint32_t k1 = key_[1];
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += kWeyl0;
        k1 += kWeyl1;
      }
      const uint64_t p0 = uint64_t{kMul0} * c[0];
      const uint64_t p1 = uint64_t{kMul1} * c[2];
      c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    }
    return c;
  }

 private:
  static constexpr uint32_t kMul0 = 0xD2511F53;
  static constexpr uint32_t kMul1 = 0xCD9E8D57;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9;  // golden ratio
  static constexpr uint32_t kWeyl1 = 0xBB67AE85;  // sqrt(3) - 1
  std::array<uint32_t, 2> key_;
};

uint64_t seed_of(const Node& n) {
  const auto seed = static_cast<uint64_t>(n.attr<int64_t>("seed"));
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

// Uniform in [0, 1) with every value a multiple of 2^-24 (float) or 2^-53 (double): all the
// mantissa allows, and never 1 after rounding.
float uniform_float(uint32_t u) { return static_cast<float>(u >> 8) * 0x1p-24f; }
double uniform_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
}

// Values one Philox block yields: four floats or two doubles.
template <class T>
constexpr int kValuesPerBlock = sizeof(T) == 4 ? 4 : 2;

// The stream of Note [Random streams], shared by the random kernels. Thread-safe: reserve() is
// one atomic add and the generator is immutable.
class RandomOpBase : public OpKernel {
 public:
  explicit RandomOpBase(const Node& n) : OpKernel(n), philox_(seed_of(n)) {}

 protected:
  // The first of `blocks` consecutive blocks that no other run gets.
  uint64_t reserve(uint64_t blocks) {
    return next_block_.fetch_add(blocks, std::memory_order_relaxed);
  }

  // Fills out[0, n) from freshly reserved blocks, fn(block, values) turning each into
  // kValuesPerBlock<T> values.
  template <class T, class Fn>
  void fill(T* out, int64_t n, Fn&& fn) {
    constexpr int64_t kPerBlock = kValuesPerBlock<T>;
    const uint64_t first = reserve(static_cast<uint64_t>((n + kPerBlock - 1) / kPerBlock));
    std::array<T, kPerBlock> values;
    for (int64_t i = 0; i < n; i += kPerBlock) {
      fn(philox_(first + static_cast<uint64_t>(i / kPerBlock)), values);
      const int64_t take = std::min(kPerBlock, n - i);
      for (int64_t j = 0; j < take; ++j) out[i + j] = values[j];
    }
  }

  const Philox4x32 philox_;

 private:
  std::atomic<uint64_t> next_block_{0};
};

// Values uniform in [0, 1). Thread-safe, as RandomOpBase.
class RandomUniformOp : public RandomOpBase {
 public:
  using RandomOpBase::RandomOpBase;

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    if (out.dtype() == DType::Float32) {
      fill(out.mutable_data<float>(), n, [](const Philox4x32::Block& b, std::array<float, 4>& v) {
        for (int j = 0; j < 4; ++j) v[j] = uniform_float(b[j]);
      });
    } else {
      fill(out.mutable_data<double>(), n, [](const Philox4x32::Block& b, std::array<double, 2>& v) {
        v[0] = uniform_double(b[0], b[1]);
        v[1] = uniform_double(b[2], b[3]);
      });
    }
  }
};

// Box-Muller: two independent uniforms give two independent standard normals. u1 is taken in
// (0, 1] so that log(u1) is finite.
template <class T>
std::pair<T, T> box_muller(T u1_from_zero, T u2) {
  const T u1 = T{1} - u1_from_zero;
  const T r = std::sqrt(T{-2} * std::log(u1));
  const T theta = T{2} * std::numbers::pi_v<T> * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

// Values normal with the "mean" and "stddev" attrs. Thread-safe, as RandomOpBase.
class RandomNormalOp : public RandomOpBase {
 public:
  explicit RandomNormalOp(const Node& n)
      : RandomOpBase(n), mean_(n.attr<double>("mean")), stddev_(n.attr<double>("stddev")) {}

  void compute(OpKernelContext& ctx) override {
    Tensor& out = ctx.allocate_output(0, node().attr<Shape>("shape"));
    const int64_t n = out.num_elements();
    if (out.dtype() == DType::Float32) {
      const auto mean = static_cast<float>(mean_);
      const auto stddev = static_cast<float>(stddev_);
      fill(out.mutable_data<float>(), n, [&](const Philox4x32::Block& b, std::array<float, 4>& v) {
        for (int j = 0; j < 4; j += 2) {
          auto [z0, z1] = box_muller(uniform_float(b[j]), uniform_float(b[j + 1]));
          v[j] = mean + stddev * z0;
          v[j + 1] = mean + stddev * z1;
        }
      });
    } else {
      auto normals = [&](const Philox4x32::Block& b, std::array<double, 2>& v) {
        auto [z0, z1] = box_muller(uniform_double(b[0], b[1]), uniform_double(b[2], b[3]));
        v[0] = mean_ + stddev_ * z0;
        v[1] = mean_ + stddev_ * z1;
      };
      fill(out.mutable_data<double>(), n, normals);
    }
  }

 private:
  const double mean_;
  const double stddev_;
};

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

TESSERA_REGISTER_KERNEL("RandomUniform", "CPU", RandomUniformOp);
TESSERA_REGISTER_KERNEL("RandomNormal", "CPU", RandomNormalOp);
TESSERA_REGISTER_KERNEL("RandomShuffle", "CPU", RandomShuffleOp);

}  // namespace
}  // namespace tessera::internal
