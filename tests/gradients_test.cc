// tessera::gradients through the public API: the cases of TensorFlow's gradients_test.py (unused
// and unconnected xs give null, fan-out sums, grad_ys weigh, integer tensors carry nothing, an op
// with no gradient is named, gradients with respect to intermediate tensors, several ys). The
// numeric checks of each op's gradient are in tests/gradient_check_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

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
  auto gd = ops::constant(g, 1.0);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({y}, {x}, {gd}); }), HasSubstr("grad_ys[0] is float64"));
  // An integer y takes an integer grad_y (which weighs nothing), not a float one.
  auto yi = ops::cast(y, DType::Int32);
  EXPECT_TRUE(gradients({yi}, {x}, {ops::constant(g, 2)})[0].is_null());
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({yi}, {x}, {ops::constant(g, 2.0f)}); }),
              HasSubstr("grad_ys[0] is float32, ys[0] is int32"));
  // A bool or string y has no default gradient: TF's _DefaultGradYs raises ("must be numeric").
  auto yb = ops::greater(y, ops::constant(g, 1.0f), "is_big");
  auto msg = error_of<InvalidArgumentError>([&] { gradients({y, yb}, {x}); });
  EXPECT_THAT(msg, HasSubstr("ys[1] (is_big:0) is bool"));
  EXPECT_THAT(msg, HasSubstr("numeric"));
  auto ys = ops::constant(g, std::string("text"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({ys}, {x}); }), HasSubstr("is string"));
}

// TF's _DefaultGradYs fills an integer y with ones of its dtype, but integer tensors are not
// backpropagatable: what only integer tensors reach gets None, and float ys beside it still count.
TEST(GradientsTest, AnIntegerYContributesNothing) {
  Graph g;
  auto xf = ops::placeholder(g, DType::Float32, Shape{}, "xf");
  auto xi = ops::placeholder(g, DType::Int32, Shape{}, "xi");
  auto int_of_float = gradients({ops::cast(xf, DType::Int32)}, {xf});
  ASSERT_EQ(int_of_float.size(), 1u);
  EXPECT_TRUE(int_of_float[0].is_null()) << "TF: [None]";
  auto mixed = gradients({ops::square(xf), ops::square(xi)}, {xf, xi});
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_TRUE(mixed[1].is_null()) << "an int32 x gets no gradient";
  auto int64_y = ops::argmax(ops::reshape(xf, {1}), 0);
  auto with_int64 = gradients({int64_y, ops::mul(xf, ops::constant(g, 5.0f))}, {xf, xi});
  EXPECT_TRUE(with_int64[1].is_null());
  EXPECT_TRUE(gradients({xi}, {xi})[0].is_null());
  Session s(g);
  auto out = s.run({mixed[0], with_int64[0]}, {{xf, Tensor::scalar(3.0f)}, {xi, Tensor::scalar<int32_t>(2)}});
  EXPECT_EQ(out[0].scalar<float>(), 6.0f);  // d(xf^2)/dxf: the integer y adds nothing
  EXPECT_EQ(out[1].scalar<float>(), 5.0f);
}

// gradients_test.py's testNonDifferentiableSwitchInWhileLoop without the loop: a cast to int32 in
// the middle cuts the path, so an integer target has no gradient and a float one only the rest.
TEST(GradientsTest, ACastToAnIntegerInTheMiddleCutsThePath) {
  Graph g;
  auto v = ops::placeholder(g, DType::Float32, Shape{}, "v");
  auto a = ops::add(ops::cast(v, DType::Int32), ops::constant(g, 1));  // int(v) + 1
  auto target = ops::mul(a, ops::constant(g, 2));
  EXPECT_TRUE(gradients({target}, {v})[0].is_null());
  // y = float(int(v) + 1) * v: only the direct v carries a gradient, d y / d v = float(int(v) + 1).
  auto y = ops::mul(ops::cast(a, DType::Float32), v);
  auto dv = gradients({y, target}, {v})[0];
  ASSERT_FALSE(dv.is_null());
  Session s(g);
  EXPECT_EQ(s.run(dv, {{v, Tensor::scalar(2.5f)}}).scalar<float>(), 3.0f);
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

}  // namespace
}  // namespace tessera
