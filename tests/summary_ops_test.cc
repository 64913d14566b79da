// The summary ops (include/tessera/summary.h): what they serialize, checked by parsing their
// output with TensorBoard's messages (core/summary.proto), and their errors. Cases after TF1's
// summary_ops_test.py and histogram tests: scalar tags and values, name scopes, merging, duplicate
// tags, NaN in a histogram.
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/summary.pb.h"
#include "testing/sim_device.h"
#include "testing/test_util.h"
#include "tessera/summary.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
namespace tb = tessera::tensorboard;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

tb::Summary parse(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::String);
  EXPECT_EQ(t.shape(), Shape{});
  tb::Summary s;
  EXPECT_TRUE(s.ParseFromString(t.scalar<std::string>()));
  return s;
}

TEST(SummaryOpsTest, ScalarOfEachNumericDtype) {
  Graph g;
  auto f32 = summary::scalar("f32", ops::constant(g, 2.5f));
  auto f64 = summary::scalar("f64", ops::constant(g, -1.25));
  auto i32 = summary::scalar("i32", ops::constant(g, int32_t{7}));
  auto i64 = summary::scalar("i64", ops::constant(g, int64_t{1} << 40));
  auto f16 = summary::scalar("f16", ops::cast(ops::constant(g, 0.5f), DType::Float16));
  Session s(g);
  auto v = s.run({f32, f64, i32, i64, f16});
  const std::vector<std::pair<std::string, float>> want = {
      {"f32", 2.5f}, {"f64", -1.25f}, {"i32", 7.0f}, {"i64", static_cast<float>(int64_t{1} << 40)}, {"f16", 0.5f}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    tb::Summary sum = parse(v[i]);
    ASSERT_EQ(sum.value_size(), 1);
    EXPECT_EQ(sum.value(0).tag(), want[i].first);
    ASSERT_EQ(sum.value(0).value_case(), tb::Summary::Value::kSimpleValue);
    EXPECT_EQ(sum.value(0).simple_value(), want[i].second);
  }
}

TEST(SummaryOpsTest, ScalarFedEachRunAndNaNPassesThrough) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto s_op = summary::scalar("loss", x);
  Session s(g);
  for (float value : {0.0f, 3.0f, -7.5f}) {
    EXPECT_EQ(parse(s.run({s_op}, {{x, Tensor::scalar(value)}})[0]).value(0).simple_value(), value);
  }
  // A scalar summary of NaN is a NaN point (TensorBoard draws the gap); only histograms refuse it.
  EXPECT_TRUE(std::isnan(parse(s.run({s_op}, {{x, Tensor::scalar(std::nanf(""))}})[0]).value(0).simple_value()));
}

TEST(SummaryOpsTest, TagIsTheScopedUniqueOpName) {
  Graph g;
  auto c = ops::constant(g, 1.0f, "c");
  Output a, b, d;
  {
    auto scope = g.name_scope("train");
    a = summary::scalar("loss", c);
    b = summary::scalar("loss", c);
  }
  d = summary::scalar("eval/accuracy", c);
  EXPECT_EQ(a.op().name(), "train/loss");
  EXPECT_EQ(b.op().name(), "train/loss_1");
  Session s(g);
  auto v = s.run({a, b, d});
  EXPECT_EQ(parse(v[0]).value(0).tag(), "train/loss");
  EXPECT_EQ(parse(v[1]).value(0).tag(), "train/loss_1");
  EXPECT_EQ(parse(v[2]).value(0).tag(), "eval/accuracy");
}

TEST(SummaryOpsTest, BadNamesAndInputsAreRefusedWhenBuilt) {
  Graph g;
  auto c = ops::constant(g, 1.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("my loss", c); }),
              HasSubstr("holds ' '"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("loss%", c); }), HasSubstr("holds '%'"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::histogram("w:0", c); }), HasSubstr("holds ':'"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("caf\xc3\xa9", c); }), HasSubstr("0xc3"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("", c); }), HasSubstr("empty name"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("/abs", c); }), HasSubstr("starts with '/'"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("v", ops::constant(g, Tensor::vector<float>({1, 2}))); }),
              HasSubstr("takes a scalar, got shape [2]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::scalar("s", ops::constant(g, Tensor::scalar("x"))); }),
              HasSubstr("takes a number"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::histogram("b", ops::constant(g, true)); }),
              HasSubstr("takes numbers"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::merge({c}); }), HasSubstr("not a string"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { summary::merge({}); }), HasSubstr("no summaries"));
  // None of the refused ones joined the graph's summaries.
  EXPECT_TRUE(summary::merge_all(g).is_null());
}

