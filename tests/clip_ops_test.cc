// The clipping functions of tessera/ops.h with the cases of TensorFlow's clip_ops_test.py:
// clip_by_value (scalar and tensor bounds), clip_by_norm (all elements and along an axis, a zero
// tensor), global_norm and clip_by_global_norm (clipped or not, null entries, an infinite norm,
// a given norm), the gradients that flow through them, and bad arguments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;
using testing::error_of;

std::vector<float> run_floats(Graph& g, const Output& y) {
  Session s(g);
  return s.run(y).to_vector<float>();
}

TEST(ClipOpsTest, ClipByValue) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  EXPECT_THAT(run_floats(g, ops::clip_by_value(x, 2.0, 4.0)), ElementsAre(2, 2, 3, 4, 4, 4));
  // Bounds that broadcast: a row of minimums, a column of maximums.
  Output lo = ops::constant(g, Tensor::vector<float>({2, 0, 5}));
  Output hi = ops::constant(g, Tensor::matrix<float>({2.5f, 4.5f}, 2, 1));
  EXPECT_THAT(run_floats(g, ops::clip_by_value(x, lo, hi)), ElementsAre(2, 2, 5, 4, 4.5f, 5));
  // An int64 bound for a float tensor is cast, as TensorFlow converts it.
  EXPECT_THAT(run_floats(g, ops::clip_by_value(x, ops::constant(g, int64_t{3}), ops::constant(g, int64_t{3}))),
              ElementsAre(3, 3, 3, 3, 3, 3));
}

TEST(ClipOpsTest, ClipByValueRejectsBoundsThatGrowTheTensor) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({1, 2}));
  Output lo = ops::constant(g, Tensor::matrix<float>({0, 0, 0, 0, 0, 0}, 3, 2));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::clip_by_value(x, lo, ops::constant(g, 5.0f)); }),
              HasSubstr("clip_by_value: the bounds broadcast [2] to [3,2]"));
}

TEST(ClipOpsTest, ClipByValueGradientFlowsInsideTheBoundsOnly) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({-3, 0.5f, 3}));
  std::vector<Output> grads = gradients({ops::reduce_sum(ops::clip_by_value(x, -1.0, 1.0))}, {x});
  EXPECT_THAT(run_floats(g, grads[0]), ElementsAre(0, 1, 0));
}

TEST(ClipOpsTest, ClipByNorm) {
  Graph g;
  // Norm 5: clipped to 4 scales by 4/5; clipped to 6 leaves it.
  Output x = ops::constant(g, Tensor::matrix<float>({-3, 0, 0, 4, 0, 0}, 2, 3));
  EXPECT_THAT(run_floats(g, ops::clip_by_norm(x, 4.0)), Pointwise(FloatNear(1e-6f), {-2.4f, 0.f, 0.f, 3.2f, 0.f, 0.f}));
  EXPECT_THAT(run_floats(g, ops::clip_by_norm(x, 6.0)), ElementsAre(-3, 0, 0, 4, 0, 0));
  // Along axis 0 the first column's norm is 5 (clipped), along axis 1 the rows' are 3 and 4 (not).
  EXPECT_THAT(run_floats(g, ops::clip_by_norm(x, 4.0, {0})), Pointwise(FloatNear(1e-6f), {-2.4f, 0.f, 0.f, 3.2f, 0.f, 0.f}));
  EXPECT_THAT(run_floats(g, ops::clip_by_norm(x, 4.0, {1})), ElementsAre(-3, 0, 0, 4, 0, 0));
  // A negative clip_norm counts as 0.
  EXPECT_THAT(run_floats(g, ops::clip_by_norm(x, -1.0)), ElementsAre(0, 0, 0, 0, 0, 0));
}

// A zero tensor stays zero, and its gradient is finite (the norm's sqrt is never taken of 0).
TEST(ClipOpsTest, ClipByNormOfZerosHasAFiniteGradient) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({0, 0, 0}));
  Output clipped = ops::clip_by_norm(x, 1.0);
  std::vector<Output> grads = gradients({ops::reduce_sum(clipped)}, {x});
  EXPECT_THAT(run_floats(g, clipped), ElementsAre(0, 0, 0));
  for (float v : run_floats(g, grads[0])) EXPECT_TRUE(std::isfinite(v)) << v;
}

