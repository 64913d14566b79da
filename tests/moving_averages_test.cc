// The moving averages of tessera/moving_averages.h with the cases of TensorFlow 1's
// moving_averages_test.py: assign_moving_average with and without zero debiasing, its naming;
// ExponentialMovingAverage's _CheckDecay cases (scalar and vector, with and without num_updates
// and zero_debias), shadow names under name scopes, variables_to_restore, control dependencies,
// colocation and placement; then training with an EMA (in process and on a ps/worker cluster) and
// a checkpoint round trip through Saver(g, variables_to_restore). Every expected value is the
// closed form of the update computed here in double, as TF's tests write it. The numeric cases run
// on the CPU and on the simulated accelerator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/node.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;
using testing::error_of;
using testing::names_of;
using train::ExponentialMovingAverage;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

template <class T>
Tensor vec(std::vector<double> v) {
  return Tensor::vector<T>(std::vector<T>(v.begin(), v.end()));
}

// A tensor's elements as doubles (a scalar as one element).
std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::Float64) {
    for (double x : t.to_vector<double>()) out.push_back(x);
  } else {
    for (float x : t.to_vector<float>()) out.push_back(x);
  }
  return out;
}

std::vector<double> repeat(double value, int dim) { return std::vector<double>(static_cast<std::size_t>(dim), value); }

MATCHER_P2(NearVector, expected, tolerance, "") {
  if (arg.size() != expected.size()) {
    *result_listener << "has " << arg.size() << " elements, expected " << expected.size();
    return false;
  }
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (!(std::abs(arg[i] - expected[i]) <= tolerance * std::max(1.0, std::abs(expected[i])))) {
      *result_listener << "element " << i << " is " << arg[i] << ", expected " << expected[i];
      return false;
    }
  }
  return true;
}

constexpr double kTolerance = 1e-6;  // relative: float32's arithmetic

std::vector<std::string> keys_of(const std::map<std::string, Variable>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

std::optional<Variable> variable_named(Graph& g, const std::string& name) {
  for (const Variable& v : global_variables(g)) {
    if (v.name() == name) return v;
  }
  return std::nullopt;
}

bool colocated_with(const Variable& v, const Variable& primary) {
  const auto& colocation = v.op().node()->colocate_with;
  return colocation.size() == 1 && colocation[0] == primary.op().node();
}

class MovingAveragesTest : public ::testing::TestWithParam<std::string> {};

// ---- assign_moving_average (MovingAveragesTest in moving_averages_test.py) ----

TEST_P(MovingAveragesTest, AssignMovingAverageWithoutZeroDebias) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable var(g, vec<float>({10, 11}), "var");
  Output val = ops::placeholder(g, DType::Float32, Shape{2}, "val");
  const double decay = 0.25;
  Output assign = train::assign_moving_average(var, val, decay, /*zero_debias=*/false);
  EXPECT_EQ(assign.op().name(), "AssignMovingAvg");
  EXPECT_EQ(assign.op().type(), "AssignSub");
  EXPECT_EQ(global_variables(g).size(), 1u) << "no debias variables without zero_debias";
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(values(s.run(var.value())), ElementsAre(10, 11));
  const Tensor returned = s.run(assign, {{val, vec<float>({1, 2})}});
  const std::vector<double> once = {10 * 0.25 + 1 * (1 - 0.25), 11 * 0.25 + 2 * (1 - 0.25)};
  EXPECT_THAT(values(returned), NearVector(once, kTolerance)) << "returns the new value";
  EXPECT_THAT(values(s.run(var.value())), NearVector(once, kTolerance));
  s.run(assign.op(), {{val, vec<float>({-3, 5})}});
  EXPECT_THAT(values(s.run(var.value())),
              NearVector(std::vector<double>{once[0] * 0.25 - 3 * 0.75, once[1] * 0.25 + 5 * 0.75}, kTolerance));
}

TEST_P(MovingAveragesTest, AssignMovingAverage) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable var(g, vec<float>({0, 0}), "var");
  Output val = ops::placeholder(g, DType::Float32, Shape{2}, "val");
  const double d = 0.25;
  Output assign = train::assign_moving_average(var, val, d);  // zero_debias by default
  EXPECT_EQ(assign.op().name(), "AssignMovingAvg");
  // The debias state: "<var>/biased" and "<var>/local_step", not trainable, next to the variable.
  const std::vector<Variable> vars = global_variables(g);
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_THAT(names_of(vars), ElementsAre("var", "var/biased", "var/local_step"));
  const Variable& biased = vars[1];
  const Variable& local_step = vars[2];
  EXPECT_EQ(biased.shape(), (Shape{2}));
  EXPECT_EQ(local_step.shape(), (Shape{}));
  EXPECT_EQ(local_step.dtype(), DType::Float32);
  EXPECT_THAT(names_of(trainable_variables(g)), ElementsAre("var"));
  EXPECT_TRUE(colocated_with(biased, var));
  EXPECT_TRUE(colocated_with(local_step, var));

  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(values(s.run(var.value())), ElementsAre(0, 0));
  s.run(assign.op(), {{val, vec<float>({1, 2})}});
  // TF's case: 1 * (1 - 0.25) / (1 - 0.25), 2 * (1 - 0.25) / (1 - 0.25).
  EXPECT_THAT(values(s.run(var.value())), NearVector(std::vector<double>{1, 2}, kTolerance));
  // A second value: biased = b1 * d + a2 * (1 - d), debiased by 1 - d^2.
  s.run(assign.op(), {{val, vec<float>({5, -4})}});
  const std::vector<double> b2 = {1 * (1 - d) * d + 5 * (1 - d), 2 * (1 - d) * d - 4 * (1 - d)};
  EXPECT_THAT(values(s.run(biased.value())), NearVector(b2, kTolerance));
  EXPECT_THAT(values(s.run(local_step.value())), ElementsAre(2));
  EXPECT_THAT(values(s.run(var.value())),
              NearVector(std::vector<double>{b2[0] / (1 - d * d), b2[1] / (1 - d * d)}, kTolerance));
}

// A decay tensor (here fed, so it may change every run) of another dtype than the variable: 1 -
// decay is taken in the decay's dtype and cast.
TEST_P(MovingAveragesTest, DecayTensorCastToTheVariablesDtype) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable var(g, vec<double>({4, -8}), "var");
  Output decay = ops::placeholder(g, DType::Float32, Shape{}, "decay");
  Output assign = train::assign_moving_average(var, ops::constant(g, vec<double>({2, 2})), decay, false, "ema_step");
  EXPECT_EQ(assign.op().name(), "ema_step");
  EXPECT_EQ(assign.dtype(), DType::Float64);
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(assign.op(), {{decay, Tensor::scalar(0.5f)}});
  EXPECT_THAT(values(s.run(var.value())), NearVector(std::vector<double>{3, -3}, 1e-12));
  s.run(assign.op(), {{decay, Tensor::scalar(0.75f)}});
  EXPECT_THAT(values(s.run(var.value())), NearVector(std::vector<double>{3 * 0.75 + 2 * 0.25, -3 * 0.75 + 2 * 0.25}, 1e-12));
}

// Built under control_dependencies, the update reads the variables when it runs: here the value
// is a variable the scope's op sets first (TF1 reads ref variables so). The sets read the
// variables' value() themselves, so that value is the one from before them in this step.
TEST_P(MovingAveragesTest, ReadsVariablesAfterItsControlDependencies) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable var(g, Tensor::scalar(0.0f), "var");
  Variable x(g, Tensor::scalar(1.0f), "x");
  Output set_x = x.assign(ops::add(x.value(), ops::constant(g, 4.0f)));        // 5
  Output set_var = var.assign(ops::add(var.value(), ops::constant(g, 2.0f)));  // 2
  Output assign;
  {
    auto after = g.control_dependencies({set_x.op(), set_var.op()});
    assign = train::assign_moving_average(var, x, 0.5, /*zero_debias=*/false);
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  // Reading the values from before the sets (0 and 1) would give 2 - (0 - 1) * 0.5.
  EXPECT_EQ(s.run(assign).scalar<float>(), 2.0f - (2.0f - 5.0f) * 0.5f);
}

// testAssignMovingAverageNewNamingMultipleCalls: the debias variables are named after the variable
// under the current name scope (TF's variable scope), "_1" for the second call's.
TEST(MovingAveragesNamingTest, AssignMovingAverageNewNamingMultipleCalls) {
  Graph g;
  std::vector<std::string> ops_returned;
  {
    auto s1 = g.name_scope("scope1");
    auto s2 = g.name_scope("scope2");
    Variable var(g, Tensor::scalar(1.0f), "Var");
    ops_returned.push_back(train::assign_moving_average(var, ops::constant(g, 0.0f), 0.99).op().name());
    ops_returned.push_back(train::assign_moving_average(var, ops::constant(g, 0.0f), 0.99).op().name());
  }
  EXPECT_THAT(names_of(global_variables(g)),
              UnorderedElementsAre("scope1/scope2/Var", "scope1/scope2/scope1/scope2/Var/biased",
                                   "scope1/scope2/scope1/scope2/Var/local_step", "scope1/scope2/scope1/scope2/Var/biased_1",
                                   "scope1/scope2/scope1/scope2/Var/local_step_1"));
  EXPECT_THAT(ops_returned, ElementsAre("scope1/scope2/AssignMovingAvg", "scope1/scope2/AssignMovingAvg_1"));
  // The second update's ops are under its own scope, as TF's unique name scopes.
  EXPECT_NO_THROW(g.operation("scope1/scope2/AssignMovingAvg_1/decay"));
}

TEST(MovingAveragesErrorsTest, AssignMovingAverageChecksItsArguments) {
  Graph g;
  Variable var(g, vec<float>({1, 2}), "var");
  Variable count(g, Tensor::scalar(int32_t{0}), "count");
  Output value = ops::constant(g, vec<float>({0, 0}));
  auto fails = [](auto f) { return error_of<InvalidArgumentError>(f); };
  EXPECT_THAT(fails([&] { train::assign_moving_average(count, ops::constant(g, int32_t{1}), 0.5); }),
              AllOf(HasSubstr("assign_moving_average"), HasSubstr("'count' is int32, not a floating point type")));
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, Output(), 0.5); }), HasSubstr("null"));
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, ops::constant(g, vec<double>({0, 0})), 0.5); }),
              AllOf(HasSubstr("assign_moving_average"), HasSubstr("float64")));
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, value, ops::constant(g, int32_t{1})); }),
              HasSubstr("not a floating point tensor"));
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, value, Output()); }), HasSubstr("decay"));
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, value, std::nan("")); }), HasSubstr("decay must be finite"));
  // A value that does not fit the variable: the graph names the op.
  EXPECT_THAT(fails([&] { train::assign_moving_average(var, ops::constant(g, vec<float>({0, 0, 0})), 0.5, false); }),
              HasSubstr("AssignMovingAvg"));
}

