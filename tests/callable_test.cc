// Session::make_callable, as TF's session_test.py uses it (testMakeCallableOnTensor,
// OnOperation, WithFeedList, the errors of a bad signature and of bad values), on the CPU and on
// the simulated accelerator, from many threads, and after the graph grows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
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

// A session on `device` with a callable from an Int64 scalar feed x to op(x, k): what the
// threaded cases call, each with values whose results it knows.
struct Int64Callable {
  Int64Callable(const std::string& device, Output (*op)(Output, Output, std::string), int64_t k) {
    auto scope = g.device(device);
    auto x = ops::placeholder(g, DType::Int64, Shape{});
    f = s.make_callable({op(x, ops::constant(g, k), "")}, {x});
  }
  Graph g;
  Session s{g};
  Callable f;
};

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
  Int64Callable times_3(GetParam(), ops::mul, 3);
  std::atomic<int> wrong{0};
  testing::run_threads(8, [&](int t) {
    for (int64_t i = 0; i < 200; ++i) {
      if (times_3.f({Tensor::scalar(i + t)})[0].scalar<int64_t>() != 3 * (i + t)) ++wrong;
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

TEST_P(CallableTest, EightThreadsWithTheirOwnFeedsGetTheirOwnResults) {
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Float32, Shape{3});
  auto y = ops::placeholder(g, DType::Float32, Shape{3});
  auto z = ops::add(ops::mul(x, y), x);  // x * y + x
  Session s(g);
  Callable f = s.make_callable({z, y}, {x, y});
  std::atomic<int> wrong{0};
  testing::run_threads(8, [&](int t) {
    for (int i = 0; i < 300; ++i) {
      const float a = static_cast<float>(t * 1000 + i);
      const std::vector<float> xs = {a, a + 1, a + 2};
      const std::vector<float> ys = {float(t), float(-t), 0.5f};
      auto out = f({Tensor::vector<float>(xs), Tensor::vector<float>(ys)});
      std::vector<float> want(3);
      for (int k = 0; k < 3; ++k) want[k] = xs[k] * ys[k] + xs[k];
      if (out.size() != 2 || out[0].to_vector<float>() != want || out[1].to_vector<float>() != ys) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(CallableTest, CallablesOfOneSessionInterleaveOnEachThread) {
  // Each thread alternates between two callables (two plans) and run(): each keeps its own step.
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Int64, Shape{});
  auto twice = ops::add(x, x);
  auto square = ops::mul(x, x);
  Session s(g);
  Callable f = s.make_callable({twice}, {x});
  Callable h = s.make_callable({square}, {x});
  std::atomic<int> wrong{0};
  testing::run_threads(8, [&](int t) {
    for (int64_t i = 0; i < 100; ++i) {
      const int64_t v = i * 8 + t;
      if (f({Tensor::scalar(v)})[0].scalar<int64_t>() != 2 * v) ++wrong;
      if (h({Tensor::scalar(v)})[0].scalar<int64_t>() != v * v) ++wrong;
      if (s.run({twice}, {{x, Tensor::scalar(v)}})[0].scalar<int64_t>() != 2 * v) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(CallableTest, FetchesOfConstantsFeedsAndRepeatsAreEachTheirValue) {
  // The step hands its fetched values over (Plan::fetch_moves): a constant, a value fetched twice
  // and a fed value must still be whole on every call.
  Graph g;
  auto scope = g.device(GetParam());
  auto a = ops::constant(g, 5.0f);
  auto x = ops::placeholder(g, DType::Float32, Shape{});
  auto c = ops::add(a, x);
  Session s(g);
  Callable f = s.make_callable({a, c, c, x}, {x});
  for (int i = 0; i < 4; ++i) {
    auto out = f({Tensor::scalar(float(i))});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].scalar<float>(), 5.0f);
    EXPECT_EQ(out[1].scalar<float>(), 5.0f + i);
    EXPECT_EQ(out[2].scalar<float>(), 5.0f + i);
    EXPECT_EQ(out[3].scalar<float>(), float(i));
  }
  auto run = s.run({c, c, a}, {{x, Tensor::scalar(1.0f)}});
  EXPECT_EQ(run[0].scalar<float>(), 6.0f);
  EXPECT_EQ(run[1].scalar<float>(), 6.0f);
  EXPECT_EQ(run[2].scalar<float>(), 5.0f);
}

TEST_P(CallableTest, AFailedCallLeavesTheNextOnesCorrect) {
  // A step that fails is not reused: the next call starts clean.
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Int32, Shape{});
  auto y = ops::placeholder(g, DType::Int32, Shape{});
  auto q = ops::div(x, y);
  Session s(g);
  Callable f = s.make_callable({q}, {x, y});
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(f({Tensor::scalar(int32_t{12}), Tensor::scalar(int32_t{i})})[0].scalar<int32_t>(), 12 / i);
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { f({Tensor::scalar(int32_t{1}), Tensor::scalar(int32_t{0})}); }),
                HasSubstr("division by zero"));
  }
}

TEST_P(CallableTest, ACallThatWaitsOnAQueueReturnsWhatWasEnqueued) {
  // The dequeue blocks (an asynchronous kernel): the step ends on another thread, not in start().
  Graph g;
  auto scope = g.device(GetParam());
  FIFOQueue queue(g, 10, {DType::Int64}, {Shape{}});
  auto v = ops::placeholder(g, DType::Int64, Shape{});
  auto enqueue = queue.enqueue({v});
  auto dequeued = ops::add(queue.dequeue()[0], ops::constant(g, int64_t{100}));
  Session s(g);
  Callable take = s.make_callable({dequeued});
  Callable put = s.make_callable({}, {v}, {enqueue});
  for (int64_t i = 0; i < 5; ++i) {
    std::vector<Tensor> out;
    std::thread taker([&] { out = take(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // usually blocked by now; either way works
    put({Tensor::scalar(i)});
    taker.join();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].scalar<int64_t>(), 100 + i);
  }
}

TEST_P(CallableTest, CloseWhileThreadsCallEndsEveryCall) {
  // Calls in flight when the session closes finish or fail with CancelledError; none hangs, and
  // every call after close() fails.
  Int64Callable plus_1(GetParam(), ops::add, 1);
  std::atomic<int> wrong{0};
  std::atomic<int> calls{0};
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    while (calls.load() < 400) std::this_thread::yield();
    plus_1.s.close();
    closed = true;
  });
  testing::run_threads(8, [&](int t) {
    for (int64_t i = 0;; ++i) {
      const bool was_closed = closed.load();
      try {
        if (plus_1.f({Tensor::scalar(i + t)})[0].scalar<int64_t>() != i + t + 1) ++wrong;
        if (was_closed) ++wrong;  // a call that starts after close() returned must fail
      } catch (const CancelledError&) {
        break;
      }
      ++calls;
    }
  });
  closer.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(CallableTest, ACallableMayOutliveItsSession) {
  // Destroying the handle after its session (whose plans its reusable step came from) is safe.
  Graph g;
  auto scope = g.device(GetParam());
  auto c = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f));
  Callable f;
  {
    Session s(g);
    f = s.make_callable({c});
    EXPECT_EQ(f()[0].scalar<float>(), 3.0f);
    EXPECT_EQ(f()[0].scalar<float>(), 3.0f);
  }
  f = Callable();  // the last reference goes after the session
}

TEST_P(CallableTest, ThreadsPickUpAGrowingGraph) {
  // Control edges added while threads call: each call runs the plan of the version it saw or a
  // later one; once every edge is in, each call runs every increment.
  Graph g;
  auto scope = g.device(GetParam());
  auto marker = ops::no_op(g, "marker");
  Session s(g);
  Callable f = s.make_callable({}, {}, {marker});
  std::vector<Variable> vars;
  std::vector<Operation> incs;
  for (int k = 0; k < 4; ++k) {
    vars.emplace_back(g, Tensor::scalar(int64_t{0}), "v" + std::to_string(k));
    incs.push_back(vars.back().assign_add(ops::constant(g, int64_t{1})).op());
  }
  s.run(global_variables_initializer(g));
  std::atomic<bool> grown{false};
  std::atomic<int64_t> after{0};
  std::thread grower([&] {
    for (const Operation& inc : incs) {
      marker.add_control_input(inc);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    grown = true;
  });
  testing::run_threads(4, [&](int) {
    for (int i = 0; i < 200 || !grown.load(); ++i) {
      const bool all_in = grown.load();
      f();
      if (all_in) ++after;
    }
  });
  grower.join();
  for (const Variable& v : vars) EXPECT_GE(s.run(v.value()).scalar<int64_t>(), after.load());
}

TEST_P(CallableTest, MoreCallablesAndThreadsThanTheyKeepStepsFor) {
  // A thread rotating over six callables (its cache keeps four) and 70 threads on one callable
  // (which keeps steps for 64): the rest make their own steps, with the same results.
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::placeholder(g, DType::Int64, Shape{});
  Session s(g);
  std::vector<Callable> fs;
  for (int64_t k = 0; k < 6; ++k) fs.push_back(s.make_callable({ops::add(x, ops::constant(g, k))}, {x}));
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(fs[k]({Tensor::scalar(i)})[0].scalar<int64_t>(), i + k);
  }
  std::atomic<int> wrong{0};
  testing::run_threads(70, [&](int t) {
    for (int64_t i = 0; i < 20; ++i) {
      if (fs[5]({Tensor::scalar(i * t)})[0].scalar<int64_t>() != i * t + 5) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
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
