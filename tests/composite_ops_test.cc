// The functions of tessera/ops.h built from other ops (core/composite_ops.cc), with the cases of
// TensorFlow's tests: nn_test.py (LeakyReluTest, MomentsTest), nn_batchnorm_test.py (the
// formula with and without offset and scale), nn_xent_test.py (SigmoidCrossEntropyWithLogitsTest:
// its inputs and losses), reduction_ops_test.py (reduce_logsumexp with infinities and overflow),
// stack_op_test.py and unpack_op_test.py (shapes, axes, a round trip, bad arguments), and
// squared_difference. Expected values are computed here from the definitions. Their gradients are
// checked numerically in tests/testing/math_gradient_cases.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> run_doubles(Graph& g, const Output& y) {
  Session s(g);
  return s.run(y).to_vector<double>();
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::fabs(want[i]))) << "element " << i;
    }
  }
}

// A deterministic [rows, cols] matrix of doubles with no two elements equal.
Tensor sample_matrix(int64_t rows, int64_t cols, double scale = 1.0) {
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(1.0 + 0.7 * static_cast<double>(i)) * (1 + 0.1 * i);
  return Tensor::matrix<double>(v, rows, cols);
}

// ---- leaky_relu, squared_difference ----

TEST(CompositeOpsTest, LeakyReluValues) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<double>({-2, -1, 0, 1, 2}));
  expect_near_all(run_doubles(g, ops::leaky_relu(x, 0.2f)), {-0.4, -0.2, 0, 1, 2}, 1e-7);
  // Integers are cast to float32 first, as TF does.
  Output ints = ops::constant(g, Tensor::vector<int32_t>({-5, 3}));
  Output y = ops::leaky_relu(ints, 0.5f);
  EXPECT_EQ(y.dtype(), DType::Float32);
  Session s(g);
  EXPECT_THAT(s.run(y).to_vector<float>(), ElementsAre(-2.5f, 3.0f));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::leaky_relu(ops::constant(g, true)); }),
              HasSubstr("leaky_relu"));
}

TEST(CompositeOpsTest, SquaredDifferenceBroadcasts) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 2, 3));
  Output y = ops::constant(g, Tensor::vector<int32_t>({4, 4, -1}));
  Session s(g);
  EXPECT_THAT(s.run(ops::squared_difference(x, y)).to_vector<int32_t>(), ElementsAre(9, 4, 16, 0, 1, 49));
}

// ---- reduce_logsumexp ----

TEST(CompositeOpsTest, ReduceLogSumExp) {
  Graph g;
  Tensor m = sample_matrix(3, 4, 3.0);
  const std::vector<double> v = m.to_vector<double>();
  Output x = ops::constant(g, m);
  std::vector<double> rows(3), all(1, 0.0);
  double total = 0;
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int c = 0; c < 4; ++c) sum += std::exp(v[r * 4 + c]);
    rows[r] = std::log(sum);
    total += sum;
  }
  all[0] = std::log(total);
  expect_near_all(run_doubles(g, ops::reduce_logsumexp(x, {1})), rows, 1e-12);
  expect_near_all(run_doubles(g, ops::reduce_logsumexp(x, {-1})), rows, 1e-12);
  expect_near_all(run_doubles(g, ops::reduce_logsumexp(x)), all, 1e-12);
  Output kept = ops::reduce_logsumexp(x, {1}, true);
  EXPECT_EQ(kept.shape(), (Shape{3, 1}));
  Session s(g);
  EXPECT_EQ(s.run(kept).shape(), (Shape{3, 1}));
  EXPECT_EQ(s.run(ops::reduce_logsumexp(x, {0, 1}, true)).shape(), (Shape{1, 1}));
}

