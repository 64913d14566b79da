// tessera::losses with the cases of TensorFlow's losses_test.py (kernel_tests): AbsoluteDifference,
// SoftmaxCrossEntropy (label smoothing too), SparseSoftmaxCrossEntropy (int32/int64 and column
// labels, weights [batch, 1], shape errors), SigmoidCrossEntropy (label smoothing too), LogLoss,
// HingeLoss, HuberLoss, MeanSquaredError, MeanPairwiseSquaredError, CosineDistance, AddLoss and
// ComputeWeightedLoss (every Reduction, broadcast and invalid weights, zero weights), plus the
// collections, get_total_loss, and gradients through the losses. Expected values are TF's test
// literals, computed here by the definition, or printed by TensorFlow 2.21's tf.compat.v1.losses
// (said where).
#include "tessera/losses.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "host/graph_collection.h"
#include "tessera/gradients.h"
#include "tessera/ops.h"
#include "tessera/session.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using losses::LossOptions;
using losses::Reduction;
using testing::error_of;
using ::testing::HasSubstr;

Output f32(Graph& g, std::vector<float> v, Shape s) { return ops::constant(g, Tensor::from_vector<float>(v, s)); }
Output f64(Graph& g, std::vector<double> v, Shape s) { return ops::constant(g, Tensor::from_vector<double>(v, s)); }
Output i32(Graph& g, std::vector<int32_t> v, Shape s) { return ops::constant(g, Tensor::from_vector<int32_t>(v, s)); }
Output i64(Graph& g, std::vector<int64_t> v, Shape s) { return ops::constant(g, Tensor::from_vector<int64_t>(v, s)); }

float eval(Graph& g, Output x, const FeedMap& feeds = {}) {
  Session s(g);
  return s.run(x, feeds).scalar<float>();
}

std::vector<float> eval_vector(Graph& g, Output x, const FeedMap& feeds = {}) {
  Session s(g);
  return s.run(x, feeds).to_vector<float>();
}

LossOptions with_reduction(Reduction r) {
  LossOptions o;
  o.reduction = r;
  return o;
}

// ---- AbsoluteDifference ----

struct AbsoluteDifferenceTest : ::testing::Test {
  Graph g;
  Output predictions = i32(g, {4, 8, 12, 8, 1, 3}, Shape{2, 3});
  Output labels = i32(g, {1, 9, 2, -5, -2, 6}, Shape{2, 3});
};

TEST_F(AbsoluteDifferenceTest, TheCasesOfTF) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::absolute_difference(labels, predictions, Output()); }),
              HasSubstr("losses::absolute_difference: weights is null"));
  EXPECT_NEAR(eval(g, losses::absolute_difference(predictions, predictions)), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions)), 5.5, 1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions, 2.3)), 5.5 * 2.3, 1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions, ops::constant(g, 2.3f))), 5.5 * 2.3, 1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions, f32(g, {1.2f, 0.0f}, Shape{2, 1}))), 5.6, 1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions, i32(g, {3, 6, 5, 0, 4, 2}, Shape{2, 3}))), 16.6,
              1e-3);
  EXPECT_NEAR(eval(g, losses::absolute_difference(labels, predictions, i32(g, {0, 0, 0, 0, 0, 2}, Shape{2, 3}))), 6.0,
              1e-3);
  const Output all_zero = losses::absolute_difference(labels, predictions, f32(g, {0, 0, 0, 0, 0, 0}, Shape{2, 3}));
  EXPECT_EQ(eval(g, all_zero), 0.0f) << "every weight 0: 0, not NaN";
  EXPECT_EQ(all_zero.dtype(), DType::Float32) << "int32 labels and predictions are cast to float32";
}

TEST_F(AbsoluteDifferenceTest, MismatchedShapesAndUnbroadcastableWeightsAreInvalidArguments) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::absolute_difference(labels, i32(g, {1, 2}, Shape{2}));
              }),
              HasSubstr("losses::absolute_difference: predictions of shape [2] and labels of shape [2,3]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::absolute_difference(labels, predictions, f32(g, {1, 2, 3}, Shape{3, 1}));
              }),
              HasSubstr("weights can not be broadcast to values: mismatch at dim 0"));
}

// ---- SoftmaxCrossEntropy ----

struct SoftmaxCrossEntropyTest : ::testing::Test {
  Graph g;
  Output logits = f32(g, {10, 0, 0, 0, 10, 0, 0, 0, 10}, Shape{3, 3});
  Output correct = i32(g, {1, 0, 0, 0, 1, 0, 0, 0, 1}, Shape{3, 3});
  Output wrong = i32(g, {0, 0, 1, 1, 0, 0, 0, 1, 0}, Shape{3, 3});
};

TEST_F(SoftmaxCrossEntropyTest, TheCasesOfTF) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::softmax_cross_entropy(correct, logits, Output()); }),
              HasSubstr("weights is null"));
  const Output all_correct = losses::softmax_cross_entropy(correct, logits);
  EXPECT_EQ(all_correct.op().name(), "softmax_cross_entropy_loss/value");
  EXPECT_NEAR(eval(g, all_correct), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits)), 10.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits, 2.3)), 23.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits, ops::constant(g, 2.3f))), 23.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits, f32(g, {1.2f, 3.4f, 5.6f}, Shape{3}))),
              (1.2 + 3.4 + 5.6) * 10.0 / 3.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits, f32(g, {2.3f}, Shape{1}))), 23.0, 1e-3);
  EXPECT_EQ(eval(g, losses::softmax_cross_entropy(wrong, logits, i32(g, {0, 0, 0}, Shape{3}))), 0.0f);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(wrong, logits, f32(g, {1.2f, 0, 0}, Shape{3}))), 12.0, 1e-3);
  // Measurement-specific weights [3, 3] against the losses [3].
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::softmax_cross_entropy(correct, logits, i32(g, {3, 4, 5, 2, 6, 0, 8, 0, 1}, Shape{3, 3}));
              }),
              HasSubstr("losses::softmax_cross_entropy: weights can not be broadcast to values"));
}

TEST_F(SoftmaxCrossEntropyTest, LabelSmoothing) {
  // TF's testSoftmaxLabelSmoothing: log softmax [0, -200, -200], so the loss is 400 L / n.
  const Output loss = losses::softmax_cross_entropy(
      i32(g, {1, 0, 0}, Shape{1, 3}), f32(g, {100, -100, -100}, Shape{1, 3}), 1.0, /*label_smoothing=*/0.1);
  EXPECT_EQ(loss.op().name(), "softmax_cross_entropy_loss/value");
  EXPECT_NEAR(eval(g, loss), 400.0 * 0.1 / 3.0, 1e-3);
  // Printed by TensorFlow 2.21's tf.compat.v1.losses.softmax_cross_entropy(label_smoothing=0.2).
  Output lg = f32(g, {1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 2.0f}, Shape{2, 3});
  Output oh = f32(g, {0, 1, 0, 0, 0, 1}, Shape{2, 3});
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(oh, lg, 1.0, 0.2)), 0.56974334, 1e-5);
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(oh, lg, f32(g, {0.5f, 2.0f}, Shape{2}), 0.2)), 0.66621006, 1e-5);
  // The number of classes known only when the step runs.
  Output fed = ops::placeholder(g, DType::Float32, Shape{2, -1});
  EXPECT_NEAR(eval(g, losses::softmax_cross_entropy(fed, lg, 1.0, 0.2),
                   {{fed, Tensor::from_vector<float>({0, 1, 0, 0, 0, 1}, Shape{2, 3})}}),
              0.56974334, 1e-5);
}

TEST(SigmoidCrossEntropyTest, LabelSmoothingEqualsSoftmaxWithTwoLabels) {
  Graph g;
  const Output sigmoid =
      losses::sigmoid_cross_entropy(i32(g, {1, 0, 1}, Shape{1, 3}), f32(g, {100, -100, -100}, Shape{1, 3}), 1.0, 0.1);
  const Output softmax = losses::softmax_cross_entropy(i32(g, {0, 1, 1, 0, 0, 1}, Shape{3, 2}),
                                                       f32(g, {0, 100, 100, 0, 100, 0}, Shape{3, 2}), 1.0, 0.1);
  EXPECT_NEAR(eval(g, sigmoid), eval(g, softmax), 1e-3);
}

// ---- SparseSoftmaxCrossEntropy ----

struct SparseSoftmaxCrossEntropyTest : ::testing::Test {
  Graph g;
  Output logits = f32(g, {10, 0, 0, 0, 10, 0, 0, 0, 10}, Shape{3, 3});
  Output wrong = i32(g, {2, 0, 1}, Shape{3, 1});
};

TEST_F(SparseSoftmaxCrossEntropyTest, TheCasesOfTF) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::sparse_softmax_cross_entropy(wrong, logits, Output()); }),
              HasSubstr("weights is null"));
  const Output int32_column = losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 2}, Shape{3, 1}), logits);
  EXPECT_EQ(int32_column.op().name(), "sparse_softmax_cross_entropy_loss/value");
  EXPECT_NEAR(eval(g, int32_column), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(i64(g, {0, 1, 2}, Shape{3, 1}), logits)), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 2}, Shape{3}), logits)), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits)), 10.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(i64(g, {2, 0, 1}, Shape{3, 1}), logits)), 10.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(i32(g, {2, 0, 1}, Shape{3}), logits)), 10.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, 2.3)), 23.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, ops::constant(g, 2.3f))), 23.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, f32(g, {2.3f}, Shape{1}))), 23.0, 1e-3);
  const double weighted = (1.2 + 3.4 + 5.6) * 10.0 / 3.0;
  // Weights [batch, 1] lose their last dim, as TF squeezes them.
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, f32(g, {1.2f, 3.4f, 5.6f}, Shape{3, 1}))),
              weighted, 1e-3);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, f32(g, {1.2f, 3.4f, 5.6f}, Shape{3}))),
              weighted, 1e-3);
  EXPECT_EQ(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, i32(g, {0, 0, 0}, Shape{3, 1}))), 0.0f);
  EXPECT_NEAR(eval(g, losses::sparse_softmax_cross_entropy(wrong, logits, f32(g, {1.2f, 0, 0}, Shape{3, 1}))), 12.0,
              1e-3);
}

TEST_F(SparseSoftmaxCrossEntropyTest, PlaceholdersForLogitsLabelsAndWeights) {
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 3});
  Output y = ops::placeholder(g, DType::Int32, Shape{-1, 1});
  Output w = ops::placeholder(g, DType::Float32, Shape{-1, 1});
  const Output loss = losses::sparse_softmax_cross_entropy(y, x, w);
  EXPECT_NEAR(eval(g, loss,
                   {{x, Tensor::from_vector<float>({10, 0, 0, 0, 10, 0, 0, 0, 10}, Shape{3, 3})},
                    {y, Tensor::from_vector<int32_t>({2, 0, 1}, Shape{3, 1})},
                    {w, Tensor::from_vector<float>({1.2f, 3.4f, 5.6f}, Shape{3, 1})}}),
              (1.2 + 3.4 + 5.6) * 10.0 / 3.0, 1e-3);
}

TEST_F(SparseSoftmaxCrossEntropyTest, LabelsOfRankTwoAgainstLogitsOfRankThree) {
  // [2, 2] labels, [2, 2, 3] logits: the op's [batch] and [batch, classes] after flattening.
  Output x = f32(g, {10, 0, 0, 0, 10, 0, 0, 0, 10, 10, 0, 0}, Shape{2, 2, 3});
  const Output none =
      losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 0, 1}, Shape{2, 2}), x, 1.0, with_reduction(Reduction::none));
  EXPECT_EQ(none.shape(), (Shape{2, 2}));
  const std::vector<float> got = eval_vector(g, none);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NEAR(got[0], 0.0, 1e-3);
  EXPECT_NEAR(got[1], 0.0, 1e-3);
  EXPECT_NEAR(got[2], 10.0, 1e-3);
  EXPECT_NEAR(got[3], 10.0, 1e-3);
}

TEST_F(SparseSoftmaxCrossEntropyTest, InconsistentShapesAreInvalidArguments) {
  Output big = f32(g, {100, -100, -100, -100, 100, -100, -100, -100, 100}, Shape{3, 3});
  Output labels = i32(g, {0, 1, 2}, Shape{3, 1});
  // Measurement-specific weights: [3, 3] cannot lose a dim of 3.
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sparse_softmax_cross_entropy(labels, big, i32(g, {3, 4, 5, 2, 6, 0, 8, 0, 1}, Shape{3, 3}));
              }),
              HasSubstr("losses::sparse_softmax_cross_entropy: weights of shape [3,3]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sparse_softmax_cross_entropy(labels, big, f32(g, {1.2f, 3.4f, 5.6f, 7.8f}, Shape{4}));
              }),
              HasSubstr("weights can not be broadcast to values"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 2, 3}, Shape{4, 1}), big,
                                                     f32(g, {1.2f, 3.4f, 5.6f}, Shape{3}));
              }),
              HasSubstr("do not match"));
  Output four = f32(g, std::vector<float>(16, 1.0f), Shape{4, 4});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 2, 3}, Shape{4, 1}), four,
                                                     f32(g, {1.2f, 3.4f, 5.6f, 7.8f}, Shape{2, 2}));
              }),
              HasSubstr("weights of shape [2,2] have one dim more than the labels ([4]) and cannot lose it"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sparse_softmax_cross_entropy(i32(g, {0, 1, 2, 3}, Shape{2, 2}), four, 1.2);
              }),
              HasSubstr("one dimension more"));
}

// ---- SigmoidCrossEntropy ----

