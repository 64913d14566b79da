// train::MonitoredTrainingSession: initialization and restore, checkpoints at close, a worker that
// waits for its chief (and one that gives up), input that runs out, and recovery from a parameter
// server that dies and comes back: stopped and restarted in this process, and killed with SIGKILL
// as a `tessera server` process. Cases ported from TF1's monitored_session_test.py
// (MonitoredTrainingSessionTest, MonitoredSessionTest, RecoverableSessionTest) and
// session_manager_test.py (wait_for_session). Every wait is bounded.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/logging.h"
#include "tests/testing/test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A model whose variables live on `ps_device` ("" : wherever): global_step and w, and a train op
// adding 1 and 0.5 to them.
struct Model {
  Graph g;
  Variable step, w;
  Operation train_op;
  explicit Model(const std::string& ps_device = "") {
    {
      auto scope = g.device(ps_device);
      step = train::get_or_create_global_step(g);
      w = Variable(g, Tensor::scalar<float>(0), "w");
    }
    train_op = ops::group({step.assign_add(ops::constant(g, int64_t{1})).op(),
                           w.assign_add(ops::constant(g, 0.5f)).op()});
  }
};

class MonitoredSessionTest : public testing::TempDirTest {
 protected:
  MonitoredSessionTest() : TempDirTest("tessera_monitored") {}
};

TEST_F(MonitoredSessionTest, TheChiefInitializesTheModel) {
  Model m;
  train::MonitoredTrainingSession s(m.g, {});
  EXPECT_EQ(s.run({m.step.value()})[0].scalar<int64_t>(), 0);
  s.run(m.train_op);
  EXPECT_FLOAT_EQ(s.run({m.w.value()})[0].scalar<float>(), 0.5f);
  EXPECT_FALSE(s.should_stop());
  s.close();
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint"));
}

// TF: test_saving_restoring_checkpoint. The first session writes a checkpoint at close; a second
// one on a fresh graph restores it instead of initializing.
TEST_F(MonitoredSessionTest, ASecondSessionRestoresTheLatestCheckpoint) {
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  {
    Model m;
    train::MonitoredTrainingSession s(m.g, o);
    for (int i = 0; i < 7; ++i) s.run(m.train_op);
  }
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), (dir_ / "model.ckpt-7").string());
  Model again;
  train::MonitoredTrainingSession s(again.g, o);
  auto values = s.run({again.step.value(), again.w.value()});
  EXPECT_EQ(values[0].scalar<int64_t>(), 7);
  EXPECT_FLOAT_EQ(values[1].scalar<float>(), 3.5f);
}

// TF: test_save_checkpoint_steps (save_checkpoint_steps wins over the default seconds) and
// test_save_checkpoint_secs, with the default StepCounterHook logging.
TEST_F(MonitoredSessionTest, CheckpointsEveryNStepsAndTheStepCounter) {
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_steps = 10;
  o.log_step_count_steps = 10;
  o.hooks = {train::StopAtStepHook(25)};
  std::vector<std::string> logged;
  std::mutex mu;
  auto saved_level = internal::log_level();
  internal::set_log_level(internal::LogLevel::kInfo);
  internal::set_log_sink([&](internal::LogLevel, std::string_view text) {
    std::lock_guard<std::mutex> l(mu);
    logged.emplace_back(text);
  });
  {
    Model m;
    train::MonitoredTrainingSession s(m.g, o);
    int runs = 0;
    while (!s.should_stop() && runs++ < 100) s.run(m.train_op);
    EXPECT_EQ(runs, 25);
  }
  internal::set_log_sink(nullptr);
  internal::set_log_level(saved_level);
  auto state = train::get_checkpoint_state(dir_.string());
  ASSERT_TRUE(state);
  std::vector<std::string> expected;
  for (int step : {0, 10, 20, 25}) expected.push_back((dir_ / ("model.ckpt-" + std::to_string(step))).string());
  EXPECT_EQ(state->all_model_checkpoint_paths, expected);
  int rates = 0;
  for (const auto& line : logged) rates += line.find("global_step/sec: ") != std::string::npos;
  EXPECT_EQ(rates, 2);  // steps 11 and 21
}

TEST_F(MonitoredSessionTest, NoCheckpointsWhenBothSchedulesAreZero) {
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_secs = 0;
  {
    Model m;
    train::MonitoredTrainingSession s(m.g, o);
    s.run(m.train_op);
  }
  EXPECT_FALSE(train::latest_checkpoint(dir_.string()));
}

// As TF: the chief's checkpoint and step counter hooks need a global step.
TEST_F(MonitoredSessionTest, ACheckpointDirNeedsAGlobalStep) {
  Graph g;
  Variable v(g, Tensor::scalar<float>(0), "v");
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  EXPECT_THROW(train::MonitoredTrainingSession(g, o), FailedPreconditionError);
}

// TF: test_stop_at_queue_end (OutOfRangeError ends the loop) with the graph's queue runners
// started by the monitored session.
TEST_F(MonitoredSessionTest, InputThatRunsOutEndsTheLoop) {
  Graph g;
  auto queue = train::input_producer(g, Tensor::vector<int32_t>({1, 2, 3}), /*num_epochs=*/1, /*shuffle=*/false);
  auto next = queue.dequeue()[0];
  train::MonitoredTrainingSession s(g, {});
  std::vector<int32_t> seen;
  for (int i = 0; i < 10 && !s.should_stop(); ++i) {
    auto out = s.run({next});
    if (!s.should_stop()) seen.push_back(out[0].scalar<int32_t>());
    else EXPECT_TRUE(out[0].is_null());
  }
  EXPECT_EQ(seen, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(s.should_stop());
  s.close();
}

TEST_F(MonitoredSessionTest, OtherErrorsPropagate) {
  Graph g;
  Variable v(g, Tensor::scalar<float>(4), "v");
  auto p = ops::placeholder(g, DType::Float32, Shape::unknown(), "p");
  auto bad = ops::reshape(p, {3});
  train::MonitoredTrainingSession s(g, {});
  EXPECT_THROW(s.run({bad}, {{p, Tensor::vector<float>({1, 2})}}), InvalidArgumentError);
  EXPECT_FALSE(s.should_stop());
  EXPECT_FLOAT_EQ(s.run({v.value()})[0].scalar<float>(), 4.0f);
}

// TF's RaiseOnceAtCountN: throws from before_run (or after_run) on its `at`-th call, once; counts
// its calls and the sessions it was given.
struct RaiseOnceAt : train::SessionRunHook::Impl {
  enum class Where { kBeforeRun, kAfterRun };
  RaiseOnceAt(int at_call, Where where_, std::function<void()> raise_fn)
      : at(at_call), where(where_), raise(std::move(raise_fn)) {}
  void after_create_session(Session&) override { ++sessions; }
  std::vector<Output> before_run() override {
    if (++before_runs == at && where == Where::kBeforeRun) fire();
    return {};
  }
  void after_run(const std::vector<Tensor>&, bool&) override {
    if (++after_runs == at && where == Where::kAfterRun) fire();
  }
  void fire() {
    if (raised) return;
    raised = true;
    raise();
  }
  const int at;
  const Where where;
  const std::function<void()> raise;
  int before_runs = 0, after_runs = 0, sessions = 0;
  bool raised = false;
};

// A graph with only the global step, and an op incrementing it.
struct StepOnly {
  Graph g;
  Variable step = train::get_or_create_global_step(g);
  Output do_step = step.assign_add(ops::constant(g, int64_t{1}));
  int64_t run(train::MonitoredTrainingSession& s, Output what) { return s.run({what})[0].scalar<int64_t>(); }
};

// TF: test_retry_on_aborted_error. A hook's AbortedError is a preemption like the run's own: the
// step is made again, hooks and all, in a fresh session (no checkpoint: initialized again).
TEST_F(MonitoredSessionTest, AHookAbortingARunIsRetriedInAFreshSession) {
  StepOnly m;
  auto hook = std::make_shared<RaiseOnceAt>(4, RaiseOnceAt::Where::kBeforeRun, [] { throw AbortedError("Abort"); });
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SessionRunHook(hook)};
  train::MonitoredTrainingSession s(m.g, o);
  EXPECT_EQ(m.run(s, m.step.value()), 0);
  EXPECT_EQ(m.run(s, m.do_step), 1);
  EXPECT_EQ(m.run(s, m.do_step), 2);
  EXPECT_EQ(hook->sessions, 1);
  EXPECT_EQ(m.run(s, m.do_step), 1);  // the 4th before_run aborted: step 0 again, then this step
  EXPECT_TRUE(hook->raised);
  EXPECT_EQ(hook->sessions, 2);
  EXPECT_EQ(hook->before_runs, 5);
  EXPECT_EQ(hook->after_runs, 4);
  EXPECT_EQ(m.run(s, m.do_step), 2);
  EXPECT_FALSE(s.should_stop());
}

// TF: test_recover_and_retry_on_aborted_error. With a checkpoint after every step, the fresh
// session restores the last one and the aborted step runs from there.
TEST_F(MonitoredSessionTest, AHookAbortingARunRecoversFromTheLatestCheckpoint) {
  StepOnly m;
  auto hook = std::make_shared<RaiseOnceAt>(4, RaiseOnceAt::Where::kBeforeRun, [] { throw AbortedError("Abort"); });
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_steps = 1;
  o.hooks = {train::SessionRunHook(hook)};
  train::MonitoredTrainingSession s(m.g, o);
  EXPECT_EQ(m.run(s, m.step.value()), 0);
  EXPECT_EQ(m.run(s, m.do_step), 1);
  EXPECT_EQ(m.run(s, m.do_step), 2);
  EXPECT_EQ(m.run(s, m.do_step), 3);
  EXPECT_TRUE(hook->raised);
  EXPECT_EQ(hook->sessions, 2);
  EXPECT_EQ(m.run(s, m.do_step), 4);
  EXPECT_FALSE(s.should_stop());
  s.close();
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), (dir_ / "model.ckpt-4").string());
}

// A hook's after_run meeting a lost task (the checkpoint hook's save when a ps died, say) is
// recovered as well: the step ran and was saved (CheckpointSaverHook's after_run comes first),
// and runs once more in the restored session.
TEST_F(MonitoredSessionTest, AHookLosingATaskInAfterRunIsRecovered) {
  StepOnly m;
  auto hook = std::make_shared<RaiseOnceAt>(3, RaiseOnceAt::Where::kAfterRun,
                                            [] { throw UnavailableError("the ps is down"); });
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_steps = 1;
  o.hooks = {train::SessionRunHook(hook), train::StopAtStepHook(4)};
  train::MonitoredTrainingSession s(m.g, o);
  EXPECT_EQ(m.run(s, m.do_step), 1);
  EXPECT_EQ(m.run(s, m.do_step), 2);
  EXPECT_FALSE(s.should_stop());
  // Step 3 ran and was saved before the hook failed: the retry restores step 3 and makes step 4,
  // which StopAtStepHook(4) stops at.
  EXPECT_EQ(m.run(s, m.do_step), 4);
  EXPECT_EQ(hook->sessions, 2);
  EXPECT_EQ(hook->before_runs, 4);
  EXPECT_TRUE(s.should_stop());
}

// TF: test_retry_initialization_on_aborted_error. AbortedError while the session is being made
// (here from a hook's after_create_session; TF's from the scaffold's init_fn) makes it again.
TEST_F(MonitoredSessionTest, AnAbortWhileTheSessionIsMadeMakesItAgain) {
  StepOnly m;
  struct AbortsFirstSession : train::SessionRunHook::Impl {
    int sessions = 0;
    void after_create_session(Session&) override {
      if (++sessions == 1) throw AbortedError("Abort");
    }
  };
  auto hook = std::make_shared<AbortsFirstSession>();
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SessionRunHook(hook)};
  train::MonitoredTrainingSession s(m.g, o);
  EXPECT_EQ(hook->sessions, 2);
  EXPECT_FALSE(s.should_stop());
  EXPECT_EQ(m.run(s, m.step.value()), 0);
}