TEST(CompositeOpsTest, ReduceLogSumExpWithInfinitiesAndLargeValues) {
  Graph g;
  // TF 2.21: [[1, 2], [3, inf]] -> [log(e + e^2), inf]; [[-inf, -inf], [1e30, 1]] -> [-inf, 1e30].
  Output a = ops::constant(g, Tensor::matrix<double>({1, 2, 3, kInf}, 2, 2));
  expect_near_all(run_doubles(g, ops::reduce_logsumexp(a, {1})), {std::log(std::exp(1.0) + std::exp(2.0)), kInf}, 1e-12);
  Output b = ops::constant(g, Tensor::matrix<double>({-kInf, -kInf, 1e30, 1}, 2, 2));
  expect_near_all(run_doubles(g, ops::reduce_logsumexp(b, {1})), {-kInf, 1e30}, 1e-12);
  // exp(1000) overflows; the shifted sum does not.
  Output c = ops::constant(g, Tensor::vector<float>({1000, 1000}));
  Session s(g);
  EXPECT_NEAR(s.run(ops::reduce_logsumexp(c)).scalar<float>(), 1000 + std::log(2.0), 1e-3);
}

// ---- stack, unstack ----

TEST(CompositeOpsTest, StackAlongEveryAxis) {
  Graph g;
  Output a = ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 2, 3));
  Output b = ops::constant(g, Tensor::matrix<int32_t>({7, 8, 9, 10, 11, 12}, 2, 3));
  Session s(g);
  Output s0 = ops::stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_THAT(s.run(s0).to_vector<int32_t>(), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  Output s1 = ops::stack({a, b}, 1);
  EXPECT_EQ(s1.shape(), (Shape{2, 2, 3}));
  EXPECT_THAT(s.run(s1).to_vector<int32_t>(), ElementsAre(1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12));
  for (int axis : {2, -1}) {
    Output s2 = ops::stack({a, b}, axis);
    EXPECT_EQ(s2.shape(), (Shape{2, 3, 2})) << axis;
    EXPECT_THAT(s.run(s2).to_vector<int32_t>(), ElementsAre(1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12)) << axis;
  }
  EXPECT_EQ(s.run(ops::stack({a, b}, -3)).to_vector<int32_t>(), s.run(s0).to_vector<int32_t>());
  // Scalars stack into a vector; one value gains a dim of 1.
  Output v = ops::stack({ops::constant(g, 1.5f), ops::constant(g, -2.0f), ops::constant(g, 3.0f)});
  EXPECT_EQ(v.shape(), (Shape{3}));
  EXPECT_THAT(s.run(v).to_vector<float>(), ElementsAre(1.5f, -2.0f, 3.0f));
  EXPECT_EQ(s.run(ops::stack({a})).shape(), (Shape{1, 2, 3}));
}

TEST(CompositeOpsTest, StackRejectsBadArguments) {
  Graph g;
  Output a = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::stack({}); }), HasSubstr("stack: no values"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::stack({a, ops::constant(g, Tensor::vector<float>({1, 2}))}); }),
              HasSubstr("has shape [2], value 0"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::stack({a, ops::cast(a, DType::Float64)}); }),
              HasSubstr("is float64"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::stack({a, a}, 3); }), HasSubstr("axis 3 is outside [-3, 2]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::stack({a, a}, -4); }), HasSubstr("axis -4"));
}

TEST(CompositeOpsTest, UnstackAndBack) {
  Graph g;
  Tensor m = Tensor::matrix<int64_t>({1, 2, 3, 4, 5, 6}, 2, 3);
  Output x = ops::constant(g, m);
  Session s(g);
  std::vector<Output> rows = ops::unstack(x);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].shape(), (Shape{3}));
  EXPECT_THAT(s.run(rows[1]).to_vector<int64_t>(), ElementsAre(4, 5, 6));
  for (int axis : {1, -1}) {
    std::vector<Output> cols = ops::unstack(x, axis);
    ASSERT_EQ(cols.size(), 3u);
    EXPECT_EQ(cols[2].shape(), (Shape{2}));
    EXPECT_THAT(s.run(cols[2]).to_vector<int64_t>(), ElementsAre(3, 6));
    EXPECT_EQ(s.run(ops::stack(cols, axis)).to_vector<int64_t>(), m.to_vector<int64_t>()) << "round trip, axis " << axis;
  }
  EXPECT_TRUE(ops::unstack(ops::constant(g, Tensor::zeros(DType::Float32, Shape{0, 4}))).empty());
}

TEST(CompositeOpsTest, UnstackRejectsBadArguments) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::unstack(x, 2); }), HasSubstr("axis 2 is outside [-2, 2)"));
  Output unknown = ops::placeholder(g, DType::Float32, Shape{-1, 3});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::unstack(unknown); }), HasSubstr("dim 0"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::unstack(ops::placeholder(g, DType::Float32)); }),
              HasSubstr("unknown rank"));
  EXPECT_EQ(ops::unstack(unknown, 1).size(), 3u);
}

// ---- sigmoid_cross_entropy_with_logits ----

TEST(CompositeOpsTest, SigmoidCrossEntropyWithLogits) {
  // nn_xent_test.py's _Inputs: the losses, from z * -log(sigmoid(x)) + (1 - z) * -log(1 - sigmoid(x)).
  const std::vector<double> x = {-100, -2, -2, 0, 2, 2, 2, 100};
  const std::vector<double> z = {0, 0, 1, 0, 0, 1, 0.5, 1};
  std::vector<double> want;
  for (std::size_t i = 0; i < x.size(); ++i) {
    // log(1 + exp(-|x|)) + max(x, 0) - x z, the stable form of that definition.
    want.push_back(std::log1p(std::exp(-std::fabs(x[i]))) + std::max(x[i], 0.0) - x[i] * z[i]);
  }
  const std::vector<double> tf_losses = {0, 0.126928, 2.126928, 0.6931472, 2.126928, 0.126928, 1.126928, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(want[i], tf_losses[i], 1e-6) << i;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Output logits = ops::cast(ops::constant(g, Tensor::vector<double>(x)), dtype);
    Output labels = ops::cast(ops::constant(g, Tensor::vector<double>(z)), dtype);
    Output loss = ops::sigmoid_cross_entropy_with_logits(labels, logits);
    EXPECT_EQ(loss.shape(), (Shape{8}));
    expect_near_all(run_doubles(g, ops::cast(loss, DType::Float64)), want, 1e-6);
  }
}

TEST(CompositeOpsTest, SigmoidCrossEntropyRejectsMismatchedArguments) {
  Graph g;
  Output logits = ops::constant(g, Tensor::vector<float>({1, 2, 3}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::sigmoid_cross_entropy_with_logits(ops::constant(g, Tensor::vector<float>({1, 0})), logits);
              }),
              HasSubstr("must have the same shape ([3] vs [2])"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::sigmoid_cross_entropy_with_logits(ops::constant(g, Tensor::vector<double>({1, 0, 1})), logits);
              }),
              HasSubstr("same dtype"));
}

// ---- moments, batch_normalization ----

TEST(CompositeOpsTest, MomentsOverAxes) {
  Graph g;
  Tensor m = sample_matrix(4, 3);
  const std::vector<double> v = m.to_vector<double>();
  Output x = ops::constant(g, m);
  std::vector<double> mean(3, 0), var(3, 0);
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < 4; ++r) mean[c] += v[r * 3 + c] / 4;
    for (int r = 0; r < 4; ++r) var[c] += (v[r * 3 + c] - mean[c]) * (v[r * 3 + c] - mean[c]) / 4;
  }
  auto [mu, sigma2] = ops::moments(x, {0});
  EXPECT_EQ(mu.shape(), (Shape{3}));
  expect_near_all(run_doubles(g, mu), mean, 1e-12);
  expect_near_all(run_doubles(g, sigma2), var, 1e-12);
  auto [mu_kept, sigma2_kept] = ops::moments(x, {0}, /*keep_dims=*/true);
  EXPECT_EQ(mu_kept.shape(), (Shape{1, 3}));
  EXPECT_EQ(sigma2_kept.shape(), (Shape{1, 3}));
  // Every axis: the global mean and variance, a scalar.
  double global_mean = 0, global_var = 0;
  for (double e : v) global_mean += e / 12;
  for (double e : v) global_var += (e - global_mean) * (e - global_mean) / 12;
  auto [gm, gv] = ops::moments(x, {0, 1});
  EXPECT_EQ(gm.shape(), Shape{});
  expect_near_all(run_doubles(g, ops::stack({gm, gv})), {global_mean, global_var}, 1e-12);
}

