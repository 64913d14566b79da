// The optimizers of tessera/optimizer.h through the public API, with the cases of TensorFlow's
// gradient_descent_test.py, momentum_test.py (incl. Nesterov), adam_test.py, adagrad_test.py and
// rmsprop_test.py: the same variables, gradients and hyper-parameters, the values after each step
// against TF's expected values or a plain reference of the update rule written here. Every case
// on the CPU and on the simulated accelerator, float32 and float64 where TF tests both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

template <class T>
Tensor vec(std::vector<double> v) {
  return Tensor::vector<T>(std::vector<T>(v.begin(), v.end()));
}

template <class T>
std::vector<double> values(const Tensor& t) {
  auto v = t.to_vector<T>();
  return std::vector<double>(v.begin(), v.end());
}

// TF's two-variable case: var0 = [1, 2], var1 = [3, 4], constant gradients [0.1, 0.1] and
// [0.01, 0.01], on the test's device.
template <class T>
struct TwoVars {
  explicit TwoVars(const std::string& device) {
    auto scope = g.device(device);
    var0 = Variable(g, vec<T>({1, 2}), "var0");
    var1 = Variable(g, vec<T>({3, 4}), "var1");
    grads0 = ops::constant(g, vec<T>({0.1, 0.1}));
    grads1 = ops::constant(g, vec<T>({0.01, 0.01}));
  }
  Operation apply(const train::Optimizer& opt, std::optional<Variable> step = std::nullopt) {
    auto scope = g.device(device_of(var0));
    return opt.apply_gradients({{grads0, var0}, {grads1, var1}}, step);
  }
  static std::string device_of(const Variable& v) { return v.op().device(); }
  std::vector<double> v0(Session& s) { return values<T>(s.run(var0.value())); }
  std::vector<double> v1(Session& s) { return values<T>(s.run(var1.value())); }

  Graph g;
  Variable var0;
  Variable var1;
  Output grads0;
  Output grads1;
};

MATCHER_P2(NearVector, expected, tolerance, "") {
  if (arg.size() != expected.size()) return false;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (!(std::abs(arg[i] - expected[i]) <= tolerance)) {
      *result_listener << "element " << i << " is " << arg[i] << ", expected " << expected[i] << " (off by "
                       << arg[i] - expected[i] << ")";
      return false;
    }
  }
  return true;
}

class OptimizerTest : public ::testing::TestWithParam<std::string> {};

// ---- gradient_descent_test.py ----

TEST_P(OptimizerTest, GradientDescentBasic) {
  TwoVars<float> t(GetParam());
  auto update = t.apply(train::GradientDescentOptimizer(3.0f));
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1, 2}, 0));
  s.run(update);
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 3 * 0.1, 2 - 3 * 0.1}, 1e-6));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{3 - 3 * 0.01, 4 - 3 * 0.01}, 1e-6));
}

TEST_P(OptimizerTest, GradientDescentIncrementsTheGlobalStepOncePerApply) {
  TwoVars<double> t(GetParam());
  Variable step = train::get_or_create_global_step(t.g);
  EXPECT_EQ(train::get_or_create_global_step(t.g).name(), step.name()) << "the same variable the second time";
  EXPECT_FALSE(step.trainable());
  auto update = t.apply(train::GradientDescentOptimizer(3.0f), step);
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  s.run(update);
  s.run(update);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 2);
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 6 * 0.1, 2 - 6 * 0.1}, 1e-12));
}

TEST_P(OptimizerTest, GradientDescentMinimize) {
  // TF's testMinimizeResourceVariable: pred = var0 x + var1, loss = pred^2.
  Graph g;
  auto scope = g.device(GetParam());
  Variable var0(g, Tensor::matrix<double>({1, 2}, 1, 2), "var0");
  Variable var1(g, Tensor::vector<double>({3}), "var1");
  auto x = ops::constant(g, Tensor::matrix<double>({4, 5}, 2, 1));
  auto pred = ops::add(ops::matmul(var0.value(), x), var1.value());
  auto loss = ops::square(pred);
  auto train_op = train::GradientDescentOptimizer(1.0f).minimize(loss);
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(train_op);
  const double p = 1 * 4 + 2 * 5 + 3;  // 17; d loss / d pred = 34
  EXPECT_THAT(values<double>(s.run(var0.value())), ElementsAre(1 - 2 * p * 4, 2 - 2 * p * 5));
  EXPECT_THAT(values<double>(s.run(var1.value())), ElementsAre(3 - 2 * p));
}