TEST(SummaryOpsTest, ScalarOfAnUnknownShapeFailsAtRunTime) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  auto s_op = summary::scalar("x", x);
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run({s_op}, {{x, Tensor::vector<float>({1, 2})}}); }),
              HasSubstr("takes a scalar, got shape [2]"));
}

// The emitted buckets partition the line: each bucket runs from the previous limit (-DBL_MAX for
// the first) to its own, and holds the values in [previous, limit).
void expect_histogram_of(const tb::HistogramProto& h, const std::vector<double>& values) {
  ASSERT_EQ(h.bucket_limit_size(), h.bucket_size());
  ASSERT_GT(h.bucket_size(), 0);
  EXPECT_EQ(h.bucket_limit(h.bucket_limit_size() - 1), DBL_MAX);
  double total = 0;
  for (int i = 0; i < h.bucket_size(); ++i) {
    const double lo = i == 0 ? -DBL_MAX : h.bucket_limit(i - 1);
    const double hi = h.bucket_limit(i);
    EXPECT_LT(lo, hi) << "bucket " << i;
    double in = 0;
    for (double v : values) in += (v >= lo && v < hi) ? 1 : 0;
    EXPECT_EQ(h.bucket(i), in) << "bucket " << i << " [" << lo << ", " << hi << ")";
    total += h.bucket(i);
    // An empty bucket is never followed by another (runs of them are one bucket).
    if (i > 0 && h.bucket(i) == 0) {
      EXPECT_GT(h.bucket(i - 1), 0) << "bucket " << i;
    }
  }
  EXPECT_EQ(total, static_cast<double>(values.size()));
  EXPECT_EQ(h.num(), static_cast<double>(values.size()));
}

TEST(SummaryOpsTest, HistogramOverTensorFlowsDefaultBuckets) {
  Graph g;
  const std::vector<float> values = {-3.0f, -1.0f, 0.0f, 0.0f, 1e-13f, 2.5f, 2.5f, 2.6f, 1000.0f, 1e25f};
  auto h_op = summary::histogram("w", ops::constant(g, Tensor::matrix<float>(values, 2, 5)));
  Session s(g);
  tb::Summary sum = parse(s.run(h_op));
  ASSERT_EQ(sum.value_size(), 1);
  EXPECT_EQ(sum.value(0).tag(), "w");
  ASSERT_EQ(sum.value(0).value_case(), tb::Summary::Value::kHisto);
  const tb::HistogramProto& h = sum.value(0).histo();
  std::vector<double> as_double(values.begin(), values.end());
  expect_histogram_of(h, as_double);
  EXPECT_EQ(h.min(), -3.0);
  EXPECT_EQ(h.max(), static_cast<double>(1e25f));
  double sum_v = 0, sum_sq = 0;
  for (double v : as_double) {
    sum_v += v;
    sum_sq += v * v;
  }
  EXPECT_DOUBLE_EQ(h.sum(), sum_v);
  EXPECT_DOUBLE_EQ(h.sum_squares(), sum_sq);
  // TF's bucket layout: zero (with 1e-13) falls in the bucket [0, 1e-12), and the limits around
  // 2.5 grow by 1.1; 1e25 lies past 1e20, in the bucket ending at DBL_MAX.
  auto bucket_of = [&](double v) {
    for (int i = 0; i < h.bucket_size(); ++i) {
      if (v < h.bucket_limit(i)) return i;
    }
    return -1;
  };
  const int zero = bucket_of(0.0);
  ASSERT_GT(zero, 0);
  EXPECT_EQ(h.bucket_limit(zero - 1), 0.0);
  EXPECT_DOUBLE_EQ(h.bucket_limit(zero), 1e-12);
  EXPECT_EQ(h.bucket(zero), 3);
  const int mid = bucket_of(2.5);
  ASSERT_GT(mid, 0);
  EXPECT_GE(h.bucket(mid), 2);
  EXPECT_NEAR(h.bucket_limit(mid) / h.bucket_limit(mid - 1), 1.1, 1e-9);
  EXPECT_EQ(h.bucket(h.bucket_size() - 1), 1);  // 1e25
}

TEST(SummaryOpsTest, HistogramOfIntegersAndOfNothing) {
  Graph g;
  auto ints = summary::histogram("ints", ops::constant(g, Tensor::vector<int32_t>({5, -5, 5, 0})));
  auto none = summary::histogram("none", ops::constant(g, Tensor::from_vector<float>({}, Shape{0})));
  Session s(g);
  auto v = s.run({ints, none});
  expect_histogram_of(parse(v[0]).value(0).histo(), {5, -5, 5, 0});
  const tb::Summary none_summary = parse(v[1]);
  const tb::HistogramProto& empty = none_summary.value(0).histo();
  EXPECT_EQ(empty.num(), 0);
  ASSERT_EQ(empty.bucket_size(), 1);  // one run of empty buckets
  EXPECT_EQ(empty.bucket(0), 0);
}

