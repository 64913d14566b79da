// The fixture of the numeric gradient checks (TensorFlow's gradient_checker: float64, central
// differences), whose cases live in headers (tests/testing/*_gradient_cases.h) so that one body
// runs on every device type: tests/gradient_check_test.cc instantiates them on "CPU" and "SIM",
// tests/gpu/cuda_gradient_check_test.cc on "GPU" (label gpu).
//
//   class MyGradientTest : public testing::GradientCaseTest {};
//   TEST_P(MyGradientTest, Square) {
//     EXPECT_LT(error({random_f64({2, 3}, 1)}, [](auto x) { return ops::square(x[0]); }), 1e-5);
//   }
//   INSTANTIATE_TEST_SUITE_P(Devices, MyGradientTest, ::testing::Values("CPU", "SIM"), ...);
//
// Each cases header also lists the op types whose gradient functions it checks; the inventory
// test (tests/gradient_check_test.cc) compares the lists with the gradient registry.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/gradient_checker.h"
#include "tests/testing/tensor_values.h"

namespace tessera::testing {

// Float64 values drawn uniformly from [lo, hi), the same for the same seed.
inline Tensor random_f64(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  RandomInputs rng(seed);
  return rng.tensor(DType::Float64, shape, Range{lo, hi});
}

class GradientCaseTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The device under test must be registered; only a GPU may be missing (the gpu suites skip
  // themselves without one, as tests/gpu/gpu_test_util.h's TESSERA_REQUIRE_GPU does).
  void SetUp() override {
    for (const DeviceInfo& d : list_devices()) {  // full names: "/job:localhost/.../device:GPU:0"
      if (d.name.size() >= device().size() && d.name.ends_with(device())) return;
    }
    if (GetParam() == "GPU") GTEST_SKIP() << "no usable GPU: nothing to test";
    FAIL() << device() << " is not registered";
  }

  std::string device() const { return "/device:" + GetParam() + ":0"; }
  // Ops built while the scope lives request the device under test (and so do their gradients).
  GraphScope on_device(Graph& g) const { return g.device(device()); }

  // Sessions of the checks place without soft placement: an op (of a forward graph or of its
  // gradient) that the device has no kernel for fails the test rather than running on the host.
  static SessionOptions no_soft_placement() {
    SessionOptions options;
    options.allow_soft_placement = false;
    return options;
  }

  // The largest Jacobian error of y with respect to each x (placeholders fed their values),
  // `feeds` feeding other placeholders.
  static double check(Graph& g, const std::vector<std::pair<Output, Tensor>>& xs, Output y, const FeedMap& feeds = {}) {
    return max_gradient_error(g, xs, y, 1e-3, feeds, no_soft_placement());
  }

  // `build` applied on the device to host placeholders fed `values` (as a GPU's feeds arrive):
  // the largest Jacobian error with respect to the inputs `checked` (every input when empty; the
  // others are only fed).
  double error(const std::vector<Tensor>& values, const std::function<Output(const std::vector<Output>&)>& build,
               const std::vector<std::size_t>& checked = {}) {
    Graph g;
    std::vector<Output> in;
    std::vector<std::pair<Output, Tensor>> xs;
    FeedMap others;
    for (std::size_t i = 0; i < values.size(); ++i) {
      in.push_back(ops::placeholder(g, values[i].dtype(), values[i].shape()));
      if (checked.empty() || std::find(checked.begin(), checked.end(), i) != checked.end()) {
        xs.emplace_back(in.back(), values[i]);
      } else {
        others[in.back()] = values[i];
      }
    }
    Output y;
    {
      auto scope = on_device(g);
      y = build(in);
    }
    return check(g, xs, y, others);
  }
};

// The names of the instantiations: the device type.
inline std::string device_type_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace tessera::testing
