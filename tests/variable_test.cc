// Variables: behaviours ported from TensorFlow's variables_test.py, plus atomicity under threads.
#include <atomic>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using testing::kThreadCounts;

TEST(VariableTest, InitializeReadAndAssign) {
  Graph g;
  Variable v(g, Tensor::vector<float>({1, 2, 3}), "weights");
  EXPECT_EQ(v.name(), "weights");
  EXPECT_EQ(v.dtype(), DType::Float32);
  EXPECT_EQ(v.shape(), (Shape{3}));
  auto assign = v.assign(ops::constant(g, Tensor::vector<float>({4, 5, 6})));
  Session s(g);
  s.run(v.initializer());
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(s.run(assign).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{4, 5, 6}));
}

TEST(VariableTest, UninitializedReadIsFailedPreconditionNamingTheVariable) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "not_ready");
  auto twice = ops::mul(v.value(), ops::constant(g, 2.0f));
  auto bump = v.assign_add(ops::constant(g, 1.0f));
  Session s(g);
  EXPECT_THROW_MSG(s.run(twice), FailedPreconditionError, "not_ready");
  EXPECT_THROW_MSG(s.run(bump), FailedPreconditionError, "not_ready");
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(twice).scalar<float>(), 2.0f);
}

TEST(VariableTest, AssignAddAndSubReturnTheNewValue) {
  Graph g;
  Variable v(g, Tensor::scalar<int32_t>(10), "v");
  auto add = v.assign_add(ops::constant(g, 5));
  auto sub = v.assign_sub(ops::constant(g, 3));
  Session s(g);
  s.run(v.initializer());
  EXPECT_EQ(s.run(add).scalar<int32_t>(), 15);
  EXPECT_EQ(s.run(sub).scalar<int32_t>(), 12);
  EXPECT_EQ(s.run(v.value()).scalar<int32_t>(), 12);
}

TEST(VariableTest, ReadIsASnapshotThatLaterUpdatesDoNotChange) {
  Graph g;
  Variable v(g, Tensor::vector<double>({1, 1}), "v");
  auto add = v.assign_add(ops::constant(g, Tensor::vector<double>({1, 1})));
  Session s(g);
  s.run(v.initializer());
  Tensor before = s.run(v.value());
  Tensor returned = s.run(add);
  s.run(add);
  EXPECT_EQ(before.to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(returned.to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(s.run(v.value()).to_vector<double>(), (std::vector<double>{3, 3}));
}

// TF1's read_value(): a read built under control_dependencies runs after the ops named there and
// sees what they wrote (value() is read when the variable's node runs, before them).
TEST(VariableTest, ReadValueUnderControlDependenciesSeesTheUpdate) {
  Graph g;
  Variable v(g, Tensor::scalar<int64_t>(1), "counter");
  Output bump = v.assign_add(ops::constant(g, int64_t{1}));
  Output after;
  {
    GraphScope deps = g.control_dependencies({bump.op()});
    after = ops::mul(v.read_value(), ops::constant(g, int64_t{10}));
  }
  EXPECT_NE(v.read_value().op(), v.read_value().op()) << "a new read per call";
  Output read = v.read_value();
  Session s(g);
  s.run(v.initializer());
  EXPECT_EQ(s.run(after).scalar<int64_t>(), 20);
  EXPECT_EQ(s.run(after).scalar<int64_t>(), 30);
  EXPECT_EQ(s.run(read).scalar<int64_t>(), 3);
  EXPECT_EQ(read.op().assigned_device(), v.op().assigned_device());
  EXPECT_FALSE(read.op().assigned_device().empty());
  // Uninitialized, it fails as value() does.
  Variable late(g, Tensor::scalar(1.0f), "late");
  EXPECT_THROW_MSG(s.run(late.read_value()), FailedPreconditionError, "late");
}

// TF1 makes a variable and its initializer in an init_scope: made under control_dependencies,
// initializing it does not run the ops named there (an optimizer's slots, made where its train op
// is built, under control_dependencies(layers::update_ops(g)), rely on this).
TEST(VariableTest, InitializerIsNotOrderedAfterTheControlScope) {
  Graph g;
  Variable counter(g, Tensor::scalar<int64_t>(0), "counter");
  Output bump = counter.assign_add(ops::constant(g, int64_t{1}));
  Variable v;
  {
    GraphScope deps = g.control_dependencies({bump.op()});
    v = Variable(g, Tensor::scalar(2.0f), "v");
  }
  EXPECT_TRUE(v.initializer().control_inputs().empty());
  EXPECT_TRUE(v.initializer().input(0).op().control_inputs().empty());
  Session s(g);
  s.run(counter.initializer());
  s.run(v.initializer());
  EXPECT_EQ(s.run(counter.value()).scalar<int64_t>(), 0) << "initializing v ran the bump";
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 2.0f);
}

TEST(VariableTest, InitialValueFromAnotherOp) {
  Graph g;
  auto init = ops::mul(ops::constant(g, Tensor::vector<float>({1, 2})), ops::constant(g, 3.0f));
  Variable v(init, "scaled");
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{3, 6}));
}

