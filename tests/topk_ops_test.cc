// ops::top_k and ops::in_top_k with the cases of TensorFlow's topk_op_test.py (one and several
// rows, ties in position order, k of 0 and of the whole row, integer and 16-bit inputs, bad k)
// and in_topk_op_test.py (testInTop1, testInTop2, testInTop2Tie, testInTopNan, testBadTarget);
// top_k's gradient is checked numerically in tests/testing/math_gradient_cases.h.
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

TEST(TopKTest, LargestFirstWithTheirPositions) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<float>({0.1f, 0.3f, 0.2f, 0.4f, 0.5f, 0.1f, 0.4f, 0.2f}, 2, 4));
  auto [values, indices] = ops::top_k(x, 2);
  EXPECT_EQ(values.shape(), (Shape{2, 2}));
  EXPECT_EQ(indices.dtype(), DType::Int32);
  Session s(g);
  const std::vector<Tensor> got = s.run({values, indices});
  EXPECT_THAT(got[0].to_vector<float>(), ElementsAre(0.4f, 0.3f, 0.5f, 0.4f));
  EXPECT_THAT(got[1].to_vector<int32_t>(), ElementsAre(3, 1, 0, 2));
  // k = 1 (the default) is an argmax with its value; k = n sorts the row.
  auto [top1, top1_index] = ops::top_k(x);
  EXPECT_THAT(s.run(top1).to_vector<float>(), ElementsAre(0.4f, 0.5f));
  EXPECT_THAT(s.run(top1_index).to_vector<int32_t>(), ElementsAre(3, 0));
  EXPECT_THAT(s.run(ops::top_k(x, 4).second).to_vector<int32_t>(), ElementsAre(3, 1, 2, 0, 0, 2, 3, 1));
  // k = 0: an empty last dim.
  EXPECT_EQ(s.run(ops::top_k(x, 0).first).shape(), (Shape{2, 0}));
}

// As TF 2.21's top_k: ties in position order, NaN ahead of 5.
TEST(TopKTest, TiesKeepPositionOrderAndNaNRanksFirst) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<double>({1, 3, 3, 2, 3, 1}));
  auto [values, indices] = ops::top_k(x, 4);
  Session s(g);
  EXPECT_THAT(s.run(values).to_vector<double>(), ElementsAre(3, 3, 3, 2));
  EXPECT_THAT(s.run(indices).to_vector<int32_t>(), ElementsAre(1, 2, 4, 3));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Output with_nan = ops::constant(g, Tensor::vector<double>({1, nan, 5}));
  EXPECT_THAT(s.run(ops::top_k(with_nan, 2).second).to_vector<int32_t>(), ElementsAre(1, 2));
}

TEST(TopKTest, IntegersHalfFloatsAndHigherRanks) {
  Graph g;
  Session s(g);
  Output ints = ops::constant(g, Tensor::vector<int64_t>({-5, 7, 0, 7, -1}));
  EXPECT_THAT(s.run(ops::top_k(ints, 3).first).to_vector<int64_t>(), ElementsAre(7, 7, 0));
  Output halves = ops::cast(ops::constant(g, Tensor::vector<float>({0.5f, -2, 8, 1})), DType::Float16);
  auto [hv, hi] = ops::top_k(halves, 2);
  EXPECT_EQ(hv.dtype(), DType::Float16);
  EXPECT_THAT(s.run(ops::cast(hv, DType::Float32)).to_vector<float>(), ElementsAre(8, 1));
  EXPECT_THAT(s.run(hi).to_vector<int32_t>(), ElementsAre(2, 3));
  // [2, 2, 3]: every row of the last dim on its own.
  Tensor t(DType::Int32, Shape{2, 2, 3});
  const std::vector<int32_t> v = {3, 1, 2, 9, 8, 7, 0, 5, 4, 6, 6, 1};
  std::copy(v.begin(), v.end(), t.mutable_data<int32_t>());
  Output c = ops::constant(g, t);
  auto [cv, ci] = ops::top_k(c, 2);
  EXPECT_EQ(cv.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(s.run(cv).to_vector<int32_t>(), ElementsAre(3, 2, 9, 8, 5, 4, 6, 6));
  EXPECT_THAT(s.run(ci).to_vector<int32_t>(), ElementsAre(0, 2, 0, 1, 1, 2, 0, 1));
}

TEST(TopKTest, BadArgumentsAreInvalidArgumentErrors) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<float>({1, 2, 3}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::top_k(x, 4); }), HasSubstr("at least k=4 columns"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::top_k(x, -1); }), HasSubstr("non-negative"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::top_k(ops::constant(g, 1.0f), 1); }), HasSubstr("rank >= 1"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::top_k(ops::constant(g, Tensor::vector<bool>({true})), 1); }),
              HasSubstr("not ordered"));
  // A row shorter than k, known only when the op runs.
  Output late = ops::placeholder(g, DType::Float32, Shape{-1});
  Output top = ops::top_k(late, 2).first;
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(top, {{late, Tensor::vector<float>({1})}}); }),
              HasSubstr("at least k=2 columns"));
}