// TF1 makes the slots in an init_scope: an optimizer built under control_dependencies (the
// UPDATE_OPS idiom) gives its slots initializers that do not run the ops named there.
TEST_P(OptimizerTest, SlotsMadeUnderAControlScopeInitializeWithoutItsOps) {
  Graph g;
  auto scope = g.device(GetParam());
  Variable counter(g, Tensor::scalar<int64_t>(0), "counter");
  Output bump = counter.assign_add(ops::constant(g, int64_t{1}));
  Variable w(g, Tensor::vector<double>({1, 2}), "w");
  Operation train_op;
  {
    GraphScope deps = g.control_dependencies({bump.op()});
    train_op = train::AdamOptimizer(0.1f).minimize(ops::reduce_sum(ops::square(w.value())));
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(counter.value()).scalar<int64_t>(), 0) << "initializing the slots ran the bump";
  s.run(train_op);
  EXPECT_EQ(s.run(counter.value()).scalar<int64_t>(), 1) << "the step runs after the bump";
}

// TF1's apply_gradients names the op it returns `name` (default: the optimizer's name): the
// group of the updates, or with a global step its increment, after the group "<name>/update".
// A name already taken is made unique, as name scopes make it in TF.
TEST_P(OptimizerTest, ApplyGradientsNamesTheOpItReturns) {
  TwoVars<float> t(GetParam());
  Variable step = train::get_or_create_global_step(t.g);
  train::GradientDescentOptimizer sgd(0.5f);
  std::vector<std::pair<Output, Variable>> pairs = {{t.grads0, t.var0}, {t.grads1, t.var1}};
  std::optional<GraphScope> on_device(t.g.device(TwoVars<float>::device_of(t.var0)));
  Operation plain = sgd.apply_gradients(pairs);
  Operation plain_again = sgd.apply_gradients(pairs);
  Operation named = sgd.apply_gradients(pairs, std::nullopt, "my_apply");
  Operation stepped = sgd.apply_gradients(pairs, step, "train_step");
  Operation stepped_again = sgd.apply_gradients(pairs, step, "train_step");
  Operation stepped_default = sgd.apply_gradients(pairs, step);
  EXPECT_EQ(plain.name(), "GradientDescent");
  EXPECT_EQ(plain_again.name(), "GradientDescent_1");
  EXPECT_EQ(named.name(), "my_apply");
  EXPECT_EQ(stepped.name(), "train_step");
  EXPECT_EQ(stepped.type(), "AssignAdd");
  EXPECT_EQ(stepped_again.name(), "train_step_1");
  EXPECT_EQ(stepped_default.name(), "GradientDescent_2");
  EXPECT_EQ(t.g.operation("train_step/update").type(), "NoOp");
  on_device.reset();
  // The named increment is still placed with the global step and runs after the updates.
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  EXPECT_EQ(s.run(stepped.output(0)).scalar<int64_t>(), 1) << "the increment's output is the new step";
  s.run(stepped_again);
  s.run(named);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 2);
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 3 * 0.05, 2 - 3 * 0.05}, 1e-6));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{3 - 3 * 0.005, 4 - 3 * 0.005}, 1e-6));
  // minimize names its op after the optimizer, with or without a global step, and trains.
  Graph g;
  Variable gs = train::get_or_create_global_step(g);
  auto scope = g.device(GetParam());
  Variable w(g, Tensor::scalar(1.0f), "w");
  auto loss = ops::square(w.value());
  Operation train_op = sgd.minimize(loss, gs);
  EXPECT_EQ(train_op.name(), "GradientDescent");
  Session s2(g);
  s2.run(global_variables_initializer(g));
  for (int i = 0; i < 2; ++i) s2.run(train_op);
  EXPECT_EQ(s2.run(gs.value()).scalar<int64_t>(), 2);
  EXPECT_FLOAT_EQ(s2.run(w.value()).scalar<float>(), 0.0f);  // w -= 0.5 * 2w
}