TEST(ClipOpsTest, GlobalNormAndClipByGlobalNorm) {
  Graph g;
  Output x0 = ops::constant(g, Tensor::matrix<float>({-2, 0, 0, 4, 0, 0}, 2, 3));
  Output x1 = ops::constant(g, Tensor::vector<float>({1, -2}));
  EXPECT_FLOAT_EQ(Session(g).run(ops::global_norm({x0, Output(), x1})).scalar<float>(), 5.0f);  // sqrt(4+16+1+4)
  auto [clipped, norm] = ops::clip_by_global_norm({x0, Output(), x1}, 4.0);
  ASSERT_EQ(clipped.size(), 3u);
  EXPECT_TRUE(clipped[1].is_null()) << "a null entry stays null";
  Session s(g);
  EXPECT_FLOAT_EQ(s.run(norm).scalar<float>(), 5.0f);
  EXPECT_THAT(s.run(clipped[0]).to_vector<float>(), Pointwise(FloatNear(1e-6f), {-1.6f, 0.f, 0.f, 3.2f, 0.f, 0.f}));
  EXPECT_THAT(s.run(clipped[2]).to_vector<float>(), Pointwise(FloatNear(1e-6f), {0.8f, -1.6f}));
  // Under the bound nothing changes; a given norm is used as it is.
  auto [kept, kept_norm] = ops::clip_by_global_norm({x0, x1}, 6.0);
  EXPECT_THAT(s.run(kept[1]).to_vector<float>(), ElementsAre(1, -2));
  auto [by_given, given] = ops::clip_by_global_norm({x1}, ops::constant(g, 1.0f), ops::constant(g, 2.0f));
  EXPECT_FLOAT_EQ(s.run(given).scalar<float>(), 2.0f);
  EXPECT_THAT(s.run(by_given[0]).to_vector<float>(), ElementsAre(0.5f, -1.0f));
}

// TensorFlow's testClipByGlobalNormInf: an infinite norm makes every element NaN.
TEST(ClipOpsTest, AnInfiniteGlobalNormMakesEverythingNaN) {
  Graph g;
  const float inf = std::numeric_limits<float>::infinity();
  Output x0 = ops::constant(g, Tensor::vector<float>({-2, inf}));
  Output x1 = ops::constant(g, Tensor::vector<float>({1, -2}));
  auto [clipped, norm] = ops::clip_by_global_norm({x0, x1}, 4.0);
  Session s(g);
  EXPECT_TRUE(std::isinf(s.run(norm).scalar<float>()));
  for (const Output& c : clipped) {
    for (float v : s.run(c).to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << v;
  }
}

// The usual use: gradients clipped before they are applied, their gradient-free path intact.
TEST(ClipOpsTest, ClippedGradientsTrain) {
  Graph g;
  Variable w(g, Tensor::vector<float>({3, 4}), "w");
  Output loss = ops::mul(ops::reduce_sum(ops::square(w.value())), ops::constant(g, 0.5f));  // gradient = w
  train::GradientDescentOptimizer sgd(1.0f);
  auto grads_and_vars = sgd.compute_gradients(loss);
  auto [clipped, norm] = ops::clip_by_global_norm({grads_and_vars[0].first}, 1.0);
  Operation step = sgd.apply_gradients({{clipped[0], grads_and_vars[0].second}});
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(step);
  // The gradient [3, 4] (norm 5) is clipped to [0.6, 0.8].
  EXPECT_THAT(s.run(w.value()).to_vector<float>(), Pointwise(FloatNear(1e-6f), {2.4f, 3.2f}));
}

TEST(ClipOpsTest, BadArgumentsAreInvalidArgumentErrors) {
  Graph g;
  Output f = ops::constant(g, Tensor::vector<float>({1, 2}));
  Output d = ops::constant(g, Tensor::vector<double>({1, 2}));
  Output i = ops::constant(g, Tensor::vector<int32_t>({1, 2}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::global_norm({Output(), Output()}); }),
              HasSubstr("global_norm: t_list holds no tensor"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::global_norm({f, d}); }),
              HasSubstr("global_norm: the tensors must share one dtype, got float32"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::clip_by_norm(i, 1.0); }),
              HasSubstr("clip_by_norm: Const_2:0 is int32, not a floating point tensor"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::clip_by_norm(f, f); }),
              HasSubstr("clip_by_norm: clip_norm must be a scalar, got shape [2]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::clip_by_value(Output(), 0.0, 1.0); }),
              HasSubstr("clip_by_value: t is null"));
}

}  // namespace
}  // namespace tessera
