// ops::cond and ops::case_ (tessera/control_flow.h): TensorFlow 1's conditionals, with cases ported
// from control_flow_ops_py_test.py (testCond*, testCondGrad*, testNestedCond*, testCase), the
// untaken branch's side effects (none), its deadness across devices and tasks, and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "core/node.h"
#include "tessera/tessera.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

Output f32(Graph& g, float v) { return ops::constant(g, v); }
Output i32(Graph& g, int32_t v) { return ops::constant(g, v); }

// testCondTrue / testCondFalse: cond(x < y, x * 17, y * 23).
TEST(CondTest, RunsTheBranchThePredicatePicks) {
  for (int32_t x : {2, 7}) {
    Graph g;
    Output cx = i32(g, x), cy = i32(g, 5);
    Output z = ops::cond(
        ops::less(cx, cy), [&] { return ops::mul(cx, i32(g, 17)); }, [&] { return ops::mul(cy, i32(g, 23)); });
    Session s(g);
    EXPECT_EQ(s.run(z).scalar<int32_t>(), x < 5 ? 34 : 115) << "x = " << x;
  }
}

// The predicate fed at run time: each step takes its own branch.
TEST(CondTest, FedPredicateChoosesPerStep) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  Output y = ops::cond(
      p, [&] { return ops::add(x, f32(g, 1)); }, [&] { return ops::neg(ops::square(x)); });
  Session s(g);
  const Tensor xv = Tensor::vector<float>({2, -3});
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(true)}, {x, xv}}).to_vector<float>(), (std::vector<float>{3, -2}));
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(false)}, {x, xv}}).to_vector<float>(), (std::vector<float>{-4, -9}));
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(true)}, {x, xv}}).to_vector<float>(), (std::vector<float>{3, -2}));
}

// Several results, of several dtypes, each merged on its own; a branch may return outside
// tensors as they are (testCond_1's identity branches).
TEST(CondTest, SeveralResultsAndOutsideTensors) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output a = f32(g, 1.5f), n = i32(g, 4);
  std::vector<Output> r = ops::cond(
      p, [&] { return std::vector<Output>{a, ops::add(n, i32(g, 1))}; },
      [&] { return std::vector<Output>{ops::mul(a, f32(g, 2)), n}; });
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].dtype(), DType::Float32);
  EXPECT_EQ(r[1].dtype(), DType::Int32);
  Session s(g);
  auto t = s.run({r[0], r[1]}, {{p, Tensor::scalar(true)}});
  EXPECT_EQ(t[0].scalar<float>(), 1.5f);
  EXPECT_EQ(t[1].scalar<int32_t>(), 5);
  t = s.run({r[0], r[1]}, {{p, Tensor::scalar(false)}});
  EXPECT_EQ(t[0].scalar<float>(), 3.0f);
  EXPECT_EQ(t[1].scalar<int32_t>(), 4);
}

// A result's static shape is what both branches agree on.
TEST(CondTest, ResultShapeIsTheBranchesCommonShape) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output a = ops::placeholder(g, DType::Float32, Shape{2, 3}, "a");
  Output b = ops::placeholder(g, DType::Float32, Shape{2, 5}, "b");
  EXPECT_EQ(ops::cond(p, [&] { return a; }, [&] { return a; }).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::cond(p, [&] { return a; }, [&] { return b; }).shape(), (Shape{2, -1}));
  EXPECT_TRUE(ops::cond(p, [&] { return a; }, [&] { return ops::reshape(b, {10}); }).shape().unknown_rank());
}

// Branches that return ops (TF1's cond of train ops, testCondSwitchIdentity): the cond's op runs
// the taken branch's op only; the other, which would fail (a dequeue from a closed empty queue),
// does not run.
TEST(CondTest, BranchesThatReturnOps) {
  Graph g;
  Variable v(g, Tensor::scalar(0.0f), "v");
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Operation step = ops::cond(
      p, [&] { return v.assign_add(f32(g, 1)).op(); }, [&] { return v.assign_sub(f32(g, 5)).op(); });
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}});
  Operation safe = ops::cond(
      ops::constant(g, true), [&] { return ops::no_op(g); }, [&] { return q.dequeue()[0].op(); }, "safe");
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(q.close());
  s.run(step, {{p, Tensor::scalar(true)}});
  s.run(step, {{p, Tensor::scalar(true)}});
  s.run(step, {{p, Tensor::scalar(false)}});
  EXPECT_EQ(s.run(v.value()).scalar<float>(), -3.0f);
  EXPECT_NO_THROW(s.run(safe));
  EXPECT_EQ(step.type(), "Merge");
}

// The untaken branch does nothing: its assign does not run (testCondRef / the side-effect cases).
TEST(CondTest, UntakenBranchHasNoSideEffects) {
  Graph g;
  Variable v(g, Tensor::scalar(0.0f), "v");
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output r = ops::cond(
      p, [&] { return v.assign(f32(g, 1)); }, [&] { return v.assign_add(f32(g, 10)); });
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(false)}}).scalar<float>(), 10.0f);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(false)}}).scalar<float>(), 20.0f);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(true)}}).scalar<float>(), 1.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 1.0f);
}

// A branch that would block (a dequeue from an empty queue) does not run when not taken: the
// step returns at once.
TEST(CondTest, UntakenBranchDoesNotBlock) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output r = ops::cond(
      p, [&] { return q.dequeue()[0]; }, [&] { return f32(g, -1); });
  Session s(g);
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(10000);
  std::vector<Tensor> out = s.run(std::vector<Output>{r}, {{p, Tensor::scalar(false)}}, {}, opts);
  EXPECT_EQ(out.at(0).scalar<float>(), -1.0f);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 0);
}

// Control dependencies inside a branch (testCondWithControl): the op the branch waits on runs
// only with the branch.
TEST(CondTest, ControlDependenciesInsideABranch) {
  Graph g;
  Variable counter(g, Tensor::scalar(0), "counter");
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output r = ops::cond(
      p,
      [&] {
        Output bump = counter.assign_add(i32(g, 1));
        auto after = g.control_dependencies({bump.op()});
        return ops::identity(i32(g, 7));
      },
      [&] { return i32(g, 8); });
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(true)}}).scalar<int32_t>(), 7);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(false)}}).scalar<int32_t>(), 8);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(true)}}).scalar<int32_t>(), 7);
  EXPECT_EQ(s.run(counter.value()).scalar<int32_t>(), 2);
}

// testCond_3 / testNestedCond: a cond inside a branch, reading tensors from both levels.
TEST(CondTest, NestedConds) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output q = ops::placeholder(g, DType::Bool, Shape{}, "q");
  Output x = f32(g, 3);
  Output y = ops::cond(
      p,
      [&] {
        Output inner_x = ops::mul(x, f32(g, 2));
        return ops::cond(
            q, [&] { return ops::add(inner_x, x); }, [&] { return ops::sub(inner_x, x); });
      },
      [&] { return ops::neg(x); });
  Session s(g);
  auto run = [&](bool pv, bool qv) { return s.run(y, {{p, Tensor::scalar(pv)}, {q, Tensor::scalar(qv)}}).scalar<float>(); };
  EXPECT_EQ(run(true, true), 9.0f);
  EXPECT_EQ(run(true, false), 3.0f);
  EXPECT_EQ(run(false, true), -3.0f);
  EXPECT_EQ(run(false, false), -3.0f);
  EXPECT_EQ(g.operation("cond/cond/pred_id").num_outputs(), 1);  // the inner cond's scope
}

// A variable made inside a branch (a layer's) is initialized whichever branch runs: variables and
// their initializers are made outside the cond (TF's init_scope).
TEST(CondTest, VariablesMadeInABranchInitializeOutsideIt) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2));
  Output y = ops::cond(
      p,
      [&] {
        layers::DenseOptions o;
        o.kernel_initializer = initializers::ones();
        return layers::dense(x, 3, o);
      },
      [&] { return ops::zeros_like(ops::matmul(x, ops::constant(g, Tensor::matrix<float>({0, 0, 0, 0, 0, 0}, 2, 3)))); });
  Session s(g);
  s.run(global_variables_initializer(g));  // made outside the cond: runs with no pred fed
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(true)}}).to_vector<float>(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(false)}}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

