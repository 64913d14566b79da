// SessionOptions that reach the kernels: allow_tf32 (API.md's Sessions) is off by default, as in
// TensorFlow 1, and what a session sets is what its kernels see, on the host and on an
// accelerator's partition alike. (A cluster session sends it in its SessionConfig; the wire takes
// only the ops it lists, so this test's probe op cannot travel there.)
#include <atomic>

#include "core/device.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "device/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

// An op whose kernel outputs the allow_tf32 its context carries.
Status probe_shape(internal::ShapeContext& c) {
  c.add_output(DType::Bool, Shape{});
  return Status();
}
class AllowTf32Probe final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(internal::OpKernelContext& ctx) override {
    ctx.allocate_output(0, Shape{}).mutable_data<bool>()[0] = ctx.allow_tf32();
  }
};
TESSERA_REGISTER_OP(internal::OpDef{"TestAllowTf32Probe", probe_shape});
TESSERA_REGISTER_KERNEL("TestAllowTf32Probe", "CPU", AllowTf32Probe);

Output probe(Graph& g, const std::string& name) {
  internal::NodeSpec spec;
  spec.type = "TestAllowTf32Probe";
  spec.name = name;
  return Output(g.impl().add_node(std::move(spec)), 0);
}

TEST(SessionOptionsTest, AllowTf32IsOffByDefaultAndReachesEveryKernel) {
  EXPECT_FALSE(SessionOptions{}.allow_tf32);
  auto& registry = internal::DeviceRegistry::global();
  auto sims = registry.find_all("/device:SIM:*");
  if (!sims.ok() || sims.value().empty()) {
    ASSERT_TRUE(internal::register_sim_devices(1, registry).ok());
  }
  Graph g;
  auto on_host = probe(g, "on_host");
  Output on_sim;
  {
    auto scope = g.device("/device:SIM:0");
    on_sim = probe(g, "on_sim");
  }
  for (bool allow : {false, true}) {
    SessionOptions options;
    options.allow_tf32 = allow;
    Session s(g, options);
    auto out = s.run({on_host, on_sim});
    EXPECT_EQ(out[0].scalar<bool>(), allow);
    EXPECT_EQ(out[1].scalar<bool>(), allow);
    EXPECT_NE(on_sim.op().assigned_device().find("/device:SIM:0"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera
