// Device functions (Graph::device(DeviceFunction), Note [Device scopes] in core/graph.cc) and
// train::replica_device_setter: TensorFlow's device_setter_test.py cases (and the greedy
// strategy's from contrib's), the resource rule that sends an optimizer's updates to its
// variables' ps tasks (Note [Placement]), and a real training run on an in-process cluster of two
// ps tasks and a worker.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/device_name.h"
#include "core/logging.h"
#include "core/node.h"
#include "core/placement.h"
#include "core/calibration.h"
#include "tests/testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using train::ClusterSpec;
using train::replica_device_setter;

// TensorFlow's assertDeviceEqual: the canonical form of both specs.
std::string canonical(const std::string& spec) { return internal::DeviceSpec::parse(spec).value().to_string(); }
#define EXPECT_DEVICE(op, spec) EXPECT_EQ((op).device(), canonical(spec)) << (op).name()

const ClusterSpec& tf_cluster() {
  static const ClusterSpec cluster(
      {{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}});
  return cluster;
}

Variable vector_variable(Graph& g, std::vector<float> values) {
  return Variable(g, Tensor::vector<float>(values));
}

// Expects `v` and its initializer on `spec`: the replica device setter places the two together.
void expect_variable_on(const Variable& v, const std::string& spec) {
  EXPECT_DEVICE(v.op(), spec);
  EXPECT_DEVICE(v.initializer(), spec);
}

// ---------------------------------------------------------------- Graph::device(DeviceFunction)

TEST(DeviceFunctionTest, TheFunctionSeesTheNewOpAndChoosesItsDevice) {
  Graph g;
  auto a = ops::constant(g, 1.0f, "a");
  std::vector<std::string> seen;
  Output sum;
  {
    auto scope = g.device([&](const Operation& op) {
      seen.push_back(op.type() + " " + op.name() + " " + std::to_string(op.num_inputs()));
      if (op.num_inputs() > 0) {
        EXPECT_EQ(op.input(0).op().name(), "a");
        EXPECT_EQ(op.output(0).shape(), Shape{});
      }
      return op.type() == "Add" ? "/job:worker/task:1" : "/device:CPU:0";
    });
    sum = ops::add(a, a, "sum");
    ops::constant(g, 2.0f, "b");
  }
  auto after = ops::constant(g, 3.0f, "after");
  EXPECT_EQ(seen, (std::vector<std::string>{"Add sum 2", "Const b 0"}));
  EXPECT_DEVICE(sum.op(), "/job:worker/task:1");
  EXPECT_DEVICE(g.operation("b"), "/device:CPU:0");
  EXPECT_EQ(a.op().device(), "");
  EXPECT_EQ(after.op().device(), "");  // the scope ended
}

TEST(DeviceFunctionTest, OuterStringScopesFillWhatTheAnswerLeavesUnset) {
  Graph g;
  auto outer = g.device("/job:train/task:3/device:CPU:0");
  {
    auto fn = g.device([](const Operation&) { return "/device:GPU:1"; });
    auto a = ops::constant(g, 1.0f, "a");
    EXPECT_DEVICE(a.op(), "/job:train/task:3/device:GPU:1");  // the answer's fields win
  }
  {
    auto fn = g.device([](const Operation&) { return "/job:other"; });
    auto b = ops::constant(g, 1.0f, "b");
    EXPECT_DEVICE(b.op(), "/job:other/task:3/device:CPU:0");
  }
  {
    auto fn = g.device([](const Operation&) { return ""; });
    auto c = ops::constant(g, 1.0f, "c");
    EXPECT_DEVICE(c.op(), "/job:train/task:3/device:CPU:0");
  }
}

TEST(DeviceFunctionTest, InnerScopesDecideFirstAndTheFunctionSeesTheirRequest) {
  Graph g;
  std::vector<std::string> seen;
  auto outer_fn = g.device([&](const Operation& op) {
    seen.push_back(op.device());
    return op.device().empty() ? std::string("/job:ps") : op.device() + "/task:7";
  });
  auto d = g.device("/job:worker");  // inside the function's scope: decides first
  auto a = ops::constant(g, 1.0f, "a");
  EXPECT_DEVICE(a.op(), "/job:worker/task:7");
  {
    auto inner_fn = g.device([](const Operation&) { return "/device:CPU:2"; });
    auto b = ops::constant(g, 1.0f, "b");
    // inner function -> "/device:CPU:2", merged under "/job:worker" -> the outer function.
    EXPECT_DEVICE(b.op(), "/job:worker/task:7/device:CPU:2");
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"/job:worker", canonical("/job:worker/device:CPU:2")}));
}

TEST(DeviceFunctionTest, AnEmptyScopeSetsTheFunctionsAside) {
  Graph g;
  int calls = 0;
  auto fn = g.device([&](const Operation&) {
    ++calls;
    return "/job:ps";
  });
  {
    auto clear = g.device("");
    auto a = ops::constant(g, 1.0f, "a");
    EXPECT_EQ(a.op().device(), "");
    auto d = g.device(nullptr);  // TensorFlow's device(None)
    EXPECT_EQ(ops::constant(g, 1.0f).op().device(), "");
  }
  EXPECT_EQ(calls, 0);
  EXPECT_DEVICE(ops::constant(g, 1.0f, "b").op(), "/job:ps");
  EXPECT_EQ(calls, 1);
}

TEST(DeviceFunctionTest, ColocateWithSetsTheDeviceScopesAside) {
  // As TensorFlow's colocate_with: colocation is the stronger constraint.
  Graph g;
  auto x = ops::constant(g, 1.0f, "x");
  int calls = 0;
  auto s = g.device("/job:outer");
  auto fn = g.device([&](const Operation&) {
    ++calls;
    return "/job:worker";
  });
  auto colo = g.colocate_with(x);
  auto a = ops::add(x, x, "a");
  EXPECT_EQ(a.op().device(), "");
  EXPECT_EQ(calls, 0);
  {
    auto inside = g.device("/device:CPU:1");  // scopes opened inside still apply
    EXPECT_DEVICE(ops::add(x, x, "b").op(), "/device:CPU:1");
  }
  EXPECT_EQ(calls, 0);
  ASSERT_EQ(a.node()->colocate_with.size(), 1u);
  EXPECT_EQ(a.node()->colocate_with[0], x.node());
}

TEST(DeviceFunctionTest, AMalformedAnswerOrAThrowIsTheOpsErrorAndAddsNothing) {
  Graph g;
  auto a = ops::constant(g, 1.0f, "a");
  const int before = g.num_operations();
  {
    auto fn = g.device([](const Operation&) { return "/gibberish:x"; });
    EXPECT_THROW_MSG(ops::add(a, a, "bad"), InvalidArgumentError, "Add 'bad': the device function answered");
  }
  {
    auto fn = g.device([](const Operation& op) -> std::string {
      throw NotFoundError("no device for " + op.name());
    });
    EXPECT_THROW_MSG(ops::add(a, a, "bad"), NotFoundError, "no device for bad");
  }
  EXPECT_EQ(g.num_operations(), before);
  EXPECT_THROW(g.operation("bad"), NotFoundError);
  EXPECT_EQ(ops::add(a, a, "bad").op().name(), "bad");  // the name was not taken
  EXPECT_THROW_MSG(auto scope = g.device(DeviceFunction()), InvalidArgumentError, "null device function");
}

TEST(DeviceFunctionTest, TheFunctionMayReadTheGraph) {
  // It runs without the graph's lock: reading the graph from it must not deadlock.
  Graph g;
  auto a = ops::constant(g, 1.0f, "a");
  auto fn = g.device([&g](const Operation& op) {
    EXPECT_THROW(g.operation(op.name()), NotFoundError);  // not added yet
    return "/task:" + std::to_string(g.num_operations());
  });
  auto b = ops::add(a, a, "b");
  EXPECT_DEVICE(b.op(), "/task:1");
  EXPECT_TRUE(b.op().control_inputs().empty());
  EXPECT_EQ(g.operation("b"), b.op());
}

// ---------------------------------------------------------------- replica_device_setter (TF's cases)

TEST(ReplicaDeviceSetterTest, CPUOverride) {
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster()));
  Variable v, w;
  {
    auto cpu = g.device("/cpu:0");
    v = vector_variable(g, {1, 2});
  }
  w = vector_variable(g, {2, 1});
  Output a;
  {
    auto cpu = g.device("/cpu:0");
    a = ops::add(v.value(), w.value());
  }
  expect_variable_on(v, "/job:ps/task:0/cpu:0");
  expect_variable_on(w, "/job:ps/task:1");
  EXPECT_DEVICE(a.op(), "/job:worker/cpu:0");
}

TEST(ReplicaDeviceSetterTest, PS2TasksWithClusterSpec) {
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster()));
  Variable v = vector_variable(g, {1, 2});
  Variable w = vector_variable(g, {2, 1});
  Output a = ops::add(v.value(), w.value());
  expect_variable_on(v, "/job:ps/task:0");
  expect_variable_on(w, "/job:ps/task:1");
  EXPECT_DEVICE(a.op(), "/job:worker");
  // Round robin comes back to task 0; the initial values are worker ops, as in TensorFlow.
  Variable x = vector_variable(g, {0, 0});
  EXPECT_DEVICE(x.op(), "/job:ps/task:0");
  EXPECT_DEVICE(x.initializer().input(0).op(), "/job:worker");
}

TEST(ReplicaDeviceSetterTest, PS2TasksPinVariableToJob) {
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster()));
  Variable v = vector_variable(g, {1, 2});
  Variable w, x;
  {
    auto moon = g.device("/job:moon");
    w = vector_variable(g, {2, 1});
    auto ps = g.device("/job:ps");  // an explicit ps job gets a task
    x = vector_variable(g, {0, 1});
  }
  Output a = ops::add(ops::add(v.value(), w.value()), x.value());
  expect_variable_on(v, "/job:ps/task:0");
  expect_variable_on(w, "/job:moon");
  expect_variable_on(x, "/job:ps/task:1");
  EXPECT_DEVICE(a.op(), "/job:worker");
}

TEST(ReplicaDeviceSetterTest, PS2TasksWithWorkerDevice) {
  // TensorFlow's testPS2TasksWithDevice, with tessera's fixed ps job: the worker device is a task.
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster(), "/job:worker/task:2/device:CPU:0"));
  Variable v = vector_variable(g, {1, 2});
  Variable w = vector_variable(g, {2, 1});
  Output a = ops::add(v.value(), w.value());
  EXPECT_DEVICE(v.op(), "/job:ps/task:0");
  EXPECT_DEVICE(w.op(), "/job:ps/task:1");
  EXPECT_DEVICE(a.op(), "/job:worker/task:2/device:CPU:0");
}

TEST(ReplicaDeviceSetterTest, OuterScopesFillTheAnswer) {
  Graph g;
  auto outer = g.device("/replica:0/device:CPU:0");
  auto setter = g.device(replica_device_setter(tf_cluster(), "/job:worker/task:1"));
  Variable v = vector_variable(g, {1, 2});
  EXPECT_DEVICE(v.op(), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_DEVICE(ops::add(v.value(), v.value()).op(), "/job:worker/replica:0/task:1/device:CPU:0");
}

TEST(ReplicaDeviceSetterTest, WithoutAPsJobEveryOpGoesToTheWorkerDevice) {
  Graph g;
  auto setter = g.device(replica_device_setter(ClusterSpec({{"worker", {"w0:2222", "w1:2222"}}}),
                                               "/job:worker/task:1"));
  Variable v = vector_variable(g, {1, 2});
  expect_variable_on(v, "/job:worker/task:1");
  EXPECT_DEVICE(ops::add(v.value(), v.value()).op(), "/job:worker/task:1");
}

TEST(ReplicaDeviceSetterTest, SparsePsJobUsesItsTaskIndices) {
  Graph g;
  ClusterSpec::SparseJobs jobs{{"ps", {{1, "ps1:2222"}, {4, "ps4:2222"}}}, {"worker", {{0, "w0:2222"}}}};
  auto setter = g.device(replica_device_setter(ClusterSpec(jobs)));
  EXPECT_DEVICE(vector_variable(g, {1}).op(), "/job:ps/task:1");
  EXPECT_DEVICE(vector_variable(g, {1}).op(), "/job:ps/task:4");
  EXPECT_DEVICE(vector_variable(g, {1}).op(), "/job:ps/task:1");
}

TEST(ReplicaDeviceSetterTest, BadArgumentsAreInvalid) {
  EXPECT_THROW_MSG(replica_device_setter(tf_cluster(), "/job:worker", "random"), InvalidArgumentError,
                   "unknown ps_strategy 'random'");
  EXPECT_THROW_MSG(replica_device_setter(tf_cluster(), "/jab:worker"), InvalidArgumentError, "/jab:worker");
}

TEST(ReplicaDeviceSetterTest, GreedyBytesBalancesByByteSize) {
  // contrib's GreedyLoadBalancingStrategy with byte_size_load_fn: u 16 bytes -> ps0, v 8 -> ps1,
  // w 16 -> ps1 (8 < 16), x 12 -> ps0 (16 < 24).
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster(), "/job:worker", "greedy_bytes"));
  Variable u(g, Tensor::zeros(DType::Float32, {2, 2}), "u");
  Variable v(g, Tensor::zeros(DType::Float32, {2, 1}), "v");
  Variable w(g, Tensor::zeros(DType::Float32, {2, 2}), "w");
  Variable x(g, Tensor::zeros(DType::Float32, {1, 3}), "x");
  Output a = ops::add(v.value(), v.value());
  EXPECT_DEVICE(u.op(), "/job:ps/task:0");
  EXPECT_DEVICE(v.op(), "/job:ps/task:1");
  EXPECT_DEVICE(w.op(), "/job:ps/task:1");
  EXPECT_DEVICE(x.op(), "/job:ps/task:0");
  EXPECT_DEVICE(a.op(), "/job:worker");
  // Loads 28 and 24: a float32 scalar -> ps1; then 28 each, and ties go to the lowest index.
  Variable z(g, Tensor::scalar(1.0f), "z");
  EXPECT_DEVICE(z.op(), "/job:ps/task:1");
  Variable y(g, Tensor::scalar(1.0), "y");
  EXPECT_DEVICE(y.op(), "/job:ps/task:0");
}

TEST(ReplicaDeviceSetterTest, GreedyBytesNeedsAKnownShape) {
  Graph g;
  auto p = ops::placeholder(g, DType::Float32, Shape{-1}, "p");
  auto setter = g.device(replica_device_setter(tf_cluster(), "/job:worker", "greedy_bytes"));
  EXPECT_THROW_MSG(Variable(p, "v"), InvalidArgumentError, "not fully defined");
}

TEST(ReplicaDeviceSetterTest, CopiesShareTheRoundRobin) {
  Graph g;
  DeviceFunction setter = replica_device_setter(tf_cluster());
  DeviceFunction copy = setter;
  Variable v, w;
  {
    auto s = g.device(setter);
    v = vector_variable(g, {1});
  }
  {
    auto s = g.device(copy);
    w = vector_variable(g, {1});
  }
  EXPECT_DEVICE(v.op(), "/job:ps/task:0");
  EXPECT_DEVICE(w.op(), "/job:ps/task:1");
}

TEST(ReplicaDeviceSetterTest, SlotsFollowTheirVariableAndTakeNoPsTask) {
  Graph g;
  auto setter = g.device(replica_device_setter(tf_cluster(), "/job:worker/task:0"));
  Variable w(g, Tensor::vector<float>({1, 2}), "w");  // ps 0
  Variable b(g, Tensor::scalar(0.5f), "b");           // ps 1
  auto x = ops::constant(g, Tensor::vector<float>({3, 4}), "x");
  auto loss = ops::reduce_sum(ops::square(ops::sub(ops::reduce_sum(ops::mul(x, w.value())), b.value())));
  train::MomentumOptimizer opt(0.1f, 0.9f);
  Operation step = opt.minimize(loss);
  Variable after(g, Tensor::scalar(1.0f), "after");  // the slots took no turn
  EXPECT_DEVICE(after.op(), "/job:ps/task:0");
  for (const Variable& var : {w, b}) {
    auto slot = opt.get_slot(var, "momentum");
    ASSERT_TRUE(slot.has_value()) << var.name();
    EXPECT_EQ(slot->op().device(), "") << slot->name();  // made under colocate_with(var)
    ASSERT_EQ(slot->op().node()->colocate_with.size(), 1u);
    EXPECT_EQ(slot->op().node()->colocate_with[0], var.op().node());
  }
  // The update asks for the worker (the scope says so); placement sends it to its variable.
  const Operation apply = g.operation("Momentum/w/ApplyMomentum");
  EXPECT_DEVICE(apply, "/job:worker/task:0");
  EXPECT_EQ(apply.node()->resource, w.op().node());
  (void)step;
}

// ---------------------------------------------------------------- placement over tasks

// Every op's device on CPUs of worker 0, ps 0 and ps 1.
std::map<std::string, std::string> place_on_tasks(const Graph& g) {
  std::vector<internal::PlacementDevice> devices;
  for (const char* task : {"/job:worker/replica:0/task:0", "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}) {
    devices.push_back({std::string(task) + "/device:CPU:0", "CPU", internal::kCpuCostProfile});
  }
  std::vector<const internal::Node*> nodes;
  for (const Operation& op : g.operations()) nodes.push_back(op.node());
  auto placed = internal::place_nodes(nodes, devices, internal::PlacementOptions{});
  EXPECT_TRUE(placed.ok()) << placed.status().to_string();
  std::map<std::string, std::string> out;
  if (!placed.ok()) return out;
  EXPECT_TRUE(placed.value().soft_placements.empty()) << placed.value().soft_placements[0];
  for (const auto& [node, d] : placed.value().device_of) out[node->name] = devices[d].name;
  return out;
}

// The brief's graph: variables on ps tasks, the model and minimize() under a worker's scope
// (TensorFlow's "Ignoring device specification ... is a reference connection" case). Every
// update, slot and slot update lands on its variable's ps task; the gradients on the worker.
TEST(ReplicaDeviceSetterTest, UpdatesBuiltUnderAWorkerScopeRunOnTheirVariablesPsTask) {
  for (const char* optimizer : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(optimizer);
    Graph g;
    std::vector<Variable> vars;
    {
      auto setter = g.device(replica_device_setter(tf_cluster()));
      vars.emplace_back(g, Tensor::zeros(DType::Float32, {4, 3}), "w");
      vars.emplace_back(g, Tensor::zeros(DType::Float32, {3}), "b");
    }
    Operation step;
    std::vector<std::string> logged;
    auto sink = internal::set_log_sink([&](internal::LogLevel, std::string_view text) {
      if (text.find("reference connection") != std::string_view::npos) logged.emplace_back(text);
    });
    const auto level = internal::log_level();
    internal::set_log_level(internal::LogLevel::kInfo);
    {
      auto worker = g.device("/job:worker/task:0");
      auto x = ops::placeholder(g, DType::Float32, Shape{8, 4}, "x");
      auto y = ops::add(ops::matmul(x, vars[0].value()), vars[1].value());
      auto loss = ops::reduce_mean(ops::square(y), {}, false, "loss");
      const std::string name = optimizer;
      if (name == "sgd") step = train::GradientDescentOptimizer(0.1f).minimize(loss);
      if (name == "momentum") step = train::MomentumOptimizer(0.1f, 0.9f).minimize(loss);
      if (name == "adam") step = train::AdamOptimizer().minimize(loss);
    }
    auto placed = place_on_tasks(g);
    auto again = place_on_tasks(g);  // logged once per op, however often it is placed
    internal::set_log_level(level);
    internal::set_log_sink(sink);
    ASSERT_FALSE(placed.empty());
    EXPECT_EQ(placed, again);
    const std::string ps0 = "/job:ps/replica:0/task:0/device:CPU:0", ps1 = "/job:ps/replica:0/task:1/device:CPU:0";
    EXPECT_EQ(placed["w"], ps0);
    EXPECT_EQ(placed["b"], ps1);
    int updates = 0;
    for (const Operation& op : g.operations()) {
      const internal::Node* n = op.node();
      // An op on a variable follows it: its updates, its slots, their updates.
      const internal::Node* var = n->resource != nullptr ? n->resource : n;
      if (var->type == "VariableV2" && !var->colocate_with.empty()) var = var->colocate_with[0];
      if (var->name == "w" || var->name == "b") {
        EXPECT_EQ(placed[n->name], placed[var->name]) << n->name;
        updates += n->type.rfind("Apply", 0) == 0;
      }
    }
    EXPECT_EQ(updates, 2);
    EXPECT_EQ(placed["x"], "/job:worker/replica:0/task:0/device:CPU:0");
    EXPECT_EQ(placed["loss"], "/job:worker/replica:0/task:0/device:CPU:0");
    // One line per update that asked for the worker, each naming the op, its request and its variable.
    EXPECT_EQ(logged.size(), 2u);
    for (const std::string& line : logged) {
      EXPECT_THAT(line, HasSubstr("ignoring device specification '/job:worker/task:0'"));
      EXPECT_THAT(line, HasSubstr("is a reference connection"));
    }
  }
}

// ---------------------------------------------------------------- a real cluster

// TensorFlow 1's between-graph replication in one process: two ps tasks and a worker, the model
// under replica_device_setter, GradientDescentOptimizer.minimize. It trains, and each variable
// (with its update) stays on its ps task.
TEST(ReplicaDeviceSetterClusterTest, MinimizeOverTwoPsTasksTrainsAndKeepsEachVariableOnItsPs) {
  ClusterSpec cluster({{"ps", {train::free_loopback_address(), train::free_loopback_address()}},
                       {"worker", {train::free_loopback_address()}}});
  train::Server ps0(cluster, "ps", 0);
  train::Server ps1(cluster, "ps", 1);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Output loss;
  Operation step;
  Variable w, b;
  {
    auto setter = g.device(replica_device_setter(cluster, "/job:worker/task:0"));
    w = Variable(g, Tensor::vector<float>({0, 0}), "w");
    b = Variable(g, Tensor::scalar(0.0f), "b");
    // y = 2 x0 - 3 x1 + 1 on four points.
    auto x = ops::constant(g, Tensor::matrix<float>({1, 0, 0, 1, 1, 1, 2, -1}, 4, 2), "x");
    auto y = ops::constant(g, Tensor::vector<float>({3, -2, 0, 8}), "y");
    auto pred = ops::add(ops::reduce_sum(ops::mul(x, w.value()), {1}), b.value());
    loss = ops::reduce_mean(ops::square(ops::sub(pred, y)), {}, false, "loss");
    step = train::GradientDescentOptimizer(0.1f).minimize(loss);
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  const float first = s.run(loss).scalar<float>();
  for (int i = 0; i < 500; ++i) s.run(step);
  const float last = s.run(loss).scalar<float>();
  EXPECT_LT(last, 1e-3f * first) << first << " -> " << last;
  const auto wv = s.run(w.value()).to_vector<float>();
  EXPECT_NEAR(wv[0], 2, 0.05);
  EXPECT_NEAR(wv[1], -3, 0.05);
  EXPECT_NEAR(s.run(b.value()).scalar<float>(), 1, 0.05);
  EXPECT_THAT(w.op().assigned_device(), StartsWith("/job:ps/replica:0/task:0/"));
  EXPECT_THAT(b.op().assigned_device(), StartsWith("/job:ps/replica:0/task:1/"));
  EXPECT_THAT(g.operation("GradientDescent/w/ApplyGradientDescent").assigned_device(),
              StartsWith("/job:ps/replica:0/task:0/"));
  EXPECT_THAT(g.operation("GradientDescent/b/ApplyGradientDescent").assigned_device(),
              StartsWith("/job:ps/replica:0/task:1/"));
  EXPECT_THAT(loss.op().assigned_device(), StartsWith("/job:worker/replica:0/task:0/"));
}

// A learning-rate schedule on a cluster: the global step lives on the ps, the schedule's ops on
// the worker (the device setter puts them there), and each step's update reads the rate of the
// step before the increment: exponential_decay(1, step, 2, 0.5, staircase) gives 1, 1, 0.5, 0.5,
// 0.25, 0.25, so w (gradient 1) ends at -3.5 after six steps.
TEST(ReplicaDeviceSetterClusterTest, ALearningRateScheduleReadsTheGlobalStepOnThePs) {
  ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Variable w;
  Variable step;
  Output lr;
  Operation train_op;
  {
    auto setter = g.device(replica_device_setter(cluster, "/job:worker/task:0"));
    step = train::get_or_create_global_step(g);
    w = Variable(g, Tensor::scalar(0.0f), "w");
    lr = train::exponential_decay(1.0f, step, 2, 0.5f, /*staircase=*/true);
    train_op = train::GradientDescentOptimizer(lr).minimize(ops::mul(w.value(), ops::constant(g, 1.0f)), step);
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  for (int i = 0; i < 6; ++i) s.run(train_op);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 6);
  EXPECT_EQ(s.run(w.value()).scalar<float>(), -3.5f);
  EXPECT_FLOAT_EQ(s.run(lr).scalar<float>(), 0.125f);
  EXPECT_THAT(step.op().assigned_device(), StartsWith("/job:ps/replica:0/task:0/"));
  EXPECT_THAT(lr.op().assigned_device(), StartsWith("/job:worker/replica:0/task:0/"));
}

}  // namespace
}  // namespace tessera