// testCase: the first true predicate's function, else the default; only that one runs.
TEST(CondTest, CaseTakesTheFirstTruePredicate) {
  Graph g;
  Output x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  Variable calls(g, Tensor::scalar(0), "calls");
  auto counted = [&](int32_t v) {
    return [&, v] {
      auto after = g.control_dependencies({calls.assign_add(i32(g, 1)).op()});
      return std::vector<Output>{ops::identity(i32(g, v))};
    };
  };
  std::vector<Output> r = ops::case_({{ops::less(x, i32(g, 1)), counted(17)}, {ops::less(x, i32(g, 2)), counted(23)}},
                                     counted(-1));
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(r[0], {{x, Tensor::scalar(0)}}).scalar<int32_t>(), 17);
  EXPECT_EQ(s.run(r[0], {{x, Tensor::scalar(1)}}).scalar<int32_t>(), 23);
  EXPECT_EQ(s.run(r[0], {{x, Tensor::scalar(5)}}).scalar<int32_t>(), -1);
  EXPECT_EQ(s.run(calls.value()).scalar<int32_t>(), 3);  // one function per step
  EXPECT_NO_THROW(g.operation("case/cond/pred_id"));
}

// ---- gradients ----

// testCondGrad_1: identity branches; the gradient is 1 whichever runs.
TEST(CondGradTest, IdentityBranches) {
  Graph g;
  Output x = f32(g, 10);
  Output r = ops::cond(ops::less(i32(g, 1), i32(g, 2)), [&] { return ops::identity(x); },
                       [&] { return ops::identity(x); });
  Output grad = gradients({r}, {x})[0];
  Session s(g);
  EXPECT_EQ(s.run(grad).scalar<float>(), 1.0f);
}

// testCondGrad_2: the gradient of the branch that ran (42 or 3), zeros from the other.
TEST(CondGradTest, GradientOfTheTakenBranch) {
  Graph g;
  Output c = ops::placeholder(g, DType::Int32, Shape{}, "c");
  Output x = f32(g, 10);
  Output r = ops::cond(ops::less(c, i32(g, 2)), [&] { return ops::mul(x, f32(g, 42)); },
                       [&] { return ops::mul(x, f32(g, 3)); });
  Output grad = gradients({r}, {x})[0];
  Session s(g);
  EXPECT_EQ(s.run(grad, {{c, Tensor::scalar(1)}}).scalar<float>(), 42.0f);
  EXPECT_EQ(s.run(grad, {{c, Tensor::scalar(3)}}).scalar<float>(), 3.0f);
}

// testNestedCond_Simple: identity through nested conds, either way.
TEST(CondGradTest, NestedCondSimple) {
  for (bool outer : {true, false}) {
    Graph g;
    Output x = f32(g, 0);
    Output y = ops::cond(
        ops::constant(g, outer), [&] { return x; },
        [&] { return ops::cond(ops::less(x, f32(g, 1)), [&] { return x; }, [&] { return x; }); });
    Output grad = gradients({y}, {x})[0];
    Session s(g);
    EXPECT_EQ(s.run(grad).scalar<float>(), 1.0f) << "outer " << outer;
  }
}

// testCondGrad_3: a gradient taken inside a branch (of a tensor from outside it), and the
// gradient of the cond's result with respect to the same x.
TEST(CondGradTest, GradientBuiltInsideABranch) {
  Graph g;
  Output c = ops::placeholder(g, DType::Int32, Shape{}, "c");
  Output ox = f32(g, 10);
  Output y = ops::mul(f32(g, 7), ox);
  Output r = ops::cond(
      ops::less(c, i32(g, 2)),
      [&] {
        Output m = ops::mul(y, y);
        return gradients({m}, {ox})[0];  // 2 * y * 7
      },
      [&] { return ops::mul(ox, f32(g, 3)); });
  Session s(g);
  EXPECT_EQ(s.run(r, {{c, Tensor::scalar(1)}}).scalar<float>(), 980.0f);
  EXPECT_EQ(s.run(r, {{c, Tensor::scalar(3)}}).scalar<float>(), 30.0f);
  // r = 98 ox through the first branch, 3 ox through the second.
  Output grad = gradients({r}, {ox})[0];
  EXPECT_EQ(s.run(grad, {{c, Tensor::scalar(1)}}).scalar<float>(), 98.0f);
  EXPECT_EQ(s.run(grad, {{c, Tensor::scalar(3)}}).scalar<float>(), 3.0f);
}

// Training only when the predicate says so: minimize inside a branch updates the variable on the
// steps that take it, and its slot variables are made (and initialized) outside the cond.
TEST(CondGradTest, MinimizeInsideABranch) {
  Graph g;
  Variable w(g, Tensor::vector<float>({1, -2}), "w");
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output loss = ops::reduce_sum(ops::square(w.value()));
  Output step = ops::cond(
      p,
      [&] {
        Operation train = train::MomentumOptimizer(0.1f, 0.9f).minimize(loss);
        auto after = g.control_dependencies({train});
        return ops::identity(f32(g, 1));
      },
      [&] { return f32(g, 0); });
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(step, {{p, Tensor::scalar(false)}}).scalar<float>(), 0.0f);
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(s.run(step, {{p, Tensor::scalar(true)}}).scalar<float>(), 1.0f);
  // Momentum's first step: accum = g = 2w; w -= 0.1 * accum.
  const auto w1 = s.run(w.value()).to_vector<float>();
  EXPECT_FLOAT_EQ(w1[0], 0.8f);
  EXPECT_FLOAT_EQ(w1[1], -1.6f);
}

// ---- across devices and tasks ----

// A branch placed on an accelerator: its inputs leave the host's Switch, dead or live, through
// _Send/_Recv; the untaken branch's device ops do not run.
TEST(CondDeviceTest, BranchOnTheSimulatedAccelerator) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  Output y;
  {
    auto on_sim = g.device("/device:SIM:0");
    y = ops::cond(
        p, [&] { return ops::mul(ops::square(x), f32(g, 2)); }, [&] { return ops::add(x, f32(g, 100)); });
  }
  // Switch and Merge made under the accelerator's scope run on the host, without soft placement.
  SessionOptions strict;
  strict.allow_soft_placement = false;
  Session s(g, strict);
  const Tensor xv = Tensor::vector<float>({1, 2, 3});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.run(y, {{p, Tensor::scalar(true)}, {x, xv}}).to_vector<float>(), (std::vector<float>{2, 8, 18}));
    EXPECT_EQ(s.run(y, {{p, Tensor::scalar(false)}, {x, xv}}).to_vector<float>(),
              (std::vector<float>{101, 102, 103}));
  }
  EXPECT_THAT(g.operation("cond/Mul").assigned_device(), HasSubstr("SIM:0"));
  EXPECT_THAT(g.operation("cond/Merge").assigned_device(), HasSubstr("CPU:0"));
  EXPECT_THAT(g.operation("cond/Switch_1").assigned_device(), HasSubstr("CPU:0"));
}

