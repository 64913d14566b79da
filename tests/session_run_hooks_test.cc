// The session run hooks (tessera/monitored_session.h) inside an in-process MonitoredTrainingSession,
// and report_uninitialized_variables. Cases ported from TF1's basic_session_run_hooks_test.py
// (StopAtStepTest, CheckpointSaverHookTest, NanTensorHookTest, LoggingTensorHookTest,
// StepCounterHookTest), monitored_session_test.py (HookedSessionTest) and variables_test.py
// (report_uninitialized_variables).
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
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
using internal::LogLevel;

// Captures tessera's log lines at info and up for the test's life.
class LogCapture {
 public:
  LogCapture() : saved_level_(internal::log_level()) {
    internal::set_log_level(LogLevel::kInfo);
    internal::set_log_sink([this](LogLevel, std::string_view text) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.emplace_back(text);
    });
  }
  ~LogCapture() {
    internal::set_log_sink(nullptr);
    internal::set_log_level(saved_level_);
  }
  // The captured lines that match `pattern` (std::regex_search).
  std::vector<std::string> matching(const std::string& pattern) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> out;
    std::regex re(pattern);
    for (const auto& line : lines_) {
      if (std::regex_search(line, re)) out.push_back(line);
    }
    return out;
  }

 private:
  LogLevel saved_level_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// A graph with a global step and a train op that adds 1 to it (and 0.5 to w).
struct StepGraph {
  Graph g;
  Variable step = train::get_or_create_global_step(g);
  Variable w{g, Tensor::scalar<float>(0), "w"};
  Operation train_op = ops::group({step.assign_add(ops::constant(g, int64_t{1})).op(),
                                   w.assign_add(ops::constant(g, 0.5f)).op()});
};

int64_t step_of(train::MonitoredTrainingSession& s, const Variable& step) {
  return s.raw_session().run(step.value()).scalar<int64_t>();
}

class HooksTest : public testing::TempDirTest {
 protected:
  HooksTest() : TempDirTest("tessera_hooks") {}
  train::MonitoredTrainingSessionOptions local(std::vector<train::SessionRunHook> hooks) {
    train::MonitoredTrainingSessionOptions o;
    o.hooks = std::move(hooks);
    return o;
  }
  std::vector<std::string> checkpoints() {
    auto state = train::get_checkpoint_state(dir_.string());
    return state ? state->all_model_checkpoint_paths : std::vector<std::string>{};
  }
  std::string ckpt(int64_t step) { return (dir_ / ("model.ckpt-" + std::to_string(step))).string(); }
};

TEST_F(HooksTest, ReportUninitializedVariablesNamesThoseWithoutAValue) {
  Graph g;
  Variable a(g, Tensor::scalar<float>(1), "a");
  Variable b(g, Tensor::vector<int32_t>({1, 2}), "b");
  auto report = report_uninitialized_variables(g);
  auto only_b = report_uninitialized_variables(g, {b});
  auto a_ready = is_variable_initialized(a);
  EXPECT_EQ(report.dtype(), DType::String);
  Session s(g);
  EXPECT_EQ(s.run(report).to_vector<std::string>(), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(s.run(a_ready).scalar<bool>());
  s.run(a.initializer());
  EXPECT_TRUE(s.run(a_ready).scalar<bool>());
  EXPECT_EQ(s.run(report).to_vector<std::string>(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(s.run(only_b).to_vector<std::string>(), (std::vector<std::string>{"b"}));
  s.run(global_variables_initializer(g));
  EXPECT_TRUE(s.run(report).to_vector<std::string>().empty());
  // Each session has its own variables: a new one has none initialized.
  Session fresh(g);
  EXPECT_EQ(fresh.run(report).to_vector<std::string>(), (std::vector<std::string>{"a", "b"}));
}

TEST_F(HooksTest, ReportUninitializedVariablesOfAGraphWithoutVariablesIsEmpty) {
  Graph g;
  auto report = report_uninitialized_variables(g);
  Session s(g);
  Tensor t = s.run(report);
  EXPECT_EQ(t.dtype(), DType::String);
  EXPECT_EQ(t.shape(), Shape{0});
}

// The readiness ops find their variable by name on its task (Note [Readiness ops]): they do not
// join its colocation group, so a variable on an accelerator stays there.
TEST_F(HooksTest, ReportUninitializedVariablesLeavesAVariableOnItsAccelerator) {
  const std::string sim = add_simulated_accelerators(1).front();
  Graph g;
  Variable v;
  {
    auto scope = g.device(sim);
    v = Variable(g, Tensor::vector<float>({1, 2}), "on_sim");
  }
  auto report = report_uninitialized_variables(g);
  SessionOptions o;
  o.allow_soft_placement = false;
  Session s(g, o);
  EXPECT_EQ(s.run(report).to_vector<std::string>(), (std::vector<std::string>{"on_sim"}));
  s.run(v.initializer());
  EXPECT_TRUE(s.run(report).to_vector<std::string>().empty());
  EXPECT_EQ(v.op().assigned_device().substr(v.op().assigned_device().size() - sim.size()), sim);
  EXPECT_NE(is_variable_initialized(v).op().assigned_device(), v.op().assigned_device());
}

// An optimizer's slot variable requests no device: it is colocated with its variable. Its
// readiness op must run on the task the variable's request names (where the slot lives), or a
// worker would wait forever for a slot its task never has.
TEST_F(HooksTest, TheReadinessOpOfASlotVariableRunsOnItsVariablesTask) {
  Graph g;
  Variable w;
  {
    auto ps = g.device("/job:ps/task:1");
    w = Variable(g, Tensor::vector<float>({1, 2}), "w");
  }
  auto loss = ops::reduce_sum(ops::square(w.value()));
  train::AdamOptimizer adam(0.1f);
  adam.minimize(loss);
  std::optional<Variable> m = adam.get_slot(w, "m");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->op().device(), "");  // the slot itself requests nothing
  EXPECT_EQ(is_variable_initialized(*m).op().device(), "/job:ps/task:1");
  EXPECT_EQ(is_variable_initialized(w).op().device(), "/job:ps/task:1");
}

// TF's local variables: a worker's own state, outside the model's variables, checkpoints and the
// readiness check, initialized by the monitored session in every session it makes.
TEST_F(HooksTest, LocalVariablesAreOutsideTheModelAndTheMonitoredSessionInitializesThem) {
  StepGraph sg;
  Variable mine = local_variable(sg.g, Tensor::scalar<int64_t>(7), "my_local");
  EXPECT_FALSE(mine.trainable());
  auto names = [](const std::vector<Variable>& vs) {
    std::vector<std::string> out;
    for (const auto& v : vs) out.push_back(v.name());
    return out;
  };
  EXPECT_EQ(names(local_variables(sg.g)), (std::vector<std::string>{"my_local"}));
  for (const std::string& n : names(global_variables(sg.g))) EXPECT_NE(n, "my_local");
  {
    Session s(sg.g);
    s.run(global_variables_initializer(sg.g));
    EXPECT_TRUE(s.run(report_uninitialized_variables(sg.g)).to_vector<std::string>().empty());
    EXPECT_FALSE(s.run(is_variable_initialized(mine)).scalar<bool>());
    s.run(local_variables_initializer(sg.g));
    EXPECT_EQ(s.run(mine.value()).scalar<int64_t>(), 7);
  }
  // The chief initializes it; a non-chief's wait is for the model only (one that waited for its
  // local step would wait forever: nothing sets it before the session exists).
  for (bool chief : {true, false}) {
    auto o = local({});
    o.is_chief = chief;
    o.checkpoint_dir = chief ? dir_.string() : "";
    o.save_checkpoint_steps = 1;
    if (!chief) o.max_wait_for_ready = 300ms;
    if (chief) {
      train::MonitoredTrainingSession s(sg.g, o);
      EXPECT_EQ(s.raw_session().run(mine.value()).scalar<int64_t>(), 7);
      s.run(sg.train_op);
      s.close();
      // The checkpoint holds the model, not the local variable.
      auto latest = train::latest_checkpoint(dir_.string());
      ASSERT_TRUE(latest.has_value());
      auto saved = train::read_checkpoint(*latest);
      EXPECT_EQ(saved.count("my_local"), 0u);
      EXPECT_EQ(saved.count("w"), 1u);
    } else {
      // Not ready (nothing initialized the model in this process's fresh session): it times out
      // waiting for the model's variables, and names them, not the local one.
      try {
        train::MonitoredTrainingSession s(sg.g, o);
        ADD_FAILURE() << "a non-chief found an uninitialized model ready";
      } catch (const DeadlineExceededError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("global_step"), std::string::npos) << m;
        EXPECT_EQ(m.find("my_local"), std::string::npos) << m;
      }
    }
  }
}

// The hooks' calls in order, their fetches in the same run, and only the caller's fetches back.
struct RecordingHook : train::SessionRunHook::Impl {
  std::vector<std::string> calls;
  Output extra;
  std::vector<Tensor> seen;
  bool stop_after_run = false;
  explicit RecordingHook(Output e) : extra(e) {}
  void begin() override { calls.push_back("begin"); }
  void after_create_session(Session&) override { calls.push_back("after_create_session"); }
  std::vector<Output> before_run() override {
    calls.push_back("before_run");
    return {extra};
  }
  void after_run(const std::vector<Tensor>& values, bool& request_stop) override {
    calls.push_back("after_run");
    seen = values;
    request_stop = stop_after_run;
  }
  void end(Session&) override { calls.push_back("end"); }
};

TEST_F(HooksTest, HooksAreCalledInOrderAndTheirFetchesRunWithTheCallers) {
  Graph g;
  Variable v(g, Tensor::scalar<float>(0), "v");
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto add = v.assign_add(x);
  auto doubled = ops::mul(v.value(), ops::constant(g, 2.0f));
  auto hook1 = std::make_shared<RecordingHook>(doubled);
  auto hook2 = std::make_shared<RecordingHook>(ops::identity(x));
  {
    train::MonitoredTrainingSession s(g, local({train::SessionRunHook(hook1), train::SessionRunHook(hook2)}));
    EXPECT_EQ(hook1->calls, (std::vector<std::string>{"begin", "after_create_session"}));
    auto out = s.run({add}, {{x, Tensor::scalar(3.0f)}});
    ASSERT_EQ(out.size(), 1u);  // the caller's fetch only
    EXPECT_EQ(out[0].scalar<float>(), 3.0f);
    ASSERT_EQ(hook1->seen.size(), 1u);
    // The hook's fetch ran in the same step (with the same feed): v is 0 or 3 there.
    const float seen = hook1->seen[0].scalar<float>();
    EXPECT_TRUE(seen == 0.0f || seen == 6.0f) << seen;
    ASSERT_EQ(hook2->seen.size(), 1u);
    EXPECT_EQ(hook2->seen[0].scalar<float>(), 3.0f);
    EXPECT_FALSE(s.should_stop());
    hook2->stop_after_run = true;
    s.run(add.op(), {{x, Tensor::scalar(1.0f)}});
    EXPECT_TRUE(s.should_stop());
    // Running after a stop request is refused (TF: "Run called even after should_stop requested.").
    EXPECT_THROW(s.run(add.op(), {{x, Tensor::scalar(1.0f)}}), FailedPreconditionError);
    s.close();
    s.close();  // idempotent
    EXPECT_THROW(s.run(add.op(), {{x, Tensor::scalar(1.0f)}}), FailedPreconditionError);
  }
  EXPECT_EQ(hook1->calls, (std::vector<std::string>{"begin", "after_create_session", "before_run", "after_run",
                                                    "before_run", "after_run", "end"}));
}

TEST_F(HooksTest, EndIsNotCalledAfterARunRaised) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::sqrt(x);
  auto hook = std::make_shared<RecordingHook>(y);
  train::MonitoredTrainingSession s(g, local({train::SessionRunHook(hook)}));
  EXPECT_THROW(s.run({y}), InvalidArgumentError);  // x not fed
  s.close();
  EXPECT_EQ(hook->calls.back(), "before_run");
}