// TF: test_regular_exception_pass_through_run. Any other error from a hook is the caller's: no
// new session, and close() skips the hooks' end().
TEST_F(MonitoredSessionTest, AHooksOtherErrorsPropagate) {
  StepOnly m;
  auto hook = std::make_shared<RaiseOnceAt>(2, RaiseOnceAt::Where::kAfterRun,
                                            [] { throw InvalidArgumentError("a hook's own mistake"); });
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_steps = 100;
  o.hooks = {train::SessionRunHook(hook)};
  train::MonitoredTrainingSession s(m.g, o);
  EXPECT_EQ(m.run(s, m.do_step), 1);
  EXPECT_THROW(m.run(s, m.do_step), InvalidArgumentError);
  EXPECT_EQ(hook->sessions, 1);
  s.close();
  // Only the checkpoint at creation: end() did not save step 2.
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), (dir_ / "model.ckpt-0").string());
}

// A hook that keeps failing with UnavailableError: the retries share recovery_wait, then the
// error is the caller's.
TEST_F(MonitoredSessionTest, AHookThatKeepsLosingATaskFailsTheRunAfterTheRecoveryWait) {
  StepOnly m;
  struct AlwaysDown : train::SessionRunHook::Impl {
    int sessions = 0;
    void after_create_session(Session&) override { ++sessions; }
    void after_run(const std::vector<Tensor>&, bool&) override { throw UnavailableError("still down"); }
  };
  auto hook = std::make_shared<AlwaysDown>();
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SessionRunHook(hook)};
  o.recovery_wait = 300ms;
  train::MonitoredTrainingSession s(m.g, o);
  const auto start = Clock::now();
  EXPECT_THROW(m.run(s, m.do_step), UnavailableError);
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_LT(Clock::now() - start, 30s);
  EXPECT_GE(hook->sessions, 2);
}

// session_manager_test: a worker that is not the chief waits until the chief has initialized the
// model on the shared task, never initializing it itself, then proceeds.
TEST_F(MonitoredSessionTest, AWorkerWaitsForTheChief) {
  auto server = train::Server::create_local_server();
  const std::string target = server.target();
  Model worker_model;
  train::MonitoredTrainingSessionOptions wo;
  wo.master = target;
  wo.is_chief = false;
  wo.max_wait_for_ready = 60s;
  struct Counting : train::SessionRunHook::Impl {
    std::atomic<int> begun{0};
    void begin() override { ++begun; }
  };
  auto chief_only = std::make_shared<Counting>();
  wo.chief_only_hooks = {train::SessionRunHook(chief_only)};  // a worker does not run them
  std::atomic<bool> worker_ready{false};
  auto worker = std::async(std::launch::async, [&] {
    train::MonitoredTrainingSession s(worker_model.g, wo);
    worker_ready = true;
    return s.run({worker_model.w.value()})[0].scalar<float>();
  });
  // The worker polls: give it time to poll at least once before the chief comes.
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(worker_ready);
  {
    Graph g;  // the chief sets w to 42 before anyone trains
    Variable step = train::get_or_create_global_step(g);
    Variable w(g, Tensor::scalar<float>(42), "w");
    train::MonitoredTrainingSessionOptions co;
    co.master = target;
    train::MonitoredTrainingSession chief(g, co);
    ASSERT_EQ(worker.wait_for(60s), std::future_status::ready);
    EXPECT_FLOAT_EQ(worker.get(), 42.0f);
    EXPECT_EQ(chief_only->begun, 0);
  }
}

TEST_F(MonitoredSessionTest, AWorkerGivesUpWhenNoChiefComes) {
  auto server = train::Server::create_local_server();
  Model m;
  train::MonitoredTrainingSessionOptions o;
  o.master = server.target();
  o.is_chief = false;
  o.max_wait_for_ready = 300ms;
  const auto start = Clock::now();
  std::string message = testing::error_of<DeadlineExceededError>([&] { train::MonitoredTrainingSession s(m.g, o); });
  EXPECT_NE(message.find("not ready"), std::string::npos) << message;
  EXPECT_NE(message.find("global_step"), std::string::npos) << message;
  EXPECT_LT(Clock::now() - start, 30s);
}

// Trains to `last_step` with checkpoints every 5 steps, calling `kill_ps` once after step 12 and
// `restart_ps` after that; returns the session's final global step and w.
std::pair<int64_t, float> train_through_a_ps_failure(const std::string& target, const fs::path& dir,
                                                     const std::function<void()>& kill_ps,
                                                     const std::function<void()>& restart_ps,
                                                     std::vector<std::string>* log) {
  Model m("/job:ps/task:0");
  train::MonitoredTrainingSessionOptions o;
  o.master = target;
  o.checkpoint_dir = dir.string();
  o.save_checkpoint_steps = 5;
  o.recovery_wait = 60s;
  o.config.rpc_timeout = 5000ms;
  o.hooks = {train::StopAtStepHook(30)};
  std::mutex mu;
  auto saved_level = internal::log_level();
  internal::set_log_level(internal::LogLevel::kInfo);
  internal::set_log_sink([&](internal::LogLevel, std::string_view text) {
    std::lock_guard<std::mutex> l(mu);
    log->emplace_back(text);
  });
  std::pair<int64_t, float> result{-1, -1};
  {
    train::MonitoredTrainingSession s(m.g, o);
    bool killed = false;
    for (int runs = 0; !s.should_stop() && runs < 200; ++runs) {
      const int64_t step = s.run({m.step.value()}, {}, {m.train_op})[0].scalar<int64_t>();
      if (!killed && step >= 12) {
        killed = true;
        kill_ps();
        restart_ps();
      }
    }
    auto values = s.raw_session().run({m.step.value(), m.w.value()});
    result = {values[0].scalar<int64_t>(), values[1].scalar<float>()};
  }
  internal::set_log_sink(nullptr);
  internal::set_log_level(saved_level);
  return result;
}

// A ps task and a worker task in this process. The worker gives up on a call to the ps after
// `rpc_timeout`: how soon a stopped ps shows in a step as UnavailableError.
struct PsAndWorker {
  explicit PsAndWorker(std::chrono::milliseconds rpc_timeout)
      : cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}}),
        ps(cluster, "ps", 0),
        worker(cluster, "worker", 0, worker_options(rpc_timeout)) {}
  static train::ServerOptions worker_options(std::chrono::milliseconds rpc_timeout) {
    train::ServerOptions options;
    options.rpc_timeout = rpc_timeout;
    return options;
  }
  train::ClusterSpec cluster;
  train::Server ps;
  train::Server worker;
};

// RecoverableSessionTest: a ps stopped and restarted (empty) mid-training on the same port; the
// monitored session makes a new session, restores the latest checkpoint (step 10) and reaches its
// target step, w consistent with the step throughout.
TEST_F(MonitoredSessionTest, RecoversFromAParameterServerRestartedInProcess) {
  // The worker gives up on a call to the ps after 1 s, and the ps stays down for 1.5 s: the step
  // that meets it down fails with UnavailableError, and so do the first tries to make a session.
  PsAndWorker tasks(1000ms);
  std::thread restarter;
  std::vector<std::string> log;
  auto [step, w] = train_through_a_ps_failure(
      tasks.worker.target(), dir_, [&] { tasks.ps.stop(); },
      [&] {
        restarter = std::thread([&] {
          std::this_thread::sleep_for(1500ms);
          for (int attempt = 0;; ++attempt) {  // the port may linger briefly
            try {
              tasks.ps.start();
              return;
            } catch (const Error&) {
              if (attempt == 50) throw;
              std::this_thread::sleep_for(100ms);
            }
          }
        });
      },
      &log);
  if (restarter.joinable()) restarter.join();
  EXPECT_EQ(step, 30);
  EXPECT_FLOAT_EQ(w, 0.5f * 30);  // restored with the step: the lost steps were trained again
  int recoveries = 0, restores = 0, unavailable = 0;
  for (const auto& line : log) {
    recoveries += line.find("new session will be created") != std::string::npos;
    unavailable += line.find("new session will be created") != std::string::npos &&
                   line.find("task is down or unreachable") != std::string::npos;
    restores += line.find("Restoring parameters from") != std::string::npos;
    if (line.find("new session will be created") != std::string::npos) std::cout << line;  // which error
  }
  EXPECT_GE(recoveries, 1);
  EXPECT_GE(unavailable, 1);
  EXPECT_GE(restores, 1);  // the first session initialized: nothing to restore then
  EXPECT_TRUE(fs::exists(dir_ / "model.ckpt-30"));
}

// Past recovery_wait the error goes to the caller, and close() then skips the hooks' end() (no
// checkpoint at close: the ps is gone).
TEST_F(MonitoredSessionTest, APsThatStaysDownFailsTheRunAfterTheRecoveryWait) {
  PsAndWorker tasks(500ms);
  Model m("/job:ps/task:0");
  train::MonitoredTrainingSessionOptions o;
  o.master = tasks.worker.target();
  o.checkpoint_dir = dir_.string();
  o.save_checkpoint_steps = 100;
  o.recovery_wait = 1000ms;
  train::MonitoredTrainingSession s(m.g, o);
  s.run(m.train_op);
  tasks.ps.stop();
  const auto start = Clock::now();
  EXPECT_THROW(s.run(m.train_op), UnavailableError);
  EXPECT_LT(Clock::now() - start, 60s);
  EXPECT_NO_THROW(s.close());
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), (dir_ / "model.ckpt-0").string());  // the one at creation
}

#ifdef TESSERA_CLI_PATH
// The same with a real ps process killed with SIGKILL and started again on its port.
TEST_F(MonitoredSessionTest, RecoversFromAParameterServerKilledAndRestarted) {
  const std::string ps_address = train::free_loopback_address();
  const std::string worker_address = train::free_loopback_address();
  const std::string cluster = train::ClusterSpec({{"ps", {ps_address}}, {"worker", {worker_address}}}).to_json();
  std::optional<train::ServerProcess> ps;
  ps.emplace(TESSERA_CLI_PATH, cluster, "ps", 0);
  train::ServerProcess worker(TESSERA_CLI_PATH, cluster, "worker", 0);
  auto restart = [&] {
    for (int attempt = 0; attempt < 50; ++attempt) {  // the port may linger briefly
      try {
        ps.emplace(TESSERA_CLI_PATH, cluster, "ps", 0);
        return;
      } catch (const UnavailableError&) {
        std::this_thread::sleep_for(100ms);
      }
    }
    FAIL() << "could not restart the ps";
  };
  // The ps comes back a moment after the kill, so the monitored session first meets a ps that is
  // down (UnavailableError) and keeps making sessions until it is back.
  std::thread restarter;
  std::vector<std::string> log;
  auto [step, w] = train_through_a_ps_failure(
      worker.target(), dir_,
      [&] {
        ps->kill(SIGKILL);
        ASSERT_TRUE(ps->wait(10s));
      },
      [&] {
        restarter = std::thread([&] {
          std::this_thread::sleep_for(500ms);
          restart();
        });
      },
      &log);
  if (restarter.joinable()) restarter.join();
  EXPECT_EQ(step, 30);
  EXPECT_FLOAT_EQ(w, 0.5f * 30);
  for (const auto& line : log) {
    if (line.find("new session will be created") != std::string::npos) std::cout << line;  // which error
  }
}
#endif

}  // namespace
}  // namespace tessera
