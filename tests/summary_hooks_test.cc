// The hooks that write summaries (SummarySaverHook, StepCounterHook with an output directory) and
// the monitored session's own (summary_dir, save_summaries_steps): what lands in the event files,
// read back record by record. Cases after TF1's basic_session_run_hooks_test.py
// (SummarySaverHookTest, StepCounterHookTest) and monitored_session_test.py (summaries).
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/summary.pb.h"
#include "host/event_file.h"
#include "testing/test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
namespace tb = tessera::tensorboard;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every event of every event file in `dir`, in file order, the file_version records left out.
std::vector<tb::Event> read_events(const fs::path& dir) {
  std::vector<tb::Event> out;
  for (const fs::path& f : event_files(dir)) {
    for (const std::string& rec : internal::read_tfrecords(f.string()).value_or_raise()) {
      tb::Event e;
      EXPECT_TRUE(e.ParseFromString(rec)) << f;
      if (e.what_case() != tb::Event::kFileVersion) out.push_back(std::move(e));
    }
  }
  return out;
}

// tag -> [(step, simple_value)] of the scalar values of `events`.
std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars(const std::vector<tb::Event>& events) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (const tb::Event& e : events) {
    if (e.what_case() != tb::Event::kSummary) continue;
    for (const auto& v : e.summary().value()) {
      if (v.value_case() == tb::Summary::Value::kSimpleValue) out[v.tag()].emplace_back(e.step(), v.simple_value());
    }
  }
  return out;
}

// global_step, a fed x and a train op that adds 1 to the step; a scalar summary of x.
struct Model {
  Graph g;
  Variable step;
  Output x;
  Operation train_op;
  Model() {
    step = train::get_or_create_global_step(g);
    x = ops::placeholder(g, DType::Float32, Shape{}, "input");  // not "x": the summary's name
    train_op = step.assign_add(ops::constant(g, int64_t{1})).op();
  }
};

class SummaryHooksTest : public testing::TempDirTest {
 protected:
  SummaryHooksTest() : TempDirTest("tessera_summary_hooks") {}
};

// TF: SummarySaverHookTest.test_save_steps. The summary is fetched with the first run and every
// save_steps global steps after it, and written at the global step read after that run.
TEST_F(SummaryHooksTest, SummarySaverHookWritesEverySaveStepsAtTheGlobalStep) {
  Model m;
  summary::scalar("x", m.x);
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SummarySaverHook((dir_ / "logs").string(), 10)};
  {
    train::MonitoredTrainingSession s(m.g, o);
    for (int i = 0; i < 25; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(static_cast<float>(i))}});
    s.close();  // end(): flushed
  }
  auto sc = scalars(read_events(dir_ / "logs"));
  // Run i moves the global step to i + 1 and feeds x = i. Runs 0, 10 and 20 are written at steps
  // 1, 11 and 21; a run that reads the step before its own increment may delay a write by one.
  const auto& x = sc["x"];
  ASSERT_GE(x.size(), 2u);
  ASSERT_LE(x.size(), 3u);
  EXPECT_EQ(x[0].first, 1);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].second, static_cast<float>(x[i].first - 1)) << "the value of the run that made step " << x[i].first;
    if (i > 0) {
      EXPECT_GE(x[i].first - x[i - 1].first, 10);
      EXPECT_LE(x[i].first - x[i - 1].first, 11);
    }
  }
  EXPECT_EQ(event_files(dir_ / "logs").size(), 1u);
}

TEST_F(SummaryHooksTest, SummarySaverHookWithAnExplicitOpWritesOnlyThatOp) {
  Model m;
  auto mine = summary::scalar("mine", m.x);
  summary::scalar("other", m.x);
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SummarySaverHook((dir_ / "logs").string(), 5, mine)};
  train::MonitoredTrainingSession s(m.g, o);
  for (int i = 0; i < 8; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(1.5f)}});
  s.close();
  const std::vector<tb::Event> events = read_events(dir_ / "logs");
  for (const tb::Event& e : events) EXPECT_NE(e.what_case(), tb::Event::kGraphDef) << "a user's hook writes no graph";
  auto sc = scalars(events);
  EXPECT_EQ(sc.count("other"), 0u);
  ASSERT_EQ(sc["mine"].size(), 2u);  // steps 1 and 6 (or 7)
  EXPECT_GE(sc["mine"][1].first, 6);
  EXPECT_EQ(sc["mine"][1].second, 1.5f);
}

// TF: SummarySaverHookTest.test_save_secs. With save_secs, the first run writes and the next
// write waits until that many seconds have passed, however many steps run meanwhile.
TEST_F(SummaryHooksTest, SummarySaverHookEverySaveSecs) {
  Model m;
  summary::scalar("x", m.x);
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::SummarySaverHook((dir_ / "logs").string(), 0, {}, 1)};
  train::MonitoredTrainingSession s(m.g, o);
  for (int i = 0; i < 50; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(static_cast<float>(i))}});
  // Fifty fast steps: only the first run's summary (the second is not due for a second).
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  s.run(m.train_op, {{m.x, Tensor::scalar(50.0f)}});  // a second later: due
  s.close();
  auto x = scalars(read_events(dir_ / "logs"))["x"];
  ASSERT_GE(x.size(), 2u);
  EXPECT_EQ(x.front().first, 1);
  EXPECT_EQ(x.back().first, 51);
  EXPECT_EQ(x.back().second, 50.0f);
  // Any write in between came after a second had passed, at a step after the first (a slow
  // machine may take a second for the fifty steps).
  for (std::size_t i = 1; i + 1 < x.size(); ++i) EXPECT_GT(x[i].first, 1);
}

