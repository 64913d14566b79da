// A device fault (issue: GPU ops stream-ordered, "Faults"): work that fails asynchronously on an
// accelerator's stream (a CUDA fault; here a simulated accelerator's stream put in error the same
// way) fails the op it was found after, naming it; the device is then failed for good, so later
// steps that need it fail at once with that reason, while work on the host goes on.
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>

#include "core/device.h"
#include "core/device_factory.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

TEST(DeviceFaultTest, AFaultFailsTheOpNamingItThenEveryLaterStepOnTheDeviceAtOnceAndTheHostGoesOn) {
  const std::string sim = add_simulated_accelerators(1).front();
  internal::Device* device = internal::DeviceRegistry::global().find(sim).value();
  Graph g;
  auto p = ops::placeholder(g, DType::Float32, Shape{4}, "p");
  Output doubled, squared;
  {
    // Its input made on the device: the fault is found by the step's drain of the compute stream
    // (Note [Stream-ordered kernels]), after `doubled`, not by a copy waiting on that stream.
    auto scope = g.device(sim);
    auto on_device = ops::constant(g, Tensor::vector<float>({0.5f, 1, 1.5f, 2}));
    doubled = ops::add(on_device, on_device, "doubled");
  }
  {
    auto scope = g.device("/device:CPU:0");
    squared = ops::mul(p, p, "squared");
  }
  const Tensor x = Tensor::vector<float>({1, 2, 3, 4});
  Session s(g);
  EXPECT_EQ(s.run({doubled}, {{p, x}})[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  ASSERT_TRUE(device->health().ok());

  // The fault: a work item that fails puts the compute stream in error, as a CUDA fault does.
  device->compute_stream(0).enqueue([] { throw std::runtime_error("simulated illegal memory access"); });
  try {
    s.run({doubled}, {{p, x}});
    ADD_FAILURE() << "the step after the fault succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("doubled"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("simulated illegal memory access"));
  }
  const Status failed = device->health();
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr(sim));
  EXPECT_THAT(failed.message(), HasSubstr("after doubled (Add)"));
  EXPECT_THAT(failed.message(), HasSubstr("simulated illegal memory access"));

  // Later steps that need the device fail at once, with the device's reason.
  for (int i = 0; i < 3; ++i) {
    try {
      s.run({doubled}, {{p, x}});
      ADD_FAILURE() << "a step on the failed device succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), failed.code());
      EXPECT_THAT(std::string(e.what()), HasSubstr("after doubled (Add)"));
    }
  }
  // The host goes on, in this session and in a new one.
  EXPECT_EQ(s.run({squared}, {{p, x}})[0].to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));
  Session fresh(g);
  EXPECT_EQ(fresh.run({squared}, {{p, x}})[0].to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));
}

// A fault on a copy stream (found by the next copy: a feed's copy to the device) fails the step
// with the fault and marks the device failed too.
TEST(DeviceFaultTest, AFaultFoundByACopyFailsTheStepAndTheDevice) {
  const std::string sim = add_simulated_accelerators(1).front();
  internal::Device* device = internal::DeviceRegistry::global().find(sim).value();
  Graph g;
  auto p = ops::placeholder(g, DType::Float32, Shape{4}, "p");
  Output doubled;
  {
    auto scope = g.device(sim);
    doubled = ops::add(p, p, "doubled");
  }
  const Tensor x = Tensor::vector<float>({1, 2, 3, 4});
  Session s(g);
  EXPECT_EQ(s.run({doubled}, {{p, x}})[0].to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  device->host_to_device_stream().enqueue([] { throw std::runtime_error("simulated illegal memory access"); });
  try {
    s.run({doubled}, {{p, x}});
    ADD_FAILURE() << "the step after the fault succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("simulated illegal memory access"));
  }
  const Status failed = device->health();
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr(sim + ", in a copy to the device"));
  EXPECT_THAT(failed.message(), HasSubstr("simulated illegal memory access"));
  EXPECT_THROW(s.run({doubled}, {{p, x}}), Error);
}

}  // namespace
}  // namespace tessera