TEST(SigmoidCrossEntropyTest, TheCasesOfTF) {
  Graph g;
  Output logits = f32(g, {100, -100, -100, -100, 100, -100, -100, -100, 100}, Shape{3, 3});
  const Output correct = losses::sigmoid_cross_entropy(i32(g, {1, 0, 0, 0, 1, 0, 0, 0, 1}, Shape{3, 3}), logits);
  EXPECT_EQ(correct.op().name(), "sigmoid_cross_entropy_loss/value");
  EXPECT_NEAR(eval(g, correct), 0.0, 1e-3);
  Output wrong = i32(g, {0, 0, 1, 1, 0, 0, 0, 1, 0}, Shape{3, 3});
  EXPECT_NEAR(eval(g, losses::sigmoid_cross_entropy(wrong, logits)), 600.0 / 9.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::sigmoid_cross_entropy(wrong, logits, i32(g, {3, 4, 5, 2, 6, 0, 8, 0, 1}, Shape{3, 3}))),
              1700.0 / 7.0, 1e-3);
  Output multi_logits = f32(g, {100, -100, 100, 100, 100, -100, -100, 100, 100}, Shape{3, 3});
  EXPECT_NEAR(eval(g, losses::sigmoid_cross_entropy(i32(g, {1, 0, 1, 1, 1, 0, 0, 1, 1}, Shape{3, 3}), multi_logits)),
              0.0, 1e-3);
  // testSigmoidLabelSmoothingCorrect: (100 + 50 L) / 3.
  EXPECT_NEAR(eval(g, losses::sigmoid_cross_entropy(i32(g, {1, 0, 1}, Shape{1, 3}),
                                                    f32(g, {100, -100, -100}, Shape{1, 3}), 1.0, 0.1)),
              (100.0 + 50.0 * 0.1) / 3.0, 1e-3);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::sigmoid_cross_entropy(i32(g, {1, 0}, Shape{2}), logits);
              }),
              HasSubstr("losses::sigmoid_cross_entropy: logits of shape [3,3] and multi_class_labels of shape [2]"));
}

TEST(SigmoidCrossEntropyTest, PlaceholdersForLogitsAndWeights) {
  for (int64_t classes : {1, 2}) {
    Graph g;
    Output logits = ops::placeholder(g, DType::Float32, Shape{-1, classes});
    Output labels = ops::placeholder(g, DType::Float32, Shape{-1, classes});
    const Output loss = losses::sigmoid_cross_entropy(labels, logits, ops::ones_like(logits));
    const Tensor ones = Tensor::from_vector<float>(std::vector<float>(32 * classes, 1.0f), Shape{32, classes});
    EXPECT_NEAR(eval(g, loss, {{logits, ones}, {labels, ones}}), 0.313, 1e-3) << classes;
  }
}

TEST(SigmoidCrossEntropyTest, Float64LogitsGiveAFloat64Loss) {
  // As TF's (the loss is computed in float32 and cast back to the logits' dtype); its label
  // smoothing case printed 35.0 from TensorFlow 2.21 with float64 logits.
  Graph g;
  const Output loss =
      losses::sigmoid_cross_entropy(i32(g, {1, 0, 1}, Shape{1, 3}), f64(g, {100, -100, -100}, Shape{1, 3}), 1.0, 0.1);
  EXPECT_EQ(loss.dtype(), DType::Float64);
  EXPECT_EQ(loss.op().name(), "sigmoid_cross_entropy_loss/value");
  Session s(g);
  EXPECT_NEAR(s.run(loss).scalar<double>(), 35.0, 1e-3);
}

// ---- LogLoss ----

struct LogLossTest : ::testing::Test {
  const std::vector<double> p = {.9, .2, .2, .8, .4, .6};
  const std::vector<double> y = {1, 0, 1, 1, 0, 0};
  Graph g;
  Output predictions = f64(g, p, Shape{2, 3});
  Output labels = f64(g, y, Shape{2, 3});

  // TF's _expected_losses (negated: the losses themselves), times weights.
  double expected_sum(const std::vector<double>& w) const {
    double sum = 0;
    for (int i = 0; i < 6; ++i) {
      sum -= w[i] * (y[i] * std::log(p[i] + 1e-7) + (1 - y[i]) * std::log(1 - p[i] + 1e-7));
    }
    return sum;
  }
};

TEST_F(LogLossTest, TheCasesOfTF) {
  const std::vector<double> ones(6, 1.0);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::log_loss(labels, labels, Output()); }),
              HasSubstr("losses::log_loss: weights is null"));
  EXPECT_NEAR(eval(g, losses::log_loss(labels, labels)), 0.0, 1e-3);
  Output fed = ops::placeholder(g, DType::Float32, Shape{2, 3});
  EXPECT_NEAR(
      eval(g, losses::log_loss(labels, fed), {{fed, Tensor::from_vector<float>({1, 0, 1, 1, 0, 0}, Shape{2, 3})}}), 0.0,
      1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions)), expected_sum(ones) / 6, 1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, 2.3)), 2.3 * expected_sum(ones) / 6, 1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, ops::constant(g, 2.3f))), 2.3 * expected_sum(ones) / 6,
              1e-3);
  Output rank_only = ops::placeholder(g, DType::Float32, Shape{-1, -1});
  EXPECT_NEAR(eval(g, losses::log_loss(labels, rank_only, ops::constant(g, 2.3f)),
                   {{rank_only, Tensor::from_vector<float>({.9f, .2f, .2f, .8f, .4f, .6f}, Shape{2, 3})}}),
              2.3 * expected_sum(ones) / 6, 1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, f32(g, {1.2f, 3.4f}, Shape{2, 1}))),
              expected_sum({1.2, 1.2, 1.2, 3.4, 3.4, 3.4}) / 6, 1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, f32(g, {1.2f, 0}, Shape{2, 1}))),
              expected_sum({1.2, 1.2, 1.2, 0, 0, 0}) / 3, 1e-3);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::log_loss(labels, predictions, f32(g, std::vector<float>(8, 0.5f), Shape{2, 4}));
              }),
              HasSubstr("weights can not be broadcast to values"));
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, i32(g, {3, 6, 5, 0, 4, 2}, Shape{2, 3}))),
              expected_sum({3, 6, 5, 0, 4, 2}) / 5, 1e-3);
  EXPECT_NEAR(eval(g, losses::log_loss(labels, predictions, i32(g, {0, 0, 0, 0, 0, 2}, Shape{2, 3}))),
              expected_sum({0, 0, 0, 0, 0, 2}), 1e-3);
  EXPECT_EQ(eval(g, losses::log_loss(labels, predictions, f32(g, std::vector<float>(6, 0.0f), Shape{2, 3}))), 0.0f);
}

// ---- HingeLoss ----

