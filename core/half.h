// The host element types of DType::Float16 and DType::BFloat16: 16-bit storage, float arithmetic.
//
//   float16_t h(0.1f);          // IEEE binary16, rounded to nearest even: 0.0999755859375
//   float f = float(h) * 2;     // arithmetic happens in float32
//   bfloat16_t b = bfloat16_t(f);
//
// Internal (the public API makes and reads these tensors through ops::cast). Every operator
// converts to float32, computes, and rounds the result back once, as TensorFlow's Eigen::half and
// bfloat16 do on the CPU; kernels that accumulate (reductions, matmul) keep float32 accumulators
// instead (Accumulate<T> below). The bits are those of CUDA's __half and __nv_bfloat16, so a
// buffer crosses between host and device unchanged.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "tessera/tensor.h"

namespace tessera::internal {

// float32 -> binary16 (5 exponent bits, 10 mantissa bits), round to nearest even. Overflow gives
// infinity, values below half the smallest subnormal give a signed zero, and NaN stays a (quiet)
// NaN with its sign and the top of its payload.
constexpr uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  // 65520 is halfway between the largest half (65504, odd mantissa) and 2^16: it rounds to inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t bits;
  uint32_t rest;
  uint32_t halfway;
  if (abs >= 0x38800000u) {  // a normal half (>= 2^-14): rebias the exponent by 127 - 15
    const uint32_t rebiased = abs - (112u << 23);
    bits = rebiased >> 13;
    rest = rebiased & 0x1fffu;
    halfway = 0x1000u;
  } else if (abs > 0x33000000u) {  // a subnormal half: m * 2^-24 with m = f * 2^24, rounded
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (abs >> 23);  // 14..24
    bits = mantissa >> shift;
    rest = mantissa & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  } else {  // at most 2^-25, halfway to the smallest subnormal: ties to the even zero
    return sign;
  }
  // A carry out of the mantissa moves into the exponent, which is the right answer.
  if (rest > halfway || (rest == halfway && (bits & 1u))) ++bits;
  return static_cast<uint16_t>(sign | bits);
}

constexpr float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// float32 -> bfloat16 (float32's top 16 bits), round to nearest even; NaN stays a quiet NaN.
constexpr uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);  // a carry into the exponent is right too
}

constexpr float bfloat16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// A 16-bit float whose arithmetic is float32 rounded back. `Traits` supplies the two conversions.
template <class Traits>
struct Float16Base {
  uint16_t bits = 0;  // +0.0

  constexpr Float16Base() = default;
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit Float16Base(T v) : bits(Traits::from_float(static_cast<float>(v))) {}
  static constexpr Float16Base from_bits(uint16_t b) {
    Float16Base h;
    h.bits = b;
    return h;
  }
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit operator T() const {
    if constexpr (std::is_same_v<T, bool>) {
      return to_float() != 0.0f;  // NaN is true, as for float
    } else {
      return static_cast<T>(to_float());
    }
  }
  constexpr float to_float() const { return Traits::to_float(bits); }

  friend constexpr Float16Base operator+(Float16Base a, Float16Base b) { return Float16Base(a.to_float() + b.to_float()); }
  friend constexpr Float16Base operator-(Float16Base a, Float16Base b) { return Float16Base(a.to_float() - b.to_float()); }
  friend constexpr Float16Base operator*(Float16Base a, Float16Base b) { return Float16Base(a.to_float() * b.to_float()); }
  friend constexpr Float16Base operator/(Float16Base a, Float16Base b) { return Float16Base(a.to_float() / b.to_float()); }
  friend constexpr Float16Base operator-(Float16Base a) { return from_bits(static_cast<uint16_t>(a.bits ^ 0x8000u)); }
  Float16Base& operator+=(Float16Base o) { return *this = *this + o; }
  Float16Base& operator-=(Float16Base o) { return *this = *this - o; }
  Float16Base& operator*=(Float16Base o) { return *this = *this * o; }
  Float16Base& operator/=(Float16Base o) { return *this = *this / o; }
  // Comparisons are float32's: NaN is unordered and unequal to itself; -0 == +0.
  friend constexpr bool operator==(Float16Base a, Float16Base b) { return a.to_float() == b.to_float(); }
  friend constexpr bool operator!=(Float16Base a, Float16Base b) { return a.to_float() != b.to_float(); }
  friend constexpr bool operator<(Float16Base a, Float16Base b) { return a.to_float() < b.to_float(); }
  friend constexpr bool operator>(Float16Base a, Float16Base b) { return a.to_float() > b.to_float(); }
  friend constexpr bool operator<=(Float16Base a, Float16Base b) { return a.to_float() <= b.to_float(); }
  friend constexpr bool operator>=(Float16Base a, Float16Base b) { return a.to_float() >= b.to_float(); }
};

struct HalfTraits {
  static constexpr uint16_t from_float(float f) { return float_to_half_bits(f); }
  static constexpr float to_float(uint16_t b) { return half_bits_to_float(b); }
};
struct BFloat16Traits {
  static constexpr uint16_t from_float(float f) { return float_to_bfloat16_bits(f); }
  static constexpr float to_float(uint16_t b) { return bfloat16_bits_to_float(b); }
};

using float16_t = Float16Base<HalfTraits>;
using bfloat16_t = Float16Base<BFloat16Traits>;
static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2);

template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

// The type a kernel computes and accumulates T in: float32 for the 16-bit floats, else T.
template <class T>
using Accumulate = std::conditional_t<is_16bit_float<T>, float, T>;

}  // namespace tessera::internal

namespace tessera {
template <> struct DTypeOf<internal::float16_t> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<internal::bfloat16_t> { static constexpr DType value = DType::BFloat16; };
}  // namespace tessera