TEST_F(SummaryHooksTest, SummarySaverHookRefusesWhatItCannotUse) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::SummarySaverHook((dir_ / "a").string(), 0); }),
              HasSubstr("exactly one of save_steps and save_secs must be > 0, got 0 and 0"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::SummarySaverHook((dir_ / "a").string(), 10, {}, 5); }),
              HasSubstr("exactly one of save_steps and save_secs"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::SummarySaverHook("", 10); }), HasSubstr("empty output_dir"));
  {
    Model m;  // no summary in the graph, none given
    train::MonitoredTrainingSessionOptions o;
    o.hooks = {train::SummarySaverHook((dir_ / "b").string(), 10)};
    EXPECT_THAT(error_of<InvalidArgumentError>([&] { train::MonitoredTrainingSession s(m.g, o); }),
                HasSubstr("the graph has no summaries"));
  }
  {
    Graph g;  // no global step
    auto x = ops::constant(g, 1.0f);
    summary::scalar("x", x);
    train::MonitoredTrainingSessionOptions o;
    o.hooks = {train::SummarySaverHook((dir_ / "c").string(), 10)};
    EXPECT_THAT(error_of<FailedPreconditionError>([&] { train::MonitoredTrainingSession s(g, o); }),
                HasSubstr("Global step should be created to use SummarySaverHook"));
  }
}

// TF's MonitoredTrainingSession: the chief writes the graph's summaries and global_step/sec to
// summary_dir, which defaults to checkpoint_dir; one event file holds both.
TEST_F(SummaryHooksTest, TheChiefsMonitoredSessionWritesSummariesAndStepRate) {
  Model m;
  summary::scalar("x", m.x);
  train::MonitoredTrainingSessionOptions o;
  o.checkpoint_dir = dir_.string();
  o.save_summaries_steps = 4;
  o.log_step_count_steps = 5;
  o.save_checkpoint_steps = 1000;
  {
    train::MonitoredTrainingSession s(m.g, o);
    for (int i = 0; i < 21; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(static_cast<float>(2 * i))}});
    s.close();
  }
  ASSERT_EQ(event_files(dir_).size(), 1u);
  const std::vector<tb::Event> events = read_events(dir_);
  // The graph, once, so that TensorBoard's graph tab shows the job.
  int graphs = 0;
  for (const tb::Event& e : events) {
    if (e.what_case() != tb::Event::kGraphDef) continue;
    ++graphs;
    tb::GraphDef def;
    ASSERT_TRUE(def.ParseFromString(e.graph_def()));
    bool has_step = false;
    for (const auto& n : def.node()) has_step |= n.name() == "global_step" && n.op() == "VariableV2";
    EXPECT_TRUE(has_step);
  }
  EXPECT_EQ(graphs, 1);
  auto sc = scalars(events);
  ASSERT_GE(sc["x"].size(), 5u);
  for (const auto& [step, value] : sc["x"]) EXPECT_EQ(value, 2.0f * static_cast<float>(step - 1)) << step;
  // A rate every 5 global steps after the first trigger: at 6, 11, 16 and 21 (or one fewer when
  // a fetched step lands past a boundary).
  ASSERT_GE(sc["global_step/sec"].size(), 3u);
  for (const auto& [step, rate] : sc["global_step/sec"]) {
    EXPECT_GT(rate, 0.0f) << step;
    EXPECT_GT(step, 1);
  }
}

TEST_F(SummaryHooksTest, SummaryDirOverridesCheckpointDirAndZeroStepsTurnsSummariesOff) {
  {
    Model m;
    summary::scalar("x", m.x);
    train::MonitoredTrainingSessionOptions o;
    o.checkpoint_dir = (dir_ / "ckpt").string();
    o.summary_dir = (dir_ / "summaries").string();
    train::MonitoredTrainingSession s(m.g, o);
    s.run(m.train_op, {{m.x, Tensor::scalar(3.0f)}});
    s.close();
    EXPECT_TRUE(event_files(dir_ / "ckpt").empty());
    EXPECT_EQ(scalars(read_events(dir_ / "summaries"))["x"].size(), 1u);
  }
  {
    Model m;
    summary::scalar("x", m.x);
    train::MonitoredTrainingSessionOptions o;
    o.summary_dir = (dir_ / "off").string();
    o.save_summaries_steps = 0;
    o.log_step_count_steps = 0;
    train::MonitoredTrainingSession s(m.g, o);
    s.run(m.train_op, {{m.x, Tensor::scalar(3.0f)}});
    s.close();
    EXPECT_TRUE(scalars(read_events(dir_ / "off")).empty());
  }
  {
    // A graph without summaries under a checkpoint_dir: the step rate only, no error.
    Model m;
    train::MonitoredTrainingSessionOptions o;
    o.checkpoint_dir = (dir_ / "plain").string();
    o.log_step_count_steps = 2;
    train::MonitoredTrainingSession s(m.g, o);
    for (int i = 0; i < 8; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(0.0f)}});
    s.close();
    auto sc = scalars(read_events(dir_ / "plain"));
    EXPECT_EQ(sc.size(), 1u);
    EXPECT_GE(sc["global_step/sec"].size(), 2u);
  }
}

TEST_F(SummaryHooksTest, StepCounterHookWithAnOutputDirectory) {
  Model m;
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::StepCounterHook(3, (dir_ / "rate").string())};
  train::MonitoredTrainingSession s(m.g, o);
  for (int i = 0; i < 10; ++i) s.run(m.train_op, {{m.x, Tensor::scalar(0.0f)}});
  s.close();
  auto rates = scalars(read_events(dir_ / "rate"))["global_step/sec"];
  ASSERT_GE(rates.size(), 2u);
  for (std::size_t i = 1; i < rates.size(); ++i) EXPECT_GE(rates[i].first - rates[i - 1].first, 3);
}

}  // namespace
}  // namespace tessera