// ---- ExponentialMovingAverage: _CheckDecay ----

struct DecayCase {
  const char* name;
  bool num_updates;  // num_updates = 1: decay min(0.25, 2 / 11)
  bool zero_debias;
  int dim;
};

class EmaDecayTest : public ::testing::TestWithParam<std::tuple<std::string, DecayCase>> {};

// TF's _CheckDecay: v0 = 10s, v1 = 30s and the tensor v0 + v1 averaged, updated twice.
TEST_P(EmaDecayTest, CheckDecay) {
  const auto& [device, c] = GetParam();
  Graph g;
  auto scope = g.device(device);
  std::optional<Output> num_updates;
  if (c.num_updates) num_updates = ops::constant(g, int32_t{1});  // TF's Python 1: an int32 tensor
  ExponentialMovingAverage ema(0.25, num_updates, c.zero_debias);
  const double dk = c.num_updates ? 2.0 / 11.0 : 0.25;
  const double scale1 = c.zero_debias ? 1 - dk : 1;
  const double scale2 = c.zero_debias ? 1 - dk * dk : 1;

  const std::vector<double> tens = repeat(10, c.dim), thirties = repeat(30, c.dim);
  auto make = [&](const std::vector<double>& v, const char* name) {
    return c.dim == 1 ? Variable(g, Tensor::scalar(static_cast<float>(v[0])), name) : Variable(g, vec<float>(v), name);
  };
  Variable var0 = make(tens, "v0");
  Variable var1 = make(thirties, "v1");
  Output tensor2 = ops::add(var0, var1, "add");
  Operation update = ema.apply({var0, var1}, {tensor2});
  EXPECT_EQ(update.name(), "ExponentialMovingAverage");
  auto avg0 = ema.average(var0), avg1 = ema.average(var1), avg2 = ema.average(tensor2);
  ASSERT_TRUE(avg0 && avg1 && avg2);

  EXPECT_THAT(names_of(train::moving_average_variables(g)), ElementsAre("v0", "v1"));
  EXPECT_THAT(names_of(trainable_variables(g)), ElementsAre("v0", "v1")) << "shadows are not trainable";
  EXPECT_EQ(avg0->name(), "v0/ExponentialMovingAverage");
  EXPECT_EQ(avg1->name(), "v1/ExponentialMovingAverage");
  EXPECT_EQ(avg2->name(), "add/ExponentialMovingAverage");

  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_THAT(values(s.run(var0.value())), NearVector(tens, kTolerance));
  EXPECT_THAT(values(s.run(tensor2)), NearVector(repeat(40, c.dim), kTolerance));
  // A variable's shadow starts at its initial value, a tensor's at zeros.
  EXPECT_THAT(values(s.run(avg0->value())), NearVector(tens, kTolerance));
  EXPECT_THAT(values(s.run(avg1->value())), NearVector(thirties, kTolerance));
  EXPECT_THAT(values(s.run(avg2->value())), NearVector(repeat(0, c.dim), kTolerance));

  s.run(update);
  EXPECT_THAT(values(s.run(avg0->value())), NearVector(repeat(10.0 * dk + 10.0 * (1 - dk), c.dim), kTolerance));
  EXPECT_THAT(values(s.run(avg1->value())), NearVector(repeat(30.0 * dk + 30.0 * (1 - dk), c.dim), kTolerance));
  EXPECT_THAT(values(s.run(avg2->value())), NearVector(repeat((0.0 * dk + 40.0 * (1 - dk)) / scale1, c.dim), kTolerance));

  s.run(update);
  EXPECT_THAT(values(s.run(avg0->value())),
              NearVector(repeat((10.0 * dk + 10.0 * (1 - dk)) * dk + 10.0 * (1 - dk), c.dim), kTolerance));
  EXPECT_THAT(values(s.run(avg1->value())),
              NearVector(repeat((30.0 * dk + 30.0 * (1 - dk)) * dk + 30.0 * (1 - dk), c.dim), kTolerance));
  EXPECT_THAT(values(s.run(avg2->value())),
              NearVector(repeat(((0.0 * dk + 40.0 * (1 - dk)) * dk + 40.0 * (1 - dk)) / scale2, c.dim), kTolerance));
}

const DecayCase kDecayCases[] = {
    {"NoNumUpdates_Scalar", false, false, 1},        {"NoNumUpdates_Scalar_Debias", false, true, 1},
    {"NoNumUpdates_Vector", false, false, 5},        {"NoNumUpdates_Vector_Debias", false, true, 5},
    {"NumUpdates_Scalar", true, false, 1},           {"NumUpdates_Scalar_Debias", true, true, 1},
    {"NumUpdates_Vector", true, false, 5},           {"NumUpdates_Vector_Debias", true, true, 5},
};

INSTANTIATE_TEST_SUITE_P(AverageVariables, EmaDecayTest,
                         ::testing::Combine(::testing::Values("/cpu:0", "/device:SIM:0"), ::testing::ValuesIn(kDecayCases)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == "/cpu:0" ? "CPU_" : "SIM_") +
                                  std::get<1>(info.param).name;
                         });

