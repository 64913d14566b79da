// The state of one variable in a session or server task. See Note [Variable updates] in
// kernels/variable_ops.cc.
#pragma once

#include <mutex>
#include <string>

#include "core/device.h"
#include "core/node.h"
#include "core/resource_mgr.h"
#include "core/tensor_buffer.h"
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

  // FailedPrecondition when the value is held in other memory than `memory` (the device whose
  // memory the kernel at hand reads and writes): the graphs that share this variable by name (a
  // server task's sessions) placed it on different devices, and the kernel could not read it.
  // `op` names the kernel's op. Call with mu held.
  Status check_memory(const std::string& memory, const std::string& op) const {
    if (!initialized || value.is_null() || value.device() == memory) return Status();
    return errors::failed_precondition(
        "variable {} holds its value in the memory of {}, but this graph runs {} on {}: every graph that "
        "shares a variable must place it on the same device",
        name_, value.device(), op, memory);
  }

  std::mutex mu;
  Tensor value;              // guarded by mu; null until initialized
  bool initialized = false;  // guarded by mu

 private:
  std::string name_;
  DType dtype_;
  Shape shape_;
};

// The memory a CPU variable kernel running on `device` reads and writes (VariableResource::
// check_memory): the host's, or a simulated accelerator's (which runs the CPU kernels).
inline std::string cpu_kernel_memory(const Device* device) {
  return device == nullptr || device->type() == "CPU" ? std::string(kHostDeviceName) : device->name();
}

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