TEST(HingeLossTest, TheCasesOfTF) {
  Graph g;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::hinge_loss(f32(g, {0, 1}, Shape{2}), f32(g, {-1.0f, 2.1f}, Shape{2, 1}));
              }),
              HasSubstr("losses::hinge_loss: logits of shape [2,1] and labels of shape [2]"));
  EXPECT_NEAR(eval(g, losses::hinge_loss(f32(g, {1, 0, 0, 1}, Shape{4}), f32(g, {1.2f, -1.4f, -1.0f, 2.1f}, Shape{4}))),
              0.0, 1e-3);
  // Examples 1 and 4 are on the right side but inside the margin.
  Output labels = f32(g, {0, 0, 1, 1}, Shape{4, 1});
  Output logits = f32(g, {-0.7f, -1.4f, 1.4f, 0.6f}, Shape{4, 1});
  EXPECT_NEAR(eval(g, losses::hinge_loss(labels, logits)), 0.175, 1e-3);
  // Printed by TensorFlow 2.21 with reduction NONE: [[0.3], [0], [0], [0.4]].
  const std::vector<float> none =
      eval_vector(g, losses::hinge_loss(labels, logits, 1.0, with_reduction(Reduction::none)));
  ASSERT_EQ(none.size(), 4u);
  EXPECT_NEAR(none[0], 0.3, 1e-6);
  EXPECT_NEAR(none[1], 0.0, 1e-6);
  EXPECT_NEAR(none[2], 0.0, 1e-6);
  EXPECT_NEAR(none[3], 0.4, 1e-6);
  // Examples 2 and 4 are misclassified.
  EXPECT_NEAR(eval(g, losses::hinge_loss(f32(g, {1, 0, 0, 1}, Shape{1, 4, 1}),
                                         f32(g, {1.2f, 0.4f, -1.0f, -1.1f}, Shape{1, 4, 1}))),
              0.875, 1e-3);
}

// ---- HuberLoss ----

struct HuberLossTest : ::testing::Test {
  const std::vector<float> y = {1.0f, 2.0f, -3.0f, 0.5f, -1.0f, 4.0f};
  const std::vector<float> p = {1.5f, 0.0f, -3.2f, 3.0f, -1.0f, 1.0f};
  Graph g;
  Output labels = f32(g, y, Shape{2, 3});
  Output predictions = f32(g, p, Shape{2, 3});

  double huber(int i, double delta) const {
    const double x = std::abs(p[i] - y[i]);
    return x <= delta ? 0.5 * x * x : 0.5 * delta * delta + delta * (x - delta);
  }
};

TEST_F(HuberLossTest, ByTheDefinitionAndAsTensorFlowPrintsIt) {
  double sum1 = 0, sum2 = 0;
  for (int i = 0; i < 6; ++i) {
    sum1 += huber(i, 1.0);
    sum2 += huber(i, 2.0);
  }
  // TensorFlow 2.21 printed 1.0241667, 1.5241667 and, with weights [[2], [0]], 1.0966667.
  EXPECT_NEAR(eval(g, losses::huber_loss(labels, predictions)), sum1 / 6, 1e-6);
  EXPECT_NEAR(eval(g, losses::huber_loss(labels, predictions)), 1.0241667, 1e-6);
  EXPECT_NEAR(eval(g, losses::huber_loss(labels, predictions, 1.0, 2.0)), 1.5241667, 1e-6);
  EXPECT_NEAR(eval(g, losses::huber_loss(labels, predictions, 1.0, 2.0)), sum2 / 6, 1e-6);
  EXPECT_NEAR(eval(g, losses::huber_loss(labels, predictions, f32(g, {2, 0}, Shape{2, 1}))), 1.0966667, 1e-6);
  const std::vector<float> none =
      eval_vector(g, losses::huber_loss(labels, predictions, 1.0, 0.5, with_reduction(Reduction::none)));
  ASSERT_EQ(none.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(none[i], huber(i, 0.5), 1e-6) << i;
  EXPECT_EQ(eval(g, losses::huber_loss(labels, labels)), 0.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::huber_loss(labels, f32(g, {1, 2, 3}, Shape{3, 1}));
              }),
              HasSubstr("losses::huber_loss: predictions of shape [3,1] and labels of shape [2,3]"));
}

// ---- MeanSquaredError ----

struct MeanSquaredErrorTest : ::testing::Test {
  Graph g;
  Output predictions = i32(g, {4, 8, 12, 8, 1, 3}, Shape{2, 3});
  Output labels = i32(g, {1, 9, 2, -5, -2, 6}, Shape{2, 3});
};

TEST_F(MeanSquaredErrorTest, TheCasesOfTF) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::mean_squared_error(predictions, predictions, Output()); }),
              HasSubstr("losses::mean_squared_error: weights is null"));
  EXPECT_EQ(eval(g, losses::mean_squared_error(ops::constant(g, 0), ops::constant(g, 0))), 0.0f);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(predictions, predictions)), 0.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions)), 49.5, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions, 2.3)), 49.5 * 2.3, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions, ops::constant(g, 2.3f))), 49.5 * 2.3, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions, f32(g, {1.2f, 3.4f}, Shape{2, 1}))), 767.8 / 6,
              1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions, i32(g, {3, 6, 5, 0, 4, 2}, Shape{2, 3}))),
              587 / 5.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_squared_error(labels, predictions, i32(g, {0, 0, 0, 0, 0, 2}, Shape{2, 3}))), 18.0,
              1e-3);
  EXPECT_EQ(eval(g, losses::mean_squared_error(labels, predictions, f32(g, std::vector<float>(6, 0), Shape{2, 3}))),
            0.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::mean_squared_error(labels, i32(g, {1, 2, 3}, Shape{3}));
              }),
              HasSubstr("losses::mean_squared_error: predictions of shape [3] and labels of shape [2,3]"));
}

// ---- MeanPairwiseSquaredError ----

struct MeanPairwiseSquaredErrorTest : ::testing::Test {
  Graph g;
  Output predictions = i32(g, {4, 8, 12, 8, 1, 3}, Shape{2, 3});
  Output labels = i32(g, {1, 9, 2, -5, -5, 7}, Shape{2, 3});
  const std::vector<int32_t> labels3 = {1, 9, 2, 12, 11, 10, 9, 8, 7, -5, -5, 7, 6, 5, 4, 3, 2, 1};
  const std::vector<int32_t> predictions3 = {4, 8, 12, 1, 2, 3, 4, 5, 6, 8, 1, 3, 7, 8, 9, 10, 11, 12};
};

