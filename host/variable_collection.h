// Graph collections of Variables that host/ code keeps by name, as TF's GraphKeys collections
// (MOVING_AVERAGE_VARIABLES, METRIC_VARIABLES): each entry a shared_ptr<Variable> in the graph's
// collections, under its lock.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "core/node.h"
#include "tessera/variable.h"

namespace tessera::internal {

// Adds `var` to the collection `key` of `g`; with `once`, not when it is there already.
inline void add_to_variable_collection(Graph& g, const char* key, const Variable& var, bool once = false) {
  GraphImpl& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  auto& entries = impl.collections_[key];
  if (once) {
    for (const auto& p : entries) {
      if (static_cast<const Variable*>(p.get())->op() == var.op()) return;
    }
  }
  entries.push_back(std::make_shared<Variable>(var));
}

// The variables of the collection `key` of `g`, in the order they were added.
inline std::vector<Variable> variable_collection(Graph& g, const char* key) {
  GraphImpl& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  std::vector<Variable> out;
  auto it = impl.collections_.find(key);
  if (it == impl.collections_.end()) return out;
  for (const auto& p : it->second) out.push_back(*static_cast<const Variable*>(p.get()));
  return out;
}

}  // namespace tessera::internal
