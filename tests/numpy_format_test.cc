// LoggingTensorHook prints values as a TF1 program prints what Session.run returns: NumPy's str()
// with suppress=True (host/numpy_format.h). The expected texts are NumPy's own, generated from
// TensorFlow and NumPy by tests/testing/numpy_format_cases.py: the padding and alignment of each
// dtype, the switch to exponent notation, rounding to 8 decimals, nan and inf, line wrapping at 75
// columns, blank lines between blocks, summaries past 1000 elements, and Python's repr of bytes.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "host/numpy_format.h"
#include "tests/testing/numpy_format_cases.h"

namespace tessera {
namespace {

using internal::numpy_str;
using testing::kNumpyFormatCases;
using testing::NumpyFormatCase;

Tensor tensor_of(const NumpyFormatCase& c) {
  Tensor t(c.dtype, c.shape);
  const testing::NumpyFormatElements& e = c.elements;
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    switch (c.dtype) {
      case DType::Float32:
        t.mutable_data<float>()[i] = static_cast<float>(e.iota_step != 0 ? e.iota_step * i : e.floats.at(at));
        break;
      case DType::Float64: t.mutable_data<double>()[i] = e.iota_step != 0 ? e.iota_step * i : e.floats.at(at); break;
      case DType::Int32:
        t.mutable_data<int32_t>()[i] = static_cast<int32_t>(e.iota_step != 0 ? static_cast<int64_t>(e.iota_step) * i : e.ints.at(at));
        break;
      case DType::Int64: t.mutable_data<int64_t>()[i] = e.iota_step != 0 ? static_cast<int64_t>(e.iota_step) * i : e.ints.at(at); break;
      case DType::Float16:
      case DType::BFloat16: std::memcpy(static_cast<char*>(t.raw_mutable_data()) + 2 * i, &e.bits.at(at), 2); break;
      case DType::Bool: t.mutable_data<bool>()[i] = e.bools.at(at) != 0; break;
      case DType::String: t.mutable_data<std::string>()[i] = e.strings.at(at); break;
    }
  }
  return t;
}

class NumpyFormatTest : public ::testing::TestWithParam<NumpyFormatCase> {};

TEST_P(NumpyFormatTest, PrintsAsNumPy) {
  const NumpyFormatCase& c = GetParam();
  EXPECT_EQ(numpy_str(tensor_of(c)), c.text) << c.name << " (" << dtype_name(c.dtype) << " " << c.shape.to_string() << ")";
}

INSTANTIATE_TEST_SUITE_P(FromNumPy, NumpyFormatTest, ::testing::ValuesIn(kNumpyFormatCases),
                         [](const ::testing::TestParamInfo<NumpyFormatCase>& info) { return std::string(info.param.name); });

// The cases are what they say: a generated table that lost its elements would compare the empty
// tensor's "[]" with whatever, so check the table against itself once.
TEST(NumpyFormatCasesTest, EveryCaseHoldsAllItsElements) {
  for (const NumpyFormatCase& c : kNumpyFormatCases) {
    const testing::NumpyFormatElements& e = c.elements;
    const std::size_t held = e.floats.size() + e.bits.size() + e.ints.size() + e.bools.size() + e.strings.size();
    if (e.iota_step != 0) {
      EXPECT_EQ(held, 0u) << c.name;
    } else {
      EXPECT_EQ(static_cast<int64_t>(held), c.shape.num_elements()) << c.name;
    }
  }
}

}  // namespace
}  // namespace tessera