TEST_F(MeanPairwiseSquaredErrorTest, ValuesAsTensorFlowPrintsThem) {
  // By the definition: for each example, sum over i, j of ((p_i - p_j) - (l_i - l_j))^2 / (n (n - 1))
  // (TF 1.15's term1 - term2); the TF 2.21 printouts agree: 208, 478.4, 74.4, 228, 137.5, 1237.5.
  double want = 0;
  const std::vector<int> p = {4, 8, 12, 8, 1, 3}, l = {1, 9, 2, -5, -5, 7};
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        const double d = (p[b * 3 + i] - p[b * 3 + j]) - (l[b * 3 + i] - l[b * 3 + j]);
        want += d * d / 6;
      }
    }
  }
  EXPECT_NEAR(want, 208.0, 1e-9);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::mean_pairwise_squared_error(labels, labels, Output()); }),
              HasSubstr("weights is null"));
  const Output loss = losses::mean_pairwise_squared_error(labels, predictions);
  EXPECT_EQ(loss.op().name(), "mean_pairwise_squared_error/value");
  EXPECT_EQ(eval(g, losses::mean_pairwise_squared_error(labels, labels)), 0.0f);
  EXPECT_NEAR(eval(g, loss), 208.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(labels, predictions, 2.3)), 478.39996, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(labels, predictions, ops::constant(g, 2.3f))), 478.39996,
              1e-3);
  EXPECT_EQ(eval(g, losses::mean_pairwise_squared_error(labels, predictions, 0.0)), 0.0f);
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(labels, predictions, f32(g, {1.2f, 0}, Shape{2, 1}))), 74.4,
              1e-3);
  // One present element in example 2: its term1 and term2 divide by 0 and give 0.
  EXPECT_NEAR(
      eval(g, losses::mean_pairwise_squared_error(labels, predictions, f32(g, {1, 0, 2, 0, 0, 3}, Shape{2, 3}))), 228.0,
      1e-3);
  EXPECT_EQ(eval(g, losses::mean_pairwise_squared_error(labels, predictions, f32(g, {0, 0}, Shape{2, 1}))), 0.0f);
}

TEST_F(MeanPairwiseSquaredErrorTest, ThreeDimensionsAndFedInputs) {
  Output l3 = i32(g, labels3, Shape{2, 3, 3});
  Output p3 = i32(g, predictions3, Shape{2, 3, 3});
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(l3, p3)), 137.5, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(l3, p3, 3.0)), 3 * 137.5, 1e-3);
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(l3, p3, f32(g, std::vector<float>(18, 1), Shape{2, 3, 3}))),
              1237.5, 1e-2);
  // Placeholders of the shapes (TF's dynamic inputs).
  Output lp = ops::placeholder(g, DType::Int32, Shape{2, 3, 3});
  Output pp = ops::placeholder(g, DType::Float32, Shape{2, 3, 3});
  Output wp = ops::placeholder(g, DType::Float32, Shape{});
  std::vector<float> pf(predictions3.begin(), predictions3.end());
  EXPECT_NEAR(eval(g, losses::mean_pairwise_squared_error(lp, pp, wp),
                   {{lp, Tensor::from_vector<int32_t>(labels3, Shape{2, 3, 3})},
                    {pp, Tensor::from_vector<float>(pf, Shape{2, 3, 3})},
                    {wp, Tensor::scalar(3.0f)}}),
              3 * 137.5, 1e-3);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::mean_pairwise_squared_error(l3, p3, f32(g, {1.2f, 3.4f}, Shape{2}));
              }),
              HasSubstr("weights can not be broadcast to values"));
}

TEST_F(MeanPairwiseSquaredErrorTest, IsAssociativeAcrossBatchElementsAndHasNoReduction) {
  Output l0 = f32(g, {0.1f, 0.5f, 0.9f, 0.3f}, Shape{1, 2, 2, 1});
  Output p0 = f32(g, {0.4f, 0.2f, 0.7f, 0.8f}, Shape{1, 2, 2, 1});
  Output l1 = f32(g, {0.6f, 0.2f, 0.1f, 0.0f}, Shape{1, 2, 2, 1});
  Output p1 = f32(g, {0.3f, 0.9f, 0.5f, 0.2f}, Shape{1, 2, 2, 1});
  const float a = eval(g, losses::mean_pairwise_squared_error(l0, p0));
  const float b = eval(g, losses::mean_pairwise_squared_error(l1, p1));
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_NEAR(a + b, eval(g, losses::mean_pairwise_squared_error(ops::concat({l0, l1}, 0), ops::concat({p0, p1}, 0))),
              1e-5);
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { losses::mean_pairwise_squared_error(l0, p0, 1.0, with_reduction(Reduction::mean)); }),
              HasSubstr("losses::mean_pairwise_squared_error: has no reduction"));
}

TEST_F(MeanPairwiseSquaredErrorTest, GradientWithZeroWeightIsFinite) {
  Variable w(g,
             Tensor::from_vector<float>({0.3f, -0.2f, 0.5f, 1.1f, 0.7f, -0.4f, 0.2f, 0.9f, -1.3f, 0.6f, 0.1f, 0.8f},
                                        Shape{3, 4}),
             "weights");
  Output predictions2 =
      ops::matmul(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(6, 1), Shape{2, 3})), w.value());
  const Output loss = losses::mean_pairwise_squared_error(predictions2, predictions2, 0.0);
  Output grad = gradients({loss}, {w.value()})[0];
  Session s(g);
  s.run(global_variables_initializer(g));
  for (float v : s.run(grad).to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

// ---- CosineDistance ----

struct CosineDistanceTest : ::testing::Test {
  Graph g;
  Output predictions = i32(g, {1, 0, 0, 0, 0, -1, 1, 0, 0, 1, 0, 0, 0, 0, -1, 1, 0, 0}, Shape{3, 2, 3});
  Output labels = i32(g, {1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0}, Shape{3, 2, 3});
};

TEST_F(CosineDistanceTest, TheCasesOfTF) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::cosine_distance(labels, labels, 2, Output()); }),
              HasSubstr("losses::cosine_distance: weights is null"));
  EXPECT_NEAR(eval(g, losses::cosine_distance(labels, labels, 2)), 0.0, 1e-5);
  EXPECT_NEAR(eval(g, losses::cosine_distance(labels, predictions, 2)), 1.0, 1e-5);
  EXPECT_NEAR(eval(g, losses::cosine_distance(labels, predictions, -1)), 1.0, 1e-5);
  Output fp = f32(g,
                  {0.819031913261206f, 0.567041924552012f, 0.087465312324590f, -0.665139432070255f, -0.739487441769973f,
                   -0.103671883216994f, 0.707106781186548f, -0.707106781186548f, 0},
                  Shape{3, 1, 3});
  Output fl = f32(g,
                  {0.819031913261206f, 0.567041924552012f, 0.087465312324590f, 0.665139432070255f, 0.739487441769973f,
                   0.103671883216994f, 0.707106781186548f, 0.707106781186548f, 0},
                  Shape{3, 1, 3});
  EXPECT_NEAR(eval(g, losses::cosine_distance(fl, fp, 2)), 1.0, 1e-5);
  EXPECT_EQ(eval(g, losses::cosine_distance(labels, predictions, 2, i32(g, {1, 0, 0}, Shape{3, 1, 1}))), 1.0f);
  EXPECT_EQ(eval(g, losses::cosine_distance(labels, predictions, 2, i32(g, {1, 0, 0, 1, 1, 1}, Shape{3, 2, 1}))),
            3.0f / 4.0f);
  Output fed = ops::placeholder(g, DType::Float32, Shape{3, 2, 3});
  EXPECT_EQ(eval(g, losses::cosine_distance(labels, fed, 2, i32(g, {1, 0, 0, 1, 1, 1}, Shape{3, 2, 1})),
                 {{fed, Tensor::from_vector<float>({1, 0, 0, 0, 0, -1, 1, 0, 0, 1, 0, 0, 0, 0, -1, 1, 0, 0},
                                                   Shape{3, 2, 3})}}),
            3.0f / 4.0f);
  EXPECT_EQ(eval(g, losses::cosine_distance(labels, predictions, 2, f32(g, {0, 0, 0}, Shape{3, 1, 1}))), 0.0f);
  EXPECT_EQ(eval(g, losses::cosine_distance(labels, predictions, 2, f32(g, std::vector<float>(6, 0), Shape{3, 2, 1}))),
            0.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::cosine_distance(labels, predictions, 3); }),
              HasSubstr("losses::cosine_distance: axis 3"));
}

