// A tensor as a TF1 Python program prints what Session.run returns for it ("%s" % value), which is
// NumPy's str(): what LoggingTensorHook logs, so that a log line reads as TensorFlow's does.
//
//   numpy_str(Tensor::matrix<float>({1, 2.5f, -3, 4}, 2, 2))  ->  "[[ 1.   2.5]\n [-3.   4. ]]"
//   numpy_str(Tensor(0.8f * 0.8f))                            ->  "0.64000005"
//
// A rank-0 tensor is the NumPy scalar Session.run returns (np.float32, np.int64, bool, bytes); any
// other is an ndarray (strings an object array of bytes). The print options are NumPy's defaults
// (precision 8, threshold 1000, edgeitems 3, linewidth 75) with suppress=True, which TF's
// LoggingTensorHook sets around its log line. Where NumPy 1.x and 2.x differ (2.x switches a
// float16 or float32 array to exponent notation from 1e3 or 1e6, not 1e8, and its float16 and
// float32 scalars likewise), this follows 2.x, which the TensorFlow of PyPI installs today.
// bfloat16 elements print as ml_dtypes prints them: printf's %g, unpadded.
//
// Internal: the public surface is LoggingTensorHook.
#pragma once

#include <string>

#include "tessera/tensor.h"

namespace tessera::internal {

std::string numpy_str(const Tensor& t);

}  // namespace tessera::internal
