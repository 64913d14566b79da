// tessera::gradients through the public API: the cases of TensorFlow's gradients_test.py (unused
// and unconnected xs give null, fan-out sums, grad_ys weigh, integer tensors carry nothing, an op
// with no gradient is named, gradients with respect to intermediate tensors, several ys), and the
// gradient of every math, shape and selection op checked numerically against central differences
// (TF's gradient_checker, float64) on the CPU and on the simulated accelerator, as
// math_grad_test.py and array_grad tests do.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/gradient_checker.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::max_gradient_error;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

Tensor random_tensor(Shape shape, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
  for (double& x : v) x = dist(gen);
  return Tensor::from_vector<double>(v, shape);
}

// ---- gradients_test.py ----

TEST(GradientsTest, MatMulGradientsHaveTheValuesOfTheChainRule) {
  Graph g;
  auto a = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  auto b = ops::constant(g, Tensor::matrix<float>({1, 0, 2, 1, 0, 3}, 3, 2));
  auto y = ops::reduce_sum(ops::matmul(a, b));
  auto grads = gradients({y}, {a, b});
  ASSERT_EQ(grads.size(), 2u);
  Session s(g);
  auto out = s.run({grads[0], grads[1]});
  // d sum(ab) / d a[i][k] = sum_j b[k][j]; d / d b[k][j] = sum_i a[i][k].
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 3, 3, 1, 3, 3}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{5, 5, 7, 7, 9, 9}));
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
}

TEST(GradientsTest, AnUnconnectedXGetsANullOutput) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3});
  auto unrelated = ops::placeholder(g, DType::Float32, Shape{3});
  auto unused = ops::square(unrelated);  // consumes it, but not on the way to y
  auto y = ops::reduce_sum(ops::square(x));
  auto grads = gradients({y}, {x, unrelated});
  EXPECT_FALSE(grads[0].is_null());
  EXPECT_TRUE(grads[1].is_null());
  (void)unused;
}

TEST(GradientsTest, FanOutIsSummed) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float64, Shape{});
  // y = x*x + 3x: dy/dx = 2x + 3.
  auto y = ops::add(ops::mul(x, x), ops::mul(ops::constant(g, 3.0), x));
  auto dx = gradients({y}, {x})[0];
  Session s(g);
  EXPECT_DOUBLE_EQ(s.run(dx, {{x, Tensor::scalar(2.0)}}).scalar<double>(), 7.0);
}

TEST(GradientsTest, GradYsWeighTheGradient) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2});
  auto y = ops::mul(x, ops::constant(g, Tensor::vector<float>({3, 4})));
  auto w = ops::constant(g, Tensor::vector<float>({10, 100}));
  auto dx = gradients({y}, {x}, {w})[0];
  Session s(g);
  EXPECT_EQ(s.run(dx, {{x, Tensor::vector<float>({1, 1})}}).to_vector<float>(), (std::vector<float>{30, 400}));
}

TEST(GradientsTest, SeveralYsAreSummed) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{});
  auto y1 = ops::mul(x, ops::constant(g, 2.0f));
  auto y2 = ops::square(x);
  auto dx = gradients({y1, y2}, {x})[0];
  Session s(g);
  EXPECT_FLOAT_EQ(s.run(dx, {{x, Tensor::scalar(3.0f)}}).scalar<float>(), 2.0f + 6.0f);
}

TEST(GradientsTest, GradientOfATensorWithRespectToItselfIsOnes) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2, 2});
  auto dx = gradients({x}, {x})[0];
  Session s(g);
  EXPECT_EQ(s.run(dx, {{x, Tensor::matrix<float>({5, 6, 7, 8}, 2, 2)}}).to_vector<float>(),
            (std::vector<float>{1, 1, 1, 1}));
}

TEST(GradientsTest, IntermediateXsGetTheirOwnGradients) {
  Graph g;
  auto a = ops::placeholder(g, DType::Float64, Shape{});
  auto b = ops::mul(a, ops::constant(g, 3.0));  // b = 3a
  auto y = ops::square(b);                    // y = b^2
  auto grads = gradients({y}, {a, b});
  Session s(g);
  auto out = s.run({grads[0], grads[1]}, {{a, Tensor::scalar(2.0)}});
  EXPECT_DOUBLE_EQ(out[1].scalar<double>(), 12.0);  // 2b
  EXPECT_DOUBLE_EQ(out[0].scalar<double>(), 36.0);  // 2b * 3
}

