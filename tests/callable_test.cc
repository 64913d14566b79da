// Session::make_callable, as TF's session_test.py uses it (testMakeCallableOnTensor,
// OnOperation, WithFeedList, the errors of a bad signature and of bad values), on the CPU and on
// the simulated accelerator, from many threads, and after the graph grows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

class CallableTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CallableTest, OnATensor) {
  Graph g;
  auto scope = g.device(GetParam());
  auto a = ops::constant(g, 3.0f);
  auto b = ops::constant(g, 4.0f);
  auto c = ops::add(a, b);
  Session s(g);
  Callable f = s.make_callable({c});
  for (int i = 0; i < 3; ++i) {
    auto out = f();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].scalar<float>(), 7.0f);
  }
}

TEST_P(CallableTest, WithFeedsInTheCallablesOrder) {
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Float32, Shape{2});
  auto y = ops::placeholder(g, DType::Float32, Shape{2});
  auto d = ops::sub(x, y);
  Session s(g);
  // y before x: the values follow the callable's feed order, not the graph's.
  Callable f = s.make_callable({d, x}, {y, x});
  auto out = f({Tensor::vector<float>({1, 2}), Tensor::vector<float>({10, 20})});
  EXPECT_THAT(out[0].to_vector<float>(), ElementsAre(9, 18));
  EXPECT_THAT(out[1].to_vector<float>(), ElementsAre(10, 20));
}

TEST_P(CallableTest, OnAnOperationRunsIt) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable v(g, Tensor::scalar(int64_t{0}), "v");
  auto inc = v.assign_add(ops::constant(g, int64_t{1}));
  Session s(g);
  s.run(global_variables_initializer(g));
  Callable f = s.make_callable({}, {}, {inc.op()});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(f().empty());
  EXPECT_EQ(s.run(v.value()).scalar<int64_t>(), 5);
}

TEST_P(CallableTest, ManyThreadsShareOneCallable) {
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Int64, Shape{});
  auto y = ops::mul(x, ops::constant(g, int64_t{3}));
  Session s(g);
  Callable f = s.make_callable({y}, {x});
  std::atomic<int> wrong{0};
  testing::run_threads(8, [&](int t) {
    for (int64_t i = 0; i < 200; ++i) {
      if (f({Tensor::scalar(i + t)})[0].scalar<int64_t>() != 3 * (i + t)) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(CallableTest, SeesControlEdgesAddedAfterItWasMade) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable v(g, Tensor::scalar(int64_t{0}), "v");
  auto inc = v.assign_add(ops::constant(g, int64_t{1}));
  auto marker = ops::no_op(g, "marker");
  Session s(g);
  s.run(global_variables_initializer(g));
  Callable f = s.make_callable({}, {}, {marker});
  f();
  EXPECT_EQ(s.run(v.value()).scalar<int64_t>(), 0);
  marker.add_control_input(inc.op());  // bumps the graph's version: the callable plans again
  f();
  EXPECT_EQ(s.run(v.value()).scalar<int64_t>(), 1);
}

TEST(CallableErrorsTest, ABadSignatureOrBadValuesAreInvalidArgumentErrors) {
  Graph g;
  Graph other;
  auto x = ops::placeholder(g, DType::Float32, Shape{2});
  auto y = ops::square(x);
  auto z = ops::constant(other, 1.0f);
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.make_callable({z}); }), HasSubstr("not an element"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.make_callable({y}, {x, x}); }), HasSubstr("listed twice"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.make_callable({Output()}); }), HasSubstr("null"));
  Callable f = s.make_callable({y}, {x});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { f(); }), HasSubstr("has 1 feeds, it was called with 0"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { f({Tensor::vector<int32_t>({1, 2})}); }),
              HasSubstr("cannot feed a int32 tensor"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { f({Tensor::vector<float>({1, 2, 3})}); }),
              HasSubstr("of shape [3]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { f({Tensor()}); }), HasSubstr("null tensor"));
  EXPECT_THAT(f({Tensor::vector<float>({2, 3})})[0].to_vector<float>(), ElementsAre(4, 9)) << "still usable";
  // An unfed placeholder fails each call, as the run would.
  Callable unfed = s.make_callable({y});
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { unfed(); }), HasSubstr("placeholder"));
  Callable empty;
  EXPECT_THROW(empty(), FailedPreconditionError);
  s.close();
  EXPECT_THAT(error_of<CancelledError>([&] { f({Tensor::vector<float>({2, 3})}); }), HasSubstr("closed session"));
}

INSTANTIATE_TEST_SUITE_P(Devices, CallableTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         [](const auto& info) { return info.index == 0 ? std::string("CPU") : std::string("SIM"); });

}  // namespace
}  // namespace tessera
