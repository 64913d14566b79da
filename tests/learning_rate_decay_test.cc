// The learning-rate schedules of tessera/learning_rate_decay.h with the cases of TensorFlow 1's
// learning_rate_decay_test.py (exponential, piecewise constant, polynomial, natural exp, inverse
// time, cosine): the global step set by assigning it, each value against the formula computed here
// in double, to float32's precision.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

// A graph with an int64 global step the test sets, and a session on it.
struct Schedule {
  Schedule() : step(train::get_or_create_global_step(g)), value(ops::placeholder(g, DType::Int64, Shape{})) {
    set = step.assign(value).op();
  }
  // The schedule's value once the global step is `at`.
  float at(const Output& lr, int64_t at) {
    if (!session) {
      session.emplace(g);
      session->run(global_variables_initializer(g));
    }
    session->run(set, {{value, Tensor::scalar(at)}});
    return session->run(lr).scalar<float>();
  }

  Graph g;
  Variable step;
  Output value;
  Operation set;
  std::optional<Session> session;
};

constexpr double kTolerance = 1e-6;  // relative: float32's arithmetic

void expect_near_relative(double got, double want) { EXPECT_NEAR(got, want, kTolerance * std::max(1.0, std::abs(want))); }

TEST(LearningRateDecayTest, ExponentialContinuous) {
  Schedule s;
  Output lr = train::exponential_decay(0.05f, s.step, 10, 0.96f);
  EXPECT_EQ(lr.dtype(), DType::Float32);
  EXPECT_EQ(lr.op().name(), "ExponentialDecay");
  for (int64_t step : {0, 5, 10, 37}) expect_near_relative(s.at(lr, step), 0.05 * std::pow(0.96, step / 10.0));
}

TEST(LearningRateDecayTest, ExponentialStaircase) {
  Schedule s;
  Output lr = train::exponential_decay(0.1f, s.step, 3, 0.96f, /*staircase=*/true);
  for (int64_t step : {0, 1, 2}) expect_near_relative(s.at(lr, step), 0.1);
  expect_near_relative(s.at(lr, 3), 0.1 * 0.96);
  expect_near_relative(s.at(lr, 100), 0.1 * std::pow(0.96, 100 / 3));
}

// A step held as a float32 variable works as an int64 one (TF casts whatever it gets).
TEST(LearningRateDecayTest, AFloatingPointStepWorksToo) {
  Graph g;
  Variable step(g, Tensor::scalar(7.0f), "my_step", /*trainable=*/false);
  Output lr = train::exponential_decay(1.0f, step, 2, 0.5f, true, "halving");
  EXPECT_EQ(lr.op().name(), "halving");
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_FLOAT_EQ(s.run(lr).scalar<float>(), 0.125f);
}

TEST(LearningRateDecayTest, PiecewiseConstant) {
  Schedule s;
  Output lr = train::piecewise_constant(s.step, {100, 110, 120}, {1.0f, 0.1f, 0.01f, 0.001f});
  const std::vector<std::pair<int64_t, float>> cases = {{-999, 1.0f}, {100, 1.0f}, {105, 0.1f}, {110, 0.1f},
                                                        {120, 0.01f}, {121, 0.001f}, {999, 0.001f}};
  for (const auto& [step, want] : cases) EXPECT_EQ(s.at(lr, step), want) << "step " << step;
}

// Boundaries above float32's exact integers still split where they say (compared as float64).
TEST(LearningRateDecayTest, PiecewiseConstantIsExactForLargeSteps) {
  Schedule s;
  const int64_t boundary = (int64_t{1} << 24) + 1;  // 16777217 is not a float32
  Output lr = train::piecewise_constant(s.step, {static_cast<double>(boundary)}, {1.0f, 2.0f});
  EXPECT_EQ(s.at(lr, boundary), 1.0f);
  EXPECT_EQ(s.at(lr, boundary + 1), 2.0f);
}

TEST(LearningRateDecayTest, PiecewiseConstantChecksItsLists) {
  Graph g;
  Variable step = train::get_or_create_global_step(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::piecewise_constant(step, {1, 2}, {1.0f, 2.0f}); }),
              HasSubstr("the length of boundaries should be 1 less than the length of values"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::piecewise_constant(step, {2, 2}, {1.0f, 2.0f, 3.0f}); }),
              HasSubstr("boundaries must increase"));
}

