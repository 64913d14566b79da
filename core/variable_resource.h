// The state of one variable in a session or server task. See Note [Variable updates] in
// kernels/variable_ops.cc.
#pragma once

#include <mutex>
#include <string>

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

}  // namespace tessera::internal
