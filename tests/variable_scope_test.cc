// Variable scopes, get_variable and the initializers, with the cases of TensorFlow's
// variable_scope_test.py (testGetVar, testNameExists, testVarScopeInitializer,
// testVarScopeRegularizer, testVarScopeReuse, testVarScopeGetOrCreateReuse, testGetVarWithDevice,
// the shape and dtype checks of sharing, name scopes ignored by get_variable) and
// init_ops_test.py (the range and spread of each initializer, variance_scaling's fans, seeds that
// repeat, the checks of the arguments). Expected values are computed here from the definitions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

std::vector<float> run_floats(Session& s, const Output& x) { return s.run(x).to_vector<float>(); }

struct Stats {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Stats stats_of(const std::vector<float>& v) {
  Stats st;
  st.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double sq = 0;
  for (float x : v) sq += (x - st.mean) * (x - st.mean);
  st.stddev = std::sqrt(sq / static_cast<double>(v.size()));
  st.min = *std::min_element(v.begin(), v.end());
  st.max = *std::max_element(v.begin(), v.end());
  return st;
}

TEST(VariableScopeTest, GetVariableNamesByTheVariableScopesOnly) {
  Graph g;
  Variable top = get_variable(g, "v", {1});
  EXPECT_EQ(top.name(), "v");
  Variable inner, in_name_scope;
  Output op;
  {
    auto foo = variable_scope(g, "foo");
    auto bar = variable_scope(g, "bar");
    EXPECT_EQ(variable_scope_name(g), "foo/bar");
    inner = get_variable(g, "v", {1});
    op = ops::identity(inner.value(), "read");
    auto ns = g.name_scope("ns");  // a name scope does not name variables (TF's get_variable)
    in_name_scope = get_variable(g, "w", {1});
  }
  EXPECT_EQ(variable_scope_name(g), "");
  EXPECT_EQ(inner.name(), "foo/bar/v");
  EXPECT_EQ(in_name_scope.name(), "foo/bar/w");
  EXPECT_EQ(op.op().name(), "foo/bar/read") << "a variable scope is also a name scope";
  EXPECT_EQ(inner.initializer().input(0).op().name().rfind("foo/bar/v/Initializer/", 0), 0u)
      << inner.initializer().input(0).op().name();
}

TEST(VariableScopeTest, AnExistingNameIsAnErrorUnlessTheScopeReuses) {
  Graph g;
  Variable v;
  {
    auto scope = variable_scope(g, "foo");
    v = get_variable(g, "v", {1});
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "v", {1}); }),
                HasSubstr("variable 'foo/v' already exists, disallowed"));
  }
  {
    auto scope = variable_scope(g, "foo", Reuse::reuse);
    Variable again = get_variable(g, "v", {1});
    EXPECT_EQ(again.op(), v.op());
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "u", {1}); }),
                HasSubstr("variable 'foo/u' does not exist"));
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "v", {2}); }),
                HasSubstr("trying to share variable 'foo/v', but the shape [2] was asked for and it has [1]"));
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "v", {1}, DType::Float64); }),
                HasSubstr("but the dtype float64 was asked for and it has float32"));
    // Reuse is inherited by the scopes inside (testVarScopeReuse).
    auto inner = variable_scope(g, "bar");
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "v", {1}); }),
                HasSubstr("'foo/bar/v' does not exist"));
  }
  EXPECT_EQ(global_variables(g).size(), 1u);
}

TEST(VariableScopeTest, AutoReuseMakesThenFinds) {
  Graph g;
  auto make = [&g] {
    auto scope = variable_scope(g, "foo", Reuse::auto_reuse);
    return get_variable(g, "v", {2, 3});
  };
  Variable a = make(), b = make();
  EXPECT_EQ(a.op(), b.op());
  EXPECT_EQ(global_variables(g).size(), 1u);
  EXPECT_EQ(trainable_variables(g).size(), 1u);
}

TEST(VariableScopeTest, ScopeInitializerAppliesInsideAndCanBeOverridden) {
  Graph g;
  Variable a, b, c, d;
  {
    auto foo = variable_scope(g, "foo", {.initializer = initializers::constant(0.3)});
    a = get_variable(g, "a", {2});
    {
      auto bar = variable_scope(g, "bar");
      b = get_variable(g, "b", {2});  // inherited
      c = get_variable(g, "c", {2}, DType::Float32, initializers::constant(0.2));  // the argument wins
    }
    auto baz = variable_scope(g, "baz", {.initializer = initializers::constant(0.1)});
    d = get_variable(g, "d", {2});
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(run_floats(s, a), ::testing::ElementsAre(0.3f, 0.3f));
  EXPECT_THAT(run_floats(s, b), ::testing::ElementsAre(0.3f, 0.3f));
  EXPECT_THAT(run_floats(s, c), ::testing::ElementsAre(0.2f, 0.2f));
  EXPECT_THAT(run_floats(s, d), ::testing::ElementsAre(0.1f, 0.1f));
}

TEST(VariableScopeTest, DefaultInitializersByDtype) {
  Graph g;
  Variable f = get_variable(g, "f", {50, 40});
  Variable i = get_variable(g, "i", {3}, DType::Int32);
  Variable l = get_variable(g, "l", {2}, DType::Int64);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "s", {1}, DType::String); }),
              HasSubstr("variable 's' of string needs an initializer"));
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(s.run(i).to_vector<int32_t>(), ::testing::ElementsAre(0, 0, 0));
  EXPECT_THAT(s.run(l).to_vector<int64_t>(), ::testing::ElementsAre(0, 0));
  // glorot_uniform: within +-sqrt(6 / (50 + 40)), and not all one value.
  const Stats st = stats_of(run_floats(s, f));
  const double limit = std::sqrt(6.0 / 90);
  EXPECT_GE(st.min, -limit);
  EXPECT_LE(st.max, limit);
  EXPECT_GT(st.stddev, 0.5 * limit / std::sqrt(3.0));
}

