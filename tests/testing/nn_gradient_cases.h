// Numeric gradient checks of the neural-network ops (nn_grad_test.py, math_grad_test.py and
// array_grad's gather cases of TensorFlow), and the gradient paths of dropout and stop_gradient,
// on the device of the instantiation. Included by tests/gradient_check_test.cc (CPU, SIM) and
// tests/gpu/cuda_gradient_check_test.cc (GPU).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "tests/testing/gradient_case_test.h"
#include "tests/testing/tensor_expect.h"

namespace tessera::testing {

// The op types whose gradient functions these cases check.
inline const std::vector<std::string> kNnGradientOps = {
    "Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits",
    "BiasAdd", "L2Loss",     "Relu",                                "Tanh",
    "Sigmoid", "Sqrt",       "GatherV2",                            "Dropout"};

class NnGradientTest : public GradientCaseTest {};

namespace nn_gradient_cases {

// Central differences with delta 1e-3 err by about delta^2 / 6 times the third derivative; a
// wrong gradient errs by the size of the values.
constexpr double kTolerance = 1e-5;

// Rows of `shape`'s last axis that are distributions (positive, sum 1), as TensorFlow's
// cross-entropy gradient (the backprop) assumes of the labels.
inline Tensor distribution_rows(const Shape& shape, uint64_t seed) {
  std::vector<double> v = values_of(random_f64(shape, seed, 0.1, 1));
  const auto cols = static_cast<std::size_t>(shape.dim(shape.rank() - 1));
  for (std::size_t r = 0; r < v.size() / cols; ++r) {
    double sum = 0;
    for (std::size_t j = 0; j < cols; ++j) sum += v[r * cols + j];
    for (std::size_t j = 0; j < cols; ++j) v[r * cols + j] /= sum;
  }
  return tensor_of(DType::Float64, shape, v);
}

}  // namespace nn_gradient_cases

TEST_P(NnGradientTest, SoftmaxAndLogSoftmax) {
  using nn_gradient_cases::kTolerance;
  const Tensor x = random_f64({3, 4}, 1, -2, 2);
  EXPECT_LT(error({x}, [](auto v) { return ops::softmax(v[0]); }), kTolerance);
  EXPECT_LT(error({x}, [](auto v) { return ops::log_softmax(v[0]); }), kTolerance);
  EXPECT_LT(error({random_f64({5}, 2, -2, 2)}, [](auto v) { return ops::softmax(v[0]); }), kTolerance);
}

TEST_P(NnGradientTest, CrossEntropiesWithRespectToLogitsAndLabels) {
  using nn_gradient_cases::kTolerance;
  const Tensor logits = random_f64({3, 4}, 3, -2, 2);
  const Tensor labels = nn_gradient_cases::distribution_rows({3, 4}, 4);
  // Through the loss, and (a second derivative) through the backprop output.
  for (int output : {0, 1}) {
    SCOPED_TRACE(output);
    EXPECT_LT(error({logits},
                    [&](auto v) {
                      auto l = ops::constant(v[0].op().graph(), tensor_of(DType::Int32, Shape{3}, {3, 0, 2}));
                      return ops::sparse_softmax_cross_entropy_with_logits(l, v[0]).op().output(output);
                    }),
              kTolerance);
    EXPECT_LT(error({labels, logits},
                    [&](auto v) { return ops::softmax_cross_entropy_with_logits(v[0], v[1]).op().output(output); }),
              kTolerance);
  }
  // The labels of the sparse op get no gradient.
  Graph g;
  auto l = ops::placeholder(g, DType::Int64, Shape{3});
  auto x = ops::placeholder(g, DType::Float64, Shape{3, 4});
  auto grads = gradients({ops::sparse_softmax_cross_entropy_with_logits(l, x)}, {l, x});
  EXPECT_TRUE(grads[0].is_null());
  EXPECT_FALSE(grads[1].is_null());
}

TEST_P(NnGradientTest, BiasAddAndL2Loss) {
  using nn_gradient_cases::kTolerance;
  EXPECT_LT(error({random_f64({2, 3, 4}, 5), random_f64({4}, 6)}, [](auto v) { return ops::bias_add(v[0], v[1]); }),
            kTolerance);
  EXPECT_LT(error({random_f64({3, 5}, 7)}, [](auto v) { return ops::l2_loss(v[0]); }), kTolerance);
}

TEST_P(NnGradientTest, ReluTanhSigmoidSqrt) {
  using nn_gradient_cases::kTolerance;
  // Relu's inputs keep clear of the kink at 0 by more than the step.
  const Tensor signs = tensor_of(DType::Float64, {2, 3}, {-0.9, 0.4, -0.2, 0.7, 1.3, -1.1});
  EXPECT_LT(error({signs}, [](auto v) { return ops::relu(v[0]); }), kTolerance);
  const Tensor x = random_f64({2, 3}, 8, -2, 2);
  EXPECT_LT(error({x}, [](auto v) { return ops::tanh(v[0]); }), kTolerance);
  EXPECT_LT(error({x}, [](auto v) { return ops::sigmoid(v[0]); }), kTolerance);
  EXPECT_LT(error({random_f64({2, 3}, 9, 0.5, 3)}, [](auto v) { return ops::sqrt(v[0]); }), kTolerance);
}

TEST_P(NnGradientTest, GatherWithRespectToParams) {
  // Repeated indices accumulate; along axis 0 and axis 1.
  const Tensor params = random_f64({4, 3}, 10);
  for (int axis : {0, 1}) {
    SCOPED_TRACE(axis);
    EXPECT_LT(error({params},
                    [&](auto v) {
                      auto i = ops::constant(v[0].op().graph(), tensor_of(DType::Int32, Shape{2, 2}, {2, 0, 2, 2}));
                      return ops::square(ops::gather(v[0], i, axis));
                    }),
              nn_gradient_cases::kTolerance);
  }
}

TEST_P(NnGradientTest, DropoutGradientIsTheMaskOfTheSameRun) {
  EXPECT_LT(error({random_f64({6}, 11)}, [](auto v) { return ops::dropout(v[0], 1.0f); }), nn_gradient_cases::kTolerance);
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{200});
  Output y;
  Output dx;
  {
    auto scope = on_device(g);
    y = ops::dropout(x, 0.5f, /*seed=*/3);
    dx = gradients({ops::reduce_sum(y)}, {x})[0];
  }
  Session s(g, no_soft_placement());
  auto out =
      s.run({dx, y.op().output(1)}, {{x, Tensor::from_vector<float>(std::vector<float>(200, 2.0f), Shape{200})}});
  EXPECT_TRUE(out[0].equals(out[1])) << "d sum(x * mask) / dx = mask";
  const std::vector<double> mask = values_of(out[1]);
  EXPECT_NE(std::count(mask.begin(), mask.end(), 0.0), 0);
  EXPECT_NE(std::count(mask.begin(), mask.end(), 2.0), 0);
}

TEST_P(NnGradientTest, StopGradientCutsThePath) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float64, Shape{3});
  Output y;
  Output cut;
  {
    auto scope = on_device(g);
    auto sq = ops::square(x);
    y = ops::reduce_sum(ops::add(sq, ops::stop_gradient(sq)));  // d/dx = 2x, not 4x
    cut = ops::reduce_sum(ops::stop_gradient(x));
  }
  auto grads = gradients({y}, {x});
  Session s(g, no_soft_placement());
  expect_values(s.run(grads[0], {{x, tensor_of(DType::Float64, {3}, {1, -2, 3})}}), DType::Float64, Shape{3},
                {2, -4, 6});
  EXPECT_TRUE(gradients({cut}, {x})[0].is_null());
}

}  // namespace tessera::testing