// ---- momentum_test.py ----

TEST_P(OptimizerTest, MomentumBasic) {
  TwoVars<float> t(GetParam());
  train::MomentumOptimizer opt(2.0f, 0.9f);
  auto update = t.apply(opt);
  EXPECT_THAT(opt.get_slot_names(), ElementsAre("momentum"));
  auto slot0 = opt.get_slot(t.var0, "momentum");
  ASSERT_TRUE(slot0.has_value());
  EXPECT_EQ(slot0->shape(), (Shape{2}));
  EXPECT_FALSE(slot0->trainable());
  EXPECT_FALSE(opt.get_slot(t.var0, "nope").has_value());
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  s.run(update);
  EXPECT_THAT(values<float>(s.run(slot0->value())), NearVector(std::vector<double>{0.1, 0.1}, 1e-6));
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 0.1 * 2, 2 - 0.1 * 2}, 1e-6));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{3 - 0.01 * 2, 4 - 0.01 * 2}, 1e-6));
  s.run(update);
  EXPECT_THAT(values<float>(s.run(slot0->value())), NearVector(std::vector<double>{0.9 * 0.1 + 0.1, 0.9 * 0.1 + 0.1}, 1e-6));
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 0.1 * 2 - (0.9 * 0.1 + 0.1) * 2,
                                                      2 - 0.1 * 2 - (0.9 * 0.1 + 0.1) * 2}, 1e-6));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{2.98 - (0.9 * 0.01 + 0.01) * 2, 3.98 - (0.9 * 0.01 + 0.01) * 2},
                                  1e-6));
}

TEST_P(OptimizerTest, MomentumNesterovFollowsTheReference) {
  TwoVars<double> t(GetParam());
  auto update = t.apply(train::MomentumOptimizer(2.0f, 0.9f, false, /*use_nesterov=*/true));
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  std::vector<double> var0{1, 2};
  std::vector<double> accum(2, 0.0);
  const double kMomentum = 0.9f;  // the optimizer's float hyper-parameter, exactly
  for (int step = 0; step < 5; ++step) {
    s.run(update);
    for (std::size_t i = 0; i < 2; ++i) {
      // TF's nesterov_momentum_update: accum = accum * m + g; var -= g * lr + accum * m * lr.
      accum[i] = accum[i] * kMomentum + 0.1;
      var0[i] -= 0.1 * 2.0 + accum[i] * kMomentum * 2.0;
    }
    EXPECT_THAT(t.v0(s), NearVector(var0, 1e-9)) << "step " << step;
  }
}

// ---- adam_test.py ----

struct AdamReference {
  double m = 0;
  double v = 0;
  // TF's adam_update_numpy, step t counted from 0.
  // The defaults are AdamOptimizer's float hyper-parameters, exactly.
  double update(double param, double g, int t, double lr = 0.001f, double b1 = 0.9f, double b2 = 0.999f,
                double eps = 1e-8f) {
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t + 1)) / (1 - std::pow(b1, t + 1));
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    return param - lr_t * m / (std::sqrt(v) + eps);
  }
};

template <class T>
void adam_basic(const std::string& device, double tolerance) {
  TwoVars<T> t(device);
  train::AdamOptimizer opt;
  auto update = t.apply(opt);
  EXPECT_THAT(opt.get_slot_names(), ElementsAre("m", "v"));
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  std::vector<double> var0{1, 2};
  std::vector<double> var1{3, 4};
  std::vector<AdamReference> r0(2), r1(2);
  // TF1's beta powers start at beta (the power of step 1) and decay once per apply.
  auto beta1_power = t.g.output("beta1_power:0");
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(s.run(beta1_power).template scalar<T>(), std::pow(0.9, step + 1), 1e-6);
    s.run(update);
    for (std::size_t i = 0; i < 2; ++i) {
      var0[i] = r0[i].update(var0[i], 0.1, step);
      var1[i] = r1[i].update(var1[i], 0.01, step);
    }
    EXPECT_THAT(t.v0(s), NearVector(var0, tolerance)) << "step " << step;
    EXPECT_THAT(t.v1(s), NearVector(var1, tolerance)) << "step " << step;
  }
  EXPECT_NEAR(s.run(beta1_power).template scalar<T>(), std::pow(0.9, 4), 1e-6);
  EXPECT_NEAR(s.run(t.g.output("beta2_power:0")).template scalar<T>(), std::pow(0.999, 4), 1e-6);
  EXPECT_THAT(values<T>(s.run(opt.get_slot(t.var0, "m")->value())), NearVector(std::vector<double>{r0[0].m, r0[1].m}, tolerance));
  EXPECT_THAT(values<T>(s.run(opt.get_slot(t.var0, "v")->value())), NearVector(std::vector<double>{r0[0].v, r0[1].v}, tolerance));
}

