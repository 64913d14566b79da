// train::SyncReplicasOptimizer: TensorFlow's sync_replicas_optimizer_test.py (test2Workers,
// test3Workers1Backup and the hook tests) on an in-process cluster (every task's Server in this
// process, each worker with its own graph and session, as between-graph replication has it), the
// same in one process with one session, the hook driven by hand, and misuse.
//
// The gradients are constants, so each synchronous step's variable values are exact: worker w
// sends 0.1 + 0.2 w for v0, 0.9 + 0.2 w for v1 and [[0], [0.1 + 0.2 w]] for v_sparse (TF's sparse
// gradient, dense here), and the wrapped optimizer is gradient descent with rate 2.
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using train::ClusterSpec;
using train::GradientDescentOptimizer;
using train::Server;
using train::SessionRunHook;
using train::SyncReplicasOptimizer;

constexpr auto kSettle = 100ms;

RunOptions bounded() {
  RunOptions o;
  o.timeout = 60s;
  return o;
}

// One worker's graph, optimizer, hook and session.
struct Worker {
  Graph g;
  Variable global_step, v0, v1, v_sparse;
  std::unique_ptr<SyncReplicasOptimizer> opt;
  Operation train_op;
  std::unique_ptr<Session> owned;  // the cluster version's session
  Session* session = nullptr;      // Not owned.
  SessionRunHook hook;  // declared after the session: destroyed (stopping its thread) before it

  void train() { session->run({}, {}, {train_op}, bounded()); }
  float value(const Variable& v) { return session->run({v.value()}, {}, {}, bounded())[0].scalar<float>(); }
  std::vector<float> values(const Variable& v) { return session->run({v.value()}, {}, {}, bounded())[0].to_vector<float>(); }
  int64_t step() { return session->run({global_step.value()}, {}, {}, bounded())[0].scalar<int64_t>(); }
  int64_t local_step() {
    return session->run({opt->local_step().value()}, {}, {}, bounded())[0].scalar<int64_t>();
  }
};

// Builds worker `id`'s graph as TF's get_workers does. `ps0`/`ps1` and `worker` are device specs
// ("" for none: the single-session version).
void build(Worker& w, int id, int num_workers, int replicas_to_aggregate, const std::string& ps0,
           const std::string& ps1, const std::string& worker) {
  Graph& g = w.g;
  auto scope = [&](const std::string& spec) { return spec.empty() ? GraphScope() : g.device(spec); };
  {
    auto s = scope(ps0);
    w.global_step = Variable(g, Tensor::scalar<int64_t>(0), "global_step", /*trainable=*/false);
    w.v0 = Variable(g, Tensor::scalar(0.0f), "v0");
  }
  {
    auto s = scope(ps1);
    w.v1 = Variable(g, Tensor::scalar(1.0f), "v1");
    w.v_sparse = Variable(g, Tensor::matrix<float>({3, 4}, 2, 1), "v_sparse");
  }
  auto s = scope(worker);
  Output grads_0 = ops::constant(g, 0.1f + id * 0.2f);
  Output grads_1 = ops::constant(g, 0.9f + id * 0.2f);
  Output grads_sparse = ops::constant(g, Tensor::matrix<float>({0, 0.1f + id * 0.2f}, 2, 1));
  GradientDescentOptimizer sgd(2.0f);
  w.opt = std::make_unique<SyncReplicasOptimizer>(sgd, replicas_to_aggregate, num_workers);
  w.train_op = w.opt->apply_gradients({{grads_0, w.v0}, {grads_1, w.v1}, {grads_sparse, w.v_sparse}}, w.global_step);
  w.hook = w.opt->make_session_run_hook(/*is_chief=*/id == 0, /*num_tokens=*/num_workers);
}

// What MonitoredTrainingSession does with the hooks: begin, the chief initializes, then
// after_create_session on each (the chief first: the others need the global step).
void start(std::vector<std::unique_ptr<Worker>>& workers, const std::vector<std::string>& targets) {
  for (std::size_t i = 0; i < workers.size(); ++i) {
    Worker& w = *workers[i];
    w.hook.impl()->begin();
    w.owned = std::make_unique<Session>(w.g, targets[i]);
    w.session = w.owned.get();
    if (i == 0) w.session->run(global_variables_initializer(w.g));
    w.hook.impl()->after_create_session(*w.session);
  }
}

void finish(std::vector<std::unique_ptr<Worker>>& workers) {
  for (auto& w : workers) w->hook.impl()->end(*w->session);
  for (auto& w : workers) w->session->close();
}

// TF's test2Workers: both workers' gradients make each step; the first round after the start is
// computed from step 0 tokens and dropped as stale.
void two_workers(std::vector<std::unique_ptr<Worker>>& workers) {
  Worker& w0 = *workers[0];
  Worker& w1 = *workers[1];
  EXPECT_EQ(w0.value(w0.v0), 0.0f);
  EXPECT_EQ(w0.value(w0.v1), 1.0f);
  EXPECT_EQ(w0.local_step(), 0);
  EXPECT_EQ(w1.step(), 0);
  EXPECT_EQ(w1.local_step(), 0);
  EXPECT_EQ(w1.values(w1.v_sparse), (std::vector<float>{3, 4}));

  // The initial tokens let the workers run one after the other.
  w0.train();
  w1.train();
  ASSERT_TRUE(testing::wait_until([&] { return w1.step() == 1; }, 60s));
  EXPECT_FLOAT_EQ(w1.value(w1.v0), 0 - (0.1f + 0.3f) / 2 * 2.0f);
  EXPECT_FLOAT_EQ(w1.value(w1.v1), 1 - (0.9f + 1.1f) / 2 * 2.0f);
  std::vector<float> sparse = w1.values(w1.v_sparse);
  EXPECT_FLOAT_EQ(sparse[0], 3.0f);
  EXPECT_FLOAT_EQ(sparse[1], 4.0f - (0.1f + 0.3f) / 2 * 2.0f);
  // The initial tokens held step 0: the next round is computed from them and dropped.
  EXPECT_EQ(w0.local_step(), 0);
  EXPECT_EQ(w1.local_step(), 0);

  w0.train();
  w1.train();
  EXPECT_EQ(w1.step(), 1);
  EXPECT_EQ(w0.local_step(), 1);
  EXPECT_EQ(w1.local_step(), 1);
  EXPECT_FLOAT_EQ(w1.value(w1.v0), 0 - (0.1f + 0.3f) / 2 * 2.0f);
  EXPECT_FLOAT_EQ(w1.value(w1.v1), 1 - (0.9f + 1.1f) / 2 * 2.0f);

  // No tokens left: the two must run together.
  auto t0 = std::async(std::launch::async, [&] { w0.train(); });
  auto t1 = std::async(std::launch::async, [&] { w1.train(); });
  t0.get();
  t1.get();
  EXPECT_EQ(w1.step(), 2);
  EXPECT_FLOAT_EQ(w1.value(w1.v0), 0 - 2 * (0.1f + 0.3f) / 2 * 2.0f);
  EXPECT_FLOAT_EQ(w1.value(w1.v1), 1 - 2 * (0.9f + 1.1f) / 2 * 2.0f);
}

// TF's test3Workers1Backup: 2 of 3 gradients make a step; the slowest is dropped.
void three_workers_one_backup(std::vector<std::unique_ptr<Worker>>& workers) {
  Worker& w0 = *workers[0];
  Worker& w1 = *workers[1];
  Worker& w2 = *workers[2];
  EXPECT_EQ(w1.step(), 0);
  EXPECT_EQ(w1.local_step(), 0);

  // Workers 0 and 2 finish first: their mean makes step 1.
  w0.train();
  w2.train();
  ASSERT_TRUE(testing::wait_until([&] { return w1.step() == 1; }, 60s));
  EXPECT_FLOAT_EQ(w1.value(w1.v0), 0 - (0.1f + 0.5f) / 2 * 2.0f);
  EXPECT_FLOAT_EQ(w1.value(w1.v1), 1 - (0.9f + 1.3f) / 2 * 2.0f);

  // Worker 1's gradients are stale now: dropped. Then a round computed from step 0 tokens.
  w1.train();
  w0.train();
  w1.train();
  w2.train();
  EXPECT_EQ(w1.step(), 1);
  EXPECT_EQ(w1.local_step(), 1);
  EXPECT_FLOAT_EQ(w1.value(w1.v0), -0.6f);

  // Worker 0 alone cannot make a step.
  auto t0 = std::async(std::launch::async, [&] { w0.train(); });
  std::this_thread::sleep_for(kSettle);
  EXPECT_EQ(w1.step(), 1);
  EXPECT_NE(t0.wait_for(0ms), std::future_status::ready);
  // Its gradients wait in the accumulators, which every worker finds on its variable's task.
  for (Worker* w : {&w0, &w1, &w2}) {
    for (const ConditionalAccumulator& a : w->opt->accumulators()) {
      EXPECT_EQ(w->session->run({a.num_accumulated()}, {}, {}, bounded())[0].scalar<int32_t>(), 1) << a.name();
    }
  }
  auto t1 = std::async(std::launch::async, [&] { w1.train(); });
  t1.get();
  t0.get();
  EXPECT_EQ(w1.step(), 2);
  EXPECT_FLOAT_EQ(w1.value(w1.v0), -0.6f - (0.1f + 0.3f) / 2 * 2.0f);
  EXPECT_FLOAT_EQ(w1.value(w1.v1), -1.2f - (0.9f + 1.1f) / 2 * 2.0f);
}

class SyncReplicasClusterTest : public ::testing::Test {
 protected:
  // `num_workers` workers and two ps tasks, each a Server of this process; one graph and session
  // per worker, on its own task's target.
  void make(int num_workers, int replicas_to_aggregate) {
    std::vector<std::string> worker_addresses, ps_addresses;
    for (int i = 0; i < num_workers; ++i) worker_addresses.push_back(train::free_loopback_address());
    for (int i = 0; i < 2; ++i) ps_addresses.push_back(train::free_loopback_address());
    ClusterSpec cluster({{"worker", worker_addresses}, {"ps", ps_addresses}});
    for (int i = 0; i < 2; ++i) servers_.push_back(std::make_unique<Server>(cluster, "ps", i));
    std::vector<std::string> targets;
    for (int i = 0; i < num_workers; ++i) {
      servers_.push_back(std::make_unique<Server>(cluster, "worker", i));
      targets.push_back(servers_.back()->target());
      workers_.push_back(std::make_unique<Worker>());
      build(*workers_.back(), i, num_workers, replicas_to_aggregate, "/job:ps/task:0", "/job:ps/task:1",
            "/job:worker/task:" + std::to_string(i));
    }
    start(workers_, targets);
  }
  void TearDown() override {
    if (!workers_.empty() && workers_[0]->session) finish(workers_);
    workers_.clear();
    servers_.clear();
  }

  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

TEST_F(SyncReplicasClusterTest, TwoWorkers) {
  make(/*num_workers=*/2, /*replicas_to_aggregate=*/2);
  two_workers(workers_);
}

TEST_F(SyncReplicasClusterTest, ThreeWorkersOneBackup) {
  make(/*num_workers=*/3, /*replicas_to_aggregate=*/2);
  three_workers_one_backup(workers_);
  // Each worker's local step on its own task (on the ps, shared, the staleness check breaks: the
  // expectations above failed so once).
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    EXPECT_NE(workers_[i]->opt->local_step().op().assigned_device().find("/job:worker/replica:0/task:" +
                                                                         std::to_string(i) + "/"),
              std::string::npos)
        << workers_[i]->opt->local_step().op().assigned_device();
  }
}

// The same in one process and one session: each "worker" is a second SyncReplicasOptimizer in the
// same graph, sharing the accumulators and the token queue by name (its own local step).
std::vector<std::unique_ptr<Worker>> one_graph_workers(Graph& g, int num_workers, int replicas_to_aggregate,
                                                      Session& s) {
  std::vector<std::unique_ptr<Worker>> workers;
  Variable global_step(g, Tensor::scalar<int64_t>(0), "global_step", false);
  Variable v0(g, Tensor::scalar(0.0f), "v0");
  Variable v1(g, Tensor::scalar(1.0f), "v1");
  Variable v_sparse(g, Tensor::matrix<float>({3, 4}, 2, 1), "v_sparse");
  for (int id = 0; id < num_workers; ++id) {
    auto w = std::make_unique<Worker>();
    w->global_step = global_step;
    w->v0 = v0;
    w->v1 = v1;
    w->v_sparse = v_sparse;
    Output grads_0 = ops::constant(g, 0.1f + id * 0.2f);
    Output grads_1 = ops::constant(g, 0.9f + id * 0.2f);
    Output grads_sparse = ops::constant(g, Tensor::matrix<float>({0, 0.1f + id * 0.2f}, 2, 1));
    w->opt = std::make_unique<SyncReplicasOptimizer>(GradientDescentOptimizer(2.0f), replicas_to_aggregate,
                                                     num_workers);
    w->train_op = w->opt->apply_gradients({{grads_0, v0}, {grads_1, v1}, {grads_sparse, v_sparse}}, global_step);
    w->hook = w->opt->make_session_run_hook(id == 0, num_workers);
    workers.push_back(std::move(w));
  }
  for (auto& w : workers) w->hook.impl()->begin();
  s.run(global_variables_initializer(g));
  for (auto& w : workers) {
    w->session = &s;
    w->hook.impl()->after_create_session(s);
  }
  return workers;
}

void end_hooks(std::vector<std::unique_ptr<Worker>>& workers) {
  for (auto& w : workers) w->hook.impl()->end(*w->session);
}

TEST(SyncReplicasOneSessionTest, TwoWorkers) {
  Graph g;
  Session s(g);
  auto workers = one_graph_workers(g, 2, 2, s);
  two_workers(workers);
  end_hooks(workers);
}

TEST(SyncReplicasOneSessionTest, ThreeWorkersOneBackup) {
  Graph g;
  Session s(g);
  auto workers = one_graph_workers(g, 3, 2, s);
  three_workers_one_backup(workers);
  end_hooks(workers);
}

// One worker aggregating one gradient, the loss's: after the dropped first round, every step is
// one update of the wrapped optimizer and one increment of the global step.
TEST(SyncReplicasOneSessionTest, MinimizeWithOneReplicaUpdatesOncePerStep) {
  Graph g;
  Variable w(g, Tensor::vector<float>({1, -2}), "w");
  Variable step = train::get_or_create_global_step(g);
  Output loss = ops::reduce_sum(ops::square(w.value()));  // gradient 2w
  SyncReplicasOptimizer opt(GradientDescentOptimizer(0.25f), 1);
  Operation train_op = opt.minimize(loss, step);
  SessionRunHook hook = opt.make_session_run_hook(true);
  hook.impl()->begin();
  Session s(g);
  s.run(global_variables_initializer(g));
  hook.impl()->after_create_session(s);
  auto run = [&] { s.run({}, {}, {train_op}, bounded()); };
  run();  // applied with local step 0, then the sync: w -= 0.25 * 2w
  ASSERT_TRUE(testing::wait_until([&] { return s.run(step.value()).scalar<int64_t>() == 1; }, 60s));
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{0.5f, -1}));
  run();  // computed with the step-0 token: dropped
  EXPECT_EQ(s.run(opt.local_step().value()).scalar<int64_t>(), 1);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 1);
  for (int i = 2; i <= 4; ++i) {
    run();  // waits for its own update: the token it gets holds the new step
    EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), i);
    EXPECT_EQ(s.run(opt.local_step().value()).scalar<int64_t>(), i);
  }
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{0.0625f, -0.125f}));
  hook.impl()->end(s);
}

// TF1's UPDATE_OPS idiom with sync replicas: minimize under control_dependencies of an op that
// reads a feed (as batch normalization's moving averages read the batch). The worker's step runs
// that op first; the chief's init op and queue runner, which run without feeds, do not (in TF 1.x
// they do, and fail asking for the feed).
TEST(SyncReplicasOneSessionTest, UnderTheCallersControlScopeOnlyTheWorkersStepRunsItsOps) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  Variable seen(g, Tensor::scalar(0.0f), "seen");
  Output record = seen.assign_add(x);  // counts what the steps were fed
  Variable w(g, Tensor::vector<float>({1, -2}), "w");
  Variable step = train::get_or_create_global_step(g);
  Output loss = ops::reduce_sum(ops::square(w.value()));
  SyncReplicasOptimizer opt(GradientDescentOptimizer(0.25f), 1);
  Operation train_op;
  {
    GraphScope after = g.control_dependencies({record.op()});
    train_op = opt.minimize(loss, step);
  }
  SessionRunHook hook = opt.make_session_run_hook(true);
  hook.impl()->begin();
  Session s(g);
  s.run(global_variables_initializer(g));
  hook.impl()->after_create_session(s);  // runs chief_init_op and starts the queue runner: no feed
  s.run({}, {{x, Tensor::scalar(2.0f)}}, {train_op}, bounded());
  ASSERT_TRUE(testing::wait_until([&] { return s.run(step.value()).scalar<int64_t>() == 1; }, 60s));
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{0.5f, -1}));
  EXPECT_EQ(s.run(seen.value()).scalar<float>(), 2.0f) << "the worker's step ran the scope's op once";
  hook.impl()->end(s);
}

// ---- The hook by hand ----

// A variable v = 1 and the SyncReplicasOptimizer that trains it, needing two gradients (each 1) a
// step; the global step comes from `make_step` (by default the graph's global step).
struct HookModel {
  explicit HookModel(Variable (*make_step)(Graph&) = train::get_or_create_global_step)
      : step(make_step(g)), train_op(opt.apply_gradients({{ops::constant(g, 1.0f), v}}, step)) {}
  Graph g;
  Variable v{g, Tensor::scalar(1.0f), "v"};
  Variable step;
  SyncReplicasOptimizer opt{GradientDescentOptimizer(1.0f), 2};
  Operation train_op;
};

// end() returns although the chief's sync step waits for gradients that never come: its takes
// are cancelled. The session stays usable, and a new after_create_session starts again.
TEST(SyncReplicasHookTest, EndStopsASyncStepThatWaits) {
  HookModel m;
  SessionRunHook hook = m.opt.make_session_run_hook(true);
  hook.impl()->begin();
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  hook.impl()->after_create_session(s);
  s.run({}, {}, {m.train_op}, bounded());  // one gradient of the two a step needs
  std::this_thread::sleep_for(kSettle);
  hook.impl()->end(s);  // the sync step waits in its take: cancelled
  EXPECT_EQ(s.run(m.step.value()).scalar<int64_t>(), 0);
  EXPECT_EQ(s.run(m.v.value()).scalar<float>(), 1.0f);
  EXPECT_EQ(s.run(m.opt.accumulators()[0].num_accumulated()).scalar<int32_t>(), 1);  // kept
  hook.impl()->end(s);  // twice: nothing to stop
  // Started again: the init tokens (2) let two steps through, which make one update.
  hook.impl()->after_create_session(s);
  s.run({}, {}, {m.train_op}, bounded());
  ASSERT_TRUE(testing::wait_until([&] { return s.run(m.step.value()).scalar<int64_t>() == 1; }, 60s));
  EXPECT_EQ(s.run(m.v.value()).scalar<float>(), 0.0f);
  hook.impl()->end(s);
}

// Destroying the hook stops its thread too; so does closing the session under it.
TEST(SyncReplicasHookTest, DestructionAndCloseStopTheSyncThread) {
  HookModel m;
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  {
    SessionRunHook hook = m.opt.make_session_run_hook(true);
    hook.impl()->after_create_session(s);  // begin() is implied
    std::this_thread::sleep_for(kSettle);
  }  // joined here
  SessionRunHook hook = m.opt.make_session_run_hook(true);
  hook.impl()->after_create_session(s);
  s.close();  // the sync step's take is cancelled by the close
  hook.impl()->end(s);
}

// A non-chief hook starts nothing: it sets its local step to the global step.
TEST(SyncReplicasHookTest, NonChiefInitializesItsLocalStep) {
  HookModel m([](Graph& g) { return Variable(g, Tensor::scalar<int64_t>(7), "global_step", false); });
  SessionRunHook hook = m.opt.make_session_run_hook(false);
  hook.impl()->begin();
  Session s(m.g);
  s.run(m.step.initializer());
  hook.impl()->after_create_session(s);
  EXPECT_EQ(s.run(m.opt.local_step().value()).scalar<int64_t>(), 7);
  hook.impl()->end(s);
}

// TF's testErrorIfUsedBeforeMinimizeCalled and testCanCreatedBeforeMinimizeCalled.
TEST(SyncReplicasHookTest, BeginBeforeApplyGradientsRaisesButCreatingTheHookDoesNot) {
  Graph g;
  SyncReplicasOptimizer opt(GradientDescentOptimizer(1.0f), 1, 1);
  SessionRunHook hook = opt.make_session_run_hook(true);
  EXPECT_THROW_MSG(hook.impl()->begin(), FailedPreconditionError, "apply_gradient should be called");
  Variable v(g, Tensor::vector<float>({0}), "v");
  Variable step(g, Tensor::scalar<int64_t>(0), "global_step", false);
  opt.minimize(ops::reduce_sum(v.value()), step);
  hook.impl()->begin();
}

// ---- The optimizer ----

// TF's testFetchVariableList, as far as tessera has it: the wrapped optimizer's slots.
TEST(SyncReplicasOptimizerTest, SlotsAreTheWrappedOptimizers) {
  Graph g;
  train::AdamOptimizer adam(0.01f);
  SyncReplicasOptimizer opt(adam, 1, 1);
  Variable v(g, Tensor::vector<float>({0}), "fetch_variable_test");
  Variable step(g, Tensor::scalar<int64_t>(0), "global_step", false);
  opt.minimize(ops::reduce_sum(v.value()), step);
  EXPECT_EQ(opt.get_slot_names(), adam.get_slot_names());
  ASSERT_TRUE(opt.get_slot(v, "m").has_value());
  EXPECT_EQ(opt.get_slot(v, "m")->name(), adam.get_slot(v, "m")->name());
  EXPECT_EQ(opt.name(), "sync_replicas");
}

TEST(SyncReplicasOptimizerTest, MisuseRaisesTypedErrors) {
  GradientDescentOptimizer sgd(1.0f);
  EXPECT_THROW_MSG(SyncReplicasOptimizer(sgd, 0), InvalidArgumentError, "replicas_to_aggregate must be positive");
  EXPECT_THROW_MSG(SyncReplicasOptimizer(sgd, 2, 0), InvalidArgumentError, "total_num_replicas");
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Variable step(g, Tensor::scalar<int64_t>(0), "global_step", false);
  SyncReplicasOptimizer opt(sgd, 3, 1);  // fewer replicas than a step needs: each runs 3 batches
  EXPECT_THROW_MSG(opt.get_chief_queue_runner(), FailedPreconditionError, "after apply_gradients");
  EXPECT_THROW_MSG(opt.get_init_tokens_op(), FailedPreconditionError, "after apply_gradients");
  EXPECT_THROW_MSG(opt.apply_gradients({}, step), InvalidArgumentError, "at least one variable");
  EXPECT_THROW_MSG(opt.apply_gradients({{ops::constant(g, 1.0f), v}}), InvalidArgumentError,
                   "global step is required");
  opt.apply_gradients({{ops::constant(g, 1.0f), v}}, step);
  EXPECT_THROW_MSG(opt.apply_gradients({{ops::constant(g, 1.0f), v}}, step), FailedPreconditionError,
                   "called already");
  EXPECT_THROW_MSG(opt.get_init_tokens_op(1), InvalidArgumentError, "too few tokens to finish the first step: 1");
  (void)opt.get_init_tokens_op(2);
  (void)opt.get_chief_queue_runner();
}

// A copy made as a plain Optimizer keeps the synchronization (no slicing), and shares the state.
TEST(SyncReplicasOptimizerTest, ACopyAsOptimizerKeepsTheSynchronization) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Variable step = train::get_or_create_global_step(g);
  SyncReplicasOptimizer opt(GradientDescentOptimizer(1.0f), 1);
  train::Optimizer plain = opt;
  Operation train_op = plain.minimize(ops::mul(v.value(), ops::constant(g, 1.0f)), step);
  EXPECT_EQ(train_op.type(), "Assign");  // the local step's, from the token
  EXPECT_EQ(train_op.input(0).op().type(), "QueueDequeue");
  EXPECT_EQ(opt.accumulators().size(), 1u);
  EXPECT_EQ(plain.name(), "sync_replicas");
}

}  // namespace
}  // namespace tessera