TEST(VariableScopeTest, RegularizersAddTheirPenaltyOnceWhenTheVariableIsMade) {
  Graph g;
  auto penalty = [](Output w) { return ops::reduce_sum(w); };
  Variable a, b, c;
  {
    auto foo = variable_scope(g, "foo", {.initializer = initializers::constant(0.5), .regularizer = penalty});
    a = get_variable(g, "a", {2});
    b = get_variable(g, "b", {3}, DType::Float32, {}, [](Output w) { return ops::reduce_sum(ops::square(w)); });
    c = get_variable(g, "c", {4}, DType::Float32, {}, [](Output) { return Output(); });  // no penalty
  }
  {
    auto again = variable_scope(g, "foo", Reuse::reuse);
    get_variable(g, "a", {2});  // found: not regularized twice
  }
  std::vector<Output> penalties = losses::get_regularization_losses(g);
  ASSERT_EQ(penalties.size(), 2u);
  EXPECT_EQ(penalties[0].op().name().rfind("foo/a/Regularizer/", 0), 0u) << penalties[0].op().name();
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_FLOAT_EQ(s.run(penalties[0]).scalar<float>(), 1.0f);   // 0.5 + 0.5
  EXPECT_FLOAT_EQ(s.run(penalties[1]).scalar<float>(), 0.75f);  // 3 * 0.25
}

TEST(VariableScopeTest, MadeOutsideControlDependenciesOnTheCurrentDevice) {
  Graph g;
  Operation before = ops::no_op(g);
  Variable v;
  {
    auto device = g.device("/job:ps/task:1");
    auto deps = g.control_dependencies({before});
    auto scope = variable_scope(g, "foo");
    v = get_variable(g, "v", {1});
  }
  EXPECT_TRUE(v.op().control_inputs().empty());
  EXPECT_TRUE(v.initializer().control_inputs().empty());
  EXPECT_TRUE(v.initializer().input(0).op().control_inputs().empty());
  EXPECT_EQ(v.op().device(), "/job:ps/task:1");
}

TEST(VariableScopeTest, BadArguments) {
  Graph g;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "v", Shape{-1, 2}); }),
              HasSubstr("the shape of the new variable 'v' must be fully defined, not [?,2]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "", {1}); }), HasSubstr("name is empty"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { (void)variable_scope(g, "a:b"); }), HasSubstr("'a:b'"));
  // An initializer that makes the wrong tensor.
  Initializer wrong = [](Graph& gr, const Shape&, DType) { return ops::constant(gr, Tensor::vector<float>({1, 2})); };
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "w", {3}, DType::Float32, wrong); }),
              HasSubstr("the initializer of 'w' made a float32 tensor of shape [2], not a float32 tensor of shape [3]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { get_variable(g, "i", {3}, DType::Int32, initializers::he_normal()); }),
              HasSubstr("initializers::variance_scaling: int32 is not a floating point dtype"));
  EXPECT_THAT(error_of<InvalidArgumentError>([] { initializers::variance_scaling(0); }),
              HasSubstr("scale must be positive"));
  EXPECT_THAT(error_of<InvalidArgumentError>([] { initializers::variance_scaling(1, "fan_sum"); }),
              HasSubstr("not \"fan_sum\""));
  EXPECT_THAT(error_of<InvalidArgumentError>([] { initializers::variance_scaling(1, "fan_in", "cauchy"); }),
              HasSubstr("not \"cauchy\""));
  // The scope closes even when what is built inside it throws.
  try {
    auto scope = variable_scope(g, "broken");
    get_variable(g, "x", Shape{-1});
  } catch (const InvalidArgumentError&) {
  }
  EXPECT_EQ(variable_scope_name(g), "");
}

