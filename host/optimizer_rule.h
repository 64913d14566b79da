// What an optimizer does, behind the train::Optimizer handle (tessera/optimizer.h): the shared,
// polymorphic state every copy of an Optimizer points to. host/optimizer.cc's update rules
// (GradientDescent, Adam, ...) derive from it, and so does SyncReplicasOptimizer's wrapper
// (host/sync_replicas_optimizer.cc), which overrides apply_gradients. Keeping the behaviour here
// rather than in virtual members of the handle is what lets a copy of a derived optimizer, made as
// a plain Optimizer, keep its behaviour (no slicing).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/optimizer.h"

namespace tessera::train {

// Graph building only: callers serialize on the graph as for any graph building (the update rules
// guard their slot maps themselves).
struct Optimizer::Rule {
  explicit Rule(std::string n) : name(std::move(n)) {}
  virtual ~Rule() = default;
  Rule(const Rule&) = delete;
  Rule& operator=(const Rule&) = delete;

  // tessera::gradients of `loss` for each variable (every trainable one when `var_list` is empty).
  virtual std::vector<std::pair<Output, Variable>> compute_gradients(Output loss, std::vector<Variable> var_list);
  virtual Operation apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                                    std::optional<Variable> global_step, std::string op_name) = 0;
  virtual std::optional<Variable> get_slot(const Variable& var, const std::string& slot_name) const = 0;
  virtual std::vector<std::string> get_slot_names() const = 0;

  const std::string name;
};

}  // namespace tessera::train