TEST_F(HooksTest, StopAtStepHookStopsAtTheLastStep) {
  StepGraph m;
  train::MonitoredTrainingSession s(m.g, local({train::StopAtStepHook(10)}));
  int runs = 0;
  while (!s.should_stop() && runs < 100) {
    s.run(m.train_op);
    ++runs;
  }
  EXPECT_EQ(runs, 10);
  EXPECT_EQ(step_of(s, m.step), 10);
}

TEST_F(HooksTest, StopAtStepHookStopsAfterOneRunWhenTheStepIsAlreadyPast) {
  StepGraph m;
  auto to_20 = m.step.assign(ops::constant(m.g, int64_t{20}));
  train::MonitoredTrainingSession s(m.g, local({train::StopAtStepHook(5)}));
  s.run({to_20});
  EXPECT_TRUE(s.should_stop());
}

TEST_F(HooksTest, StopAtStepHookCountsRunsThatDoNotStepAsNothing) {
  StepGraph m;
  train::MonitoredTrainingSession s(m.g, local({train::StopAtStepHook(3)}));
  for (int i = 0; i < 5; ++i) s.run({m.w.value()});  // the global step stays 0
  EXPECT_FALSE(s.should_stop());
  for (int i = 0; i < 3; ++i) s.run(m.train_op);
  EXPECT_TRUE(s.should_stop());
}

TEST_F(HooksTest, HooksThatReadTheGlobalStepNeedOne) {
  for (auto make : std::vector<std::function<train::SessionRunHook()>>{
           [] { return train::StopAtStepHook(3); },
           [this] { return train::CheckpointSaverHook(dir_.string(), 0, 1); },
           [] { return train::StepCounterHook(10); }}) {
    Graph g;
    Variable v(g, Tensor::scalar<float>(0), "v");
    std::string message = testing::error_of<FailedPreconditionError>(
        [&] { train::MonitoredTrainingSession s(g, local({make()})); });
    EXPECT_NE(message.find("Global step should be created to use"), std::string::npos) << message;
  }
}

TEST_F(HooksTest, CheckpointSaverHookSavesAtCreationEveryNStepsAndAtEnd) {
  StepGraph m;
  LogCapture log;
  {
    train::MonitoredTrainingSession s(m.g, local({train::CheckpointSaverHook(dir_.string(), 0, 2)}));
    EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0)}));  // at creation, step 0
    for (int i = 0; i < 5; ++i) s.run(m.train_op);
    EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0), ckpt(2), ckpt(4)}));
    s.close();
  }
  EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0), ckpt(2), ckpt(4), ckpt(5)}));
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), ckpt(5));
  auto saved = train::read_checkpoint(ckpt(5));
  EXPECT_EQ(saved.at("global_step").scalar<int64_t>(), 5);
  EXPECT_FLOAT_EQ(saved.at("w").scalar<float>(), 2.5f);
  EXPECT_EQ(log.matching("Saving checkpoints for 4 into .*model\\.ckpt\\.").size(), 1u);
}

TEST_F(HooksTest, CheckpointSaverHookDoesNotSaveTheLastStepTwice) {
  StepGraph m;
  {
    train::MonitoredTrainingSession s(m.g, local({train::CheckpointSaverHook(dir_.string(), 0, 2)}));
    for (int i = 0; i < 4; ++i) s.run(m.train_op);
  }  // the destructor closes: step 4 was saved by the run already
  EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0), ckpt(2), ckpt(4)}));
}

TEST_F(HooksTest, CheckpointSaverHookEverySeconds) {
  StepGraph m;
  {
    train::MonitoredTrainingSession s(m.g, local({train::CheckpointSaverHook(dir_.string(), 3600, 0)}));
    for (int i = 0; i < 3; ++i) s.run(m.train_op);
    EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0)}));
  }
  EXPECT_EQ(checkpoints(), (std::vector<std::string>{ckpt(0), ckpt(3)}));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  StepGraph m2;
  train::MonitoredTrainingSession s(m2.g, local({train::CheckpointSaverHook(dir_.string(), 1, 0)}));
  s.run(m2.train_op);
  std::this_thread::sleep_for(1100ms);  // more than save_secs since the save at creation
  s.run(m2.train_op);
  auto kept = checkpoints();
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.back(), ckpt(2));
}

