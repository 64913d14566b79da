// Small shape helpers shared by op definitions and kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::internal {

// [d] + s: the shape of a batch of `d` elements of shape `s` (unknown rank stays unknown).
inline Shape prepend_dim(int64_t d, const Shape& s) {
  if (s.unknown_rank()) return Shape::unknown();
  std::vector<int64_t> dims{d};
  for (int64_t x : s.dims()) dims.push_back(x);
  return Shape(dims);
}

}  // namespace tessera::internal
