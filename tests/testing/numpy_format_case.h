// One case of tests/testing/numpy_format_cases.h: a tensor and the text NumPy prints for it.
#pragma once

#include <cmath>  // NAN and INFINITY in the generated cases
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::testing {

// The elements of a case's tensor, in the member its dtype uses.
struct NumpyFormatElements {
  std::vector<double> floats;         // float32 (each exactly a float32) and float64
  std::vector<uint16_t> bits;         // float16 and bfloat16
  std::vector<int64_t> ints;          // int32 and int64
  std::vector<int> bools;             // bool, 0 or 1
  std::vector<std::string> strings;   // string
  double iota_step = 0;               // nonzero: a long case, element i is iota_step * i
};

struct NumpyFormatCase {
  const char* name;
  DType dtype;
  Shape shape;
  NumpyFormatElements elements;
  const char* text;  // "%s" % the fetched value, under np.set_printoptions(suppress=True)
};

// GoogleTest names a failing case by this, not by its bytes.
inline void PrintTo(const NumpyFormatCase& c, std::ostream* os) { *os << c.name; }

}  // namespace tessera::testing