TEST_P(OptimizerTest, AdamBasicFloat32) { adam_basic<float>(GetParam(), 1e-6); }
TEST_P(OptimizerTest, AdamBasicFloat64) { adam_basic<double>(GetParam(), 1e-9); }

// ---- adagrad_test.py ----

TEST_P(OptimizerTest, AdagradBasic) {
  TwoVars<float> t(GetParam());
  auto update = t.apply(train::AdagradOptimizer(3.0f, 0.1f));
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  for (int i = 0; i < 3; ++i) s.run(update);
  // TF's expected values after 3 steps.
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{-1.6026098728179932, -0.6026098728179932}, 1e-5));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{2.715679168701172, 3.715679168701172}, 1e-5));
}

// ---- rmsprop_test.py ----

TEST_P(OptimizerTest, RMSPropFollowsTheReference) {
  for (float momentum : {0.0f, 0.5f}) {
    TwoVars<double> t(GetParam());
    train::RMSPropOptimizer opt(2.0f, 0.9f, momentum, 1e-10f);
    auto update = t.apply(opt);
    Session s(t.g);
    s.run(global_variables_initializer(t.g));
    EXPECT_THAT(values<double>(s.run(opt.get_slot(t.var0, "rms")->value())), ElementsAre(1, 1)) << "rms starts at 1";
    std::vector<double> var0{1, 2};
    std::vector<double> ms(2, 1.0), mom(2, 0.0);
    const double eps = static_cast<double>(1e-10f);
    for (int step = 0; step < 4; ++step) {
      s.run(update);
      for (std::size_t i = 0; i < 2; ++i) {
        ms[i] = ms[i] + (0.1 * 0.1 - ms[i]) * (1 - static_cast<double>(0.9f));
        mom[i] = mom[i] * momentum + 2.0 * 0.1 / std::sqrt(ms[i] + eps);
        var0[i] -= mom[i];
      }
      EXPECT_THAT(t.v0(s), NearVector(var0, 1e-9)) << "momentum " << momentum << " step " << step;
    }
  }
}

// ---- minimize, variables, errors ----

TEST_P(OptimizerTest, MinimizeTrainsOnlyTrainableVariablesAndTheLossFalls) {
  // Least squares: y = x w + b fitted to a known line.
  Graph g;
  auto scope = g.device(GetParam());
  auto x = ops::constant(g, Tensor::matrix<float>({0, 1, 2, 3, 4, 5, 6, 7}, 8, 1));
  auto y = ops::constant(g, Tensor::matrix<float>({1, 3, 5, 7, 9, 11, 13, 15}, 8, 1));  // 2x + 1
  Variable w(g, Tensor::matrix<float>({0}, 1, 1), "w");
  Variable b(g, Tensor::vector<float>({0}), "b");
  Variable frozen(g, Tensor::vector<float>({0.5f}), "frozen", /*trainable=*/false);
  auto loss = ops::reduce_mean(ops::square(ops::sub(ops::add(ops::add(ops::matmul(x, w.value()), b.value()),
                                                             frozen.value()), y)));
  EXPECT_EQ(trainable_variables(g).size(), 2u);
  auto train_op = train::AdamOptimizer(0.1f).minimize(loss);
  Session s(g);
  s.run(global_variables_initializer(g));
  const float first = s.run(loss).scalar<float>();
  for (int i = 0; i < 600; ++i) s.run(train_op);
  EXPECT_LT(s.run(loss).scalar<float>(), first * 1e-3f);
  EXPECT_NEAR(s.run(w.value()).to_vector<float>()[0], 2.0f, 0.05f);
  EXPECT_NEAR(s.run(b.value()).to_vector<float>()[0], 0.5f, 0.1f) << "b + frozen = 1";
  EXPECT_EQ(s.run(frozen.value()).to_vector<float>()[0], 0.5f) << "not trainable: untouched";
}

