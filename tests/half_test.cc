// float16 and bfloat16: the host conversions (core/half.h) against independent references, and the
// dtypes end to end through a session (cast in, math, cast out), on the CPU and on a simulated
// accelerator, as a TensorFlow user makes and reads them.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/half.h"
#include "tessera/tessera.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using internal::bfloat16_t;
using internal::float16_t;

// Every finite binary16 value, in increasing order of magnitude (positive bit patterns), decoded
// from the definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double half_value_by_definition(uint16_t bits) {
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

// The nearest binary16 to `x` (finite, |x| < 65520), ties to the even mantissa, by search over the
// positive values: an independent reference for float_to_half_bits.
uint16_t nearest_half_by_search(double x) {
  const double a = std::fabs(x);
  uint16_t lo = 0;
  while (lo < 0x7bff && half_value_by_definition(static_cast<uint16_t>(lo + 1)) <= a) ++lo;
  uint16_t best = lo;
  if (lo < 0x7bff) {
    const double below = a - half_value_by_definition(lo);
    const double above = half_value_by_definition(static_cast<uint16_t>(lo + 1)) - a;
    if (above < below || (above == below && (lo & 1))) best = static_cast<uint16_t>(lo + 1);
  }
  return static_cast<uint16_t>(best | (std::signbit(x) ? 0x8000 : 0));
}

TEST(HalfTest, EveryHalfDecodesToItsDefinitionAndRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = internal::half_bits_to_float(bits);
    const int e = (bits >> 10) & 0x1f;
    if (e == 0x1f) {
      if (bits & 0x3ff) {
        EXPECT_TRUE(std::isnan(f)) << std::hex << b;
        EXPECT_TRUE(internal::half_bits_to_float(internal::float_to_half_bits(f)) != f);
        EXPECT_EQ(internal::float_to_half_bits(f) & 0x8000, bits & 0x8000) << "NaN keeps its sign";
      } else {
        EXPECT_TRUE(std::isinf(f));
        EXPECT_EQ(internal::float_to_half_bits(f), bits);
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), half_value_by_definition(bits)) << std::hex << b;
    ASSERT_EQ(internal::float_to_half_bits(f), bits) << std::hex << b;
  }
}

TEST(HalfTest, FloatToHalfRoundsToNearestEven) {
  // Known answers first.
  EXPECT_EQ(internal::float_to_half_bits(0.1f), 0x2e66);
  EXPECT_EQ(internal::float_to_half_bits(65504.0f), 0x7bff);                // the largest half
  EXPECT_EQ(internal::float_to_half_bits(65519.996f), 0x7bff);              // just below the tie
  EXPECT_EQ(internal::float_to_half_bits(65520.0f), 0x7c00);                // the tie goes to inf
  EXPECT_EQ(internal::float_to_half_bits(-1e10f), 0xfc00);
  EXPECT_EQ(internal::float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(internal::float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);   // tie to even zero
  EXPECT_EQ(internal::float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(internal::float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 ulp: tie to 2
  EXPECT_EQ(internal::float_to_half_bits(-std::ldexp(1.0f, -30)), 0x8000);  // signed zero
  EXPECT_EQ(internal::float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even 1
  EXPECT_EQ(internal::float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // The largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(internal::float_to_half_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);

  // Then random floats over the whole half range, against the search.
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> exponent(-26, 16);
  std::uniform_real_distribution<double> unit(1, 2);
  for (int i = 0; i < 3000; ++i) {
    float f = static_cast<float>(std::ldexp(unit(gen), static_cast<int>(exponent(gen))));
    if (i % 2) f = -f;
    if (std::fabs(f) >= 65520.0f) continue;
    ASSERT_EQ(internal::float_to_half_bits(f), nearest_half_by_search(f)) << f;
  }
#if defined(__FLT16_MAX__)
  // And against the compiler's own conversion, over a sweep of float bit patterns.
  for (uint32_t x = 0; x < 0x80000000u; x += 0x1357u) {
    const float f = std::bit_cast<float>(x);
    if (std::isnan(f)) continue;
    const auto want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(internal::float_to_half_bits(f), want) << std::hex << x;
  }
#endif
}

// The nearest bfloat16 to a finite float: one of the two 16-bit truncations around it.
uint16_t nearest_bfloat16_by_comparison(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto down = static_cast<uint16_t>(x >> 16);
  const auto up = static_cast<uint16_t>(down + 1);
  const double d = std::fabs(static_cast<double>(f) - internal::bfloat16_bits_to_float(down));
  const double u = std::fabs(static_cast<double>(internal::bfloat16_bits_to_float(up)) - f);
  if ((x & 0xffff) == 0) return down;
  if (u < d || (u == d && (down & 1))) return up;
  return down;
}

TEST(HalfTest, FloatToBFloat16RoundsToNearestEven) {
  EXPECT_EQ(internal::float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(internal::float_to_bfloat16_bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even
  EXPECT_EQ(internal::float_to_bfloat16_bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd
  EXPECT_EQ(internal::float_to_bfloat16_bits(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(internal::float_to_bfloat16_bits(std::numeric_limits<float>::max()), 0x7f80);  // to inf
  EXPECT_EQ(internal::float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = internal::float_to_bfloat16_bits(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(internal::bfloat16_bits_to_float(nan))) << "a NaN with a low payload stays NaN";
  for (uint32_t x = 0; x < 0x7f7f0000u; x += 0x10001u) {
    const float f = std::bit_cast<float>(x);
    ASSERT_EQ(internal::float_to_bfloat16_bits(f), nearest_bfloat16_by_comparison(f)) << std::hex << x;
    ASSERT_EQ(internal::float_to_bfloat16_bits(-f), nearest_bfloat16_by_comparison(-f)) << std::hex << x;
  }
}

TEST(HalfTest, ArithmeticIsFloat32RoundedOnce) {
  const float16_t a(1.0f);
  const float16_t tiny(std::ldexp(1.0f, -11));  // half an ulp of 1
  EXPECT_EQ((a + tiny).bits, a.bits) << "1 + 2^-11 ties to 1";
  EXPECT_EQ(float(float16_t(3.0f) / float16_t(2.0f)), 1.5f);
  EXPECT_TRUE(float16_t(std::nanf("")) != float16_t(std::nanf("")));
  EXPECT_TRUE(float16_t(-0.0f) == float16_t(0.0f));
  EXPECT_EQ((-float16_t(2.0f)).bits, 0xc000);
  EXPECT_EQ(static_cast<int>(bfloat16_t(-3.75f)), -3);
  EXPECT_TRUE(static_cast<bool>(bfloat16_t(std::nanf(""))));
}

// ---- Through a session ----

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

// The math runs on the CPU and on the simulated accelerator (whose kernels are the CPU's, run on
// its streams over device memory).
class HalfSessionTest : public ::testing::TestWithParam<std::tuple<DType, const char*>> {
 protected:
  DType half() const { return std::get<0>(GetParam()); }
  const char* device() const { return std::get<1>(GetParam()); }
};

// Values exact in both 16-bit formats, so every check below is exact.
TEST_P(HalfSessionTest, CastMathAndCastBack) {
  const DType half = this->half();
  Graph g;
  auto scope = g.device(device());
  Output x = ops::cast(ops::constant(g, Tensor::matrix<float>({1, -2, 3, 0.5f, 4, -8}, 2, 3)), half);
  Output w = ops::cast(ops::constant(g, Tensor::matrix<float>({1, 0, 0, 1, 2, -1}, 3, 2)), half);
  EXPECT_EQ(x.dtype(), half);
  Output doubled = ops::add(x, x);
  Output sum = ops::cast(doubled, DType::Float32);
  Output relu = ops::cast(ops::relu(x), DType::Float32);
  Output total = ops::cast(ops::reduce_sum(x), DType::Float32);
  Output mean0 = ops::cast(ops::reduce_mean(x, {0}), DType::Float32);
  Output max1 = ops::cast(ops::reduce_max(x, {1}), DType::Float32);
  Output product = ops::cast(ops::matmul(x, w), DType::Float32);
  Output as_int = ops::cast(x, DType::Int32);
  Session s(g);
  auto out = s.run({sum, relu, total, mean0, max1, product, as_int});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, -4, 6, 1, 8, -16}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 0, 3, 0.5f, 4, 0}));
  EXPECT_EQ(out[2].scalar<float>(), -1.5f);
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{0.75f, 1, -2.5f}));
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{3, 4}));
  // [1 -2 3; .5 4 -8] x [1 0; 0 1; 2 -1]
  EXPECT_EQ(out[5].to_vector<float>(), (std::vector<float>{7, -5, -15.5f, 12}));
  EXPECT_EQ(out[6].to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3, 0, 4, -8}));
  const std::string where = std::string(device()) == "/cpu:0" ? "/device:CPU:0" : "/device:SIM:0";
  EXPECT_NE(doubled.op().assigned_device().find(where), std::string::npos) << doubled.op().assigned_device();
}

// Sums accumulate in float32: 4096 ones add up to 4096 (a float16 accumulator stops at 2048, where
// 2048 + 1 rounds back to 2048; a bfloat16 one at 256).
TEST_P(HalfSessionTest, ReductionsAndMatMulAccumulateInFloat32) {
  const DType half = this->half();
  Graph g;
  auto scope = g.device(device());
  Output ones = ops::cast(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(4096, 1.0f), Shape{1, 4096})), half);
  Output sum = ops::cast(ops::reduce_sum(ones), DType::Float32);
  Output dot = ops::cast(ops::matmul(ones, ones, false, true), DType::Float32);
  Session s(g);
  auto out = s.run({sum, dot});
  EXPECT_EQ(out[0].scalar<float>(), 4096.0f);
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{4096.0f}));
}

