// tessera::layers with the cases of TensorFlow's layers tests (core_test.py: DenseTest's
// testCall, testNoBias, testNonTrainable, testOutputShape, testCallTensorDot, testFunctionalDense
// Reuse / ReuseFromScope / TwoLayer..., testKernelRegularizer; convolutional_test.py's
// testConv2D / SAME / strides; pooling_test.py; core_test.py's DropoutTest and FlattenTest;
// normalization_test.py's BNTest: the statistics used in and out of training, the moving
// averages' updates, axis 1, a training tensor), plus a small model that trains. Expected values
// are computed here from the definitions and from the variables' values read back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::names_of;

std::vector<float> floats(Session& s, const Output& x, const FeedMap& feeds = {}) {
  return s.run(x, feeds).to_vector<float>();
}

Output matrix(Graph& g, std::vector<float> values, int64_t rows, int64_t cols) {
  return ops::constant(g, Tensor::matrix<float>(std::move(values), rows, cols));
}

TEST(DenseTest, VariablesNamedAsTensorFlowNamesThem) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 4}, "x");
  Output a = layers::dense(x, 3);
  Output b = layers::dense(a, 2, {.use_bias = false});
  Output c = layers::dense(b, 1, {.trainable = false, .name = "my_dense"});
  EXPECT_THAT(names_of(global_variables(g)),
              ElementsAre("dense/kernel", "dense/bias", "dense_1/kernel", "my_dense/kernel", "my_dense/bias"));
  EXPECT_THAT(names_of(trainable_variables(g)), ElementsAre("dense/kernel", "dense/bias", "dense_1/kernel"));
  EXPECT_EQ(a.shape(), (Shape{-1, 3}));
  EXPECT_EQ(c.shape(), (Shape{-1, 1}));
  EXPECT_EQ(a.op().name().rfind("dense/", 0), 0u) << a.op().name();
  EXPECT_EQ(c.op().name().rfind("my_dense/", 0), 0u) << c.op().name();
}

TEST(DenseTest, ComputesInputsTimesKernelPlusBiasThroughTheActivation) {
  Graph g;
  Output x = matrix(g, {1, -2, 3, 0.5f, 4, -1}, 2, 3);
  Output linear = layers::dense(x, 2, {.bias_initializer = initializers::constant(0.25)});
  Output relu = layers::dense(x, 2, {.activation = ops::relu, .bias_initializer = initializers::constant(-0.5)});
  Output doubled = layers::dense(x, 2, {.activation = [](Output y) { return ops::mul(y, ops::constant(y.op().graph(), 2.0f)); }});
  std::vector<Variable> vars = global_variables(g);
  Session s(g);
  s.run(global_variables_initializer(g));
  auto expect_layer = [&](const Output& out, const Variable& kernel, const Variable& bias, auto activation) {
    const std::vector<float> k = floats(s, kernel), b = floats(s, bias), xs = floats(s, x), got = floats(s, out);
    ASSERT_EQ(got.size(), 4u);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        float want = b[j];
        for (int t = 0; t < 3; ++t) want += xs[i * 3 + t] * k[t * 2 + j];
        EXPECT_NEAR(got[i * 2 + j], activation(want), 1e-5) << out.name() << " [" << i << "," << j << "]";
      }
    }
  };
  expect_layer(linear, vars[0], vars[1], [](float v) { return v; });
  expect_layer(relu, vars[2], vars[3], [](float v) { return std::max(v, 0.0f); });
  expect_layer(doubled, vars[4], vars[5], [](float v) { return 2 * v; });
  EXPECT_THAT(floats(s, vars[1]), ElementsAre(0.25f, 0.25f));
}

