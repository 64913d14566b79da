// What layers need of the variable scopes of tessera/variable_scope.h (host/variable_scope.cc).
#pragma once

#include <string>

#include "tessera/graph.h"

namespace tessera::internal {

// A name for a new scope made from `prefix` inside the current variable scope: `prefix` the first
// time, then "<prefix>_1", "<prefix>_2", ... (TF's _get_unique_variable_scope). The count starts
// again whenever the enclosing scope is left, so that a model built twice, in
// variable_scope("m") and then in variable_scope("m", Reuse::reuse), gives its layers the same
// names both times ("m/dense", "m/dense_1") and the second build finds the first one's variables.
std::string unique_variable_scope(Graph& g, const std::string& prefix);

}  // namespace tessera::internal
