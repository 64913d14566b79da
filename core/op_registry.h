// Op definitions (shape and dtype inference) and kernel registration, per device type.
//
//   TESSERA_REGISTER_OP(OpDef{"Square", square_shape_fn});
//   TESSERA_REGISTER_KERNEL("Square", "CPU", SquareOp);
//
// Registration happens during static initialization; lookups afterwards are lock-free reads of
// immutable maps (registration after the first lookup is not supported).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/status.h"

namespace tessera::internal {

class OpKernel;

// What a shape function sees of the node being built, and where it writes the outputs.
class ShapeContext {
 public:
  ShapeContext(const NodeSpec& spec, const std::string& node_name, std::vector<DType> in_dtypes,
               std::vector<Shape> in_shapes)
      : spec_(spec), name_(node_name), in_dtypes_(std::move(in_dtypes)),
        in_shapes_(std::move(in_shapes)) {}

  int num_inputs() const { return static_cast<int>(in_dtypes_.size()); }
  DType input_dtype(int i) const { return in_dtypes_[i]; }
  const Shape& input_shape(int i) const { return in_shapes_[i]; }
  const std::string& node_name() const { return name_; }
  const std::string& op_type() const { return spec_.type; }
  const NodeSpec& spec() const { return spec_; }
  template <class T>
  const T& attr(const std::string& key) const {
    auto it = spec_.attrs.find(key);
    TESSERA_CHECK(it != spec_.attrs.end());
    return std::get<T>(it->second);
  }
  bool has_attr(const std::string& key) const { return spec_.attrs.count(key) != 0; }

  void add_output(DType dtype, Shape shape) {
    out_dtypes_.push_back(dtype);
    out_shapes_.push_back(std::move(shape));
  }
  // InvalidArgumentError whose message starts with "name (Type): ".
  template <class... Args>
  Status invalid(fmt::format_string<Args...> f, Args&&... args) const {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{} ({}): ", name_, spec_.type) +
                      fmt::format(f, std::forward<Args>(args)...));
  }

  std::vector<DType> out_dtypes_;
  std::vector<Shape> out_shapes_;

 private:
  const NodeSpec& spec_;
  const std::string& name_;
  std::vector<DType> in_dtypes_;
  std::vector<Shape> in_shapes_;
};

// InvalidArgument unless the node being built has exactly `n` inputs.
inline Status expect_inputs(const ShapeContext& c, int n) {
  if (c.num_inputs() != n) return c.invalid("expects {} inputs, got {}", n, c.num_inputs());
  return Status();
}

// Adds output `shape` of `dtype`, or the InvalidArgument saying why there is none.
inline Status add_shaped(ShapeContext& c, DType dtype, const StatusOr<Shape>& shape) {
  if (!shape.ok()) return c.invalid("{}", shape.status().message());
  c.add_output(dtype, shape.value());
  return Status();
}

using ShapeFn = std::function<Status(ShapeContext&)>;

struct OpDef {
  std::string type;
  ShapeFn shape_fn;
  // Stateful ops (variables, queues, random) are never deduplicated or constant-folded and keep
  // their kernel (and its state) for the life of the session.
  bool stateful = false;
  // Must run where its resource lives, in host memory (queues).
  bool host_only = false;
  // host_only, and a request for an accelerator means that task's CPU (Switch and Merge: the
  // executor decides a cond's deadness on the host, Note [Conditionals] in
  // core/control_flow_ops.cc), so no soft placement is needed.
  bool host_of_request = false;
};

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const Node&)>;
// The dtypes a device type's kernel takes, as TensorFlow's TypeConstraint: those of the node's
// output 0 (the "T" or "dtype" of every op constrained so far). Empty: any the op takes (the kernel
// checks). Placement puts a node only on a device type whose kernel takes its dtype, so a dtype
// the CPU kernel has and an accelerator's lacks (float16 convolutions, the GPU's float32 and
// float64 ones) runs on the CPU.
using KernelDTypes = std::vector<DType>;
// Builds a device type's kernel around another device type's (the simulated accelerator runs the
// CPU kernels on its streams this way).
using KernelAdapter = std::function<std::unique_ptr<OpKernel>(std::unique_ptr<OpKernel> base)>;