// ---- compute_weighted_loss ----

struct ComputeWeightedLossTest : ::testing::Test {
  // TF's raw losses: 0, 1, ..., 23 in shape [3, 2, 4].
  std::vector<float> raw;
  ComputeWeightedLossTest() {
    for (int i = 0; i < 24; ++i) raw.push_back(static_cast<float>(i));
  }

  // The weights of `wshape` ([] or rank 3) broadcast to [3, 2, 4].
  static std::vector<double> broadcast(const std::vector<float>& w, const std::vector<int64_t>& wshape) {
    std::vector<double> out;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) {
        for (int k = 0; k < 4; ++k) {
          if (wshape.empty()) {
            out.push_back(w[0]);
            continue;
          }
          const int64_t a = wshape[0] == 1 ? 0 : i, b = wshape[1] == 1 ? 0 : j, c = wshape[2] == 1 ? 0 : k;
          out.push_back(w[static_cast<std::size_t>((a * wshape[1] + b) * wshape[2] + c)]);
        }
      }
    }
    return out;
  }

  // The reduction of raw * weights, by the definition.
  double expected(Reduction r, const std::vector<double>& w) const {
    double sum = 0, weight_sum = 0, nonzero = 0;
    for (int i = 0; i < 24; ++i) {
      sum += raw[i] * w[i];
      weight_sum += w[i];
      nonzero += w[i] != 0 ? 1 : 0;
    }
    switch (r) {
      case Reduction::sum:
        return sum;
      case Reduction::mean:
        return weight_sum == 0 ? 0 : sum / weight_sum;
      case Reduction::sum_over_batch_size:
        return sum / 24;
      case Reduction::sum_by_nonzero_weights:
        return nonzero == 0 ? 0 : sum / nonzero;
      case Reduction::none:
        break;
    }
    return NAN;
  }

  void expect_valid(const std::vector<float>& w, const std::vector<int64_t>& wshape) {
    const std::vector<double> bw = broadcast(w, wshape);
    for (Reduction r : {Reduction::none, Reduction::sum, Reduction::sum_over_batch_size, Reduction::mean,
                        Reduction::sum_by_nonzero_weights}) {
      Graph g;
      Output losses = f32(g, raw, Shape{3, 2, 4});
      const Output weights = f32(g, w, Shape(wshape));
      const Output loss = losses::compute_weighted_loss(losses, weights, with_reduction(r));
      EXPECT_EQ(losses::get_losses(g).size(), 1u);
      if (r == Reduction::none) {
        EXPECT_EQ(loss.shape(), (Shape{3, 2, 4}));
        const std::vector<float> got = eval_vector(g, loss);
        ASSERT_EQ(got.size(), 24u);
        for (int i = 0; i < 24; ++i) EXPECT_NEAR(got[i], raw[i] * bw[i], 1e-4) << i;
        continue;
      }
      EXPECT_EQ(loss.shape(), Shape{});
      EXPECT_NEAR(eval(g, loss), expected(r, bw), 1e-3 * std::max(1.0, std::abs(expected(r, bw))))
          << "reduction " << static_cast<int>(r) << ", weights " << Shape(wshape).to_string();
    }
  }

  void expect_invalid(const std::vector<float>& w, const std::vector<int64_t>& wshape) {
    Graph g;
    Output losses = f32(g, raw, Shape{3, 2, 4});
    EXPECT_THAT(
        error_of<InvalidArgumentError>([&] { losses::compute_weighted_loss(losses, f32(g, w, Shape(wshape))); }),
        HasSubstr("losses::compute_weighted_loss: weights can not be broadcast to values"))
        << Shape(wshape).to_string();
    EXPECT_TRUE(losses::get_losses(g).empty());
  }
};

TEST_F(ComputeWeightedLossTest, UnweightedForEveryReduction) {
  double sum = 0;
  for (float v : raw) sum += v;
  for (Reduction r :
       {Reduction::sum, Reduction::sum_over_batch_size, Reduction::mean, Reduction::sum_by_nonzero_weights}) {
    Graph g;
    Output losses = f32(g, raw, Shape{3, 2, 4});
    std::vector<Output> all = {losses::compute_weighted_loss(losses, 1.0, with_reduction(r))};
    for (const Shape& s : {Shape{1, 1, 1}, Shape{1, 1, 4}, Shape{1, 2, 1}, Shape{1, 2, 4}, Shape{3, 1, 1},
                           Shape{3, 1, 4}, Shape{3, 2, 1}, Shape{3, 2, 4}}) {
      all.push_back(losses::compute_weighted_loss(
          losses, f32(g, std::vector<float>(static_cast<std::size_t>(s.num_elements()), 1.0f), s), with_reduction(r)));
    }
    EXPECT_EQ(losses::get_losses(g).size(), 9u);
    for (const Output& loss : all) EXPECT_NEAR(eval(g, loss), r == Reduction::sum ? sum : sum / 24, 1e-3);
  }
}

TEST_F(ComputeWeightedLossTest, ScalarWeight) {
  Graph g;
  const Output loss = losses::compute_weighted_loss(f32(g, raw, Shape{3, 2, 4}), 17.0);
  EXPECT_EQ(loss.op().name(), "weighted_loss/value");
  EXPECT_NEAR(eval(g, loss), 17.0 * 11.5, 1e-3);
  for (Reduction r :
       {Reduction::sum, Reduction::sum_over_batch_size, Reduction::mean, Reduction::sum_by_nonzero_weights}) {
    Graph g2;
    const Output zero = losses::compute_weighted_loss(f32(g2, raw, Shape{3, 2, 4}), 0.0, with_reduction(r));
    EXPECT_EQ(eval(g2, zero), 0.0f) << "weight 0, reduction " << static_cast<int>(r) << ": 0, not NaN";
  }
}

TEST_F(ComputeWeightedLossTest, ValidWeights) {
  expect_valid({17}, {});
  expect_valid({17}, {1, 1, 1});
  expect_valid({17, 3}, {1, 2, 1});
  expect_valid({17, 0, 2, 5}, {1, 1, 4});
  expect_valid({17, 5, 2}, {3, 1, 1});
  expect_valid({17, 3, 5, 31, 2, 7}, {3, 2, 1});
  expect_valid({17, 0, 2, 5, 5, 31, 17, 5, 7, 3, 11, 5}, {3, 1, 4});
  expect_valid({17, 0, 2, 5, 3, 13, 11, 2}, {1, 2, 4});
  expect_valid({17, 0, 2, 5, 3, 13, 11, 2, 5, 31, 17, 5, 13, 3, 0, 11, 0, 3, 11, 5, 13, 11, 1, 7}, {3, 2, 4});
  expect_valid({0, 0, 0}, {3, 1, 1});  // every weight 0: 0 for the mean reductions, not NaN
}

TEST_F(ComputeWeightedLossTest, InvalidWeights) {
  expect_invalid(std::vector<float>(16, 0), {2, 2, 2, 2});
  expect_invalid({17, 5, 2}, {3});
  expect_invalid({17, 5, 2}, {3, 1});
  expect_invalid({17, 3, 5, 31, 2, 7}, {3, 2});
  expect_invalid({17, 3}, {2});
  expect_invalid({17}, {1});
  Graph g;
  Output losses = ops::reshape(f32(g, raw, Shape{3, 2, 4}), {3, 2, 4, 1});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                losses::compute_weighted_loss(losses, f32(g, std::vector<float>(48, 1), Shape{3, 2, 4, 2}));
              }),
              HasSubstr("mismatch at dim 3"));
}

TEST_F(ComputeWeightedLossTest, WeightsOfUnknownShapeThatGrowTheLossesFailTheRun) {
  Graph g;
  Output losses = ops::reshape(f32(g, raw, Shape{3, 2, 4}), {3, 2, 4, 1});
  Output w = ops::placeholder(g, DType::Float32);
  const Output loss = losses::compute_weighted_loss(losses, w);
  EXPECT_EQ(losses::get_losses(g).size(), 1u);
  Session s(g);
  EXPECT_THROW(s.run(loss, {{w, Tensor::from_vector<float>(std::vector<float>(48, 1), Shape{3, 2, 4, 2})}}),
               InvalidArgumentError);
  EXPECT_NEAR(s.run(loss, {{w, Tensor::from_vector<float>({1, 0, 1}, Shape{3, 1, 1, 1})}}).scalar<float>(),
              (28.0 + 156.0) / 16, 1e-3);  // examples 0 and 2: 0 + .. + 7 and 16 + .. + 23
  EXPECT_NEAR(s.run(loss, {{w, Tensor::scalar(2.0f)}}).scalar<float>(), 23.0, 1e-3);
}

TEST_F(ComputeWeightedLossTest, KeepsTheLossesDtypeAndScope) {
  Graph g;
  LossOptions o;
  o.scope = "mine";
  o.reduction = Reduction::sum;
  const Output loss = losses::compute_weighted_loss(f64(g, {1.5, 2.5}, Shape{2}), 2.0, o);
  EXPECT_EQ(loss.dtype(), DType::Float64);
  EXPECT_EQ(loss.op().name(), "mine/value");
  Session s(g);
  EXPECT_DOUBLE_EQ(s.run(loss).scalar<double>(), 8.0);
  const Output ints = losses::compute_weighted_loss(i32(g, {1, 2, 3}, Shape{3}), 1.0, with_reduction(Reduction::sum));
  EXPECT_EQ(ints.dtype(), DType::Int32);
  EXPECT_EQ(s.run(ints).scalar<int32_t>(), 6);
}

// ---- collections and the total loss ----

TEST(AddLossTest, NoCollectLossesAndTheCollections) {
  Graph g;
  Output logits = f32(g, {1.2f, 0.4f, -1.0f, -1.1f, 1.2f, 0.4f, -1.0f, -1.1f}, Shape{2, 4});
  Output labels = f32(g, {1, 0, 0, 1, 1, 0, 0, 1}, Shape{2, 4});
  LossOptions none;
  none.add_to_collection = false;
  losses::absolute_difference(logits, labels, 1.0, none);
  losses::log_loss(logits, labels, 1.0, 1e-7, none);
  losses::mean_squared_error(logits, labels, 1.0, none);
  losses::sigmoid_cross_entropy(logits, labels, 1.0, 0, none);
  losses::softmax_cross_entropy(logits, labels, 1.0, 0, none);
  losses::hinge_loss(labels, logits, 1.0, none);
  losses::huber_loss(labels, logits, 1.0, 1.0, none);
  losses::cosine_distance(labels, logits, 1, 1.0, none);
  losses::mean_pairwise_squared_error(labels, logits, 1.0, none);
  losses::sparse_softmax_cross_entropy(i32(g, {0, 3}, Shape{2}), logits, 1.0, none);
  losses::compute_weighted_loss(logits, 1.0, none);
  EXPECT_TRUE(losses::get_losses(g).empty());

  const Output a = losses::mean_squared_error(labels, logits);
  const Output b = losses::hinge_loss(labels, logits);
  const Output c = ops::constant(g, 0.25f);
  losses::add_loss(c);
  EXPECT_EQ(losses::get_losses(g), (std::vector<Output>{a, b, c}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::add_loss(Output()); }),
              HasSubstr("losses::add_loss: loss is null"));
}

TEST(TotalLossTest, SumsTheLossesAndTheRegularizationLosses) {
  Graph g;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::get_total_loss(g); }),
              HasSubstr("losses::get_total_loss: no losses are found"));
  const Output zero = losses::get_regularization_loss(g);
  EXPECT_EQ(zero.dtype(), DType::Float32);
  EXPECT_EQ(zero.op().name(), "total_regularization_loss");
  EXPECT_EQ(eval(g, zero), 0.0f);

  Output labels = i32(g, {4, 8, 12, 8, 1, 3}, Shape{2, 3});
  Output predictions = i32(g, {1, 9, 2, -5, -2, 6}, Shape{2, 3});
  losses::mean_squared_error(labels, predictions);   // 49.5
  losses::absolute_difference(labels, predictions);  // 5.5
  // A regularizer's penalty, as the layers add them.
  internal::add_to_collection<Output>(g, internal::kRegularizationLossesCollection, ops::constant(g, 0.5f));
  internal::add_to_collection<Output>(g, internal::kRegularizationLossesCollection, ops::constant(g, 1.5f));
  EXPECT_EQ(losses::get_regularization_losses(g).size(), 2u);
  const Output reg = losses::get_regularization_loss(g);
  EXPECT_EQ(reg.op().name(), "total_regularization_loss_1");
  EXPECT_EQ(eval(g, reg), 2.0f);
  const Output total = losses::get_total_loss(g);
  EXPECT_EQ(total.op().name(), "total_loss");
  EXPECT_NEAR(eval(g, total), 57.0, 1e-3);
  EXPECT_NEAR(eval(g, losses::get_total_loss(g, false, "data_loss")), 55.0, 1e-3);

  Graph only_penalties;
  internal::add_to_collection<Output>(only_penalties, internal::kRegularizationLossesCollection,
                                      ops::constant(only_penalties, 3.0f));
  EXPECT_EQ(eval(only_penalties, losses::get_total_loss(only_penalties)), 3.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::get_total_loss(only_penalties, false); }),
              HasSubstr("no losses are found"));
  // An unreduced loss cannot be added to the scalar ones.
  losses::mean_squared_error(f32(only_penalties, {1, 2}, Shape{2}), f32(only_penalties, {1, 3}, Shape{2}), 1.0,
                             with_reduction(Reduction::none));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { losses::get_total_loss(only_penalties); }),
              HasSubstr("losses::get_total_loss: the losses cannot be added"));
}

