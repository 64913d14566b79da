// CPU kernels: Const, Placeholder, Identity (and StopGradient, which is Identity to the kernels), NoOp.
#include "core/op_kernel.h"
#include "core/op_registry.h"

namespace tessera::internal {
namespace {

class ConstOp : public OpKernel {
 public:
  explicit ConstOp(const Node& n) : OpKernel(n), value_(n.attr<Tensor>("value")) {}
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, value_); }  // shared, no copy
  bool is_expensive() const override { return false; }

 private:
  Tensor value_;
};

TESSERA_REGISTER_KERNEL("Const", "CPU", ConstOp);

// Runs only when its output was not fed (the executor substitutes fed values).
class PlaceholderOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    ctx.fail(ErrorCode::kInvalidArgument,
             "you must feed a value for placeholder '{}' with dtype {} and shape {}", name(),
             dtype_name(node().output_dtypes[0]), node().output_shapes[0].to_string());
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("Placeholder", "CPU", PlaceholderOp);

class IdentityOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, ctx.input(0)); }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("Identity", "CPU", IdentityOp);
TESSERA_REGISTER_KERNEL("StopGradient", "CPU", IdentityOp);  // core/nn_ops.cc

class NoOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext&) override {}
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("NoOp", "CPU", NoOpKernel);

}  // namespace
}  // namespace tessera::internal
