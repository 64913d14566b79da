// The numeric gradient checks (TensorFlow's gradient_checker: float64, central differences) of
// tests/testing/*_gradient_cases.h on the CPU and on the simulated accelerator (the same cases run
// on a GPU in tests/gpu/cuda_gradient_check_test.cc), and the inventory: every op type registered
// with a gradient function is checked by one of those cases.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/gradients.h"
#include "tests/testing/conv_gradient_cases.h"
#include "tests/testing/math_gradient_cases.h"
#include "tests/testing/nn_gradient_cases.h"
#include "tests/testing/sim_device.h"

namespace tessera {
namespace {

using testing::ConvGradientTest;
using testing::GradientCheckTest;
using testing::NnGradientTest;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

INSTANTIATE_TEST_SUITE_P(Devices, GradientCheckTest, ::testing::Values("CPU", "SIM"), testing::device_type_name);
INSTANTIATE_TEST_SUITE_P(Devices, NnGradientTest, ::testing::Values("CPU", "SIM"), testing::device_type_name);
INSTANTIATE_TEST_SUITE_P(Devices, ConvGradientTest, ::testing::Values("CPU", "SIM"), testing::device_type_name);

// Every cases header's list of the op types it checks.
std::set<std::string> checked_op_types() {
  std::set<std::string> checked;
  for (const auto* list : {&testing::kMathGradientOps, &testing::kNnGradientOps, &testing::kConvGradientOps}) {
    checked.insert(list->begin(), list->end());
  }
  return checked;
}

TEST(GradientInventoryTest, EveryDifferentiableOpHasANumericCheck) {
  const std::set<std::string> checked = checked_op_types();
  std::vector<std::string> unchecked;
  for (const std::string& type : internal::GradientRegistry::global().differentiable_op_types()) {
    if (!checked.contains(type)) unchecked.push_back(type);
  }
  EXPECT_TRUE(unchecked.empty()) << "differentiable ops without a numeric gradient check: "
                                 << fmt::format("{}", fmt::join(unchecked, ", "));
}

TEST(GradientInventoryTest, TheListsNameOnlyDifferentiableOps) {
  const std::vector<std::string> types = internal::GradientRegistry::global().differentiable_op_types();
  const std::set<std::string> registered(types.begin(), types.end());
  std::vector<std::string> stale;
  for (const std::string& type : checked_op_types()) {
    if (!registered.contains(type)) stale.push_back(type);
  }
  EXPECT_TRUE(stale.empty()) << "listed as checked, but no gradient function is registered: "
                             << fmt::format("{}", fmt::join(stale, ", "));
  // The registry lists the gradient functions, not the ops marked not differentiable.
  EXPECT_TRUE(registered.contains("MatMul"));
  EXPECT_FALSE(registered.contains("ArgMax"));
  EXPECT_FALSE(registered.contains("StopGradient"));
}

}  // namespace
}  // namespace tessera