TEST(DenseTest, InputsOfRankThreeAreAppliedToTheLastDim) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 2, 3});
  Output y = layers::dense(x, 4, {.kernel_initializer = initializers::random_uniform(-1, 1, 5)});
  EXPECT_EQ(y.shape(), (Shape{-1, 2, 4}));
  Session s(g);
  s.run(global_variables_initializer(g));
  std::vector<float> xs = {1, 2, 3, 4, 5, 6, -1, -2, -3, 0, 1, 0};
  Tensor in = Tensor::from_vector<float>(xs, Shape{2, 2, 3});
  const std::vector<float> got = floats(s, y, {{x, in}});
  const std::vector<float> k = floats(s, global_variables(g)[0]);
  ASSERT_EQ(got.size(), 16u);
  for (int row = 0; row < 4; ++row) {
    for (int j = 0; j < 4; ++j) {
      float want = 0;  // bias starts at 0
      for (int t = 0; t < 3; ++t) want += xs[row * 3 + t] * k[t * 4 + j];
      EXPECT_NEAR(got[row * 4 + j], want, 1e-5);
    }
  }
}

TEST(DenseTest, ReuseByNameAndByScope) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 3});
  Output first = layers::dense(x, 2, {.name = "fc"});
  Output shared = layers::dense(x, 2, {.name = "fc", .reuse = true});
  Output again = layers::dense(x, 2, {.name = "fc"});  // not reused: TF makes "fc_1"
  EXPECT_THAT(names_of(global_variables(g)), ElementsAre("fc/kernel", "fc/bias", "fc_1/kernel", "fc_1/bias"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(x, 2, {.name = "nothing", .reuse = true}); }),
              HasSubstr("'nothing/kernel' does not exist"));

  // A two-layer model built twice: the second build, in a reusing scope, finds the first's.
  auto model = [&g](Output in) { return layers::dense(layers::dense(in, 4, {.activation = ops::tanh}), 1); };
  Output train_out, eval_out;
  {
    auto scope = variable_scope(g, "model");
    train_out = model(x);
  }
  const std::size_t made = global_variables(g).size();
  {
    auto scope = variable_scope(g, "model", Reuse::reuse);
    eval_out = model(x);
  }
  EXPECT_EQ(global_variables(g).size(), made);
  EXPECT_THAT(names_of(global_variables(g)),
              ::testing::IsSupersetOf({"model/dense/kernel", "model/dense/bias", "model/dense_1/kernel"}));
  Session s(g);
  s.run(global_variables_initializer(g));
  FeedMap feed{{x, Tensor::matrix<float>({1, 2, 3, -1, 0, 4}, 2, 3)}};
  EXPECT_EQ(floats(s, train_out, feed), floats(s, eval_out, feed));
  EXPECT_EQ(floats(s, first, feed), floats(s, shared, feed));
  EXPECT_NE(floats(s, first, feed), floats(s, again, feed));
}

TEST(DenseTest, BadInputs) {
  Graph g;
  Output unknown_last = ops::placeholder(g, DType::Float32, Shape{2, -1});
  Output vec = ops::placeholder(g, DType::Float32, Shape{3});
  Output ints = ops::placeholder(g, DType::Int32, Shape{2, 3});
  Output two_unknown = ops::placeholder(g, DType::Float32, Shape{-1, -1, 3});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(unknown_last, 2); }),
              HasSubstr("the last dimension of inputs"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(vec, 2); }), HasSubstr("must have rank 2 or more"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(ints, 2); }), HasSubstr("not a floating point"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(two_unknown, 2); }),
              HasSubstr("every dimension but the first known"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(vec, 0); }), HasSubstr("units must be positive"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dense(Output(), 2); }), HasSubstr("inputs is null"));
  EXPECT_TRUE(global_variables(g).empty()) << "nothing made before the checks";
}

TEST(RegularizerTest, KernelAndBiasPenaltiesJoinTheRegularizationLosses) {
  Graph g;
  Output x = matrix(g, {1, 2}, 1, 2);
  layers::dense(x, 3, {.kernel_initializer = initializers::constant(0.5),
                       .bias_initializer = initializers::constant(-2),
                       .kernel_regularizer = layers::l2_regularizer(0.1),
                       .bias_regularizer = layers::l1_regularizer(0.01)});
  layers::dense(x, 3, {.kernel_initializer = initializers::constant(-1),
                       .kernel_regularizer = layers::l1_l2_regularizer(0.2, 0.3)});
  layers::dense(x, 3, {.kernel_regularizer = layers::l2_regularizer(0)});  // scale 0: no penalty
  std::vector<Output> penalties = losses::get_regularization_losses(g);
  ASSERT_EQ(penalties.size(), 3u);
  EXPECT_EQ(penalties[0].op().name().rfind("dense/kernel/Regularizer/l2_regularizer", 0), 0u)
      << penalties[0].op().name();
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_FLOAT_EQ(s.run(penalties[0]).scalar<float>(), 0.1f * 6 * 0.25f / 2);  // scale * sum(w^2) / 2
  EXPECT_FLOAT_EQ(s.run(penalties[1]).scalar<float>(), 0.01f * 3 * 2);        // scale * sum(|w|)
  EXPECT_FLOAT_EQ(s.run(penalties[2]).scalar<float>(), 0.2f * 6 + 0.3f * 6 / 2);
  EXPECT_THAT(error_of<InvalidArgumentError>([] { layers::l2_regularizer(-1); }),
              HasSubstr("layers::l2_regularizer: the scale must be finite and 0 or more, not -1"));
}

TEST(Conv2DTest, ShapesAndValuesForValidSameAndStrides) {
  Graph g;
  Output ones = ops::constant(g, Tensor::from_vector<float>(std::vector<float>(16, 1.0f), Shape{1, 4, 4, 1}));
  Output valid = layers::conv2d(ones, 2, {3}, {.kernel_initializer = initializers::ones()});
  Output same = layers::conv2d(ones, 1, {3, 3},
                               {.padding = "SAME", .kernel_initializer = initializers::ones(),
                                .bias_initializer = initializers::constant(0.5)});
  Output strided = layers::conv2d(ones, 1, {2, 2}, {.strides = {2}, .kernel_initializer = initializers::ones()});
  Output relu = layers::conv2d(ones, 1, {1, 1}, {.activation = ops::relu, .kernel_initializer = initializers::constant(-1)});
  EXPECT_EQ(valid.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(same.shape(), (Shape{1, 4, 4, 1}));
  EXPECT_EQ(strided.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_THAT(names_of(global_variables(g)),
              ::testing::IsSupersetOf({"conv2d/kernel", "conv2d/bias", "conv2d_1/kernel", "conv2d_3/bias"}));
  EXPECT_EQ(global_variables(g)[0].shape(), (Shape{3, 3, 1, 2}));
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(floats(s, valid), ::testing::Each(9.0f));
  // SAME: a corner sees 4 ones, an edge 6, the middle 9 (plus the bias).
  EXPECT_THAT(floats(s, same), ElementsAre(4.5f, 6.5f, 6.5f, 4.5f, 6.5f, 9.5f, 9.5f, 6.5f,  //
                                           6.5f, 9.5f, 9.5f, 6.5f, 4.5f, 6.5f, 6.5f, 4.5f));
  EXPECT_THAT(floats(s, strided), ::testing::Each(4.0f));
  EXPECT_THAT(floats(s, relu), ::testing::Each(0.0f));
}

TEST(Conv2DTest, BadArguments) {
  Graph g;
  Output rank3 = ops::placeholder(g, DType::Float32, Shape{1, 4, 4});
  Output images = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 3});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::conv2d(rank3, 2, {3}); }), HasSubstr("must have rank 4"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::conv2d(images, 2, {3}, {.padding = "full"}); }),
              HasSubstr("padding must be \"valid\" or \"same\", not \"full\""));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::conv2d(images, 2, {3, 3, 3}); }),
              HasSubstr("kernel_size must be one or two positive numbers"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::conv2d(images, 2, {3}, {.strides = {0}}); }),
              HasSubstr("strides must be one or two positive numbers"));
}