TEST(GradientsTest, IntegerPathsCarryNoGradient) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{4});
  auto i = ops::placeholder(g, DType::Int32, Shape{4});
  // argmax is integer: nothing flows back through it, as in TensorFlow.
  auto y = ops::add(ops::reduce_sum(x), ops::cast(ops::argmax(x, 0), DType::Float32));
  auto yi = ops::add(y, ops::reduce_sum(ops::cast(i, DType::Float32)));
  auto grads = gradients({yi}, {x, i});
  EXPECT_TRUE(grads[1].is_null()) << "an int32 x gets no gradient";
  Session s(g);
  EXPECT_EQ(s.run(grads[0], {{x, Tensor::vector<float>({1, 9, 2, 3})}, {i, Tensor::vector<int32_t>({1, 2, 3, 4})}})
                .to_vector<float>(),
            (std::vector<float>{1, 1, 1, 1}));
}

TEST(GradientsTest, AnOpWithoutAGradientIsNamed) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3});
  auto y = ops::random_shuffle(x, 0, "the_shuffle");  // TensorFlow has no gradient for it either
  auto msg = error_of<InvalidArgumentError>([&] { gradients({y}, {x}); });
  EXPECT_THAT(msg, HasSubstr("the_shuffle (RandomShuffle)"));
  EXPECT_THAT(msg, HasSubstr("no gradient"));
}

TEST(GradientsTest, BadArgumentsAreInvalidArgumentErrors) {
  Graph g;
  Graph other;
  auto x = ops::placeholder(g, DType::Float32, Shape{});
  auto y = ops::square(x);
  auto xo = ops::placeholder(other, DType::Float32, Shape{});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({y}, {xo}); }), HasSubstr("another graph"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({y}, {Output()}); }), HasSubstr("null"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({}, {x}); }), HasSubstr("ys is empty"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({y}, {x}, {y, y}); }), HasSubstr("2 grad_ys for 1 ys"));
  auto yi = ops::cast(y, DType::Int32);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({yi}, {x}); }), HasSubstr("floating point"));
  auto gd = ops::constant(g, 1.0);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({y}, {x}, {gd}); }), HasSubstr("grad_ys[0] is float64"));
}

TEST(GradientsTest, OnlyTheUsedOutputOfASplitGetsAGradient) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{4});
  auto parts = ops::split(x, 2, 0);
  auto y = ops::reduce_sum(ops::square(parts[1]));
  auto dx = gradients({y}, {x})[0];
  Session s(g);
  EXPECT_EQ(s.run(dx, {{x, Tensor::vector<float>({1, 2, 3, 4})}}).to_vector<float>(),
            (std::vector<float>{0, 0, 6, 8}));
}

TEST(GradientsTest, BroadcastGradientsAreSummedToTheShapeAtRunTime) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1, 3});
  auto b = ops::placeholder(g, DType::Float32, Shape{-1});  // rank known, size not
  auto y = ops::reduce_sum(ops::add(x, b));
  auto grads = gradients({y}, {x, b});
  Session s(g);
  auto out = s.run({grads[0], grads[1]}, {{x, Tensor::from_vector<float>(std::vector<float>(15, 1), Shape{5, 3})},
                                          {b, Tensor::vector<float>({0, 0, 0})}});
  EXPECT_EQ(out[0].shape(), (Shape{5, 3}));
  EXPECT_EQ(out[1].shape(), (Shape{3}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{5, 5, 5}));
  // b of one element broadcast along both dims.
  auto out1 = s.run({grads[1]}, {{x, Tensor::from_vector<float>(std::vector<float>(6, 1), Shape{2, 3})},
                                 {b, Tensor::vector<float>({0})}});
  EXPECT_EQ(out1[0].to_vector<float>(), (std::vector<float>{6}));
}

TEST(GradientsTest, GradientOpsAreNamedAndRequestTheForwardOpsDevice) {
  Graph g;
  Output x;
  Output y;
  {
    auto scope = g.device("/cpu:0");
    x = ops::placeholder(g, DType::Float32, Shape{2});
    y = ops::reduce_sum(ops::square(x), {}, false, "loss");
  }
  auto dx = gradients({y}, {x})[0];
  EXPECT_EQ(dx.op().name().rfind("gradients/", 0), 0u) << dx.op().name();
  EXPECT_THAT(dx.op().device(), HasSubstr("CPU:0"));
}

TEST(GradientsTest, ReshapeGradientWithAnUnknownShapeIsReshapedAtRunTime) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32);  // unknown rank
  auto y = ops::reduce_sum(ops::square(ops::reshape(x, {-1})));
  auto dx = gradients({y}, {x})[0];
  Session s(g);
  auto v = s.run(dx, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3)}});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

// ---- Numeric checks of every gradient, on each device ----

class GradientCheckTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The largest Jacobian error of `build(xs...)` with respect to placeholders of `shapes`, fed
  // the values `values` (random in [-1, 1] when empty), built under the device of the test.
  double error(const std::vector<Shape>& shapes, const std::function<Output(const std::vector<Output>&)>& build,
               std::vector<Tensor> values = {}) {
    Graph g;
    auto scope = g.device(GetParam());
    std::vector<Output> xs;
    std::vector<std::pair<Output, Tensor>> fed;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      xs.push_back(ops::placeholder(g, DType::Float64, shapes[i]));
      fed.emplace_back(xs.back(), i < values.size() ? values[i] : random_tensor(shapes[i], 17 + i));
    }
    return max_gradient_error(g, fed, build(xs));
  }
};

// Central differences with delta 1e-3 err by about delta^2 |f'''| / 6 (2e-6 for log near 0.5); a wrong
// gradient errs by the size of the values.
constexpr double kTolerance = 1e-5;

TEST_P(GradientCheckTest, BinaryOpsWithBroadcasting) {
  using Fn = Output (*)(Output, Output, std::string);
  for (Fn op : {Fn(&ops::add), Fn(&ops::sub), Fn(&ops::mul), Fn(&ops::maximum), Fn(&ops::minimum)}) {
    EXPECT_LT(error({{2, 3}, {2, 3}}, [&](auto x) { return op(x[0], x[1], ""); }), kTolerance);
    EXPECT_LT(error({{2, 3}, {3}}, [&](auto x) { return op(x[0], x[1], ""); }), kTolerance);
    EXPECT_LT(error({{2, 1}, {1, 3}}, [&](auto x) { return op(x[0], x[1], ""); }), kTolerance);
    EXPECT_LT(error({{}, {2, 2}}, [&](auto x) { return op(x[0], x[1], ""); }), kTolerance);
  }
  // Division away from zero.
  const Tensor num = random_tensor({2, 3}, 5);
  const Tensor den = random_tensor({3}, 6, 0.5, 2.0);
  EXPECT_LT(error({{2, 3}, {3}}, [](auto x) { return ops::div(x[0], x[1]); }, {num, den}), kTolerance);
}

TEST_P(GradientCheckTest, UnaryOps) {
  using Fn = Output (*)(Output, std::string);
  for (Fn op : {Fn(&ops::neg), Fn(&ops::square), Fn(&ops::exp), Fn(&ops::identity)}) {
    EXPECT_LT(error({{2, 3}}, [&](auto x) { return op(x[0], ""); }), kTolerance);
  }
  EXPECT_LT(error({{2, 3}}, [](auto x) { return ops::log(x[0]); }, {random_tensor({2, 3}, 3, 0.5, 2.0)}), kTolerance);
  EXPECT_LT(error({{3}}, [](auto x) { return ops::cast(ops::cast(x[0], DType::Float32), DType::Float64); }), 1e-3)
      << "through float32";
  EXPECT_LT(error({{2}, {2}, {2}}, [](auto x) { return ops::add_n({x[0], ops::square(x[1]), x[2], x[0]}); }),
            kTolerance);
}

TEST_P(GradientCheckTest, MatMulInEveryTransposition) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{3, 2} : Shape{2, 3};
      const Shape b = tb ? Shape{4, 3} : Shape{3, 4};
      EXPECT_LT(error({a, b}, [&](auto x) { return ops::matmul(x[0], x[1], ta, tb); }), kTolerance)
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST_P(GradientCheckTest, Reductions) {
  using Fn = Output (*)(Output, std::vector<int>, bool, std::string);
  for (Fn op : {Fn(&ops::reduce_sum), Fn(&ops::reduce_mean), Fn(&ops::reduce_max), Fn(&ops::reduce_min)}) {
    for (const std::vector<int>& axes : {std::vector<int>{}, {0}, {1}, {-1}, {0, 2}}) {
      for (bool keep : {false, true}) {
        EXPECT_LT(error({{2, 3, 2}}, [&](auto x) { return op(x[0], axes, keep, ""); }), kTolerance)
            << "axes " << axes.size() << " keep_dims " << keep;
      }
    }
  }
}

TEST_P(GradientCheckTest, MeanOverAnUnknownBatchDividesByTheRunTimeCount) {
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Float64, Shape{-1, 2});
  EXPECT_LT(max_gradient_error(g, {{x, random_tensor({3, 2}, 4)}}, ops::reduce_mean(x, {0})), kTolerance);
}

TEST_P(GradientCheckTest, ShapeOps) {
  EXPECT_LT(error({{2, 3}}, [](auto x) { return ops::reshape(x[0], {3, 2}); }), kTolerance);
  EXPECT_LT(error({{2, 3}}, [](auto x) { return ops::expand_dims(x[0], 1); }), kTolerance);
  EXPECT_LT(error({{2, 1, 3}}, [](auto x) { return ops::squeeze(x[0]); }), kTolerance);
  EXPECT_LT(error({{2, 3, 4}}, [](auto x) { return ops::transpose(x[0], {1, 2, 0}); }), kTolerance);
  EXPECT_LT(error({{2, 3}}, [](auto x) { return ops::transpose(x[0]); }), kTolerance);
  EXPECT_LT(error({{2, 3}, {2, 1}}, [](auto x) { return ops::concat({x[0], x[1]}, -1); }), kTolerance);
  EXPECT_LT(error({{2, 4}}, [](auto x) { return ops::mul(ops::split(x[0], 2, 1)[1], ops::split(x[0], 2, 1)[0]); }),
            kTolerance);
  EXPECT_LT(error({{3, 4}}, [](auto x) { return ops::slice(x[0], {1, 1}, {2, -1}); }), kTolerance);
  EXPECT_LT(error({{2, 2}}, [](auto x) { return ops::pad(x[0], {{1, 0}, {2, 1}}); }), kTolerance);
  EXPECT_LT(error({{2, 3}}, [](auto x) { return ops::tile(x[0], {2, 3}); }), kTolerance);
}

TEST_P(GradientCheckTest, WhereRoutesTheGradient) {
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Float64, Shape{2, 3});
  auto y = ops::placeholder(g, DType::Float64, Shape{3});
  auto cond = ops::constant(g, Tensor::vector<bool>({true, false, true}));
  auto out = ops::where(cond, x, y);
  EXPECT_LT(max_gradient_error(g, {{x, random_tensor({2, 3}, 1)}, {y, random_tensor({3}, 2)}}, out), kTolerance);
}

TEST_P(GradientCheckTest, ARealisticChainOfOps) {
  // softmax-free logistic model: mean((xW + b)^2) with a batch of unknown size.
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Float64, Shape{-1, 3});
  auto w = ops::placeholder(g, DType::Float64, Shape{3, 2});
  auto b = ops::placeholder(g, DType::Float64, Shape{2});
  auto y = ops::reduce_mean(ops::square(ops::add(ops::matmul(x, w), b)));
  EXPECT_LT(max_gradient_error(g, {{x, random_tensor({4, 3}, 1)}, {w, random_tensor({3, 2}, 2)}, {b, random_tensor({2}, 3)}},
                               y),
            kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Devices, GradientCheckTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         [](const auto& info) { return info.index == 0 ? std::string("CPU") : std::string("SIM"); });

}  // namespace
}  // namespace tessera