// On a cluster: the branch updates a variable on the ps (its assign follows the variable), so a
// dead tensor crosses from the worker to the ps when the branch is not taken.
TEST(CondClusterTest, DeadTensorsCrossTasks) {
  train::ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Variable v;
  Output p, r;
  {
    auto on_ps = g.device("/job:ps/task:0");
    v = Variable(g, Tensor::scalar(0.0f), "v");
  }
  {
    auto on_worker = g.device("/job:worker/task:0");
    p = ops::placeholder(g, DType::Bool, Shape{}, "p");
    Output delta = ops::mul(ops::placeholder(g, DType::Float32, Shape{}, "d"), f32(g, 3));
    r = ops::cond(
        p, [&] { return v.assign_add(delta); }, [&] { return ops::identity(f32(g, -1)); });
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  const Output d = g.output("d:0");
  auto run = [&](bool pv) { return s.run(r, {{p, Tensor::scalar(pv)}, {d, Tensor::scalar(2.0f)}}).scalar<float>(); };
  EXPECT_EQ(run(false), -1.0f);
  EXPECT_EQ(run(true), 6.0f);
  EXPECT_EQ(run(false), -1.0f);
  EXPECT_EQ(run(true), 12.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 12.0f);
  EXPECT_THAT(g.operation("cond/v/AssignAdd").assigned_device(), HasSubstr("/job:ps/"));
}

// Many threads running one cond, each with its own predicate: every step gets its own branch.
TEST(CondConcurrencyTest, ThreadsTakeTheirOwnBranches) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  Output y = ops::cond(
      p, [&] { return ops::mul(x, f32(g, 2)); }, [&] { return ops::neg(x); });
  Output grad = gradients({y}, {x})[0];
  Session s(g);
  std::atomic<int> wrong{0};
  testing::run_threads(8, [&](int t) {
    for (int i = 0; i < 200; ++i) {
      const bool pv = (i + t) % 3 == 0;
      const float xv = static_cast<float>(i);
      auto out = s.run({y, grad}, {{p, Tensor::scalar(pv)}, {x, Tensor::scalar(xv)}});
      if (out[0].scalar<float>() != (pv ? 2 * xv : -xv) || out[1].scalar<float>() != (pv ? 2.0f : -1.0f)) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

// ---- errors ----

TEST(CondErrorTest, PredicateMustBeABoolScalar) {
  Graph g;
  Output x = f32(g, 1);
  auto branch = [&] { return x; };
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::cond(i32(g, 1), branch, branch); }),
              HasSubstr("must be bool, got int32"));
  Output pv = ops::placeholder(g, DType::Bool, Shape{2}, "pv");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::cond(pv, branch, branch); }),
              HasSubstr("must be a scalar, got shape [2]"));
  // A predicate of unknown shape is checked when the Switch runs.
  Output pu = ops::placeholder(g, DType::Bool, Shape::unknown(), "pu");
  Output y = ops::cond(pu, [&] { return ops::add(x, x); }, branch);
  Session s(g);
  Tensor two(DType::Bool, Shape{2});
  two.mutable_data<bool>()[0] = true;
  two.mutable_data<bool>()[1] = false;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(y, {{pu, two}}); }),
              HasSubstr("pred must be a bool scalar"));
}

TEST(CondErrorTest, BranchesMustAgree) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output a = f32(g, 1), n = i32(g, 1);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::cond(p, [&] { return a; }, [&] { return n; }); }),
              HasSubstr("result 0 is float32 in true_fn and int32 in false_fn"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::cond(
                    p, [&] { return std::vector<Output>{a, a}; }, [&] { return std::vector<Output>{a}; });
              }),
              HasSubstr("true_fn returned 2 results, false_fn 1"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::cond(
                    p, [&] { return std::vector<Output>{}; }, [&] { return std::vector<Output>{}; });
              }),
              HasSubstr("true_fn returned no results"));
  // A failed cond leaves the graph outside any branch: later ops are ordinary.
  EXPECT_EQ(g.impl().cond_branch_, nullptr);
}

TEST(CondErrorTest, ABranchCannotReadTheOthersTensors) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = f32(g, 1);
  Output leaked;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::cond(
                    p,
                    [&] {
                      leaked = ops::add(x, x, "inside_true");
                      return leaked;
                    },
                    [&] { return ops::mul(leaked, x); });
              }),
              HasSubstr("another branch of a cond"));
}

// Fetching a tensor of the branch that did not run is an error naming it (TF: "Retval does not
// have value"); fetching it when its branch runs is fine.
TEST(CondErrorTest, FetchingADeadTensorFails) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = f32(g, 4);
  Output inside;
  Output y = ops::cond(
      p,
      [&] {
        inside = ops::square(x, "sq");
        return inside;
      },
      [&] { return x; });
  Session s(g);
  EXPECT_EQ(s.run(inside, {{p, Tensor::scalar(true)}}).scalar<float>(), 16.0f);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run({y, inside}, {{p, Tensor::scalar(false)}}); }),
              HasSubstr("fetch 'cond/sq:0' has no value"));
  EXPECT_EQ(s.run(y, {{p, Tensor::scalar(false)}}).scalar<float>(), 4.0f);  // the session is fine
}

}  // namespace
}  // namespace tessera
