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

}  // namespace
}  // namespace tessera