TEST(InitializersTest, ConstantsInEachDtype) {
  Graph g;
  Output f64 = initializers::constant(2.5)(g, Shape{2}, DType::Float64);
  Output i64 = initializers::constant(3e10)(g, Shape{1}, DType::Int64);
  Output b = initializers::ones()(g, Shape{2}, DType::Bool);
  Output h = initializers::ones()(g, Shape{2}, DType::Float16);
  Session s(g);
  EXPECT_THAT(s.run(f64).to_vector<double>(), ::testing::ElementsAre(2.5, 2.5));
  EXPECT_THAT(s.run(i64).to_vector<int64_t>(), ::testing::ElementsAre(int64_t{30000000000}));
  EXPECT_THAT(s.run(b).to_vector<bool>(), ::testing::ElementsAre(true, true));
  EXPECT_THAT(s.run(ops::cast(h, DType::Float32)).to_vector<float>(), ::testing::ElementsAre(1.0f, 1.0f));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { initializers::zeros()(g, Shape{-1}, DType::Float32); }),
              HasSubstr("initializers::zeros: the shape [?] is not fully defined"));
}

TEST(InitializersTest, RandomInitializersRangeAndSpread) {
  Graph g;
  const Shape shape{200, 100};
  Output uniform = initializers::random_uniform(-3, 5, 1)(g, shape, DType::Float32);
  Output normal = initializers::random_normal(2, 0.5, 2)(g, shape, DType::Float32);
  Output truncated = initializers::truncated_normal(-1, 2, 3)(g, shape, DType::Float32);
  Output f64 = initializers::random_uniform(0, 1, 4)(g, Shape{10}, DType::Float64);
  Session s(g);
  const Stats u = stats_of(run_floats(s, uniform));
  EXPECT_GE(u.min, -3);
  EXPECT_LT(u.max, 5);
  EXPECT_NEAR(u.mean, 1, 0.1);
  EXPECT_NEAR(u.stddev, 8 / std::sqrt(12.0), 0.1);
  const Stats n = stats_of(run_floats(s, normal));
  EXPECT_NEAR(n.mean, 2, 0.03);
  EXPECT_NEAR(n.stddev, 0.5, 0.02);
  const Stats t = stats_of(run_floats(s, truncated));
  EXPECT_GE(t.min, -1 - 2 * 2);
  EXPECT_LE(t.max, -1 + 2 * 2);
  EXPECT_NEAR(t.mean, -1, 0.1);
  EXPECT_NEAR(t.stddev, 2 * 0.8796, 0.1);  // a normal truncated at 2 stddev
  EXPECT_EQ(s.run(f64).dtype(), DType::Float64);
}

TEST(InitializersTest, VarianceScalingUsesTheFans) {
  Graph g;
  const Shape conv{3, 3, 16, 32};  // fan_in 3*3*16 = 144, fan_out 3*3*32 = 288
  Output he = initializers::he_normal(1)(g, conv, DType::Float32);
  Output glorot = initializers::glorot_uniform(2)(g, conv, DType::Float32);
  Output lecun = initializers::lecun_uniform(3)(g, Shape{400, 10}, DType::Float32);
  Output out_normal = initializers::variance_scaling(3, "fan_out", "untruncated_normal", 4)(g, Shape{50, 600},
                                                                                            DType::Float32);
  Session s(g);
  // The truncation's correction makes the truncated draws' stddev sqrt(scale / n).
  const Stats h = stats_of(run_floats(s, he));
  EXPECT_NEAR(h.stddev, std::sqrt(2.0 / 144), 0.05 * std::sqrt(2.0 / 144));
  EXPECT_LE(std::max(-h.min, h.max), 2 * std::sqrt(2.0 / 144) / 0.87962566103423978 + 1e-6);
  const double glorot_limit = std::sqrt(3.0 / ((144.0 + 288.0) / 2));
  const Stats gl = stats_of(run_floats(s, glorot));
  EXPECT_LE(std::max(-gl.min, gl.max), glorot_limit);
  EXPECT_NEAR(gl.stddev, glorot_limit / std::sqrt(3.0), 0.05 * glorot_limit);
  const Stats le = stats_of(run_floats(s, lecun));
  EXPECT_LE(std::max(-le.min, le.max), std::sqrt(3.0 / 400));
  const Stats on = stats_of(run_floats(s, out_normal));
  EXPECT_NEAR(on.stddev, std::sqrt(3.0 / 600), 0.05 * std::sqrt(3.0 / 600));
}

TEST(InitializersTest, ASeedRepeatsItsValues) {
  Graph g;
  Variable a = get_variable(g, "a", {5}, DType::Float32, initializers::glorot_uniform(7));
  Variable b = get_variable(g, "b", {5}, DType::Float32, initializers::glorot_uniform(7));
  Variable c = get_variable(g, "c", {5}, DType::Float32, initializers::glorot_uniform(8));
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<float> first = run_floats(s, a);
  EXPECT_EQ(run_floats(s, b), first);
  EXPECT_NE(run_floats(s, c), first);
  // An op seed repeats the sequence of values over runs: a new session starts it again (as TF's).
  Session again(g);
  again.run(global_variables_initializer(g));
  EXPECT_EQ(run_floats(again, a), first);
}

}  // namespace
}  // namespace tessera
