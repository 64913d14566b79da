// Graph collections that host/ code keeps by name, as TF's GraphKeys collections
// (MOVING_AVERAGE_VARIABLES, METRIC_VARIABLES, LOSSES, REGULARIZATION_LOSSES, UPDATE_OPS): each
// entry a shared_ptr<T> in the graph's collections, under its lock. One key holds one type T
// (Variable, Output or Operation); the key constants below say which.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/node.h"
#include "tessera/graph.h"
#include "tessera/variable.h"

namespace tessera::internal {

// TF's GraphKeys.LOSSES: Outputs, the losses tessera::losses made or add_loss was given.
inline constexpr const char kLossesCollection[] = "losses";
// TF's GraphKeys.REGULARIZATION_LOSSES: Outputs, each a regularizer's penalty on a variable.
inline constexpr const char kRegularizationLossesCollection[] = "regularization_losses";
// TF's GraphKeys.UPDATE_OPS: Operations a training step should run (batch norm's moving averages).
inline constexpr const char kUpdateOpsCollection[] = "update_ops";

// Adds `value` to the collection `key` of `g`; with `once`, not when a value `same` as it is there.
template <class T, class Same = std::equal_to<T>>
void add_to_collection(Graph& g, const char* key, const T& value, bool once = false, Same same = {}) {
  GraphImpl& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  auto& entries = impl.collections_[key];
  if (once) {
    for (const auto& p : entries) {
      if (same(*static_cast<const T*>(p.get()), value)) return;
    }
  }
  entries.push_back(std::make_shared<T>(value));
}

// The entries of the collection `key` of `g`, in the order they were added.
template <class T>
std::vector<T> collection(Graph& g, const char* key) {
  GraphImpl& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  std::vector<T> out;
  auto it = impl.collections_.find(key);
  if (it == impl.collections_.end()) return out;
  for (const auto& p : it->second) out.push_back(*static_cast<const T*>(p.get()));
  return out;
}

// Variables are the same when they are one variable (their node).
inline void add_to_variable_collection(Graph& g, const char* key, const Variable& var, bool once = false) {
  add_to_collection(g, key, var, once, [](const Variable& a, const Variable& b) { return a.op() == b.op(); });
}

inline std::vector<Variable> variable_collection(Graph& g, const char* key) { return collection<Variable>(g, key); }

}  // namespace tessera::internal
