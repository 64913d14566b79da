// The key of a random op's Philox stream (Note [Random streams] in kernels/random_ops.cc), for its
// CPU and GPU kernels alike: the op's "seed" attr, or, for seed 0, a key drawn from
// std::random_device when the kernel is made (so every session draws new values).
#pragma once

#include <cstdint>
#include <random>

#include "core/node.h"

namespace tessera::internal {

inline uint64_t random_key(const Node& n) {
  const auto seed = static_cast<uint64_t>(n.attr<int64_t>("seed"));
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

}  // namespace tessera::internal