TEST(PoolingTest, MaxAndAveragePooling) {
  Graph g;
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  Output x = ops::constant(g, Tensor::from_vector<float>(v, Shape{1, 4, 4, 1}));
  Output mx = layers::max_pooling2d(x, {2}, {2});
  Output avg = layers::average_pooling2d(x, {2, 2}, {2, 2}, "valid");
  Output same = layers::max_pooling2d(x, {3}, {2}, "same");
  EXPECT_EQ(mx.op().name().rfind("max_pooling2d/", 0), 0u) << mx.op().name();
  EXPECT_EQ(same.op().name().rfind("max_pooling2d_1/", 0), 0u) << same.op().name();
  Session s(g);
  EXPECT_THAT(floats(s, mx), ElementsAre(5, 7, 13, 15));
  EXPECT_THAT(floats(s, avg), ElementsAre(2.5f, 4.5f, 10.5f, 12.5f));
  EXPECT_EQ(same.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_THAT(floats(s, same), ElementsAre(10, 11, 14, 15));
}

TEST(FlattenTest, KeepsTheBatchDim) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 2, 3});
  Output y = layers::flatten(x);
  EXPECT_EQ(y.shape(), (Shape{-1, 6}));
  Session s(g);
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Shape{2, 2, 3});
  Tensor out = s.run(y, {{x, in}});
  EXPECT_EQ(out.shape(), (Shape{2, 6}));
  EXPECT_EQ(out.to_vector<float>(), in.to_vector<float>());
  EXPECT_EQ(layers::flatten(ops::placeholder(g, DType::Float32, Shape{5})).shape(), (Shape{5, 1}));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { layers::flatten(ops::placeholder(g, DType::Float32, Shape{2, -1, 3})); }),
              HasSubstr("every dimension but the first known"));
}

TEST(DropoutTest, OnlyWhenTraining) {
  Graph g;
  Output x = ops::fill(g, Shape{100, 100}, Tensor::scalar(1.0f));
  Output is_training = ops::placeholder(g, DType::Bool, Shape{}, "is_training");
  EXPECT_EQ(layers::dropout(x, 0.5), x) << "TF's default training=false: the inputs";
  Output fixed = layers::dropout(x, 0.25, true, 3);
  Output chosen = layers::dropout(x, 0.25, is_training, 3);
  Session s(g);
  auto check_dropped = [](const std::vector<float>& v) {
    int zeros = 0;
    for (float e : v) {
      if (e == 0) {
        ++zeros;
      } else {
        EXPECT_FLOAT_EQ(e, 1 / 0.75f);
      }
    }
    EXPECT_NEAR(zeros / 10000.0, 0.25, 0.03);
  };
  check_dropped(floats(s, fixed));
  check_dropped(floats(s, chosen, {{is_training, Tensor::scalar(true)}}));
  EXPECT_THAT(floats(s, chosen, {{is_training, Tensor::scalar(false)}}), ::testing::Each(1.0f));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dropout(x, 1.0, true); }),
              HasSubstr("rate must be in [0, 1), not 1"));
  Output int_flag = ops::placeholder(g, DType::Int32, Shape{});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::dropout(x, 0.5, int_flag); }),
              HasSubstr("must be a bool scalar"));
}

// Per-feature (last dim) mean and population variance of a rows x cols matrix.
std::pair<std::vector<double>, std::vector<double>> column_moments(const std::vector<float>& v, int rows, int cols) {
  std::vector<double> mean(cols, 0), var(cols, 0);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) mean[j] += v[i * cols + j] / rows;
  }
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) var[j] += (v[i * cols + j] - mean[j]) * (v[i * cols + j] - mean[j]) / rows;
  }
  return {mean, var};
}

