// What the op suites (tests/*_ops_test.cc) share before their first test: the SIM device,
// registered once per program (each suite runs its ops on the CPU and on SIM), and the tensor
// helpers and names they use unqualified. A suite says `using namespace op_suite;` in its own
// anonymous namespace and adds the few names only it needs.
#pragma once

#include <gmock/gmock.h>

#include <cstdint>
#include <vector>

#include "tests/testing/sim_device.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"
#include "tests/testing/test_util.h"

namespace tessera::testing {

// Inline: one registration however the program's files include this.
inline const auto* const kOpSuiteSimEnvironment = ::testing::AddGlobalTestEnvironment(new SimEnvironment);

}  // namespace tessera::testing

namespace tessera::op_suite {

using testing::error_of;
using testing::expect_values;
using testing::tensor_of;
using testing::values_of;
using ::testing::HasSubstr;

// A shape's dimensions and a tensor's values, as the suites write them (values are doubles for
// every dtype; tensor_of converts).
using Dims = std::vector<int64_t>;
using V = std::vector<double>;

}  // namespace tessera::op_suite