TEST_P(HalfSessionTest, RoundsOnTheWayInAndSaturatesToInfinity) {
  const DType half = this->half();
  Graph g;
  auto scope = g.device(device());
  Output x = ops::cast(ops::constant(g, Tensor::vector<float>({0.1f, 1e6f})), half);
  Session s(g);
  const std::vector<float> back = s.run({ops::cast(x, DType::Float32)})[0].to_vector<float>();
  if (half == DType::Float16) {
    EXPECT_EQ(back[0], 0.0999755859375f);
    EXPECT_TRUE(std::isinf(back[1]));  // above 65504
  } else {
    EXPECT_EQ(back[0], 0.10009765625f);
    EXPECT_EQ(back[1], 999424.0f);  // bfloat16 has float32's range, 8 bits of precision
  }
}

TEST_P(HalfSessionTest, VariablesOfHalfDTypeUpdateInPlace) {
  const DType half = this->half();
  Graph g;
  auto scope = g.device(device());
  Variable v(ops::cast(ops::constant(g, Tensor::vector<float>({1, 2})), half),
             fmt::format("v_{}_{}", dtype_name(half), device()[1]));
  Output step = v.assign_add(ops::cast(ops::constant(g, Tensor::vector<float>({0.5f, -1})), half));
  Session s(g);
  s.run({}, {}, {v.initializer()});
  s.run({step});
  EXPECT_EQ(s.run({ops::cast(v.value(), DType::Float32)})[0].to_vector<float>(), (std::vector<float>{1.5f, 1}));
}

TEST_P(HalfSessionTest, ShapeFunctionsRejectWhatHasNoKernel) {
  const DType half = this->half();
  Graph g;
  auto scope = g.device(device());
  Output x = ops::cast(ops::constant(g, Tensor::vector<float>({1})), half);
  Output y = ops::cast(ops::constant(g, Tensor::vector<float>({1})), DType::Float32);
  EXPECT_THROW(ops::add(x, y), InvalidArgumentError) << "no implicit promotion";
}

INSTANTIATE_TEST_SUITE_P(DtypesAndDevices, HalfSessionTest,
                         ::testing::Combine(::testing::Values(DType::Float16, DType::BFloat16),
                                            ::testing::Values("/cpu:0", "/device:SIM:0")),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::string(std::get<1>(info.param)) == "/cpu:0" ? "_cpu" : "_sim");
                         });

TEST(HalfTest, DTypeNamesAndSizes) {
  EXPECT_EQ(dtype_name(DType::Float16), "float16");
  EXPECT_EQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(dtype_size(DType::Float16), 2u);
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_TRUE(dtype_is_floating(DType::Float16));
  EXPECT_TRUE(dtype_is_floating(DType::BFloat16));
  EXPECT_EQ(static_cast<int>(DType::Float16), 19) << "TensorFlow's DT_HALF";
  EXPECT_EQ(static_cast<int>(DType::BFloat16), 14) << "TensorFlow's DT_BFLOAT16";
}

}  // namespace
}  // namespace tessera