TEST(BatchNormalizationTest, TrainingUsesTheBatchAndUpdatesTheMovingAverages) {
  Graph g;
  const std::vector<float> xs = {1, 10, 2, 20, 3, 60, 6, 30};  // 4 rows, 2 features
  Output x = matrix(g, xs, 4, 2);
  Output y = layers::batch_normalization(x, {.momentum = 0.9, .training = true});
  EXPECT_THAT(names_of(global_variables(g)),
              ElementsAre("batch_normalization/gamma", "batch_normalization/beta", "batch_normalization/moving_mean",
                          "batch_normalization/moving_variance"));
  EXPECT_THAT(names_of(trainable_variables(g)), ElementsAre("batch_normalization/gamma", "batch_normalization/beta"));
  std::vector<Operation> updates = layers::update_ops(g);
  ASSERT_EQ(updates.size(), 2u);
  auto [mean, var] = column_moments(xs, 4, 2);
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> got = floats(s, y);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_NEAR(got[i * 2 + j], (xs[i * 2 + j] - mean[j]) / std::sqrt(var[j] + 1e-3), 1e-4);
    }
  }
  s.run(ops::group(updates));
  std::vector<Variable> vars = global_variables(g);
  const std::vector<float> moving_mean = floats(s, vars[2]), moving_var = floats(s, vars[3]);
  for (int j = 0; j < 2; ++j) {
    EXPECT_NEAR(moving_mean[j], 0.1 * mean[j], 1e-4);
    EXPECT_NEAR(moving_var[j], 0.9 * 1 + 0.1 * var[j], 1e-3);
  }
}

TEST(BatchNormalizationTest, InferenceUsesTheMovingStatisticsAndAddsNoUpdates) {
  Graph g;
  Output x = matrix(g, {1, 10, 3, 30}, 2, 2);
  Output y = layers::batch_normalization(x, {.epsilon = 0.01,
                                             .beta_initializer = initializers::constant(1),
                                             .gamma_initializer = initializers::constant(2),
                                             .moving_mean_initializer = initializers::constant(2),
                                             .moving_variance_initializer = initializers::constant(4)});
  EXPECT_TRUE(layers::update_ops(g).empty());
  Session s(g);
  s.run(global_variables_initializer(g));
  const double d = std::sqrt(4.01);
  const std::vector<float> got = floats(s, y);
  const std::vector<double> want = {(1 - 2) / d * 2 + 1, (10 - 2) / d * 2 + 1, (3 - 2) / d * 2 + 1,
                                    (30 - 2) / d * 2 + 1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-4);
}

TEST(BatchNormalizationTest, ATrainingTensorChoosesPerRun) {
  Graph g;
  const std::vector<float> xs = {0, 4, 2, 8};  // 2 rows, 2 features: means 1 and 6, variances 1 and 4
  Output x = matrix(g, xs, 2, 2);
  Output is_training = ops::placeholder(g, DType::Bool, Shape{}, "is_training");
  Output y = layers::batch_normalization(x, {.momentum = 0.5, .center = false, .scale = false, .training = is_training});
  EXPECT_THAT(names_of(global_variables(g)),
              ElementsAre("batch_normalization/moving_mean", "batch_normalization/moving_variance"));
  std::vector<Operation> updates = layers::update_ops(g);
  Session s(g);
  s.run(global_variables_initializer(g));
  const FeedMap training{{is_training, Tensor::scalar(true)}}, inference{{is_training, Tensor::scalar(false)}};
  // Not training: moving mean 0 and variance 1, and the updates leave them so.
  std::vector<float> out = floats(s, y, inference);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], xs[i] / std::sqrt(1.001), 1e-5);
  s.run(ops::group(updates), inference);
  std::vector<Variable> vars = global_variables(g);
  EXPECT_THAT(floats(s, vars[0]), ElementsAre(0, 0));
  EXPECT_THAT(floats(s, vars[1]), ElementsAre(1, 1));
  // Training: the batch's statistics, and the updates move halfway to them.
  out = floats(s, y, training);
  EXPECT_NEAR(out[0], -1 / std::sqrt(1.001), 1e-5);
  EXPECT_NEAR(out[1], -2 / std::sqrt(4.001), 1e-5);
  s.run(ops::group(updates), training);
  EXPECT_THAT(floats(s, vars[0]), ElementsAre(0.5f, 3.0f));
  EXPECT_THAT(floats(s, vars[1]), ElementsAre(1.0f, 2.5f));
}