TEST(CompositeOpsTest, MomentsOfHalfFloatsAreComputedInFloat32) {
  Graph g;
  // 1000 ones and 1000 threes: the mean 2 and variance 1 are exact in float16; a float16 sum of the
  // elements would have stopped growing at 2048 already (its spacing there is 2).
  std::vector<float> values(2000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = i % 2 == 0 ? 1.0f : 3.0f;
  Output x = ops::cast(ops::constant(g, Tensor::vector<float>(values)), DType::Float16);
  auto [mean, variance] = ops::moments(x, {0});
  EXPECT_EQ(mean.dtype(), DType::Float16);
  Session s(g);
  EXPECT_EQ(s.run(ops::cast(mean, DType::Float32)).scalar<float>(), 2.0f);
  EXPECT_EQ(s.run(ops::cast(variance, DType::Float32)).scalar<float>(), 1.0f);
}

TEST(CompositeOpsTest, BatchNormalizationMatchesItsFormula) {
  Graph g;
  Tensor xm = sample_matrix(4, 3, 2.0);
  const std::vector<double> xv = xm.to_vector<double>();
  const std::vector<double> mean = {0.5, -1, 2}, var = {0.25, 1.5, 4}, offset = {1, 0, -1}, scale = {2, 0.5, 1};
  const double eps = 0.001;
  Output x = ops::constant(g, xm);
  Output m = ops::constant(g, Tensor::vector<double>(mean));
  Output v = ops::constant(g, Tensor::vector<double>(var));
  Output o = ops::constant(g, Tensor::vector<double>(offset));
  Output sc = ops::constant(g, Tensor::vector<double>(scale));
  std::vector<double> full, plain;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const std::size_t c = i % 3;
    const double normalized = (xv[i] - mean[c]) / std::sqrt(var[c] + static_cast<double>(static_cast<float>(eps)));
    full.push_back(normalized * scale[c] + offset[c]);
    plain.push_back(normalized);
  }
  expect_near_all(run_doubles(g, ops::batch_normalization(x, m, v, o, sc, 0.001f)), full, 1e-12);
  expect_near_all(run_doubles(g, ops::batch_normalization(x, m, v, Output(), Output(), 0.001f)), plain, 1e-12);
  // With the batch's own moments the result has mean 0 and variance var / (var + eps) per column.
  auto [bm, bv] = ops::moments(x, {0});
  auto [nm, nv] = ops::moments(ops::batch_normalization(x, bm, bv, Output(), Output(), 0.001f), {0});
  Session s(g);
  for (double e : s.run(nm).to_vector<double>()) EXPECT_NEAR(e, 0, 1e-12);
  const std::vector<double> batch_var = s.run(bv).to_vector<double>();
  const std::vector<double> normalized_var = s.run(nv).to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(normalized_var[c], batch_var[c] / (batch_var[c] + static_cast<float>(eps)), 1e-12);
  }
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::batch_normalization(x, ops::cast(m, DType::Float32), v, o, sc, 0.001f);
              }),
              HasSubstr("batch_normalization"));
}

}  // namespace
}  // namespace tessera
