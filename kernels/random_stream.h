// The Philox stream of the CPU random kernels (Note [Random streams] in kernels/random_ops.cc):
// the block function, the conversions of its words into uniform and normal values, and the
// kernel base that reserves blocks. Shared by kernels/random_ops.cc and the random ops of
// kernels/nn_ops.cc (Dropout, TruncatedNormal); device/cuda/philox.cuh is the GPU's copy.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>

#include "core/half.h"
#include "core/op_kernel.h"
#include "core/random_seed.h"

namespace tessera::internal {

// The Philox4x32-10 block function under one key. Thread-safe: immutable.
class Philox4x32 {
 public:
  using Block = std::array<uint32_t, 4>;

  explicit Philox4x32(uint64_t key)
      : key_{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)} {}

  // Block `index` of the stream: Philox4x32-10 of the counter (index, redraw) under the key. The
  // stream proper is redraw 0; a kernel that rejects values (TruncatedNormal) draws more for the
  // same block with redraw 1, 2, ..., which no other block's counter reaches.
  Block operator()(uint64_t index, uint32_t redraw = 0) const {
    Block c{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), redraw, 0};
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

// Uniform in [0, 1) with every value a multiple of 2^-24 (float) or 2^-53 (double): all the
// mantissa allows, and never 1 after rounding.
inline float uniform_float(uint32_t u) { return static_cast<float>(u >> 8) * 0x1p-24f; }
inline double uniform_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
}

// Values one Philox block yields: four floats or two doubles.
template <class T>
constexpr int kValuesPerBlock = sizeof(T) == 4 ? 4 : 2;

// Box-Muller: two independent uniforms give two independent standard normals. u1 is taken in
// (0, 1] so that log(u1) is finite.
template <class T>
std::pair<T, T> box_muller(T u1_from_zero, T u2) {
  const T u1 = T{1} - u1_from_zero;
  const T r = std::sqrt(T{-2} * std::log(u1));
  const T theta = T{2} * std::numbers::pi_v<T> * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

// The normals of one block: four floats or two doubles (Box-Muller over its words' uniforms).
template <class T>
std::array<T, kValuesPerBlock<T>> block_normals(const Philox4x32::Block& b) {
  if constexpr (sizeof(T) == 4) {
    auto [z0, z1] = box_muller(uniform_float(b[0]), uniform_float(b[1]));
    auto [z2, z3] = box_muller(uniform_float(b[2]), uniform_float(b[3]));
    return {z0, z1, z2, z3};
  } else {
    auto [z0, z1] = box_muller(uniform_double(b[0], b[1]), uniform_double(b[2], b[3]));
    return {z0, z1};
  }
}

// The stream of Note [Random streams], shared by the random kernels. Thread-safe: reserve() is
// one atomic add and the generator is immutable.
class RandomOpBase : public OpKernel {
 public:
  explicit RandomOpBase(const Node& n) : OpKernel(n), philox_(random_key(n)) {}

 protected:
  // The first of `blocks` consecutive blocks that no other run gets.
  uint64_t reserve(uint64_t blocks) {
    return next_block_.fetch_add(blocks, std::memory_order_relaxed);
  }

  // Fills out[0, n) from freshly reserved blocks, fn(block, values) turning each into
  // kValuesPerBlock<T> values of T = Accumulate<Out>: float16 and bfloat16 take float32's values,
  // each rounded once, so a 16-bit op gives the float32 op's stream of the same seed, cast.
  template <class Out, class Fn>
  void fill(Out* out, int64_t n, Fn&& fn) {
    using T = Accumulate<Out>;
    constexpr int64_t kPerBlock = kValuesPerBlock<T>;
    const uint64_t first = reserve(static_cast<uint64_t>((n + kPerBlock - 1) / kPerBlock));
    std::array<T, kPerBlock> values;
    for (int64_t i = 0; i < n; i += kPerBlock) {
      fn(philox_(first + static_cast<uint64_t>(i / kPerBlock)), values);
      const int64_t take = std::min(kPerBlock, n - i);
      for (int64_t j = 0; j < take; ++j) out[i + j] = static_cast<Out>(values[j]);
    }
  }

  const Philox4x32 philox_;

 private:
  std::atomic<uint64_t> next_block_{0};
};

}  // namespace tessera::internal