TEST(SummaryOpsTest, HistogramOfNaNOrInfinityFailsTheRun) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  {
    auto scope = g.name_scope("layer1");
    summary::histogram("weights", x);
  }
  Output h = g.output("layer1/weights");
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                s.run({h}, {{x, Tensor::vector<float>({1, std::numeric_limits<float>::quiet_NaN(), 2})}});
              }),
              HasSubstr("Nan in summary histogram for: layer1/weights"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                s.run({h}, {{x, Tensor::vector<float>({1, std::numeric_limits<float>::infinity(), 2})}});
              }),
              HasSubstr("Nan in summary histogram for: layer1/weights"));
  EXPECT_NO_THROW(s.run({h}, {{x, Tensor::vector<float>({1, 2, 3})}}));
}

TEST(SummaryOpsTest, MergeKeepsOrderAndRefusesDuplicateTags) {
  Graph g;
  auto a = summary::scalar("a", ops::constant(g, 1.0f));
  auto b = summary::histogram("b", ops::constant(g, Tensor::vector<float>({1, 2})));
  auto c = summary::scalar("c", ops::constant(g, 3.0f));
  auto ab = summary::merge({a, b});
  auto abc = summary::merge({ab, c}, "everything");  // a merged summary merges again
  auto twice = summary::merge({a, ab});
  EXPECT_EQ(abc.op().name(), "everything");
  Session s(g);
  tb::Summary m = parse(s.run(abc));
  ASSERT_EQ(m.value_size(), 3);
  EXPECT_EQ(m.value(0).tag(), "a");
  EXPECT_EQ(m.value(0).simple_value(), 1.0f);
  EXPECT_EQ(m.value(1).tag(), "b");
  EXPECT_EQ(m.value(1).histo().num(), 2);
  EXPECT_EQ(m.value(2).tag(), "c");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(twice); }), HasSubstr("Duplicate tag a found in summary inputs"));
}

TEST(SummaryOpsTest, MergeOfStringsThatAreNoSummary) {
  Graph g;
  auto x = ops::placeholder(g, DType::String, Shape::unknown(), "x");
  auto m = summary::merge({x});
  Session s(g);
  // A vector of serialized summaries merges element by element.
  tb::Summary one, two;
  one.add_value()->set_tag("one");
  two.add_value()->set_tag("two");
  tb::Summary both = parse(s.run({m}, {{x, Tensor::vector({one.SerializeAsString(), two.SerializeAsString()})}})[0]);
  ASSERT_EQ(both.value_size(), 2);
  EXPECT_EQ(both.value(1).tag(), "two");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run({m}, {{x, Tensor::scalar(std::string("\xff\xff\xff"))}}); }),
              HasSubstr("Could not parse one of the summary inputs"));
}

TEST(SummaryOpsTest, MergeAllCollectsEverySummaryMadeSoFar) {
  Graph g;
  EXPECT_TRUE(summary::merge_all(g).is_null());  // TF: None
  auto x = ops::constant(g, 4.0f);
  summary::scalar("x", x);
  {
    auto scope = g.name_scope("hist");
    summary::histogram("x", ops::constant(g, Tensor::vector<float>({1, 2, 3})));
  }
  Output first = summary::merge_all(g);
  summary::scalar("later", x);
  Output second = summary::merge_all(g);
  Session s(g);
  tb::Summary m1 = parse(s.run(first));
  ASSERT_EQ(m1.value_size(), 2);
  EXPECT_EQ(m1.value(0).tag(), "x");
  EXPECT_EQ(m1.value(1).tag(), "hist/x");
  tb::Summary m2 = parse(s.run(second));
  ASSERT_EQ(m2.value_size(), 3);
  EXPECT_EQ(m2.value(2).tag(), "later");
}

TEST(SummaryOpsTest, SummaryOfAValueOnTheSimulatedAcceleratorRunsOnTheHost) {
  Graph g;
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::mul(ops::constant(g, Tensor::vector<float>({1, 2, 3})), ops::constant(g, 2.0f));
  }
  auto h = summary::histogram("y", y);
  auto sc = summary::scalar("y_sum", ops::reduce_sum(y));
  Session s(g);
  auto v = s.run({summary::merge({h, sc})});
  tb::Summary m = parse(v[0]);
  ASSERT_EQ(m.value_size(), 2);
  EXPECT_EQ(m.value(0).histo().sum(), 12.0);
  EXPECT_EQ(m.value(1).simple_value(), 12.0f);
  EXPECT_THAT(h.op().assigned_device(), HasSubstr("CPU"));
}

}  // namespace
}  // namespace tessera
