// The state of one variable in a session or server task. See Note [Variable updates] in
// kernels/variable_ops.cc.
#pragma once

#include <mutex>
#include <string>

#include "core/node.h"
#include "core/resource_mgr.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class VariableResource : public ResourceBase {
 public:
  VariableResource(std::string name, DType dtype, Shape shape)
      : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {}
  std::string debug_string() const override {
    return "Variable " + name_ + " " + std::string(dtype_name(dtype_)) + " " + shape_.to_string();
  }
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }  // declared (possibly partial) shape

  // FailedPrecondition naming the variable until it is initialized. Call with mu held.
  Status check_initialized() const {
    if (initialized) return Status();
    return errors::failed_precondition("attempting to use uninitialized value {}", name_);
  }

  std::mutex mu;
  Tensor value;              // guarded by mu; null until initialized
  bool initialized = false;  // guarded by mu

 private:
  std::string name_;
  DType dtype_;
  Shape shape_;
};

// A variable kernel's way to its variable: looks `var` (the VariableV2 node) up in the session's
// resources on the first call, creating it uninitialized, and returns the same one afterwards.
// Thread-safe.
class VariableLookup {
 public:
  StatusOr<VariableResource*> get(ResourceMgr& resources, const Node& var) {
    return cached_.get([&] {
      return resources.lookup_or_create<VariableResource>(
          var.name, [&]() -> StatusOr<std::shared_ptr<VariableResource>> {
            return std::make_shared<VariableResource>(var.name, var.output_dtypes[0], var.output_shapes[0]);
          });
    });
  }

 private:
  CachedResource<VariableResource> cached_;
};

}  // namespace tessera::internal
