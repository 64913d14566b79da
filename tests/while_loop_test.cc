// ops::while_loop (tessera/control_flow.h): TensorFlow's tf.while_loop, with cases ported from
// control_flow_ops_py_test.py (testWhile_1, testWhile_2, testWhileWithMaximumIterations,
// testWhileShapeInference, testNestedWhile_1, testWhileCondWithControl, testWhileGrad_Square,
// testWhileGrad_Mul, testWhileGrad_Variable, testWhileQueue_1) and written for what they take for
// granted: captured tensors, conds inside the body, a loop inside a cond, a body that waits,
// cancellation, threads, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

Output f32(Graph& g, float v) { return ops::constant(g, v); }
Output f64(Graph& g, double v) { return ops::constant(g, v); }
Output i32(Graph& g, int32_t v) { return ops::constant(g, v); }
using Vars = std::vector<Output>;

// testWhile_1: n = 0; while n < 10000: n += 1.
TEST(WhileTest, CountsUp) {
  Graph g;
  Output n = i32(g, 0);
  Output r = ops::while_loop([&](Output v) { return ops::less(v, i32(g, 10000)); },
                             [&](Output v) { return ops::add(v, i32(g, 1)); }, n);
  Session s(g);
  EXPECT_EQ(s.run(r).scalar<int32_t>(), 10000);
  EXPECT_EQ(s.run(r).scalar<int32_t>(), 10000);  // a second run starts from the initial value again
  EXPECT_EQ(r.op().type(), "While");
}

// testWhile_2 with several loop variables of several dtypes: the sum and the product of 1..10.
TEST(WhileTest, SeveralLoopVariables) {
  Graph g;
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less_equal(v[0], i32(g, 10)); },
      [&](const Vars& v) {
        return Vars{ops::add(v[0], i32(g, 1)), ops::add(v[1], v[0]), ops::mul(v[2], ops::cast(v[0], DType::Float64))};
      },
      {i32(g, 1), i32(g, 0), f64(g, 1)});
  Session s(g);
  std::vector<Tensor> out = s.run(r);
  EXPECT_EQ(out[0].scalar<int32_t>(), 11);
  EXPECT_EQ(out[1].scalar<int32_t>(), 55);
  EXPECT_EQ(out[2].scalar<double>(), 3628800.0);
}

// A cond that is false at once: the loop variables come out as they went in; the body's ops never
// run (its dequeue from an empty queue would block).
TEST(WhileTest, ZeroIterations) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}});
  Output x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 0)); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::add(v[1], q.dequeue()[0])}; },
      {i32(g, 0), x});
  Session s(g);
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(10000);
  std::vector<Tensor> out = s.run(r, {{x, Tensor::vector<float>({1, 2})}}, {}, opts);
  EXPECT_EQ(out[0].scalar<int32_t>(), 0);
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 2}));
}

// The body reads tensors from outside the loop (a fed placeholder, a constant made before the
// loop) as they are when the loop starts; each step feeds its own.
TEST(WhileTest, ReadsTensorsFromOutside) {
  Graph g;
  Output factor = ops::placeholder(g, DType::Float32, Shape{}, "factor");
  Output limit = f32(g, 100);
  Output r = ops::while_loop([&](Output v) { return ops::less(v, limit); },
                             [&](Output v) { return ops::mul(v, factor); }, f32(g, 1));
  Session s(g);
  EXPECT_EQ(s.run(r, {{factor, Tensor::scalar(2.0f)}}).scalar<float>(), 128.0f);
  EXPECT_EQ(s.run(r, {{factor, Tensor::scalar(3.0f)}}).scalar<float>(), 243.0f);
  EXPECT_EQ(s.run(r, {{factor, Tensor::scalar(10.0f)}}).scalar<float>(), 100.0f);
}

