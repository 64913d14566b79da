// A fixture for tests of op kernels through the public API on each device a suite is
// instantiated for ("CPU", or "SIM": /device:SIM:0, whose placeholders stay on the host so inputs
// cross to the device and outputs back, as a GPU's would). Used by the selection, neural-network
// and convolution op suites.
//
//   class MyOpsTest : public testing::DeviceOpTest {};
//   TEST_P(MyOpsTest, Adds) { EXPECT_TRUE(apply({a, b}, [](auto x) { return ops::add(x[0], x[1]); }).equals(c)); }
//   INSTANTIATE_TEST_SUITE_P(Devices, MyOpsTest, ::testing::Values("CPU", "SIM"));
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/test_util.h"

namespace tessera::testing {

class DeviceOpTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Ops built while the scope lives request the device under test.
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }

  // Every output of `y`'s op, fetched twice (on SIM the second step replays the captured
  // partition): the op ran on the device under test and the two steps agree.
  std::vector<Tensor> run_all(Output y, const FeedMap& feeds = {}) {
    Session s(y.op().graph());
    std::vector<Output> fetches;
    for (int i = 0; i < y.op().num_outputs(); ++i) fetches.push_back(y.op().output(i));
    std::vector<Tensor> first = s.run(fetches, feeds);
    std::vector<Tensor> second = s.run(fetches, feeds);
    EXPECT_THAT(y.op().assigned_device(), ::testing::HasSubstr("/device:" + GetParam() + ":0")) << y.name();
    for (std::size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(first[i].equals(second[i])) << y.name() << ": output " << i << " of the second step differs";
    }
    return first;
  }
  // Output y's value, as run_all checks it.
  Tensor run(Output y, const FeedMap& feeds = {}) {
    return run_all(y, feeds)[static_cast<std::size_t>(y.index())];
  }

  // Feeds `inputs` through placeholders (of their own shapes, or unknown ones, which leaves every
  // check to the kernel), applies `op` on the device and returns every output of its node.
  template <class F>
  std::vector<Tensor> apply_all(const std::vector<Tensor>& inputs, F op, bool unknown_shapes = false) {
    Graph g;
    FeedMap feeds;
    Output y = build(g, inputs, op, unknown_shapes, &feeds);
    return run_all(y, feeds);
  }
  template <class F>
  Tensor apply(const std::vector<Tensor>& inputs, F op, bool unknown_shapes = false) {
    Graph g;
    FeedMap feeds;
    Output y = build(g, inputs, op, unknown_shapes, &feeds);
    return run(y, feeds);
  }

  // Applies `op` to placeholders of unknown shape and expects the run to fail with
  // InvalidArgumentError naming the op and saying `detail`.
  template <class F>
  void expect_run_fails(const std::vector<Tensor>& inputs, F op, const std::string& detail) {
    Graph g;
    FeedMap feeds;
    Output y = build(g, inputs, op, /*unknown_shapes=*/true, &feeds);
    Session s(g);
    const std::string message = error_of<InvalidArgumentError>([&] { s.run(y, feeds); });
    EXPECT_THAT(message, ::testing::HasSubstr(y.op().name() + " (" + y.op().type() + "): "));
    EXPECT_THAT(message, ::testing::HasSubstr(detail));
  }

 private:
  template <class F>
  Output build(Graph& g, const std::vector<Tensor>& inputs, F op, bool unknown_shapes, FeedMap* feeds) {
    std::vector<Output> xs;
    for (const Tensor& t : inputs) {
      xs.push_back(ops::placeholder(g, t.dtype(), unknown_shapes ? Shape::unknown() : t.shape()));
      (*feeds)[xs.back()] = t;
    }
    auto scope = on_device(g);
    return op(xs);
  }
};

// Expects `build` to throw InvalidArgumentError naming the op (`op`: "name (Type)" or part of it)
// and saying `detail`.
template <class F>
void expect_build_fails(F build, const std::string& op, const std::string& detail) {
  const std::string message = error_of<InvalidArgumentError>(build);
  EXPECT_THAT(message, ::testing::HasSubstr(op));
  EXPECT_THAT(message, ::testing::HasSubstr(detail));
}

}  // namespace tessera::testing