TEST_P(OptimizerTest, ACopyKeepsTheUpdateRuleAndSharesSlots) {
  TwoVars<float> t(GetParam());
  train::MomentumOptimizer momentum(2.0f, 0.9f);
  train::Optimizer copy = momentum;  // no slicing
  EXPECT_EQ(copy.name(), "Momentum");
  auto update = t.apply(copy);
  EXPECT_TRUE(momentum.get_slot(t.var0, "momentum").has_value()) << "the copy made the slot both see";
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  s.run(update);
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{0.8, 1.8}, 1e-6));
}

// ---- A learning rate computed by the graph (TF's testTensorLearningRate cases) ----

// gradient_descent_test.py's testTensorLearningRate: the same update as the float 3.0.
TEST_P(OptimizerTest, GradientDescentTensorLearningRate) {
  TwoVars<float> t(GetParam());
  auto update = t.apply(train::GradientDescentOptimizer(ops::constant(t.g, 3.0f)));
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  s.run(update);
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 3 * 0.1, 2 - 3 * 0.1}, 1e-6));
  EXPECT_THAT(t.v1(s), NearVector(std::vector<double>{3 - 3 * 0.01, 4 - 3 * 0.01}, 1e-6));
}

// Every optimizer: a constant tensor gives the updates of the same float, bit for bit, over three
// steps (the float64 variables read a float32 tensor, cast as TF1 casts it).
template <class T>
void tensor_rate_matches_float(const std::string& device) {
  using Make = std::function<train::Optimizer(std::optional<Output>)>;
  const std::vector<std::pair<std::string, Make>> optimizers = {
      {"GradientDescent", [](std::optional<Output> lr) {
         return lr ? train::GradientDescentOptimizer(*lr) : train::GradientDescentOptimizer(0.25f);
       }},
      {"Momentum", [](std::optional<Output> lr) {
         return lr ? train::MomentumOptimizer(*lr, 0.9f) : train::MomentumOptimizer(0.25f, 0.9f);
       }},
      {"Adam", [](std::optional<Output> lr) { return lr ? train::AdamOptimizer(*lr) : train::AdamOptimizer(0.25f); }},
      {"Adagrad", [](std::optional<Output> lr) {
         return lr ? train::AdagradOptimizer(*lr) : train::AdagradOptimizer(0.25f);
       }},
      {"RMSProp", [](std::optional<Output> lr) {
         return lr ? train::RMSPropOptimizer(*lr, 0.9f, 0.5f) : train::RMSPropOptimizer(0.25f, 0.9f, 0.5f);
       }},
  };
  for (const auto& [name, make] : optimizers) {
    SCOPED_TRACE(name);
    TwoVars<T> by_float(device);
    TwoVars<T> by_tensor(device);
    auto float_update = by_float.apply(make(std::nullopt));
    auto tensor_update = by_tensor.apply(make(ops::constant(by_tensor.g, 0.25f)));
    Session a(by_float.g);
    Session b(by_tensor.g);
    a.run(global_variables_initializer(by_float.g));
    b.run(global_variables_initializer(by_tensor.g));
    for (int i = 0; i < 3; ++i) {
      a.run(float_update);
      b.run(tensor_update);
    }
    EXPECT_EQ(by_tensor.v0(b), by_float.v0(a));
    EXPECT_EQ(by_tensor.v1(b), by_float.v1(a));
    EXPECT_NE(by_tensor.v0(b), (std::vector<double>{1, 2})) << "the updates ran";
  }
}
TEST_P(OptimizerTest, EveryOptimizerTakesATensorLearningRateFloat32) { tensor_rate_matches_float<float>(GetParam()); }
TEST_P(OptimizerTest, EveryOptimizerTakesATensorLearningRateFloat64) { tensor_rate_matches_float<double>(GetParam()); }

