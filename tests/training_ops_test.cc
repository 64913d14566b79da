// The fused optimizer updates (ApplyGradientDescent, ApplyMomentum with and without Nesterov,
// ApplyAdam, ApplyAdagrad, ApplyRMSProp) and count_up_to through a Graph and a Session, on the
// CPU and on a simulated accelerator. The update cases follow TensorFlow's training_ops_test.py
// (testApplyGradientDescent, testApplyAdagrad, testApplyAdam) and its momentum and RMSProp
// optimizer tests, over several steps, against float64 references written here element by element
// (rounded to the dtype after each step, as the kernels store it); the count_up_to cases follow
// variables_test.py's testCountUpTo. Also: errors (uninitialized slots, shape and dtype
// mismatches at build and at run time), copy on write, atomicity under threads, colocation of the
// slots, and a run through a ps/worker cluster.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/node.h"
#include "core/training_ops.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using internal::apply_adagrad;
using internal::apply_adam;
using internal::apply_gradient_descent;
using internal::apply_momentum;
using internal::apply_rms_prop;
using testing::kThreadCounts;

std::string device_of(const std::string& type) { return "/device:" + type + ":0"; }

std::vector<double> arange(int64_t begin, int64_t end, double scale = 1) {
  std::vector<double> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(static_cast<double>(i) * scale);
  return v;
}

// `values` as `dtype` stores them.
std::vector<double> rounded(DType dtype, const std::vector<double>& values) {
  return values_of(tensor_of(dtype, Shape{static_cast<int64_t>(values.size())}, values));
}

Tensor vector_of(DType dtype, const std::vector<double>& values) {
  return tensor_of(dtype, Shape{static_cast<int64_t>(values.size())}, values);
}

// ---- The update rules against references, every floating point dtype ----

// One op's case: initial values, the scalar inputs of each step, the builder and a reference.
struct ApplyCase {
  std::vector<double> var;
  std::vector<std::vector<double>> slots;
  std::vector<double> grad;
  // The scalar inputs of step t (from 1), in the op's input order.
  std::function<std::vector<double>(int t)> scalars;
  std::function<Output(const Variable& var, const std::vector<Variable>& slots, const std::vector<Output>& scalars,
                       Output grad)>
      build;
  // One element's update in float64: the variable, the slots, the gradient, the scalars.
  std::function<void(double& var, std::vector<double>& slots, double g, const std::vector<double>& s)> reference;
  int steps = 3;
};

class ApplyOpsTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  const std::string& device() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }

  // Builds the case on the device under test (the hyper-parameters are fed from the host), runs
  // its steps and checks the returned value, the variable and the slots after each.
  void check(const ApplyCase& c) {
    const DType dt = dtype();
    const auto n = static_cast<int64_t>(c.var.size());
    const std::size_t num_scalars = c.scalars(1).size();
    Graph g;
    std::vector<Output> scalars;
    for (std::size_t i = 0; i < num_scalars; ++i) scalars.push_back(ops::placeholder(g, dt, Shape{}));
    Variable var;
    std::vector<Variable> slots;
    Output apply;
    {
      auto scope = g.device(device_of(device()));
      var = Variable(g, vector_of(dt, c.var), "var");
      for (std::size_t k = 0; k < c.slots.size(); ++k) {
        slots.emplace_back(g, vector_of(dt, c.slots[k]), "slot" + std::to_string(k));
      }
      apply = c.build(var, slots, scalars, ops::constant(g, vector_of(dt, c.grad), "grad"));
    }
    Session s(g);
    s.run(global_variables_initializer(g));
    std::vector<double> want = rounded(dt, c.var);
    std::vector<std::vector<double>> want_slots;
    for (const auto& slot : c.slots) want_slots.push_back(rounded(dt, slot));
    const std::vector<double> grad = rounded(dt, c.grad);
    for (int t = 1; t <= c.steps; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      const std::vector<double> sv = rounded(dt, c.scalars(t));
      FeedMap feeds;
      for (std::size_t i = 0; i < num_scalars; ++i) feeds[scalars[i]] = tensor_of(dt, Shape{}, {sv[i]});
      const Tensor got = s.run(apply, feeds);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> slot_values;
        for (const auto& slot : want_slots) slot_values.push_back(slot[i]);
        c.reference(want[i], slot_values, grad[i], sv);
        for (std::size_t k = 0; k < want_slots.size(); ++k) want_slots[k][i] = slot_values[k];
      }
      want = rounded(dt, want);
      for (auto& slot : want_slots) slot = rounded(dt, slot);
      expect_values(got, dt, Shape{n}, want);
      expect_values(s.run(var.value()), dt, Shape{n}, want);
      for (std::size_t k = 0; k < slots.size(); ++k) expect_values(s.run(slots[k].value()), dt, Shape{n}, want_slots[k]);
    }
    EXPECT_THAT(apply.op().assigned_device(), HasSubstr(device_of(device())));
  }
};