// ---- gradients ----

// d loss / d x at x0 by central differences, loss built by `make` from a constant x.
std::vector<double> numeric_gradient(const std::function<Output(Graph&, Output)>& make, const std::vector<float>& x0,
                                     const Shape& shape) {
  std::vector<double> out;
  const float h = 1e-2f;
  for (std::size_t i = 0; i < x0.size(); ++i) {
    double f[2];
    for (int side = 0; side < 2; ++side) {
      std::vector<float> x = x0;
      x[i] += side == 0 ? h : -h;
      Graph g;
      f[side] = eval(g, make(g, f32(g, x, shape)));
    }
    out.push_back((f[0] - f[1]) / (2 * h));
  }
  return out;
}

// The analytic gradient (through tessera::gradients, with respect to a variable) against the
// numeric one.
void expect_gradient(const std::function<Output(Graph&, Output)>& make, const std::vector<float>& x0,
                     const Shape& shape, double tolerance) {
  Graph g;
  Variable x(g, Tensor::from_vector<float>(x0, shape), "x");
  const Output loss = make(g, x.value());
  const Output grad = gradients({loss}, {x.value()})[0];
  ASSERT_FALSE(grad.is_null());
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> got = s.run(grad).to_vector<float>();
  const std::vector<double> want = numeric_gradient(make, x0, shape);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << "element " << i;
}

TEST(LossGradientTest, MeanSquaredErrorAnalytically) {
  // d/dp mean((p - l)^2 w) over nonzero weights = 2 (p - l) w / count.
  Graph g;
  Variable p(g, Tensor::from_vector<float>({4, 8, 12, 8, 1, 3}, Shape{2, 3}), "p");
  const std::vector<float> l = {1, 9, 2, -5, -2, 6};
  const Output loss = losses::mean_squared_error(f32(g, l, Shape{2, 3}), p, f32(g, {1.2f, 0}, Shape{2, 1}));
  const Output grad = gradients({loss}, {p.value()})[0];
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> got = s.run(grad).to_vector<float>();
  const std::vector<float> p0 = {4, 8, 12, 8, 1, 3};
  for (int i = 0; i < 6; ++i) {
    const double w = i < 3 ? 1.2 : 0.0;
    EXPECT_NEAR(got[i], 2 * (p0[i] - l[i]) * w / 3, 1e-4) << i;
  }
}

TEST(LossGradientTest, MeanSquaredErrorNumerically) {
  expect_gradient(
      [](Graph& g, Output x) {
        return losses::mean_squared_error(f32(g, {0.5f, -1.0f, 2.0f, 0.0f}, Shape{2, 2}), x,
                                          f32(g, {1.0f, 0.5f}, Shape{1, 2}));
      },
      {1.0f, 0.2f, -0.7f, 0.3f}, Shape{2, 2}, 2e-3);
}

TEST(LossGradientTest, HuberLossNumericallyOnBothSidesOfDelta) {
  // Errors 0.5 (quadratic) and 2.5, -1.5 (linear) and 0.2.
  expect_gradient(
      [](Graph& g, Output x) {
        return losses::huber_loss(f32(g, {0, 0, 0, 0}, Shape{4}), x, f32(g, {1, 2, 0.5f, 3}, Shape{4}), 1.0);
      },
      {0.5f, 2.5f, -1.5f, 0.2f}, Shape{4}, 2e-3);
}

TEST(LossGradientTest, SoftmaxCrossEntropyWithLabelSmoothing) {
  const std::vector<float> lg = {1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 2.0f};
  auto make = [](Graph& g, Output x) {
    return losses::softmax_cross_entropy(f32(g, {0, 1, 0, 0, 0, 1}, Shape{2, 3}), x, 1.0, 0.2);
  };
  expect_gradient(make, lg, Shape{2, 3}, 2e-3);
  // Printed by TensorFlow 2.21: tf.gradients of the smoothed loss with respect to the logits.
  const std::vector<float> tf = {0.08227861f, -0.11906749f, 0.03678885f, 0.0290204f, -0.01257758f, -0.01644284f};
  Graph g;
  Variable x(g, Tensor::from_vector<float>(lg, Shape{2, 3}), "x");
  const Output grad = gradients({make(g, x.value())}, {x.value()})[0];
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> got = s.run(grad).to_vector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], tf[i], 1e-6) << i;
}

TEST(LossGradientTest, TheOtherLossesAreDifferentiable) {
  const std::vector<float> x0 = {0.3f, 0.6f, 0.2f, 0.9f};
  const Shape s{2, 2};
  auto labels = [](Graph& g) { return f32(g, {1, 0, 0, 1}, Shape{2, 2}); };
  expect_gradient([&](Graph& g, Output x) { return losses::log_loss(labels(g), x); }, x0, s, 2e-3);
  expect_gradient([&](Graph& g, Output x) { return losses::sigmoid_cross_entropy(labels(g), x, 1.0, 0.1); }, x0, s,
                  2e-3);
  expect_gradient([&](Graph& g, Output x) { return losses::hinge_loss(labels(g), x); }, x0, s, 2e-3);
  expect_gradient([&](Graph& g, Output x) { return losses::absolute_difference(labels(g), x); }, x0, s, 2e-3);
  expect_gradient([&](Graph& g, Output x) { return losses::cosine_distance(labels(g), x, 1); }, x0, s, 2e-3);
  expect_gradient(
      [&](Graph& g, Output x) {
        return losses::sparse_softmax_cross_entropy(i32(g, {1, 0}, Shape{2}), x);
      },
      x0, s, 2e-3);
  expect_gradient([&](Graph& g, Output x) { return losses::mean_pairwise_squared_error(labels(g), x); }, x0, s, 2e-3);
}

}  // namespace
}  // namespace tessera