// ---- ExponentialMovingAverage: values that move ----

// _CheckDecay's variables never change, so their shadows stay put: here each update sees a new
// value, s_k = d * s_(k-1) + (1 - d) * x_k, in float64.
TEST_P(MovingAveragesTest, ShadowsFollowTheVariables) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable w(g, vec<double>({1, -2}), "w");
  Output fed = ops::placeholder(g, DType::Float64, Shape{2});
  Output set = w.assign(fed);
  const double d = 0.9;
  ExponentialMovingAverage ema(d);
  Operation update = ema.apply({w});
  Variable shadow = *ema.average(w);
  EXPECT_EQ(shadow.dtype(), DType::Float64);
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::vector<std::vector<double>> xs = {{3, 5}, {-1, 0.5}, {8, 8}};
  for (const auto& x : xs) {
    s.run(set.op(), {{fed, vec<double>(x)}});
    s.run(update);
  }
  // The decay is float32 (TF's), cast to float64 once 1 - decay is taken.
  const double df = 1 - static_cast<double>(1 - static_cast<float>(d));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i) {
    const double s0 = i == 0 ? 1 : -2;
    want.push_back(std::pow(df, 3) * s0 + (1 - df) * (df * df * xs[0][i] + df * xs[1][i] + xs[2][i]));
  }
  EXPECT_THAT(values(s.run(shadow.value())), NearVector(want, 1e-12));
}

// num_updates read every run: with the global step, decay = min(0.25, (1 + step) / (10 + step)).
TEST_P(MovingAveragesTest, NumUpdatesIsReadEveryRun) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable step = train::get_or_create_global_step(g);
  Variable v(g, Tensor::scalar(0.0f), "v");
  Output bump = step.assign_add(ops::constant(g, int64_t{1}));
  Output set = v.assign(ops::cast(step.value(), DType::Float32));  // v follows the step: 0, 1, 2, ...
  ExponentialMovingAverage ema(0.25, step.value());
  Operation update = ema.apply({v});
  Session s(g);
  s.run(global_variables_initializer(g));
  double want = 0;
  for (int n = 0; n < 4; ++n) {
    s.run(set.op());
    s.run(update);
    const double dk = std::min(0.25, (1.0 + n) / (10.0 + n));  // 0.1, 2/11, 0.25 (3/12), 0.25 (4/13 > 0.25)
    want = dk * want + (1 - dk) * n;
    EXPECT_NEAR(s.run(ema.average(v)->value()).scalar<float>(), want, 1e-5) << "step " << n;
    s.run(bump.op());
  }
}

// testBasicEager in graph mode: applying the same variables again reuses their shadows.
TEST_P(MovingAveragesTest, ApplyingAgainReusesTheShadows) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable v0(g, Tensor::scalar(1.0f), "v0");
  Variable v1(g, Tensor::scalar(2.0f), "v1");
  ExponentialMovingAverage ema(0.25);
  Operation first = ema.apply({v0, v1});
  const std::size_t variables_after_first = global_variables(g).size();
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(first);
  s.run(v0.assign(ops::constant(g, 2.0f)).op());
  s.run(v1.assign(ops::constant(g, 4.0f)).op());
  ExponentialMovingAverage copy = ema;  // copies share the shadows
  Operation second = copy.apply({v0, v1});
  EXPECT_NE(second, first);
  EXPECT_EQ(second.name(), "ExponentialMovingAverage_1");
  EXPECT_EQ(global_variables(g).size(), variables_after_first) << "no second shadow";
  EXPECT_EQ(copy.average(v0)->op(), ema.average(v0)->op());
  s.run(second);
  EXPECT_EQ(s.run(ema.average(v0)->value()).scalar<float>(), 1.75f);
  EXPECT_EQ(s.run(ema.average(v1)->value()).scalar<float>(), 3.5f);
}

INSTANTIATE_TEST_SUITE_P(Devices, MovingAveragesTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         [](const auto& info) { return info.index == 0 ? std::string("CPU") : std::string("SIM"); });

// An EMA of float16 variables (what TF's dtype check allows): read through a cast.
TEST(EmaTest, HalfVariables) {
  Graph g;
  Variable h(ops::cast(ops::constant(g, vec<float>({2, -4})), DType::Float16), "h");
  ExponentialMovingAverage ema(0.5);
  Operation update = ema.apply({h});
  Output set = h.assign(ops::cast(ops::constant(g, vec<float>({4, 4})), DType::Float16));
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(set.op());
  s.run(update);
  EXPECT_EQ(ema.average(h)->dtype(), DType::Float16);
  EXPECT_THAT(values(s.run(ops::cast(ema.average(h)->value(), DType::Float32))), ElementsAre(3, 0));
}

// A float16 tensor's shadow starts at zeros and, zero-debiased, equals the tensor after one update.
TEST(EmaTest, HalfTensorZeroDebiased) {
  Graph g;
  Output t = ops::cast(ops::constant(g, vec<float>({6, -2})), DType::Float16, "t");
  ExponentialMovingAverage ema(0.5, std::nullopt, /*zero_debias=*/true);
  Operation update = ema.apply({}, {t});
  Session s(g);
  s.run(global_variables_initializer(g));
  const Output read = ops::cast(ema.average(t)->value(), DType::Float32);
  EXPECT_THAT(values(s.run(read)), ElementsAre(0, 0));
  s.run(update);
  EXPECT_THAT(values(s.run(read)), ElementsAre(6, -2));  // (0.5 * t) / (1 - 0.5)
}