class OpRegistry {
 public:
  static OpRegistry& global();
  void register_op(OpDef def);
  void register_kernel(const std::string& type, const std::string& device_type, KernelFactory f,
                       KernelDTypes dtypes = {});
  // nullptr when unknown.
  const OpDef* find_op(const std::string& type) const;
  // The kernel registered for the device type itself, whatever its dtypes.
  const KernelFactory* find_kernel(const std::string& type, const std::string& device_type) const;
  std::vector<std::string> op_types() const;
  std::vector<std::string> kernel_device_types(const std::string& type) const;

  // Every op of `base_device_type` that is not host_only also runs on `device_type`, as
  // `adapter(base kernel)`, unless a kernel is registered for `device_type` directly.
  void register_kernel_adapter(const std::string& device_type, const std::string& base_device_type,
                               KernelAdapter adapter);
  // A kernel registered directly or through an adapter, for some dtype.
  bool has_kernel(const std::string& type, const std::string& device_type) const;
  // The same for `node`'s dtype (KernelDTypes): what placement asks.
  bool has_kernel(const Node& node, const std::string& device_type) const;
  // The kernel for `node` on `device_type`; Unimplemented naming the op when there is none (or
  // none for its dtype), or the factory's error.
  StatusOr<std::unique_ptr<OpKernel>> create_kernel(const Node& node, const std::string& device_type) const;

 private:
  struct Adapter {
    std::string base_device_type;
    KernelAdapter adapter;
  };
  struct Kernel {
    KernelFactory factory;
    KernelDTypes dtypes;
  };
  // The kernel that runs op `type` on `device_type`, directly or as the adapter's base kernel
  // (whose dtypes then hold); nullptr where there is none.
  const Kernel* kernel_of(const std::string& type, const std::string& device_type) const;

  std::map<std::string, std::unique_ptr<OpDef>> ops_;
  std::map<std::pair<std::string, std::string>, Kernel> kernels_;
  std::map<std::string, Adapter> adapters_;  // by device type
};

struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::global().register_op(std::move(def)); }
  // Stateless ops `types` that share one shape function (Add, Sub, ... of binary_shape).
  OpRegistrar(const ShapeFn& shape_fn, std::initializer_list<const char*> types) {
    for (const char* type : types) OpRegistry::global().register_op(OpDef{type, shape_fn});
  }
};
struct KernelRegistrar {
  KernelRegistrar(const std::string& type, const std::string& device, KernelFactory f, KernelDTypes dtypes = {}) {
    OpRegistry::global().register_kernel(type, device, std::move(f), std::move(dtypes));
  }
};

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)
#define TESSERA_REGISTER_OP(...)                                                 \
  static ::tessera::internal::OpRegistrar TESSERA_CONCAT(tessera_op_reg_, __COUNTER__)( \
      __VA_ARGS__)
// TESSERA_REGISTER_OPS(binary_shape, "Add", "Sub"): stateless ops of one shape function.
#define TESSERA_REGISTER_OPS(shape_fn, ...)                                                          \
  static ::tessera::internal::OpRegistrar TESSERA_CONCAT(tessera_op_reg_, __COUNTER__)(shape_fn, \
                                                                                       {__VA_ARGS__})
#define TESSERA_REGISTER_KERNEL(type, device, Class)                                        \
  static ::tessera::internal::KernelRegistrar TESSERA_CONCAT(tessera_kernel_reg_, __COUNTER__)( \
      type, device, [](const ::tessera::internal::Node& n) -> std::unique_ptr<::tessera::internal::OpKernel> { \
        return std::make_unique<Class>(n);                                                  \
      })
// TESSERA_REGISTER_TYPED_KERNEL("Conv2D", "GPU", ConvGpuOp, DType::Float32, DType::Float64): a kernel
// that takes only those dtypes (KernelDTypes).
#define TESSERA_REGISTER_TYPED_KERNEL(type, device, Class, ...)                                   \
  static ::tessera::internal::KernelRegistrar TESSERA_CONCAT(tessera_kernel_reg_, __COUNTER__)( \
      type, device,                                                                             \
      [](const ::tessera::internal::Node& n) -> std::unique_ptr<::tessera::internal::OpKernel> { \
        return std::make_unique<Class>(n);                                                      \
      },                                                                                        \
      ::tessera::internal::KernelDTypes{__VA_ARGS__})

}  // namespace tessera::internal