TEST(VariableTest, AssignChecksDtypeAndShapeAtBuildTime) {
  Graph g;
  Variable v(g, Tensor::vector<float>({1, 2}), "typed");
  EXPECT_THROW_MSG(v.assign(ops::constant(g, Tensor::vector<int32_t>({1, 2}))), InvalidArgumentError, "typed");
  EXPECT_THROW_MSG(v.assign_add(ops::constant(g, Tensor::vector<float>({1, 2, 3}))), InvalidArgumentError,
                   "[3]");
  Variable flag(g, Tensor::scalar(true), "flag");
  EXPECT_THROW(flag.assign_add(ops::constant(g, true)), InvalidArgumentError);
}

TEST(VariableTest, PartialShapeVariableChecksUpdatesAtRunTime) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  Variable v(x, "dynamic");
  auto bump = v.assign_add(x);
  Session s(g);
  s.run(v.initializer(), {{x, Tensor::vector<float>({1, 2})}});
  EXPECT_EQ(s.run(bump, {{x, Tensor::vector<float>({1, 1})}}).to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_THROW_MSG(s.run(bump, {{x, Tensor::vector<float>({1, 1, 1})}}), InvalidArgumentError, "dynamic");
}

TEST(VariableTest, GlobalVariablesInitializerCoversEveryVariable) {
  Graph g;
  Variable a(g, Tensor::scalar(1.0f), "a");
  Variable b(g, Tensor::scalar(2.0f), "b");
  EXPECT_EQ(global_variables(g).size(), 2u);
  auto sum = ops::add(a.value(), b.value());
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(sum).scalar<float>(), 3.0f);
}

TEST(VariableTest, InitializerWithNoVariablesIsANoOp) {
  Graph g;
  Session s(g);
  EXPECT_NO_THROW(s.run(global_variables_initializer(g)));
}

TEST(VariableTest, EachInProcessSessionHasItsOwnState) {
  Graph g;
  Variable v(g, Tensor::scalar<int32_t>(0), "v");
  auto inc = v.assign_add(ops::constant(g, 1));
  Session s1(g), s2(g);
  s1.run(v.initializer());
  s1.run(inc);
  EXPECT_THROW(s2.run(v.value()), FailedPreconditionError);
  s2.run(v.initializer());
  EXPECT_EQ(s2.run(v.value()).scalar<int32_t>(), 0);
  EXPECT_EQ(s1.run(v.value()).scalar<int32_t>(), 1);
}

TEST(VariableTest, DefaultConstructedHandleIsRejected) {
  Variable v;
  EXPECT_THROW(v.value(), InvalidArgumentError);
}

class VariableConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(VariableConcurrencyTest, ConcurrentAssignAddLosesNoUpdate) {
  const int threads = GetParam();
  constexpr int kSteps = 500;
  Graph g;
  Variable v(g, Tensor::scalar<int64_t>(0), "counter");
  auto inc = v.assign_add(ops::constant(g, int64_t{1}));
  Session s(g);
  s.run(v.initializer());
  testing::run_threads(threads, [&](int) {
    for (int i = 0; i < kSteps; ++i) s.run(inc.op());
  });
  EXPECT_EQ(s.run(v.value()).scalar<int64_t>(), int64_t{threads} * kSteps);
}

TEST_P(VariableConcurrencyTest, ReadsNeverSeeAHalfDoneUpdate) {
  const int threads = GetParam();
  Graph g;
  Variable v(g, Tensor::zeros(DType::Float32, {256}), "vec");
  auto inc = v.assign_add(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(256, 1.0f), {256})));
  Session s(g);
  s.run(v.initializer());
  std::atomic<int> torn{0};
  testing::run_threads(threads + 1, [&](int id) {
    for (int i = 0; i < 200; ++i) {
      if (id == 0) {
        auto t = s.run(v.value()).to_vector<float>();
        for (float x : t) {
          if (x != t[0]) torn++;
        }
      } else {
        s.run(inc.op());
      }
    }
  });
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(s.run(v.value()).to_vector<float>()[255], 200.0f * threads);
}

INSTANTIATE_TEST_SUITE_P(Threads, VariableConcurrencyTest, ::testing::ValuesIn(testing::kThreadCounts));

}  // namespace
}  // namespace tessera