TEST(TopKTest, TheGradientGoesToThePickedPositions) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<double>({1, 5, 3, 4, 2, 6}, 2, 3));
  auto [values, indices] = ops::top_k(x, 2);
  Output weights = ops::constant(g, Tensor::matrix<double>({10, 20, 30, 40}, 2, 2));
  std::vector<Output> grads = gradients({ops::reduce_sum(ops::mul(values, weights))}, {x});
  Session s(g);
  EXPECT_THAT(s.run(grads[0]).to_vector<double>(), ElementsAre(0, 10, 20, 40, 0, 30));
  // The indices carry none: only through them, x gets no gradient.
  EXPECT_TRUE(gradients({ops::reduce_sum(ops::cast(indices, DType::Float64))}, {x})[0].is_null());
}

TEST(InTopKTest, TensorFlowsCases) {
  Graph g;
  Session s(g);
  Output p = ops::constant(g, Tensor::matrix<float>({0.1f, 0.3f, 0.2f, 0.4f, 0.1f, 0.2f, 0.3f, 0.4f}, 2, 4));
  EXPECT_THAT(s.run(ops::in_top_k(p, ops::constant(g, Tensor::vector<int32_t>({3, 1})), 1)).to_vector<bool>(),
              ElementsAre(true, false));
  EXPECT_THAT(s.run(ops::in_top_k(p, ops::constant(g, Tensor::vector<int32_t>({0, 2})), 2)).to_vector<bool>(),
              ElementsAre(false, true));
  EXPECT_THAT(s.run(ops::in_top_k(p, ops::constant(g, Tensor::vector<int64_t>({0, 2})), 2)).to_vector<bool>(),
              ElementsAre(false, true));
  // testInTop2Tie: a tie at the boundary counts as in.
  Output tie = ops::constant(g, Tensor::matrix<float>({0.1f, 0.3f, 0.2f, 0.2f, 0.1f, 0.3f, 0.2f, 0.2f}, 2, 4));
  EXPECT_THAT(s.run(ops::in_top_k(tie, ops::constant(g, Tensor::vector<int32_t>({2, 3})), 2)).to_vector<bool>(),
              ElementsAre(true, true));
  // testInTopNan: a NaN elsewhere in the row is not larger; an infinite target's prediction is out.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Output with_nan = ops::constant(g, Tensor::matrix<float>({0.1f, nan, 0.2f, 0.4f, 0.1f, 0.2f, 0.3f, inf}, 2, 4));
  EXPECT_THAT(s.run(ops::in_top_k(with_nan, ops::constant(g, Tensor::vector<int32_t>({0, 3})), 2)).to_vector<bool>(),
              ElementsAre(false, false));
  // testBadTarget: out of range is false, not an error (TF 2.21 gives these four values too).
  EXPECT_THAT(s.run(ops::in_top_k(p, ops::constant(g, Tensor::vector<int32_t>({3, 10000})), 2)).to_vector<bool>(),
              ElementsAre(true, false));
  EXPECT_THAT(s.run(ops::in_top_k(p, ops::constant(g, Tensor::vector<int32_t>({-1, 3})), 4)).to_vector<bool>(),
              ElementsAre(false, true));
}

TEST(InTopKTest, BadArgumentsAreInvalidArgumentErrors) {
  Graph g;
  Output p = ops::constant(g, Tensor::matrix<float>({0.1f, 0.3f, 0.2f, 0.4f}, 2, 2));
  Output t = ops::constant(g, Tensor::vector<int32_t>({0, 1}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::in_top_k(ops::cast(p, DType::Float64), t, 1); }),
              HasSubstr("predictions must be float32"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::in_top_k(p, ops::constant(g, Tensor::vector<int32_t>({0})), 1); }),
              HasSubstr("2 rows and targets 1"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::in_top_k(p, ops::cast(t, DType::Float32), 1); }),
              HasSubstr("targets must be int32 or int64"));
  Output late = ops::placeholder(g, DType::Int32, Shape{-1});
  Output in = ops::in_top_k(p, late, 1);
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(in, {{late, Tensor::vector<int32_t>({0, 1, 1})}}); }),
              HasSubstr("one per row"));
}

}  // namespace
}  // namespace tessera
