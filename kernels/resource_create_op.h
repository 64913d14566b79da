// The kernel of an op that makes a resource of the session (a queue, an accumulator): when run it
// creates the resource with kGet(ctx, node) or, for a shared one, checks that it agrees with the
// node; a failure fails the op. Thread-safe.
//
//   TESSERA_REGISTER_KERNEL("FIFOQueue", "CPU", ResourceCreateOp<get_queue>);
#pragma once

#include "core/op_kernel.h"

namespace tessera::internal {

template <auto kGet>
class ResourceCreateOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    auto made = kGet(ctx, node());
    if (!made.ok()) ctx.fail(made.status());
  }
  bool is_expensive() const override { return false; }
};

}  // namespace tessera::internal
