// Numeric gradient checks, as TensorFlow's gradient_checker: the Jacobian of y with respect to
// each x is built twice, from tessera::gradients (one backward run per element of y, grad_ys a
// one-hot) and from central differences ((y(x + delta) - y(x - delta)) / 2 delta, one pair of runs
// per element of x), and max_gradient_error returns the largest difference between the two.
//
//   Graph g;
//   auto x = ops::placeholder(g, DType::Float64, {2, 3});
//   auto y = ops::reduce_sum(ops::square(x), {1});
//   EXPECT_LT(testing::max_gradient_error(g, {{x, tensor_of_values}}, y), 1e-6);
//
// The xs are placeholders (float32 or float64) fed the given values; `feeds` feeds any other
// placeholder. Build the graph under a device scope to check a device's kernels: the gradient ops
// request the device of the op they differentiate. Sessions use `options`.
#pragma once

#include <cstdint>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.h"

namespace tessera::testing {

namespace gradient_checker_internal {

inline std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::Float64) return t.to_vector<double>();
  if (t.dtype() == DType::Float32) {
    const auto f = t.to_vector<float>();
    return std::vector<double>(f.begin(), f.end());
  }
  throw InvalidArgumentError("gradient checker: only float32 and float64 tensors are checked");
}

inline Tensor of_doubles(const std::vector<double>& v, DType dtype, const Shape& shape) {
  if (dtype == DType::Float64) return Tensor::from_vector<double>(v, shape);
  return Tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

}  // namespace gradient_checker_internal

inline double max_gradient_error(Graph& g, const std::vector<std::pair<Output, Tensor>>& xs, Output y,
                                 double delta = 1e-3, const FeedMap& feeds = {}, const SessionOptions& options = {}) {
  namespace gc = gradient_checker_internal;
  Session s(g, options);
  FeedMap base = feeds;
  for (const auto& [x, value] : xs) base[x] = value;
  const Tensor y0 = s.run(y, base);
  const int64_t ny = y0.shape().num_elements();

  Output dy = ops::placeholder(g, y.dtype(), y0.shape(), "gradient_checker_dy");
  std::vector<Output> x_outputs;
  for (const auto& p : xs) x_outputs.push_back(p.first);
  const std::vector<Output> grads = gradients({y}, x_outputs, {dy});

  double worst = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const auto& [x, value] = xs[k];
    const std::vector<double> x0 = gc::as_doubles(value);
    const auto nx = static_cast<int64_t>(x0.size());
    // theoretical[j][i] = d y_j / d x_i, a row per element of y.
    std::vector<std::vector<double>> theoretical(static_cast<std::size_t>(ny), std::vector<double>(x0.size(), 0.0));
    if (!grads[k].is_null()) {
      for (int64_t j = 0; j < ny; ++j) {
        std::vector<double> onehot(static_cast<std::size_t>(ny), 0.0);
        onehot[static_cast<std::size_t>(j)] = 1.0;
        FeedMap f = base;
        f[dy] = gc::of_doubles(onehot, y.dtype(), y0.shape());
        const Tensor row = s.run(grads[k], f);
        EXPECT_EQ(row.shape(), value.shape()) << "the gradient of " << x.name() << " is shaped like it";
        theoretical[static_cast<std::size_t>(j)] = gc::as_doubles(row);
      }
    }
    for (int64_t i = 0; i < nx; ++i) {
      auto at = [&](double step) {
        std::vector<double> moved = x0;
        moved[static_cast<std::size_t>(i)] += step;
        FeedMap f = base;
        f[x] = gc::of_doubles(moved, value.dtype(), value.shape());
        return gc::as_doubles(s.run(y, f));
      };
      const std::vector<double> plus = at(delta);
      const std::vector<double> minus = at(-delta);
      for (int64_t j = 0; j < ny; ++j) {
        const auto uj = static_cast<std::size_t>(j);
        const double numeric = (plus[uj] - minus[uj]) / (2 * delta);
        const double error = std::abs(numeric - theoretical[uj][static_cast<std::size_t>(i)]);
        if (!(error <= worst)) worst = error;  // NaN wins
      }
    }
  }
  return worst;
}

}  // namespace tessera::testing