// testAverageVariablesWithControlDeps: the shadow ignores the control_dependencies scope of
// apply(), the update op does not.
TEST(EmaTest, AverageVariablesWithControlDeps) {
  Graph g;
  Variable v0(g, Tensor::scalar(int32_t{0}), "v0");
  Output add_to_v0 = v0.assign_add(ops::constant(g, int32_t{1}));
  Variable v1(g, vec<float>({10}), "v1");
  Output assign_to_v1 = v1.assign(ops::constant(g, vec<float>({20})));
  ExponentialMovingAverage ema(0.25);
  Operation ema_op;
  {
    auto after = g.control_dependencies({add_to_v0.op()});
    ema_op = ema.apply({v1});
  }
  Variable v1_avg = *ema.average(v1);
  EXPECT_TRUE(v1_avg.initializer().control_inputs().empty());
  EXPECT_TRUE(v1_avg.op().control_inputs().empty());
  Session s(g);
  s.run(v1_avg.initializer());  // before v0's: it needs nothing else
  s.run(v0.initializer());
  s.run(v1.initializer());
  EXPECT_THAT(values(s.run(v1_avg.value())), ElementsAre(10));
  s.run(assign_to_v1.op());
  s.run(ema_op);
  EXPECT_EQ(s.run(v0.value()).scalar<int32_t>(), 1) << "the update ran after add_to_v0";
  EXPECT_THAT(values(s.run(v1_avg.value())), ElementsAre(17.5));
}

// ---- names and variables_to_restore ----

void average_variables_names(bool zero_debias) {
  Graph g;
  Variable v0(g, Tensor::scalar(10.0f), "v0");
  Variable v1(g, Tensor::scalar(30.0f), "v1");
  Variable v2(g, Tensor::scalar(20.0f), "v2", /*trainable=*/false);
  Output tensor2 = ops::add(v0, v1, "add");
  ExponentialMovingAverage ema(0.25, std::nullopt, zero_debias, "foo");
  EXPECT_EQ(ema.name(), "foo");
  EXPECT_EQ(ema.average_name(v0), "v0/foo");
  EXPECT_EQ(ema.average_name(v1), "v1/foo");
  EXPECT_EQ(ema.average_name(tensor2), "add/foo");
  EXPECT_FALSE(ema.average(v0).has_value());
  ema.apply({v0, v1}, {tensor2});
  const auto to_restore = ema.variables_to_restore(g);
  std::vector<std::string> expected = {"v0/foo", "v1/foo", "add/foo", "v2"};
  if (zero_debias) {
    expected.push_back("add/foo/biased");
    expected.push_back("add/foo/local_step");
  }
  EXPECT_THAT(keys_of(to_restore), UnorderedElementsAreArray(expected));
  EXPECT_EQ(to_restore.at("v0/foo").op(), v0.op()) << "a variable is restored from its shadow's name";
  EXPECT_EQ(to_restore.at("v1/foo").op(), v1.op());
  EXPECT_EQ(to_restore.at("add/foo").op(), ema.average(tensor2)->op()) << "a tensor's shadow is restored as itself";
  EXPECT_EQ(to_restore.at("v2").op(), v2.op());
  EXPECT_EQ(ema.average(v0)->name(), ema.average_name(v0));
  EXPECT_EQ(ema.average(v1)->name(), ema.average_name(v1));
  EXPECT_EQ(ema.average(tensor2)->name(), ema.average_name(tensor2));
}

TEST(EmaNamesTest, AverageVariablesNames) { average_variables_names(/*zero_debias=*/true); }
TEST(EmaNamesTest, AverageVariablesNamesNoDebias) { average_variables_names(/*zero_debias=*/false); }

void average_variables_names_respect_scope(bool zero_debias) {
  Graph g;
  Variable v0, v1, v2;
  Output tensor2;
  {
    auto scope = g.name_scope("scope1");
    v0 = Variable(g, Tensor::scalar(10.0f), "v0");
    v1 = Variable(g, Tensor::scalar(30.0f), "v1");
    v2 = Variable(g, Tensor::scalar(20.0f), "v2", /*trainable=*/false);
    tensor2 = ops::add(v0, v1, "add");
  }
  auto scope = g.name_scope("scope2");
  ExponentialMovingAverage ema(0.25, std::nullopt, zero_debias, "foo");
  EXPECT_EQ(ema.average_name(v0), "scope2/scope1/v0/foo");
  EXPECT_EQ(ema.average_name(v1), "scope2/scope1/v1/foo");
  EXPECT_EQ(ema.average_name(tensor2), "scope2/scope1/add/foo");
  ema.apply({v0, v1}, {tensor2});
  std::vector<std::string> expected = {ema.average_name(v0), ema.average_name(v1), ema.average_name(tensor2), v2.name()};
  if (zero_debias) {
    expected.push_back("scope2/" + ema.average_name(tensor2) + "/biased");
    expected.push_back("scope2/" + ema.average_name(tensor2) + "/local_step");
  }
  EXPECT_THAT(keys_of(ema.variables_to_restore(g)), UnorderedElementsAreArray(expected));
  EXPECT_EQ(ema.average(v0)->name(), ema.average_name(v0));
  EXPECT_EQ(ema.average(v1)->name(), ema.average_name(v1));
  EXPECT_EQ(ema.average(tensor2)->name(), "scope2/scope1/add/foo");
  // The update ops are under the EMA's own scope.
  EXPECT_NO_THROW(g.operation("scope2/foo"));
  EXPECT_NO_THROW(g.operation("scope2/foo/decay"));
}