// testWhileWithMaximumIterations: a cond that stays true stops after maximum_iterations.
TEST(WhileTest, MaximumIterations) {
  Graph g;
  Output limit = ops::placeholder(g, DType::Int32, Shape{}, "limit");
  ops::WhileOptions options;
  options.maximum_iterations = limit;
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::constant(g, true); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::mul(v[1], f32(g, 2))}; },
      {i32(g, 0), f32(g, 1)}, options);
  Session s(g);
  for (int32_t n : {0, 1, 5}) {
    std::vector<Tensor> out = s.run(r, {{limit, Tensor::scalar(n)}});
    EXPECT_EQ(out[0].scalar<int32_t>(), n);
    EXPECT_EQ(out[1].scalar<float>(), static_cast<float>(1 << n));
  }
}

// testWhileShapeInference: a loop variable whose shape changes needs a shape invariant that
// allows it; the results have the invariant's shape.
TEST(WhileTest, ShapeInvariants) {
  Graph g;
  Output v0 = ops::constant(g, Tensor::vector<float>({1}));
  auto cond = [&](const Vars& v) { return ops::less(ops::size(v[0]), i32(g, 16)); };
  auto body = [&](const Vars& v) { return Vars{ops::concat({v[0], v[0]}, 0)}; };
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::while_loop(cond, body, {v0}); }),
              HasSubstr("has shape [1] before the loop but [2] after an iteration: pass shape_invariants"));
  ops::WhileOptions options;
  options.shape_invariants = {Shape{-1}};
  Output r = ops::while_loop(cond, body, {v0}, options)[0];
  EXPECT_EQ(r.shape(), Shape{-1});
  Session s(g);
  EXPECT_EQ(s.run(r).to_vector<float>(), std::vector<float>(16, 1.0f));
}

// testNestedWhile_1: a loop in a loop's body, the inner one reading the outer's variable and a
// tensor from outside both.
TEST(WhileTest, NestedLoops) {
  Graph g;
  Output step = i32(g, 1);
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 3)); },
      [&](const Vars& v) {
        std::vector<Output> inner = ops::while_loop(
            [&](const Vars& w) { return ops::less(w[0], ops::add(v[0], i32(g, 4))); },
            [&](const Vars& w) { return Vars{ops::add(w[0], step), ops::add(w[1], step)}; }, {i32(g, 0), v[1]});
        return Vars{ops::add(v[0], step), inner[1]};
      },
      {i32(g, 0), i32(g, 0)});
  Session s(g);
  std::vector<Tensor> out = s.run(r);
  EXPECT_EQ(out[0].scalar<int32_t>(), 3);
  EXPECT_EQ(out[1].scalar<int32_t>(), 4 + 5 + 6);
}

// A cond inside the body: each iteration takes its own branch (Collatz: 27 reaches 1 in 111
// steps).
TEST(WhileTest, CondInsideTheBody) {
  Graph g;
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::greater(v[0], i32(g, 1)); },
      [&](const Vars& v) {
        Output half = ops::div(v[0], i32(g, 2));
        Output even = ops::equal(ops::mul(half, i32(g, 2)), v[0]);
        Output next = ops::cond(
            even, [&] { return half; },
            [&] { return ops::add(ops::mul(v[0], i32(g, 3)), i32(g, 1)); });
        return Vars{next, ops::add(v[1], i32(g, 1))};
      },
      {i32(g, 27), i32(g, 0)});
  Session s(g);
  EXPECT_EQ(s.run(r[1]).scalar<int32_t>(), 111);
  EXPECT_EQ(s.run(r[0]).scalar<int32_t>(), 1);
}

// A loop in a branch of a cond runs only when its branch is taken.
TEST(WhileTest, LoopInsideACond) {
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  Output r = ops::cond(
      p,
      [&] {
        return ops::while_loop([&](Output v) { return ops::less(v, i32(g, 100)); },
                               [&](Output v) { return ops::add(v, x); }, x);
      },
      [&] { return ops::neg(x); });
  Session s(g);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(true)}, {x, Tensor::scalar(7)}}).scalar<int32_t>(), 105);
  EXPECT_EQ(s.run(r, {{p, Tensor::scalar(false)}, {x, Tensor::scalar(7)}}).scalar<int32_t>(), -7);
}

// testWhileCondWithControl and its kind: a control input from outside the loop makes the loop
// wait for it; the body's ops may update a variable each iteration.
TEST(WhileTest, ControlInputsAndUpdatesInTheBody) {
  Graph g;
  Variable counter(g, Tensor::scalar(0), "counter");
  Variable flag(g, Tensor::scalar(0), "flag");
  Output set_flag = flag.assign(i32(g, 5));
  Output r;
  {
    auto after = g.control_dependencies({set_flag.op()});
    r = ops::while_loop([&](Output v) { return ops::less(v, i32(g, 4)); },
                        [&](Output v) {
                          Output bump = counter.assign_add(i32(g, 1));
                          auto ordered = g.control_dependencies({bump.op()});
                          return ops::add(v, i32(g, 1));
                        },
                        i32(g, 0));
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(r).scalar<int32_t>(), 4);
  EXPECT_EQ(s.run(counter.value()).scalar<int32_t>(), 4);
  EXPECT_EQ(s.run(flag.value()).scalar<int32_t>(), 5);
  s.run(r);
  EXPECT_EQ(s.run(counter.value()).scalar<int32_t>(), 8);
}

// testWhileQueue_1: the body dequeues (an asynchronous op): the loop takes what it needs.
TEST(WhileTest, BodyThatDequeues) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  Output x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  Operation enqueue = q.enqueue({x});
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 3)); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::add(v[1], q.dequeue()[0])}; },
      {i32(g, 0), f32(g, 0)});
  Session s(g);
  for (float v : {1.0f, 2.0f, 4.0f, 8.0f}) s.run(enqueue, {{x, Tensor::scalar(v)}});
  EXPECT_EQ(s.run(r[1]).scalar<float>(), 7.0f);
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 1);
}

// A body blocked on an empty queue is cancelled with its step: the step's deadline, and closing
// the queue, end the loop with the step's error.
TEST(WhileTest, BlockedBodyIsCancelledWithTheStep) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  Output r = ops::while_loop([&](Output v) { return ops::less(v, f32(g, 1e9f)); },
                             [&](Output v) { return ops::add(v, q.dequeue()[0]); }, f32(g, 0));
  Session s(g);
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  EXPECT_THROW(s.run(std::vector<Output>{r}, {}, {}, opts), DeadlineExceededError);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.run(q.close());
  });
  opts.timeout = std::chrono::milliseconds(30000);
  EXPECT_THAT(error_of<OutOfRangeError>([&] { s.run(std::vector<Output>{r}, {}, {}, opts); }), HasSubstr("body"));
  closer.join();
}

// Threads running one loop at once, each with its own feed.
TEST(WhileTest, ConcurrentRuns) {
  Graph g;
  Output x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], x); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::add(v[1], v[0])}; }, {i32(g, 0), i32(g, 0)});
  Session s(g);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        const int32_t n = t * 10 + k;
        if (s.run(r[1], {{x, Tensor::scalar(n)}}).scalar<int32_t>() != n * (n - 1) / 2) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A loop made under an accelerator's device scope runs on its task's CPU, without soft placement.
TEST(WhileTest, UnderAnAcceleratorScopeRunsOnTheHost) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  Output r;
  {
    auto on_sim = g.device("/device:SIM:0");
    r = ops::while_loop([&](Output v) { return ops::less(ops::reduce_sum(v), f32(g, 100)); },
                        [&](Output v) { return ops::mul(v, f32(g, 2)); }, ops::square(x));
  }
  SessionOptions strict;
  strict.allow_soft_placement = false;
  Session s(g, strict);
  EXPECT_EQ(s.run(r, {{x, Tensor::vector<float>({1, 2, 3})}}).to_vector<float>(), (std::vector<float>{8, 32, 72}));
  EXPECT_THAT(r.op().assigned_device(), HasSubstr("CPU:0"));
  EXPECT_THAT(ops::square(x).op().assigned_device(), ::testing::Not(HasSubstr("CPU")));
}

// On a cluster: the loop runs on the worker's host, reading a variable of the ps (captured: sent
// to the worker once per step) and a fed tensor; its gradient trains the ps variable. The task
// receives the loop's nodes with its share of the graph (Note [While loops on the wire]).
TEST(WhileClusterTest, LoopOnAWorkerTrainsAPsVariable) {
  train::ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Variable w;
  {
    auto on_ps = g.device("/job:ps/task:0");
    w = Variable(g, Tensor::scalar(1.0), "w");
  }
  Output n, loss, dw;
  std::vector<Output> r;
  Operation train;
  {
    auto on_worker = g.device("/job:worker/task:0");
    n = ops::placeholder(g, DType::Int32, Shape{}, "n");
    // y = w^n by n multiplications; loss = (y - 8)^2.
    r = ops::while_loop(
        [&](const Vars& v) { return ops::less(v[0], n); },
        [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::mul(v[1], w.value())}; },
        {i32(g, 0), f64(g, 1)});
    loss = ops::square(ops::sub(r[1], f64(g, 8)));
    dw = gradients({loss}, {w.value()})[0];
    train = train::GradientDescentOptimizer(0.002f).minimize(loss);
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  const FeedMap three = {{n, Tensor::scalar(3)}};
  EXPECT_EQ(s.run(r[1], three).scalar<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s.run(dw, three).scalar<double>(), 2 * (1 - 8) * 3);
  for (int k = 0; k < 300; ++k) s.run(train, three);
  EXPECT_NEAR(s.run(w.value()).scalar<double>(), 2.0, 1e-6);
  EXPECT_THAT(r[1].op().assigned_device(), HasSubstr("/job:worker/"));
}

// testWhileGrad_Square: v = 2; while v < 100: v = v * v. d v^8 / dv = 8 v^7 = 1024.
TEST(WhileGradTest, Square) {
  Graph g;
  Output v = f32(g, 2);
  Output r = ops::while_loop([&](Output x) { return ops::less(x, f32(g, 100)); },
                             [&](Output x) { return ops::square(x); }, v);
  Output dv = gradients({r}, {v})[0];
  Session s(g);
  EXPECT_EQ(s.run(r).scalar<float>(), 256.0f);
  EXPECT_FLOAT_EQ(s.run(dv).scalar<float>(), 1024.0f);
}

// testWhileGrad_Mul: the body reads `a` from outside: r = v * a^4, dr/da = 4 v a^3, dr/dv = a^4.
TEST(WhileGradTest, CapturedTensor) {
  Graph g;
  Output a = f32(g, 3), v = f32(g, 2);
  Output r = ops::while_loop([&](Output x) { return ops::less(x, f32(g, 100)); },
                             [&](Output x) { return ops::mul(x, a); }, v);
  std::vector<Output> d = gradients({r}, {a, v});
  Session s(g);
  EXPECT_EQ(s.run(r).scalar<float>(), 162.0f);
  EXPECT_FLOAT_EQ(s.run(d[0]).scalar<float>(), 216.0f);
  EXPECT_FLOAT_EQ(s.run(d[1]).scalar<float>(), 81.0f);
}

// An integer counter beside the values: no gradient flows through it; a loop variable the body
// passes through unchanged passes its gradient through too. No iteration: the gradient is the
// incoming one.
TEST(WhileGradTest, CounterAndPassThroughVariables) {
  Graph g;
  Output n = ops::placeholder(g, DType::Int32, Shape{}, "n");
  Output x = ops::placeholder(g, DType::Float64, Shape{2}, "x");
  Output y = ops::placeholder(g, DType::Float64, Shape{2}, "y");
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], n); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::mul(v[1], ops::sin(v[2])), v[2]}; },
      {i32(g, 0), x, y});
  Output loss = ops::reduce_sum(ops::add(r[1], r[2]));
  std::vector<Output> d = gradients({loss}, {x, y});
  Session s(g);
  const Tensor xv = Tensor::vector<double>({1.5, -2}), yv = Tensor::vector<double>({0.3, 1.1});
  for (int32_t iterations : {0, 1, 3}) {
    std::vector<Tensor> out = s.run({d[0], d[1]}, {{n, Tensor::scalar(iterations)}, {x, xv}, {y, yv}});
    for (int i = 0; i < 2; ++i) {
      const double xi = xv.data<double>()[i], si = std::sin(yv.data<double>()[i]), ci = std::cos(yv.data<double>()[i]);
      // loss = x sin(y)^k + y
      EXPECT_NEAR(out[0].data<double>()[i], std::pow(si, iterations), 1e-12) << iterations;
      const double dy = 1 + (iterations == 0 ? 0 : xi * iterations * std::pow(si, iterations - 1) * ci);
      EXPECT_NEAR(out[1].data<double>()[i], dy, 1e-12) << iterations;
    }
  }
}

// testWhileGrad_Variable, then training: a loss computed by a loop over a variable's value goes
// down under gradient descent, as the closed form says.
TEST(WhileGradTest, TrainsAVariableThroughALoop) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0), "w");
  // y = w^3 by three multiplications in a loop; loss = (y - 8)^2, least at w = 2.
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 3)); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::mul(v[1], w.value())}; },
      {i32(g, 0), f64(g, 1)});
  Output loss = ops::square(ops::sub(r[1], f64(g, 8)));
  Output dw = gradients({loss}, {w.value()})[0];
  Operation train = train::GradientDescentOptimizer(0.002f).minimize(loss);
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_DOUBLE_EQ(s.run(dw).scalar<double>(), 2 * (1 - 8) * 3);  // 2 (w^3 - 8) 3 w^2 at w = 1
  for (int k = 0; k < 300; ++k) s.run(train);
  EXPECT_NEAR(s.run(w.value()).scalar<double>(), 2.0, 1e-6);
  EXPECT_NEAR(s.run(loss).scalar<double>(), 0.0, 1e-9);
}

// Nested loops have a gradient too: r = x^(3*2), three outer iterations of two inner products,
// the inner loop reading x as the outer body has it (a tensor of the outer loop's body).
TEST(WhileGradTest, NestedLoops) {
  Graph g;
  Output x = f64(g, 1.1);
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 3)); },
      [&](const Vars& v) {
        Output x_here = ops::identity(x);
        std::vector<Output> inner = ops::while_loop(
            [&](const Vars& w) { return ops::less(w[0], i32(g, 2)); },
            [&](const Vars& w) { return Vars{ops::add(w[0], i32(g, 1)), ops::mul(w[1], x_here)}; },
            {i32(g, 0), v[1]});
        return Vars{ops::add(v[0], i32(g, 1)), inner[1]};
      },
      {i32(g, 0), f64(g, 1)});
  Output dx = gradients({r[1]}, {x})[0];
  Session s(g);
  EXPECT_NEAR(s.run(r[1]).scalar<double>(), std::pow(1.1, 6), 1e-12);
  EXPECT_NEAR(s.run(dx).scalar<double>(), 6 * std::pow(1.1, 5), 1e-12);
}

// A cond in the body: each recomputed iteration takes the branch its forward iteration took.
// x: 0.5 -> 1.5 (x * 3) -> 2.25 (x^2) -> 5.0625 (x^2); d/dx = 3 * (2 * 1.5) * (2 * 2.25) = 40.5.
TEST(WhileGradTest, CondInTheBody) {
  Graph g;
  Output x = f64(g, 0.5);
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 3)); },
      [&](const Vars& v) {
        Output next = ops::cond(
            ops::greater(v[1], f64(g, 1)), [&] { return ops::square(v[1]); }, [&] { return ops::mul(v[1], f64(g, 3)); });
        return Vars{ops::add(v[0], i32(g, 1)), next};
      },
      {i32(g, 0), x});
  Output dx = gradients({r[1]}, {x})[0];
  Session s(g);
  EXPECT_DOUBLE_EQ(s.run(r[1]).scalar<double>(), 5.0625);
  EXPECT_DOUBLE_EQ(s.run(dx).scalar<double>(), 40.5);
}

TEST(WhileGradTest, StatefulBodyHasNoGradient) {
  Graph g;
  Output x = f32(g, 1);
  Output r = ops::while_loop([&](Output v) { return ops::less(v, f32(g, 10)); },
                             [&](Output v) { return ops::add(v, ops::random_uniform(g, Shape{}, DType::Float32)); }, x);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { gradients({r}, {x}); }),
              HasSubstr("its body has the stateful op"));
}

TEST(WhileErrorTest, BadLoops) {
  Graph g;
  Output x = f32(g, 1);
  auto lt = [&](const Vars& v) { return ops::less(v[0], f32(g, 10)); };
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::while_loop(lt, [](const Vars& v) { return v; }, {}); }),
              HasSubstr("no loop variables"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::while_loop([&](const Vars& v) { return v[0]; }, [](const Vars& v) { return v; }, {x});
              }),
              HasSubstr("cond must return a bool scalar, got float32"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::while_loop(lt, [&](const Vars& v) { return Vars{v[0], v[0]}; }, {x});
              }),
              HasSubstr("body returned 2 results for 1 loop variables"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ops::while_loop(lt, [&](const Vars& v) { return Vars{ops::cast(v[0], DType::Int32)}; }, {x});
              }),
              HasSubstr("body result 0 is int32, loop variable 0 is float32"));
}

// Nothing outside the loop reads its body's tensors: an op made outside that reads one is an
// error, and so is fetching one.
TEST(WhileErrorTest, BodyTensorsStayInside) {
  Graph g;
  Output inside;
  Output r = ops::while_loop([&](Output v) { return ops::less(v, f32(g, 10)); },
                             [&](Output v) {
                               inside = ops::add(v, f32(g, 1));
                               return inside;
                             },
                             f32(g, 0));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::neg(inside); }),
              HasSubstr("was made in the body of while loop 'while': outside the loop, read the loop's results"));
  {  // nor waits on one, or is waited on by one, whether when made or later
    auto after = g.control_dependencies({inside.op()});
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::no_op(g); }),
                HasSubstr("control input 'while/body/Add' was made in the body of while loop 'while'"));
  }
  Operation outside = ops::no_op(g, "outside");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { outside.add_control_input(inside.op()); }),
              HasSubstr("an edge added later may not cross a while loop's body"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { inside.op().add_control_input(outside); }),
              HasSubstr("an edge added later may not cross a while loop's body"));
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(inside); }), HasSubstr("has a value only inside the loop"));
  EXPECT_EQ(s.run(r).scalar<float>(), 10.0f);
}

// A loop variable whose shape changes at run time beyond its invariant fails the step, naming
// the variable (the shape its body's result has when the graph is built allows it).
TEST(WhileErrorTest, ShapeBeyondTheInvariantAtRunTime) {
  Graph g;
  Output table = ops::constant(g, Tensor::vector<float>({10, 20, 30}));
  Output idx = ops::placeholder(g, DType::Int32, Shape{-1}, "idx");
  std::vector<Output> r = ops::while_loop(
      [&](const Vars& v) { return ops::less(v[0], i32(g, 2)); },
      [&](const Vars& v) { return Vars{ops::add(v[0], i32(g, 1)), ops::gather(table, idx)}; },
      {i32(g, 0), ops::constant(g, Tensor::vector<float>({0, 0}))});
  Session s(g);
  EXPECT_EQ(s.run(r[1], {{idx, Tensor::vector<int32_t>({2, 0})}}).to_vector<float>(), (std::vector<float>{30, 10}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(r[1], {{idx, Tensor::vector<int32_t>({2, 0, 1})}}); }),
              HasSubstr("loop variable 1 has shape [3] after iteration 0, which its shape invariant [2] does not allow"));
}

}  // namespace
}  // namespace tessera