TEST_P(ApplyOpsTest, ApplyGradientDescent) {
  check(ApplyCase{
      arange(0, 100), {}, arange(1, 101), [](int) { return std::vector<double>{2.0}; },
      [](const Variable& var, const std::vector<Variable>&, const std::vector<Output>& s, Output grad) {
        return apply_gradient_descent(var, s[0], grad);
      },
      [](double& var, std::vector<double>&, double delta, const std::vector<double>& s) { var -= s[0] * delta; }});
}

TEST_P(ApplyOpsTest, ApplyAdagrad) {
  check(ApplyCase{
      arange(0, 100), {arange(1, 101)}, arange(0, 100), [](int) { return std::vector<double>{2.0}; },
      [](const Variable& var, const std::vector<Variable>& slots, const std::vector<Output>& s, Output grad) {
        return apply_adagrad(var, slots[0], s[0], grad);
      },
      [](double& var, std::vector<double>& slot, double g, const std::vector<double>& s) {
        slot[0] += g * g;
        var -= s[0] * g * std::pow(slot[0], -0.5);
      }});
}

ApplyCase momentum_case(bool nesterov) {
  std::vector<double> grad;
  for (int i = 0; i < 100; ++i) grad.push_back(0.1 * ((i % 7) - 3));
  return ApplyCase{
      arange(0, 100, 0.1), {std::vector<double>(100, 0.0)}, grad, [](int) { return std::vector<double>{2.0, 0.9}; },
      [nesterov](const Variable& var, const std::vector<Variable>& slots, const std::vector<Output>& s, Output grad) {
        return apply_momentum(var, slots[0], s[0], grad, s[1], /*use_locking=*/false, nesterov);
      },
      [nesterov](double& var, std::vector<double>& slot, double g, const std::vector<double>& s) {
        const double lr = s[0];
        const double momentum = s[1];
        slot[0] = slot[0] * momentum + g;
        var -= nesterov ? g * lr + slot[0] * momentum * lr : lr * slot[0];
      }};
}

TEST_P(ApplyOpsTest, ApplyMomentum) { check(momentum_case(/*nesterov=*/false)); }
TEST_P(ApplyOpsTest, ApplyMomentumNesterov) { check(momentum_case(/*nesterov=*/true)); }

TEST_P(ApplyOpsTest, ApplyAdam) {
  ApplyCase c{
      arange(0, 100), {arange(1, 101), arange(101, 201)}, arange(0, 100),
      // beta1_power, beta2_power, lr, beta1, beta2, epsilon
      [](int t) { return std::vector<double>{std::pow(0.9, t), std::pow(0.999, t), 0.001, 0.9, 0.999, 1e-8}; },
      [](const Variable& var, const std::vector<Variable>& slots, const std::vector<Output>& s, Output grad) {
        return apply_adam(var, slots[0], slots[1], s[0], s[1], s[2], s[3], s[4], s[5], grad);
      },
      // TensorFlow's _adamUpdateNumpy, from the fed beta powers.
      [](double& var, std::vector<double>& slot, double g, const std::vector<double>& s) {
        const double alpha = s[2] * std::sqrt(1 - s[1]) / (1 - s[0]);
        slot[0] = s[3] * slot[0] + (1 - s[3]) * g;
        slot[1] = s[4] * slot[1] + (1 - s[4]) * g * g;
        var -= alpha * slot[0] / (std::sqrt(slot[1]) + s[5]);
      }};
  c.steps = 4;
  check(c);
}

TEST_P(ApplyOpsTest, ApplyRMSProp) {
  check(ApplyCase{
      arange(0, 100), {std::vector<double>(100, 1.0), std::vector<double>(100, 0.0)}, arange(0, 100, 0.1),
      // lr, rho, momentum, epsilon
      [](int) { return std::vector<double>{0.01, 0.9, 0.5, 1e-4}; },
      [](const Variable& var, const std::vector<Variable>& slots, const std::vector<Output>& s, Output grad) {
        return apply_rms_prop(var, slots[0], slots[1], s[0], s[1], s[2], s[3], grad);
      },
      // TensorFlow's _rmsprop_update_numpy.
      [](double& var, std::vector<double>& slot, double g, const std::vector<double>& s) {
        slot[0] = slot[0] * s[1] + (1 - s[1]) * g * g;
        slot[1] = s[2] * slot[1] + s[0] * g / std::sqrt(slot[0] + s[3]);
        var -= slot[1];
      }});
}

INSTANTIATE_TEST_SUITE_P(DevicesAndDTypes, ApplyOpsTest,
                         ::testing::Combine(::testing::Values("CPU", "SIM"),
                                            ::testing::Values(DType::Float32, DType::Float64, DType::Float16,
                                                              DType::BFloat16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
                         });

// ---- Errors, copy on write, atomicity and placement ----

class TrainingOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  GraphScope on_device(Graph& g) { return g.device(device_of(GetParam())); }
};

Output scalar(Graph& g, float v) { return ops::constant(g, Tensor::scalar(v)); }

TEST_P(TrainingOpsTest, AnUninitializedSlotIsFailedPreconditionNamingIt) {
  Graph g;
  auto scope = on_device(g);
  Variable w(g, Tensor::vector<float>({1, 2, 3}), "w");
  Variable never_seen(g, Tensor::vector<float>({0, 0, 0}), "never_seen");
  Variable read_first(g, Tensor::vector<float>({0, 0, 0}), "read_first");
  auto grad = ops::constant(g, Tensor::vector<float>({1, 1, 1}));
  auto a = apply_adagrad(w, never_seen, scalar(g, 0.1f), grad);
  auto m = apply_momentum(w, read_first, scalar(g, 0.1f), grad, scalar(g, 0.9f));
  Session s(g);
  s.run(w.initializer());
  // No kernel has created this slot yet: a lookup finds nothing, which is uninitialized too.
  std::string message = error_of<FailedPreconditionError>([&] { s.run(a); });
  EXPECT_THAT(message, HasSubstr("w/ApplyAdagrad (ApplyAdagrad): "));
  EXPECT_THAT(message, HasSubstr("uninitialized value never_seen"));
  // This one exists (a failed read created it) but holds no value.
  EXPECT_THROW_MSG(s.run(read_first.value()), FailedPreconditionError, "read_first");
  message = error_of<FailedPreconditionError>([&] { s.run(m); });
  EXPECT_THAT(message, HasSubstr("w/ApplyMomentum (ApplyMomentum): "));
  EXPECT_THAT(message, HasSubstr("uninitialized value read_first"));
  // Nothing was updated.
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(a).to_vector<float>().size(), 3u);
}