// polynomial_decay_test: half way, the end, beyond the end, with an end rate, with cycles.
TEST(LearningRateDecayTest, Polynomial) {
  Schedule s;
  const double lr = 0.05;
  const double end = 0.001;
  Output linear = train::polynomial_decay(0.05f, s.step, 10, 0.0f);
  Output to_end = train::polynomial_decay(0.05f, s.step, 10, 0.001f);
  Output squared = train::polynomial_decay(0.05f, s.step, 10, 0.001f, 2.0f);
  Output cyclic = train::polynomial_decay(0.05f, s.step, 10, 0.001f, 1.0f, /*cycle=*/true);
  expect_near_relative(s.at(linear, 5), lr * 0.5);
  expect_near_relative(s.at(linear, 10), 0.0);
  expect_near_relative(s.at(to_end, 5), (lr - end) * 0.5 + end);
  expect_near_relative(s.at(to_end, 15), end);
  expect_near_relative(s.at(squared, 5), (lr - end) * 0.25 + end);
  expect_near_relative(s.at(cyclic, 0), lr);
  expect_near_relative(s.at(cyclic, 10), end);
  expect_near_relative(s.at(cyclic, 15), (lr - end) * 0.25 + end);  // decay_steps 20: 1 - 15/20
  expect_near_relative(s.at(cyclic, 20), end);
  expect_near_relative(s.at(cyclic, 21), (lr - end) * (1 - 21.0 / 30) + end);
}

TEST(LearningRateDecayTest, NaturalExpAndInverseTime) {
  Schedule s;
  Output natural = train::natural_exp_decay(0.1f, s.step, 1, 0.5f);
  Output natural_stairs = train::natural_exp_decay(0.1f, s.step, 2, 0.5f, true);
  Output inverse = train::inverse_time_decay(0.1f, s.step, 1, 0.5f);
  Output inverse_stairs = train::inverse_time_decay(0.1f, s.step, 2, 0.5f, true);
  for (int64_t step : {0, 1, 2, 3, 7}) {
    SCOPED_TRACE(step);
    expect_near_relative(s.at(natural, step), 0.1 * std::exp(-0.5 * step));
    expect_near_relative(s.at(natural_stairs, step), 0.1 * std::exp(-0.5 * (step / 2)));
    expect_near_relative(s.at(inverse, step), 0.1 / (1 + 0.5 * step));
    expect_near_relative(s.at(inverse_stairs, step), 0.1 / (1 + 0.5 * (step / 2)));
  }
}

// cosine_decay_test: 1000 steps, with and without alpha, past the end held at alpha.
TEST(LearningRateDecayTest, Cosine) {
  Schedule s;
  Output plain = train::cosine_decay(1.0f, s.step, 1000);
  Output with_alpha = train::cosine_decay(1.0f, s.step, 1000, 0.1f);
  for (int64_t step = 0; step <= 1500; step += 250) {
    SCOPED_TRACE(step);
    const double decayed = 0.5 * (1 + std::cos(std::numbers::pi * std::min<int64_t>(step, 1000) / 1000));
    EXPECT_NEAR(s.at(plain, step), decayed, 1e-6);
    EXPECT_NEAR(s.at(with_alpha, step), 0.9 * decayed + 0.1, 1e-6);
  }
}

TEST(LearningRateDecayTest, BadArgumentsAreInvalidArgumentErrors) {
  Graph g;
  Variable step = train::get_or_create_global_step(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::exponential_decay(0.1f, Output(), 10, 0.9f); }),
              HasSubstr("global_step is required for exponential_decay."));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::polynomial_decay(0.1f, step, 0); }),
              HasSubstr("polynomial_decay: decay_steps must be positive, got 0"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::cosine_decay(0.1f, ops::constant(g, std::string("x")), 5); }),
              HasSubstr("cosine_decay: global_step Const:0 is string, not a number"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { train::inverse_time_decay(0.1f, ops::constant(g, Tensor::vector<int64_t>({1, 2})), 5, 0.5f); }),
              HasSubstr("inverse_time_decay: global_step Const_1:0 must be a scalar, got shape [2]"));
}

}  // namespace
}  // namespace tessera