TEST(EmaNamesTest, AverageVariablesNamesRespectScope) { average_variables_names_respect_scope(true); }
TEST(EmaNamesTest, AverageVariablesNamesRespectScopeNoDebias) { average_variables_names_respect_scope(false); }

// testSubsetAverageVariablesNames (the tensor left out: variables_to_restore maps Variables).
TEST(EmaNamesTest, SubsetAverageVariablesNames) {
  Graph g;
  Variable v0(g, Tensor::scalar(10.0f), "v0");
  Variable v1(g, Tensor::scalar(30.0f), "v1");
  Variable v2(g, Tensor::scalar(20.0f), "v2", /*trainable=*/false);
  Output tensor2 = ops::add(v0, v1, "add");
  ExponentialMovingAverage ema(0.25, std::nullopt, false, "foo_avg");
  EXPECT_EQ(ema.average_name(v0), "v0/foo_avg");
  EXPECT_EQ(ema.average_name(tensor2), "add/foo_avg");
  const auto to_restore = ema.variables_to_restore(g, {v0});
  EXPECT_THAT(keys_of(to_restore), UnorderedElementsAre("v0/foo_avg", "v1", "v2"));
  EXPECT_EQ(to_restore.at("v1").op(), v1.op());
  ema.apply({v0, v1}, {tensor2});
  EXPECT_EQ(ema.average(v0)->name(), ema.average_name(v0));
  EXPECT_EQ(ema.average(v1)->name(), ema.average_name(v1));
  EXPECT_EQ(ema.average(tensor2)->name(), ema.average_name(tensor2));
}

// TF's default set is trainable_variables() plus moving_average_variables(): an averaged variable
// that is not trainable is restored from its shadow too; a second EMA of the same name gets
// "_1" shadows, which its average_name reports.
TEST(EmaNamesTest, VariablesToRestoreCoversAveragedNonTrainableVariables) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0f), "w");
  Variable mean(g, Tensor::scalar(0.0f), "moving_mean", /*trainable=*/false);
  Variable other(g, Tensor::scalar(0.0f), "other", /*trainable=*/false);
  ExponentialMovingAverage ema(0.5);
  ema.apply({mean});
  EXPECT_THAT(names_of(train::moving_average_variables(g)), ElementsAre("moving_mean"));
  const auto to_restore = ema.variables_to_restore(g);
  EXPECT_THAT(keys_of(to_restore),
              UnorderedElementsAre("w/ExponentialMovingAverage", "moving_mean/ExponentialMovingAverage", "other"));
  EXPECT_EQ(to_restore.at("moving_mean/ExponentialMovingAverage").op(), mean.op());

  ExponentialMovingAverage again(0.5);
  EXPECT_EQ(again.average_name(mean), "moving_mean/ExponentialMovingAverage_1") << "the name the graph would give";
  again.apply({mean});
  EXPECT_EQ(again.average(mean)->name(), "moving_mean/ExponentialMovingAverage_1");
  EXPECT_THAT(names_of(train::moving_average_variables(g)), ElementsAre("moving_mean")) << "listed once";
}

// apply(g) is TF's apply(): every trainable variable, no other.
TEST(EmaTest, ApplyToAGraphAveragesItsTrainableVariables) {
  Graph g;
  Variable a(g, Tensor::scalar(1.0f), "a");
  Variable b(g, vec<double>({1, 2}), "b");
  Variable frozen(g, Tensor::scalar(1.0f), "frozen", /*trainable=*/false);
  ExponentialMovingAverage ema(0.9);
  ema.apply(g);
  EXPECT_TRUE(ema.average(a).has_value());
  EXPECT_TRUE(ema.average(b).has_value());
  EXPECT_FALSE(ema.average(frozen).has_value());
  // A tensor that is a variable's value is that variable.
  ExponentialMovingAverage by_value(0.9, std::nullopt, false, "by_value");
  by_value.apply({}, {frozen.value()});
  EXPECT_EQ(by_value.average(frozen)->name(), "frozen/by_value");
  EXPECT_THAT(names_of(train::moving_average_variables(g)), ElementsAre("a", "b", "frozen"));
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(by_value.average(frozen)->value()).scalar<float>(), 1.0f) << "starts at the variable's value, not zero";
}

TEST(EmaTest, ErrorsNameTheEma) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Variable count(g, Tensor::scalar(int64_t{0}), "count");
  Output unknown = ops::placeholder(g, DType::Float32, Shape{-1}, "unknown");
  auto fails = [](auto f) { return error_of<InvalidArgumentError>(f); };
  ExponentialMovingAverage ema(0.5, std::nullopt, false, "foo");
  EXPECT_THAT(fails([&] { ema.apply({count}); }),
              AllOf(HasSubstr("ExponentialMovingAverage 'foo'"), HasSubstr("'count' is int64")));
  EXPECT_THAT(fails([&] { ema.apply({v, v}); }), AllOf(HasSubstr("'foo'"), HasSubstr("'v' is listed twice")));
  EXPECT_THAT(fails([&] { ema.apply({v}, {v.value()}); }), HasSubstr("'v' is listed twice"));
  EXPECT_THAT(fails([&] { ema.apply({}); }), HasSubstr("no variables or tensors to average"));
  EXPECT_THAT(fails([&] { ema.apply({}, {unknown}); }), HasSubstr("fully defined shape"));
  EXPECT_THAT(fails([&] { ema.apply({}, {Output()}); }), HasSubstr("null"));
  Graph other;
  Variable elsewhere(other, Tensor::scalar(1.0f), "elsewhere");
  EXPECT_THAT(fails([&] { ema.apply({v, elsewhere}); }), HasSubstr("'elsewhere' is in another graph"));
  EXPECT_THAT(fails([&] { ema.variables_to_restore(g, {elsewhere}); }), HasSubstr("another graph"));
  Graph empty;
  EXPECT_THAT(fails([&] { ema.apply(empty); }), HasSubstr("no trainable variables"));
  EXPECT_FALSE(ema.average(v).has_value()) << "a failed apply makes nothing";
  EXPECT_EQ(global_variables(g).size(), 2u);

  EXPECT_THAT(fails([&] { (void)ExponentialMovingAverage(std::nan("")); }), HasSubstr("decay must be finite"));
  EXPECT_THAT(fails([&] { (void)ExponentialMovingAverage(0.5, ops::constant(g, true)); }), HasSubstr("num_updates"));
  EXPECT_THAT(fails([&] { (void)ExponentialMovingAverage(0.5, ops::constant(g, vec<float>({1, 2}))); }),
              HasSubstr("must be a scalar"));
  EXPECT_THAT(fails([&] { (void)ExponentialMovingAverage(0.5, Output()); }), HasSubstr("null"));
  EXPECT_THAT(fails([&] { (void)ExponentialMovingAverage(0.5, std::nullopt, false, ""); }), HasSubstr("name"));
  ExponentialMovingAverage counted(0.5, ops::constant(other, int32_t{1}));
  EXPECT_THAT(fails([&] { counted.apply({v}); }), HasSubstr("num_updates"));
}

// ---- devices ----

// testAverageVariablesDeviceAssignment: a variable's shadow asks for no device of its own and is
// colocated with its variable (whatever device scope apply() runs in); a tensor's shadow takes
// apply()'s device scope.
TEST(EmaDeviceTest, AverageVariablesDeviceAssignment) {
  Graph g;
  Variable v0, v1;
  {
    auto scope = g.device("/job:dev_v0");
    v0 = Variable(g, Tensor::scalar(10.0f), "v0");
  }
  {
    auto scope = g.device("/job:dev_v1");
    v1 = Variable(g, vec<float>({1}), "v1");
  }
  Output tensor2 = ops::add(v0, v1, "add");
  ExponentialMovingAverage ema(0.25, std::nullopt, true, "foo_avg");
  {
    auto scope = g.device("/job:default");
    ema.apply({v0, v1}, {tensor2});
  }
  EXPECT_EQ(ema.average(v0)->op().device(), "");
  EXPECT_TRUE(colocated_with(*ema.average(v0), v0));
  EXPECT_TRUE(colocated_with(*ema.average(v1), v1));
  EXPECT_EQ(ema.average(tensor2)->op().device(), "/job:default");
  EXPECT_TRUE(ema.average(tensor2)->op().node()->colocate_with.empty());
  // The zero-debias state of the tensor's shadow is colocated with that shadow.
  const std::optional<Variable> biased = variable_named(g, "add/foo_avg/biased");
  ASSERT_TRUE(biased.has_value());
  EXPECT_TRUE(colocated_with(*biased, *ema.average(tensor2)));
}