TEST_P(TrainingOpsTest, AnUninitializedVariableIsFailedPreconditionNamingIt) {
  Graph g;
  auto scope = on_device(g);
  Variable w(g, Tensor::vector<float>({1, 2}), "w_not_ready");
  Variable accum(g, Tensor::vector<float>({0, 0}), "accum");
  auto a = apply_adagrad(w, accum, scalar(g, 0.1f), ops::constant(g, Tensor::vector<float>({1, 1})));
  Session s(g);
  s.run(accum.initializer());
  EXPECT_THROW_MSG(s.run(a), FailedPreconditionError, "uninitialized value w_not_ready");
}

// Build time: every mismatch the shapes and dtypes show, as InvalidArgumentError naming the op.
TEST_P(TrainingOpsTest, MismatchesAreRefusedWhenTheGraphIsBuilt) {
  Graph g;
  auto scope = on_device(g);
  Variable w(g, Tensor::vector<float>({1, 2, 3}), "w");
  Variable short_slot(g, Tensor::vector<float>({0, 0}), "short_slot");
  Variable double_slot(g, Tensor::vector<double>({0, 0, 0}), "double_slot");
  Variable ok_slot(g, Tensor::vector<float>({0, 0, 0}), "ok_slot");
  Variable ints(g, Tensor::vector<int32_t>({1, 2, 3}), "ints");
  auto grad = ops::constant(g, Tensor::vector<float>({1, 1, 1}));
  auto lr = scalar(g, 0.1f);
  auto expect_refused = [](const std::function<void()>& build, const std::string& type, const std::string& detail) {
    const std::string message = error_of<InvalidArgumentError>(build);
    EXPECT_THAT(message, HasSubstr("(" + type + "): "));
    EXPECT_THAT(message, HasSubstr(detail));
  };
  expect_refused([&] { apply_adagrad(w, short_slot, lr, grad); }, "ApplyAdagrad",
                 "variable 'w' has shape [3], slot 'accum' ('short_slot') has shape [2]");
  expect_refused([&] { apply_momentum(w, double_slot, lr, grad, lr); }, "ApplyMomentum",
                 "slot 'accum' ('double_slot') is float64, the variable 'w' is float32");
  expect_refused([&] { apply_gradient_descent(w, lr, ops::constant(g, Tensor::vector<float>({1, 1}))); },
                 "ApplyGradientDescent", "variable 'w' has shape [3], delta has shape [2]");
  expect_refused([&] { apply_gradient_descent(w, ops::constant(g, Tensor::vector<float>({1, 1})), grad); },
                 "ApplyGradientDescent", "alpha must be a scalar, got shape [2]");
  expect_refused([&] { apply_gradient_descent(w, ops::constant(g, Tensor::scalar(1.0)), grad); },
                 "ApplyGradientDescent", "alpha is float64, the variable 'w' is float32");
  expect_refused([&] { apply_gradient_descent(ints, ops::constant(g, 1), ops::constant(g, Tensor::vector<int32_t>({1, 1, 1}))); },
                 "ApplyGradientDescent", "variable 'ints' is int32: the update needs a floating point variable");
  expect_refused([&] { apply_adagrad(w, w, lr, grad); }, "ApplyAdagrad", "slot 'accum' is the variable 'w' itself");
  expect_refused([&] { apply_adam(w, ok_slot, ok_slot, lr, lr, lr, lr, lr, lr, grad); }, "ApplyAdam",
                 "slots 'm' and 'v' are both 'ok_slot'");
  expect_refused([&] { apply_rms_prop(w, ok_slot, short_slot, lr, lr, lr, lr, grad); }, "ApplyRMSProp",
                 "slot 'mom' ('short_slot') has shape [2]");
  // None of them was added.
  EXPECT_THROW(g.operation("w/ApplyAdagrad"), NotFoundError);
}

TEST_P(TrainingOpsTest, ABuilderRefusesHandlesFromElsewhere) {
  Graph g;
  Graph other;
  Variable w(g, Tensor::vector<float>({1, 2}), "w");
  Variable foreign(other, Tensor::vector<float>({0, 0}), "foreign");
  auto grad = ops::constant(g, Tensor::vector<float>({1, 1}));
  EXPECT_THROW_MSG(apply_adagrad(w, foreign, scalar(g, 1.0f), grad), InvalidArgumentError, "another graph");
  EXPECT_THROW_MSG(apply_gradient_descent(w, scalar(other, 1.0f), grad), InvalidArgumentError, "another graph");
  EXPECT_THROW(apply_gradient_descent(w, Output(), grad), InvalidArgumentError);
  EXPECT_THROW(apply_gradient_descent(Variable(), scalar(g, 1.0f), grad), InvalidArgumentError);
}

// Run time: partial shapes leave the checks to the kernel, with the same messages.
TEST_P(TrainingOpsTest, MismatchesLeftOpenAreRefusedWhenTheOpRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  auto y = ops::placeholder(g, DType::Float32, Shape{-1}, "y");
  auto grad = ops::placeholder(g, DType::Float32, Shape{-1}, "grad");
  auto lr = ops::placeholder(g, DType::Float32, Shape::unknown(), "lr");
  Variable w, accum;
  Output apply;
  {
    auto scope = on_device(g);
    w = Variable(x, "w");
    accum = Variable(y, "accum");
    apply = apply_adagrad(w, accum, lr, grad);
  }
  Session s(g);
  const Tensor three = Tensor::vector<float>({1, 2, 3});
  s.run(w.initializer(), {{x, three}});
  s.run(accum.initializer(), {{y, Tensor::vector<float>({1, 1})}});
  auto expect_fails = [&](const FeedMap& feeds, const std::string& detail) {
    const std::string message = error_of<InvalidArgumentError>([&] { s.run(apply, feeds); });
    EXPECT_THAT(message, HasSubstr("w/ApplyAdagrad (ApplyAdagrad): "));
    EXPECT_THAT(message, HasSubstr(detail));
  };
  const Tensor one = Tensor::scalar(1.0f);
  expect_fails({{grad, three}, {lr, one}}, "variable 'w' has shape [3], slot 'accum' ('accum') has shape [2]");
  s.run(accum.initializer(), {{y, Tensor::vector<float>({1, 1, 1})}});
  expect_fails({{grad, Tensor::vector<float>({1, 1})}, {lr, one}}, "variable 'w' has shape [3], grad has shape [2]");
  expect_fails({{grad, three}, {lr, Tensor::vector<float>({1})}}, "lr must be a scalar, got shape [1]");
  // A failed apply changed nothing.
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(s.run(accum.value()).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  // accum = 1 + 1 = 2 everywhere, w -= 1 * 1 / sqrt(2).
  const std::vector<float> got = s.run(apply, {{grad, Tensor::vector<float>({1, 1, 1})}, {lr, one}}).to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(got[i], static_cast<float>(i + 1) - 1 / std::sqrt(2.0f));
}

// Reads taken before an apply (of the variable, of a slot, an apply's own result) never change.
TEST_P(TrainingOpsTest, AnEarlierReadKeepsItsValue) {
  Graph g;
  auto scope = on_device(g);
  Variable w(g, Tensor::vector<float>({1, 2, 3}), "w");
  Variable accum(g, Tensor::vector<float>({0, 0, 0}), "accum");
  auto apply = apply_momentum(w, accum, scalar(g, 1.0f), ops::constant(g, Tensor::vector<float>({1, 1, 1})),
                              scalar(g, 1.0f));
  Session s(g);
  s.run(global_variables_initializer(g));
  const Tensor w_before = s.run(w.value());
  const Tensor accum_before = s.run(accum.value());
  const Tensor first = s.run(apply);  // accum 1, w 0 1 2
  const Tensor second = s.run(apply);  // accum 2, w -2 -1 0
  EXPECT_EQ(w_before.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(accum_before.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(second.to_vector<float>(), (std::vector<float>{-2, -1, 0}));
  EXPECT_EQ(s.run(accum.value()).to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// N threads each applying alpha 1, delta 1 K times leave exactly -N*K: every apply is atomic.
TEST_P(TrainingOpsTest, ConcurrentAppliesAreAtomic) {
  constexpr int kApplies = 100;
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    Graph g;
    auto scope = on_device(g);
    Variable w(g, Tensor::vector<float>({0, 0, 0, 0}), "w");
    auto apply = apply_gradient_descent(w, scalar(g, 1.0f), ops::constant(g, Tensor::vector<float>({1, 1, 1, 1})));
    Session s(g);
    s.run(w.initializer());
    testing::run_threads(threads, [&](int) {
      for (int k = 0; k < kApplies; ++k) s.run(apply);
    });
    const float want = -static_cast<float>(threads * kApplies);
    EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>(4, want)));
  }
}

// Two applies that share variables in swapped roles (each one's slot is the other's variable)
// run concurrently without deadlock.
TEST_P(TrainingOpsTest, AppliesSharingVariablesInSwappedRolesDoNotDeadlock) {
  Graph g;
  auto scope = on_device(g);
  Variable a(g, Tensor::vector<float>({0, 0}), "a");
  Variable b(g, Tensor::vector<float>({0, 0}), "b");
  auto grad = ops::constant(g, Tensor::vector<float>({1, 1}));
  auto ab = apply_momentum(a, b, scalar(g, 0.0f), grad, scalar(g, 1.0f));  // b += 1, a unchanged
  auto ba = apply_momentum(b, a, scalar(g, 0.0f), grad, scalar(g, 1.0f));  // a += 1, b unchanged
  Session s(g);
  s.run(global_variables_initializer(g));
  constexpr int kApplies = 100;
  testing::run_threads(8, [&](int i) {
    for (int k = 0; k < kApplies; ++k) s.run(i % 2 == 0 ? ab : ba);
  });
  EXPECT_EQ(s.run(a.value()).to_vector<float>(), (std::vector<float>(2, 4 * kApplies)));
  EXPECT_EQ(s.run(b.value()).to_vector<float>(), (std::vector<float>(2, 4 * kApplies)));
}

// The slots go where the variable goes, even when only the variable asks for a device.
TEST_P(TrainingOpsTest, SlotsArePlacedWithTheVariable) {
  Graph g;
  Variable m(g, Tensor::vector<float>({0, 0}), "m");
  Variable v(g, Tensor::vector<float>({0, 0}), "v");
  Variable w;
  {
    auto scope = on_device(g);
    w = Variable(g, Tensor::vector<float>({1, 1}), "w");
  }
  auto one = scalar(g, 0.5f);
  auto apply = apply_adam(w, m, v, one, one, one, one, one, one, ops::constant(g, Tensor::vector<float>({1, 1})),
                          /*use_locking=*/true);
  EXPECT_TRUE(apply.node()->attr<bool>("use_locking"));
  EXPECT_EQ(apply.node()->attr<std::string>("m"), "m");
  EXPECT_EQ(apply.node()->attr<std::string>("v"), "v");
  Session s(g);
  s.run(global_variables_initializer(g));
  // m = 0.5, v = 0.5, lr_t = 0.5 * sqrt(0.5) / 0.5: w = 1 - sqrt(0.5) * 0.5 / (sqrt(0.5) + 0.5).
  const float want = 1 - std::sqrt(0.5f) * 0.5f / (std::sqrt(0.5f) + 0.5f);
  const std::vector<float> got = s.run(apply).to_vector<float>();
  EXPECT_NEAR(got[0], want, 1e-6);
  for (const Operation& op : {apply.op(), w.op(), m.op(), v.op()}) {
    EXPECT_THAT(op.assigned_device(), HasSubstr(device_of(GetParam()))) << op.name();
  }
}

// Updates are not differentiable: no gradient flows back through one (TensorFlow's behaviour).
TEST_P(TrainingOpsTest, NoGradientFlowsThroughAnUpdate) {
  Graph g;
  auto scope = on_device(g);
  Variable w(g, Tensor::vector<float>({1, 2}), "w");
  Variable step(g, Tensor::scalar<int64_t>(0), "step");
  auto x = ops::constant(g, Tensor::vector<float>({1, 1}), "x");
  auto apply = apply_gradient_descent(w, scalar(g, 1.0f), ops::mul(x, x));
  auto counted = ops::cast(ops::count_up_to(step, 10), DType::Float32);
  auto loss = ops::reduce_sum(ops::add(ops::mul(apply, apply), counted));
  const std::vector<Output> grads = gradients({loss}, {x});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(grads[0].is_null());
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainingOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const auto& info) { return info.param; });

// Through a cluster: the variable on a ps task (its slot made colocated with it), the gradient computed
// on the worker; the op, its attrs and the slot's name cross the wire, and the ps task's kernel
// finds the slot by name among its resources.
TEST(TrainingOpsClusterTest, AnApplyOnAParameterServerFindsItsSlots) {
  train::ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Variable w;
  {
    auto scope = g.device("/job:ps/task:0");
    w = Variable(g, Tensor::vector<float>({1, 2}), "w");
  }
  Variable accum;
  {
    // As TensorFlow's slot_creator makes slots: a master pins a variable that asks for nothing to
    // its own task, which the op's colocation would then contradict.
    auto scope = g.colocate_with(w.op());
    accum = Variable(g, Tensor::vector<float>({0, 0}), "accum");
  }
  Output grad;
  {
    auto scope = g.device("/job:worker/task:0");
    grad = ops::mul(ops::constant(g, Tensor::vector<float>({1, 2})), ops::constant(g, 2.0f), "grad");
  }
  auto apply = apply_momentum(w, accum, scalar(g, 0.5f), grad, scalar(g, 0.5f), false, /*use_nesterov=*/true);
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  // accum = g = [2, 4]; w -= g * 0.5 + accum * 0.5 * 0.5 = [1.5, 3].
  EXPECT_EQ(s.run(apply).to_vector<float>(), (std::vector<float>{-0.5f, -1.0f}));
  EXPECT_EQ(s.run(accum.value()).to_vector<float>(), (std::vector<float>{2, 4}));
  for (const Operation& op : {apply.op(), accum.op()}) {
    EXPECT_EQ(op.assigned_device().rfind("/job:ps/replica:0/task:0/", 0), 0u) << op.name() << " on "
                                                                               << op.assigned_device();
  }
}

// ---- count_up_to (variables_test.py's testCountUpTo) ----

class CountUpToTest : public ::testing::TestWithParam<std::string> {
 protected:
  // A variable that asks for the device under test (count_up_to moves it to the host).
  Variable make(Graph& g, Tensor value, std::string name) {
    auto scope = g.device(device_of(GetParam()));
    return Variable(g, std::move(value), std::move(name));
  }
};

TEST_P(CountUpToTest, HandsOutEachValueThenRaisesOutOfRange) {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Variable x = make(g, tensor_of(dtype, Shape{}, {0}), "x");
    auto count = ops::count_up_to(x, 3);
    EXPECT_EQ(count.dtype(), dtype);
    EXPECT_EQ(count.shape(), Shape{});
    Session s(g);
    s.run(x.initializer());
    for (double want : {0, 1, 2}) expect_values(s.run(count), dtype, Shape{}, {want});
    for (int again = 0; again < 2; ++again) {
      const std::string message = error_of<OutOfRangeError>([&] { s.run(count); });
      EXPECT_THAT(message, HasSubstr("CountUpTo (CountUpTo): "));
      EXPECT_THAT(message, HasSubstr("Reached limit of 3"));
    }
    expect_values(s.run(x.value()), dtype, Shape{}, {3});
    // A host kernel: its variable is on the host with it, whatever was asked.
    EXPECT_THAT(count.op().assigned_device(), HasSubstr("/device:CPU:0"));
    EXPECT_THAT(x.op().assigned_device(), HasSubstr("/device:CPU:0"));
  }
}

TEST_P(CountUpToTest, AValueAtOrPastTheLimitIsOutOfRangeAtOnce) {
  Graph g;
  Variable x = make(g, Tensor::scalar<int64_t>(7), "x");
  auto count = ops::count_up_to(x, 5, "counter");
  Session s(g);
  s.run(x.initializer());
  EXPECT_THROW_MSG(s.run(count), OutOfRangeError, "counter (CountUpTo): Reached limit of 5");
  EXPECT_EQ(s.run(x.value()).scalar<int64_t>(), 7);
}

TEST_P(CountUpToTest, AnEarlierReadKeepsItsValue) {
  Graph g;
  Variable x = make(g, Tensor::scalar<int32_t>(0), "x");
  auto count = ops::count_up_to(x, 10);
  Session s(g);
  s.run(x.initializer());
  const Tensor before = s.run(x.value());
  EXPECT_EQ(s.run(count).scalar<int32_t>(), 0);
  EXPECT_EQ(before.scalar<int32_t>(), 0);
  EXPECT_EQ(s.run(x.value()).scalar<int32_t>(), 1);
}

TEST_P(CountUpToTest, RacingThreadsGetEachValueOnce) {
  constexpr int kPerThread = 50;
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const int64_t limit = threads * kPerThread;
    Graph g;
    Variable x = make(g, Tensor::scalar<int64_t>(0), "x");
    auto count = ops::count_up_to(x, limit);
    Session s(g);
    s.run(x.initializer());
    std::mutex mu;
    std::vector<int64_t> got;
    int out_of_range = 0;
    testing::run_threads(threads, [&](int) {
      for (;;) {
        try {
          const int64_t v = s.run(count).scalar<int64_t>();
          std::lock_guard<std::mutex> l(mu);
          got.push_back(v);
        } catch (const OutOfRangeError&) {
          std::lock_guard<std::mutex> l(mu);
          ++out_of_range;
          return;
        }
      }
    });
    std::sort(got.begin(), got.end());
    std::vector<int64_t> want(static_cast<std::size_t>(limit));
    for (int64_t i = 0; i < limit; ++i) want[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(got, want);
    EXPECT_EQ(out_of_range, threads);
    EXPECT_EQ(s.run(x.value()).scalar<int64_t>(), limit);
  }
}

TEST_P(CountUpToTest, ErrorsNameTheOpOrTheVariable) {
  Graph g;
  Variable f = make(g, Tensor::scalar(1.0f), "f");
  Variable vec = make(g, Tensor::vector<int32_t>({1, 2}), "vec");
  Variable later = make(g, Tensor::scalar<int32_t>(0), "later");
  EXPECT_THROW_MSG(ops::count_up_to(f, 3), InvalidArgumentError,
                   "CountUpTo (CountUpTo): variable 'f' is float32: CountUpTo counts in int32 or int64");
  EXPECT_THROW_MSG(ops::count_up_to(vec, 3), InvalidArgumentError, "variable 'vec' has shape [2]");
  EXPECT_THROW(ops::count_up_to(Variable(), 3), InvalidArgumentError);
  auto count = ops::count_up_to(later, 3);
  Session s(g);
  EXPECT_THROW_MSG(s.run(count), FailedPreconditionError, "uninitialized value later");
}

INSTANTIATE_TEST_SUITE_P(Devices, CountUpToTest, ::testing::Values("CPU", "SIM"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessera
