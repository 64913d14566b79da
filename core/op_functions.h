// What the functions built from other ops (core/clip_ops.cc, core/composite_ops.cc,
// host/metrics.cc) share: the graph of an argument, the checks of their arguments (an
// InvalidArgumentError naming the function), and the name scope they build in.
#pragma once

#include <string>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/graph.h"

namespace tessera::internal {

inline Graph& graph_of(const Output& x) { return x.op().graph(); }

// `what`: the function ("clip_by_norm"); `arg`: the argument's name.
inline void expect_not_null(const Output& t, const char* what, const char* arg) {
  if (t.is_null()) throw InvalidArgumentError(fmt::format("{}: {} is null", what, arg));
}

inline void expect_floating(const Output& t, const char* what) {
  if (!dtype_is_floating(t.dtype())) {
    throw InvalidArgumentError(
        fmt::format("{}: {} is {}, not a floating point tensor", what, t.name(), dtype_name(t.dtype())));
  }
}

// Shapes that cannot belong to one tensor: both of known rank and differing in rank or in a dim
// both know.
inline bool shapes_conflict(const Shape& a, const Shape& b) {
  if (a.unknown_rank() || b.unknown_rank()) return false;
  if (a.rank() != b.rank()) return true;
  for (int i = 0; i < a.rank(); ++i) {
    if (a.dim(i) >= 0 && b.dim(i) >= 0 && a.dim(i) != b.dim(i)) return true;
  }
  return false;
}

// The scope a function builds its ops in: the caller's name, else TensorFlow's default.
inline std::string scope_name(const std::string& name, const char* fallback) { return name.empty() ? fallback : name; }

}  // namespace tessera::internal