TEST_F(HooksTest, CheckpointSaverHookWantsExactlyOneSchedule) {
  EXPECT_THROW(train::CheckpointSaverHook(dir_.string(), 0, 0), InvalidArgumentError);
  EXPECT_THROW(train::CheckpointSaverHook(dir_.string(), 10, 10), InvalidArgumentError);
  EXPECT_THROW(train::CheckpointSaverHook(dir_.string(), -1, 0), InvalidArgumentError);
  EXPECT_THROW(train::CheckpointSaverHook("", 0, 1), InvalidArgumentError);
}

TEST_F(HooksTest, CheckpointSaverHookMakesItsDirectory) {
  StepGraph m;
  const fs::path nested = dir_ / "a" / "b";
  {
    train::MonitoredTrainingSession s(m.g, local({train::CheckpointSaverHook(nested.string(), 0, 1)}));
    s.run(m.train_op);
  }
  EXPECT_EQ(train::latest_checkpoint(nested.string()), (nested / "model.ckpt-1").string());
}

TEST_F(HooksTest, NanTensorHookRaisesOnNaN) {
  Graph g;
  auto loss = ops::placeholder(g, DType::Float32, Shape{}, "loss");
  LogCapture log;
  train::MonitoredTrainingSession s(g, local({train::NanTensorHook(loss)}));
  s.run({loss}, {{loss, Tensor::scalar(1.5f)}});
  EXPECT_FALSE(s.should_stop());
  std::string message = testing::error_of<InvalidArgumentError>(
      [&] { s.run({loss}, {{loss, Tensor::scalar(std::numeric_limits<float>::quiet_NaN())}}); });
  EXPECT_NE(message.find("NaN loss during training"), std::string::npos) << message;
  EXPECT_EQ(log.matching("Model diverged with loss = NaN\\.").size(), 1u);
}

TEST_F(HooksTest, NanTensorHookRequestsAStopWhenNotFailing) {
  Graph g;
  auto loss = ops::placeholder(g, DType::Float64, Shape{2}, "loss");
  train::MonitoredTrainingSession s(g, local({train::NanTensorHook(loss, /*fail_on_nan_loss=*/false)}));
  s.run({loss}, {{loss, Tensor::vector<double>({1, 2})}});
  EXPECT_FALSE(s.should_stop());
  s.run({loss}, {{loss, Tensor::vector<double>({1, std::nan("")})}});
  EXPECT_TRUE(s.should_stop());
}

TEST_F(HooksTest, NanTensorHookWantsAFloatingPointLoss) {
  Graph g;
  EXPECT_THROW(train::NanTensorHook(ops::constant(g, 1)), InvalidArgumentError);
}

TEST_F(HooksTest, LoggingTensorHookLogsEveryNIterations) {
  Graph g;
  Variable counter(g, Tensor::scalar<int32_t>(0), "counter");
  auto bump = counter.assign_add(ops::constant(g, 1));
  auto a = ops::constant(g, 2.5f, "a");
  auto b = ops::constant(g, Tensor::vector<int32_t>({1, 2, 3}), "b");
  LogCapture log;
  {
    train::MonitoredTrainingSession s(g, local({train::LoggingTensorHook({a, b}, 2)}));
    for (int i = 0; i < 5; ++i) s.run({bump});
  }
  auto lines = log.matching("a = ");
  ASSERT_EQ(lines.size(), 3u);  // iterations 0, 2 and 4
  EXPECT_NE(lines[0].find("tessera: a = 2.5, b = [1 2 3]\n"), std::string::npos) << lines[0];
  EXPECT_TRUE(std::regex_search(lines[1], std::regex(R"(a = 2\.5, b = \[1 2 3\] \([0-9]+\.[0-9]{3} sec\))")))
      << lines[1];
  EXPECT_THROW(train::LoggingTensorHook({a}, 0), InvalidArgumentError);
}