// Placed by a session: the shadow of a variable on the accelerator, and its update, run there.
TEST(EmaDeviceTest, ShadowsArePlacedWithTheirVariables) {
  Graph g;
  Variable on_sim, on_cpu;
  {
    auto scope = g.device("/device:SIM:0");
    on_sim = Variable(g, vec<float>({1, 2}), "on_sim");
  }
  {
    auto scope = g.device("/cpu:0");
    on_cpu = Variable(g, vec<float>({3, 4}), "on_cpu");
  }
  ExponentialMovingAverage ema(0.5);
  Operation update;
  {
    auto scope = g.device("/cpu:0");
    update = ema.apply({on_sim, on_cpu});
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(on_sim.assign(ops::constant(g, vec<float>({3, 4}))).op());
  s.run(update);
  EXPECT_THAT(values(s.run(ema.average(on_sim)->value())), ElementsAre(2, 3));
  EXPECT_THAT(values(s.run(ema.average(on_cpu)->value())), ElementsAre(3, 4));
  EXPECT_THAT(ema.average(on_sim)->op().assigned_device(), HasSubstr("SIM:0"));
  EXPECT_THAT(ema.average(on_cpu)->op().assigned_device(), HasSubstr("CPU:0"));
  EXPECT_THAT(g.operation("ExponentialMovingAverage/AssignMovingAvg").assigned_device(), HasSubstr("SIM:0"))
      << "the update of the SIM variable's shadow runs with it";
}

// ---- training: the closed form ----

// Gradient descent on loss = sum(c * w) moves w by -lr * c a step: w_k = w0 - k * lr * c. An EMA
// with num_updates = the global step, run after each step, then has s_0 = w0 and
// s_k = d_k * s_(k-1) + (1 - d_k) * w_k with d_k = min(d, (1 + k) / (10 + k)).
std::vector<double> trained_average(const std::vector<double>& w0, const std::vector<double>& c, double lr, double d,
                                    int steps) {
  std::vector<double> want;
  for (std::size_t i = 0; i < w0.size(); ++i) {
    double shadow = w0[i];
    for (int k = 1; k <= steps; ++k) {
      const double dk = std::min(d, (1.0 + k) / (10.0 + k));
      shadow = dk * shadow + (1 - dk) * (w0[i] - k * lr * c[i]);
    }
    want.push_back(shadow);
  }
  return want;
}

// On a cluster, as TF1 runs it: the variables on the ps (replica_device_setter), the model and
// the EMA built on the worker. The shadows, their updates and the reads of the variables after
// the training step run on the ps with the variables; the averages are those of the step results.
TEST(EmaClusterTest, ShadowsLiveAndUpdateOnTheParameterServer) {
  train::ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  const double lr = 0.1, d = 0.5;
  const std::vector<double> w0 = {1, -1}, c = {2, 3};
  Graph g;
  Variable w;
  Operation train_and_average;
  std::optional<ExponentialMovingAverage> ema;
  {
    auto setter = g.device(train::replica_device_setter(cluster, "/job:worker/task:0"));
    Variable step = train::get_or_create_global_step(g);
    w = Variable(g, vec<float>(w0), "w");
    Output loss = ops::reduce_sum(ops::mul(ops::constant(g, vec<float>(c)), w.value()));
    Operation train_op = train::GradientDescentOptimizer(static_cast<float>(lr)).minimize(loss, step);
    ema.emplace(d, step);
    auto after = g.control_dependencies({train_op});
    train_and_average = ema->apply({w});
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  for (int i = 0; i < 3; ++i) s.run(train_and_average);
  EXPECT_THAT(values(s.run(ema->average(w)->value())), NearVector(trained_average(w0, c, lr, d, 3), 1e-5));
  EXPECT_THAT(w.op().assigned_device(), ::testing::StartsWith("/job:ps/replica:0/task:0/"));
  EXPECT_EQ(ema->average(w)->op().assigned_device(), w.op().assigned_device());
  EXPECT_EQ(g.operation("ExponentialMovingAverage/AssignMovingAvg").assigned_device(), w.op().assigned_device());
  EXPECT_EQ(g.operation("ExponentialMovingAverage/AssignMovingAvg/w/read").assigned_device(), w.op().assigned_device());
}

// ---- checkpoints ----

class EmaCheckpointTest : public testing::TempDirTest {
 protected:
  EmaCheckpointTest() : TempDirTest("tessera_ema") {}
};

// Train with an EMA, save everything with the default Saver, then restore the averages into the
// variables of a fresh graph with Saver(g, ema.variables_to_restore(g)). The EMA counts updates
// with the global step and runs after the training step (TF's usage): both the weights and the
// step it reads are the step's results.
TEST_F(EmaCheckpointTest, RestoreTheAveragesIntoTheVariables) {
  const double lr = 0.1, d = 0.5;
  const std::vector<double> w0 = {1, -1}, c = {2, 3};  // loss = sum(c * w): w moves by -lr * c a step
  const int steps = 4;
  std::string checkpoint;
  std::vector<double> shadow_seen;
  {
    Graph g;
    Variable step = train::get_or_create_global_step(g);
    Variable w(g, vec<float>(w0), "w");
    Output loss = ops::reduce_sum(ops::mul(ops::constant(g, vec<float>(c)), w.value()));
    Operation train_op = train::GradientDescentOptimizer(static_cast<float>(lr)).minimize(loss, step);
    ExponentialMovingAverage ema(d, step);
    Operation train_and_average;
    {
      auto after = g.control_dependencies({train_op});
      train_and_average = ema.apply({w});
    }
    Session s(g);
    s.run(global_variables_initializer(g));
    for (int i = 0; i < steps; ++i) s.run(train_and_average);
    shadow_seen = values(s.run(ema.average(w)->value()));
    checkpoint = train::Saver(g).save(s, (dir_ / "model").string(), steps);
    EXPECT_THAT(keys_of(ema.variables_to_restore(g)), UnorderedElementsAre("w/ExponentialMovingAverage", "global_step"));
  }
  // d_k = 2/11, 3/12, 4/13, 5/14: all below d, so the step read matters.
  const std::vector<double> want = trained_average(w0, c, lr, d, steps);
  EXPECT_THAT(shadow_seen, NearVector(want, 1e-5));
  const auto saved = train::read_checkpoint(checkpoint);
  EXPECT_TRUE(saved.count("w") && saved.count("w/ExponentialMovingAverage") && saved.count("global_step"));

  Graph g;
  Variable step = train::get_or_create_global_step(g);
  Variable w(g, vec<float>({0, 0}), "w");
  ExponentialMovingAverage ema(d);
  const auto to_restore = ema.variables_to_restore(g);
  EXPECT_THAT(keys_of(to_restore), UnorderedElementsAre("w/ExponentialMovingAverage", "global_step"));
  train::Saver saver(g, to_restore);
  Session s(g);
  saver.restore(s, checkpoint);
  EXPECT_THAT(values(s.run(w.value())), NearVector(want, 1e-5)) << "w holds the average";
  EXPECT_EQ(values(s.run(w.value())), shadow_seen) << "bit for bit what was saved";
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), steps);
}

}  // namespace
}  // namespace tessera