// The rate is read every run: a placeholder fed a new value each step, and a schedule of the
// global step (exponential_decay with staircase halves it every 2 steps).
TEST_P(OptimizerTest, TheLearningRateIsReadEveryRun) {
  {
    TwoVars<float> t(GetParam());
    Output lr = ops::placeholder(t.g, DType::Float32, Shape{}, "lr");
    auto update = t.apply(train::GradientDescentOptimizer(lr));
    Session s(t.g);
    s.run(global_variables_initializer(t.g));
    s.run(update, {{lr, Tensor::scalar(1.0f)}});
    s.run(update, {{lr, Tensor::scalar(2.0f)}});
    EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 3 * 0.1, 2 - 3 * 0.1}, 1e-6));
  }
  TwoVars<double> t(GetParam());
  Variable step = train::get_or_create_global_step(t.g);
  Output lr = train::exponential_decay(1.0f, step, /*decay_steps=*/2, /*decay_rate=*/0.5f, /*staircase=*/true);
  auto update = t.apply(train::GradientDescentOptimizer(lr), step);
  Session s(t.g);
  s.run(global_variables_initializer(t.g));
  for (int i = 0; i < 6; ++i) s.run(update);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 6);
  // Rates 1, 1, 0.5, 0.5, 0.25, 0.25: each read before its own step's increment.
  EXPECT_THAT(t.v0(s), NearVector(std::vector<double>{1 - 3.5 * 0.1, 2 - 3.5 * 0.1}, 1e-7));
}

TEST(OptimizerErrorsTest, ABadLearningRateTensorIsAnInvalidArgumentError) {
  Graph g;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::GradientDescentOptimizer{Output()}; }),
              HasSubstr("GradientDescentOptimizer: learning_rate is a null tensor"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::AdamOptimizer(ops::constant(g, int64_t{1})); }),
              HasSubstr("AdamOptimizer: learning_rate Const:0 is int64, not a floating point tensor"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { train::MomentumOptimizer(ops::constant(g, Tensor::vector<float>({1, 2})), 0.9f); }),
              HasSubstr("MomentumOptimizer: learning_rate Const_1:0 must be a scalar, got shape [2]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::RMSPropOptimizer(ops::constant(g, 0.1f), -0.5f); }),
              HasSubstr("RMSPropOptimizer: decay must be non-negative"));
}

TEST(OptimizerErrorsTest, BadUsesAreInvalidArgumentErrors) {
  Graph g;
  Variable v(g, Tensor::vector<float>({1, 2}), "v");
  Variable unrelated(g, Tensor::vector<float>({1}), "unrelated");
  Variable ints(g, Tensor::vector<int32_t>({1}), "ints");
  auto loss = ops::reduce_sum(ops::square(v.value()));
  train::GradientDescentOptimizer opt(0.1f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { opt.minimize(loss, std::nullopt, {unrelated}); }),
              HasSubstr("no gradients provided for any variable: [unrelated]"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { opt.apply_gradients({}); }), HasSubstr("no variables"));
  auto gi = ops::constant(g, Tensor::vector<int32_t>({1}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { opt.apply_gradients({{gi, ints}}); }),
              HasSubstr("'ints' is int32"));
  auto gd = ops::constant(g, Tensor::vector<double>({1, 1}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { opt.apply_gradients({{gd, v}}); }),
              HasSubstr("the gradient of 'v' is float64"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::GradientDescentOptimizer(-1.0f); }),
              HasSubstr("learning_rate must be non-negative"));
  Variable not_a_step(g, Tensor::scalar(1.0f), "global_step");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::get_or_create_global_step(g); }),
              HasSubstr("not an int64 scalar"));
}

INSTANTIATE_TEST_SUITE_P(Devices, OptimizerTest, ::testing::Values("/cpu:0", "/device:SIM:0"),
                         [](const auto& info) { return info.index == 0 ? std::string("CPU") : std::string("SIM"); });

}  // namespace
}  // namespace tessera