TEST_F(HooksTest, LoggingTensorHookFormatsAsNumPy) {
  Graph g;
  auto f = ops::constant(g, Tensor::matrix<float>({1, 2.5f, -3, 4}, 2, 2), "f");
  auto one = ops::constant(g, 1.0f, "one");
  auto yes = ops::constant(g, true, "yes");
  auto word = ops::constant(g, std::string("hi"), "word");
  LogCapture log;
  {
    train::MonitoredTrainingSession s(g, local({train::LoggingTensorHook({f, one, yes, word}, 1)}));
    s.run({one});
  }
  auto lines = log.matching("f = ");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("f = [[ 1.   2.5]\n"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" [-3.   4. ]], one = 1.0, yes = True, word = b'hi'"), std::string::npos) << lines[0];
}

// TF's hook prints NumPy values: a float32 scalar with the shortest digits that read back as that
// float32 ("0.64000005", not the widened double's "0.64000004529953"), a float64 as Python does;
// an array in one notation for all its elements, to at most 8 decimals (numpy_format_test has
// NumPy's other rules).
TEST_F(HooksTest, LoggingTensorHookPrintsEachFloatAsNumPyPrintsItsType) {
  Graph g;
  auto f32 = ops::mul(ops::constant(g, 0.8f), ops::constant(g, 0.8f), "f32");
  auto f64 = ops::add(ops::constant(g, 0.1), ops::constant(g, 0.2), "f64");
  auto v32 = ops::constant(g, Tensor::vector<float>({0.1f, 1e-5f, 3e38f, 16777216.0f}), "v32");
  auto v64 = ops::constant(g, Tensor::vector<double>({0.1, 1.0 / 3}), "v64");
  LogCapture log;
  {
    train::MonitoredTrainingSession s(g, local({train::LoggingTensorHook({f32, f64, v32, v64}, 1)}));
    s.run({f32});
  }
  auto lines = log.matching("f32 = ");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("tessera: f32 = 0.64000005, f64 = 0.30000000000000004, "
                          "v32 = [1.0000000e-01 9.9999997e-06 3.0000000e+38 1.6777216e+07], v64 = [0.1        0.33333333]\n"),
            std::string::npos)
      << lines[0];
}

TEST_F(HooksTest, StepCounterHookLogsTheRateEveryNSteps) {
  StepGraph m;
  LogCapture log;
  {
    train::MonitoredTrainingSession s(m.g, local({train::StepCounterHook(5)}));
    // The first run starts the count (step 1); steps 6 and 11 each log a rate.
    for (int i = 0; i < 11; ++i) s.run(m.train_op);
  }
  auto lines = log.matching("global_step/sec: ");
  EXPECT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    EXPECT_TRUE(std::regex_search(line, std::regex(R"(tessera: global_step/sec: [0-9.e+]+\n)"))) << line;
  }
  EXPECT_THROW(train::StepCounterHook(0), InvalidArgumentError);
}

TEST_F(HooksTest, StepCounterHookWarnsWhenTheGlobalStepDoesNotMove) {
  StepGraph m;
  LogCapture log;
  train::MonitoredTrainingSession s(m.g, local({train::StepCounterHook(5)}));
  for (int i = 0; i < 21; ++i) s.run({m.w.value()});
  EXPECT_EQ(log.matching("global step has not been increased").size(), 1u);
  EXPECT_TRUE(log.matching("global_step/sec").empty());
}

// A hook can be driven by hand (no monitored session): it finds the graph through its session.
TEST_F(HooksTest, AHookDrivenByHandFindsTheGlobalStepThroughItsSession) {
  StepGraph m;
  train::SessionRunHook hook = train::StopAtStepHook(2);
  hook.impl()->begin();
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  hook.impl()->after_create_session(s);
  bool stop = false;
  for (int i = 0; i < 2 && !stop; ++i) {
    auto fetches = hook.impl()->before_run();
    auto values = s.run(fetches, {}, {m.train_op});
    hook.impl()->after_run(values, stop);
  }
  EXPECT_TRUE(stop);
}

}  // namespace
}  // namespace tessera
