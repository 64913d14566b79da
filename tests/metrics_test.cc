// tessera::metrics with the cases of TensorFlow's metrics_test.py: MeanTest (testBasic,
// testUpdateOpsReturnsCurrentValue, weighted with 1-D and 2-D weights, all weights 0),
// AccuracyTest (testMultipleUpdates, testEffectivelyEquivalentSizes, incompatible shapes),
// Precision/RecallTest (testAllCorrect, testSomeCorrect, testWeighted1d, testAllIncorrect,
// testZeroTrueAndFalsePositivesGivesZeroPrecision), the error metrics, the variables' names and
// collections, a reset, and updates from several threads. Expected values are computed here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "tessera/metrics.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::names_of;

TEST(MetricsTest, MeanOverBatchesAndTheUpdatesReturnTheMeanSoFar) {
  Graph g;
  Output values = ops::placeholder(g, DType::Float32, Shape{1, 2});
  auto [mean, update] = metrics::mean(values);
  Session s(g);
  s.run(local_variables_initializer(g));
  EXPECT_EQ(s.run(mean).scalar<float>(), 0.0f) << "nothing counted yet";
  const std::vector<std::vector<float>> batches = {{0, 1}, {-4.2f, 9.1f}, {6.5f, 0}, {-3.2f, 4.0f}};
  const std::vector<double> want = {0.5, 5.9 / 4, 12.4 / 6, 13.2 / 8};
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const float got = s.run(update, {{values, Tensor::matrix<float>(batches[i], 1, 2)}}).scalar<float>();
    EXPECT_NEAR(got, want[i], 1e-5) << "batch " << i;
  }
  EXPECT_NEAR(s.run(mean).scalar<float>(), 1.65, 1e-5);
  // Reset: the local variables' initializers.
  s.run(local_variables_initializer(g));
  EXPECT_EQ(s.run(mean).scalar<float>(), 0.0f);
}

TEST(MetricsTest, WeightedMean) {
  Graph g;
  Output values = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2));
  // Weights [2, 1] by row: (1 + 2) * 1 ... row 0 weighs 1, row 1 0: (1 + 2) / 2.
  auto [by_row, by_row_update] = metrics::mean(values, ops::constant(g, Tensor::matrix<float>({1, 0}, 2, 1)));
  // 2-D weights, one per element: (1 * 0.5 + 2 * 0 + 3 * 1 + 4 * 2) / 3.5.
  auto [each, each_update] = metrics::mean(values, ops::constant(g, Tensor::matrix<float>({0.5f, 0, 1, 2}, 2, 2)));
  auto [none, none_update] = metrics::mean(values, ops::constant(g, Tensor::matrix<float>({0, 0, 0, 0}, 2, 2)));
  Session s(g);
  s.run(local_variables_initializer(g));
  EXPECT_FLOAT_EQ(s.run(by_row_update).scalar<float>(), 1.5f);
  EXPECT_FLOAT_EQ(s.run(each_update).scalar<float>(), 11.5f / 3.5f);
  EXPECT_EQ(s.run(none_update).scalar<float>(), 0.0f) << "all weights 0: 0, not NaN";
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                metrics::mean(values, ops::constant(g, Tensor::matrix<float>({1, 1, 1, 1, 1, 1}, 3, 2)));
              }),
              HasSubstr("metrics::mean"));
}

TEST(MetricsTest, AccuracyCastsPredictionsAndSqueezesATrailingDim) {
  Graph g;
  Output logits = ops::placeholder(g, DType::Float32, Shape{4, 3});
  Output labels = ops::placeholder(g, DType::Int32, Shape{4, 1});
  auto [acc, update] = metrics::accuracy(labels, ops::argmax(logits, 1));  // int64 against int32 [4, 1]
  Session s(g);
  s.run(local_variables_initializer(g));
  Tensor l1 = Tensor::matrix<float>({9, 0, 0, 0, 9, 0, 0, 0, 9, 9, 0, 0}, 4, 3);  // argmax 0 1 2 0
  EXPECT_FLOAT_EQ(s.run(update, {{logits, l1}, {labels, Tensor::matrix<int32_t>({0, 1, 2, 2}, 4, 1)}}).scalar<float>(),
                  0.75f);
  EXPECT_FLOAT_EQ(s.run(update, {{logits, l1}, {labels, Tensor::matrix<int32_t>({1, 1, 1, 1}, 4, 1)}}).scalar<float>(),
                  4.0f / 8);
  EXPECT_FLOAT_EQ(s.run(acc).scalar<float>(), 0.5f);
  // testEffectivelyEquivalentSizes: [40, 1] predictions against [40] labels.
  auto [same, same_update] = metrics::accuracy(ops::constant(g, Tensor::vector<float>(std::vector<float>(40, 1))),
                                               ops::constant(g, Tensor::matrix<float>(std::vector<float>(40, 1), 40, 1)));
  s.run(local_variables_initializer(g));
  EXPECT_EQ(s.run(same_update).scalar<float>(), 1.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                metrics::accuracy(ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4}, 2, 2)),
                                  ops::constant(g, Tensor::vector<int32_t>({1, 2, 3})));
              }),
              HasSubstr("metrics::accuracy: labels of shape [2,2] and predictions of shape [3] do not match"));
}

TEST(MetricsTest, PrecisionAndRecall) {
  Graph g;
  Session s(g);
  auto run_update = [&](const metrics::Metric& m) {
    s.run(local_variables_initializer(g));
    return s.run(m.second).scalar<float>();
  };
  Output predictions = ops::constant(g, Tensor::vector<int32_t>({1, 0, 1, 0}));
  Output labels = ops::constant(g, Tensor::vector<int32_t>({0, 1, 1, 0}));
  // testSomeCorrect: one true positive, one false positive, one false negative.
  EXPECT_FLOAT_EQ(run_update(metrics::precision(labels, predictions)), 0.5f);
  EXPECT_FLOAT_EQ(run_update(metrics::recall(labels, predictions)), 0.5f);
  EXPECT_EQ(run_update(metrics::true_positives(labels, predictions)), 1.0f);
  EXPECT_EQ(run_update(metrics::false_positives(labels, predictions)), 1.0f);
  EXPECT_EQ(run_update(metrics::false_negatives(labels, predictions)), 1.0f);
  // testAllCorrect and testAllIncorrect.
  EXPECT_EQ(run_update(metrics::precision(labels, labels)), 1.0f);
  EXPECT_EQ(run_update(metrics::recall(labels, ops::logical_not(ops::cast(labels, DType::Bool)))), 0.0f);
  // testWeighted1d: rows weighing 2 and 5; precision (2 + 5) / (2 + 2 + 5 + 5).
  Output p2 = ops::constant(g, Tensor::matrix<bool>({true, false, true, false, true, false, true, false}, 2, 4));
  Output l2 = ops::constant(g, Tensor::matrix<bool>({false, true, true, false, true, false, false, true}, 2, 4));
  Output w = ops::constant(g, Tensor::matrix<float>({2, 5}, 2, 1));
  EXPECT_FLOAT_EQ(run_update(metrics::precision(l2, p2, w)), 0.5f);
  EXPECT_FLOAT_EQ(run_update(metrics::recall(l2, p2, w)), 7.0f / 14);
  // testZeroTrueAndFalsePositivesGivesZeroPrecision.
  Output zeros = ops::constant(g, Tensor::vector<float>({0, 0, 0, 0}));
  EXPECT_EQ(run_update(metrics::precision(zeros, zeros)), 0.0f);
  EXPECT_EQ(run_update(metrics::recall(zeros, zeros)), 0.0f);
}

TEST(MetricsTest, ErrorMetrics) {
  Graph g;
  Output labels = ops::constant(g, Tensor::vector<int32_t>({2, 4, 6}));
  Output predictions = ops::constant(g, Tensor::vector<float>({4, 8, 3}));
  Session s(g);
  s.run(local_variables_initializer(g));
  auto mse = metrics::mean_squared_error(labels, predictions);
  auto mae = metrics::mean_absolute_error(labels, predictions);
  auto rmse = metrics::root_mean_squared_error(labels, predictions);
  s.run(local_variables_initializer(g));
  EXPECT_FLOAT_EQ(s.run(mse.second).scalar<float>(), (4.0f + 16 + 9) / 3);
  EXPECT_FLOAT_EQ(s.run(mae.second).scalar<float>(), (2.0f + 4 + 3) / 3);
  EXPECT_FLOAT_EQ(s.run(rmse.second).scalar<float>(), std::sqrt((4.0f + 16 + 9) / 3));
  EXPECT_FLOAT_EQ(s.run(rmse.first).scalar<float>(), std::sqrt((4.0f + 16 + 9) / 3));
}

TEST(MetricsTest, VariablesAreLocalNamedAndCollected) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({1, 2}));
  metrics::mean(x);
  metrics::accuracy(x, x);
  metrics::precision(x, x);
  EXPECT_THAT(names_of(metrics::metric_variables(g)),
              ElementsAre("mean/total", "mean/count", "accuracy/total", "accuracy/count",
                          "precision/true_positives/count", "precision/false_positives/count"));
  EXPECT_EQ(names_of(local_variables(g)), names_of(metrics::metric_variables(g)));
  EXPECT_TRUE(global_variables(g).empty()) << "not saved, not initialized by global_variables_initializer";
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { metrics::mean(Output()); }), HasSubstr("metrics::mean: values is null"));
}

// Each update is an assign_add per variable: several threads lose none of their counts.
TEST(MetricsTest, UpdatesFromSeveralThreadsLoseNothing) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({1, 3}));
  auto [mean, update] = metrics::mean(x);
  Session s(g);
  s.run(local_variables_initializer(g));
  constexpr int kThreads = 4, kUpdates = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kUpdates; ++i) s.run(update);
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<Variable> vars = metrics::metric_variables(g);
  EXPECT_EQ(s.run(vars[0].value()).scalar<float>(), 4.0f * kThreads * kUpdates);  // total
  EXPECT_EQ(s.run(vars[1].value()).scalar<float>(), 2.0f * kThreads * kUpdates);  // count
  EXPECT_EQ(s.run(mean).scalar<float>(), 2.0f);
}

}  // namespace
}  // namespace tessera
