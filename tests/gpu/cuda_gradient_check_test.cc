// The numeric gradient checks of tests/testing/*_gradient_cases.h on the process's GPU (label gpu;
// every test skips itself without one): the forward ops and their gradients placed on
// /device:GPU:0 without soft placement, so an op without a GPU kernel fails its check. The same
// cases run on the CPU and the simulated accelerator in tests/gradient_check_test.cc.
#include <gtest/gtest.h>

#include "tests/testing/conv_gradient_cases.h"
#include "tests/testing/math_gradient_cases.h"
#include "tests/testing/nn_gradient_cases.h"

namespace tessera {
namespace {

using testing::ConvGradientTest;
using testing::GradientCheckTest;
using testing::NnGradientTest;

INSTANTIATE_TEST_SUITE_P(Devices, GradientCheckTest, ::testing::Values("GPU"), testing::device_type_name);
INSTANTIATE_TEST_SUITE_P(Devices, NnGradientTest, ::testing::Values("GPU"), testing::device_type_name);
INSTANTIATE_TEST_SUITE_P(Devices, ConvGradientTest, ::testing::Values("GPU"), testing::device_type_name);

}  // namespace
}  // namespace tessera