TEST(BatchNormalizationTest, AxisOneNormalizesPerChannelOfNCHW) {
  Graph g;
  // [N=2, C=2, H=1, W=2]; channel 0 holds 1, 3, 5, 7 and channel 1 holds 10, 10, 20, 20.
  const std::vector<float> xs = {1, 3, 10, 10, 5, 7, 20, 20};
  Output x = ops::constant(g, Tensor::from_vector<float>(xs, Shape{2, 2, 1, 2}));
  Output y = layers::batch_normalization(x, {.axis = 1, .epsilon = 1e-6, .training = true});
  EXPECT_EQ(global_variables(g)[0].shape(), (Shape{2}));
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> got = floats(s, y);
  const double c0 = std::sqrt(5.0), c1 = 5.0;  // channel 0: mean 4, variance 5; channel 1: mean 15, variance 25
  const std::vector<double> want = {-3 / c0, -1 / c0, -5 / c1, -5 / c1, 1 / c0, 3 / c0, 5 / c1, 5 / c1};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { layers::batch_normalization(x, {.axis = 4}); }),
              HasSubstr("axis 4 is out of range"));
}

TEST(LayersTest, AModelOfLayersTrainsWithItsUpdateOps) {
  // y = 3 x0 - 2 x1 + 1 through dense + batch norm + dense, trained with Adam after the moving
  // averages' updates (TF's UPDATE_OPS idiom); the loss falls and evaluation with the moving
  // statistics is close to the training output.
  Graph g;
  Output x = ops::random_uniform(g, Shape{64, 2}, DType::Float32, 11);
  Output target = ops::add(ops::matmul(x, ops::constant(g, Tensor::matrix<float>({3, -2}, 2, 1))),
                           ops::constant(g, 1.0f));
  Output is_training = ops::placeholder(g, DType::Bool, Shape{}, "is_training");
  Output h = layers::dense(x, 16, {.kernel_initializer = initializers::glorot_uniform(1)});
  h = ops::relu(layers::batch_normalization(h, {.momentum = 0.9, .training = is_training}));
  Output y = layers::dense(h, 1, {.kernel_initializer = initializers::glorot_uniform(2),
                                  .kernel_regularizer = layers::l2_regularizer(1e-4)});
  Output mse = ops::reduce_mean(ops::square(ops::sub(y, target)));
  Output loss = ops::add(mse, losses::get_regularization_loss(g));
  Operation train_op;
  {
    auto after = g.control_dependencies(layers::update_ops(g));
    train_op = train::AdamOptimizer(0.02f).minimize(loss);
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  const FeedMap training{{is_training, Tensor::scalar(true)}}, inference{{is_training, Tensor::scalar(false)}};
  const float initial = s.run(mse, training).scalar<float>();
  for (int i = 0; i < 400; ++i) s.run(train_op, training);
  const float trained = s.run(mse, training).scalar<float>();
  const float evaluated = s.run(mse, inference).scalar<float>();
  EXPECT_LT(trained, 0.05f * initial) << "initial " << initial;
  EXPECT_LT(evaluated, 0.1f * initial) << "trained " << trained;
  // The moving mean moved away from its zeros.
  std::vector<float> moving_mean = floats(s, global_variables(g)[4]);
  ASSERT_EQ(global_variables(g)[4].name(), "batch_normalization/moving_mean");
  EXPECT_GT(*std::max_element(moving_mean.begin(), moving_mean.end()), 0.01f);
}

TEST(LayersTest, ReplicaDeviceSetterPutsTheWeightsOnPs) {
  Graph g;
  train::ClusterSpec cluster({{"ps", {"localhost:1", "localhost:2"}}, {"worker", {"localhost:3"}}});
  Output y;
  {
    auto devices = g.device(train::replica_device_setter(cluster, "/job:worker/task:0"));
    Output x = ops::placeholder(g, DType::Float32, Shape{-1, 3});
    y = layers::dense(layers::dense(x, 4), 2);
  }
  std::vector<Variable> vars = global_variables(g);
  ASSERT_EQ(vars.size(), 4u);
  EXPECT_EQ(vars[0].op().device(), "/job:ps/task:0");
  EXPECT_EQ(vars[1].op().device(), "/job:ps/task:1");
  EXPECT_EQ(vars[2].op().device(), "/job:ps/task:0");
  EXPECT_EQ(y.op().device(), "/job:worker/task:0");
}

}  // namespace
}  // namespace tessera
