// The logging facility (core/logging.h): the threshold filters before formatting, lines are
// "tessera: " + message, TESSERA_LOG_LEVEL's names and numbers parse (a bad value is reported once
// and the default used), and messages from many threads come out as whole lines.
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/logging.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using testing::ScopedEnv;

struct Captured {
  LogLevel level;
  std::string text;
};

// Captures what the facility writes (through its sink) and restores the threshold and the sink.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_level_ = log_level();
    set_log_sink([this](LogLevel level, std::string_view text) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.push_back({level, std::string(text)});
    });
  }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(saved_level_);
  }
  std::vector<Captured> lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }

 private:
  LogLevel saved_level_ = LogLevel::kInfo;
  std::mutex mu_;
  std::vector<Captured> lines_;
};

int evaluations = 0;
int counted() { return ++evaluations; }

TEST_F(LoggingTest, TheThresholdFiltersBeforeArgumentsAreEvaluated) {
  set_log_level(LogLevel::kWarning);
  evaluations = 0;
  TESSERA_LOG(kDebug, "debug {}", counted());
  TESSERA_LOG(kInfo, "info {}", counted());
  EXPECT_EQ(evaluations, 0);  // neither formatted nor evaluated
  TESSERA_LOG(kWarning, "warning {}", counted());
  TESSERA_LOG(kError, "error {}", counted());
  EXPECT_EQ(evaluations, 2);
  auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].level, LogLevel::kWarning);
  EXPECT_EQ(got[0].text, "tessera: warning 1\n");
  EXPECT_EQ(got[1].level, LogLevel::kError);
  EXPECT_EQ(got[1].text, "tessera: error 2\n");

  set_log_level(LogLevel::kOff);
  TESSERA_LOG(kError, "dropped");
  log_message(LogLevel::kError, "dropped too");
  EXPECT_EQ(lines().size(), 2u);

  set_log_level(LogLevel::kDebug);
  TESSERA_LOG(kDebug, "all of them");
  ASSERT_EQ(lines().size(), 3u);
  EXPECT_EQ(lines()[2].text, "tessera: all of them\n");
  EXPECT_EQ(log_level(), LogLevel::kDebug);
}

TEST_F(LoggingTest, EveryLineOfAMessageHasThePrefix) {
  set_log_level(LogLevel::kInfo);
  TESSERA_LOG(kInfo, "a -> {}\nbb -> {}\n", "/device:CPU:0", "/device:SIM:0");  // trailing newline dropped
  TESSERA_LOG(kInfo, "");
  auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text, "tessera: a -> /device:CPU:0\ntessera: bb -> /device:SIM:0\n");
  EXPECT_EQ(got[1].text, "tessera: \n");
}

// One kind of event a thousand times costs `burst` lines per window; the next line written says how
// many were skipped.
TEST(LogRateLimitTest, AdmitsABurstPerWindowAndCountsTheRest) {
  LogRateLimit limit(std::chrono::seconds(10), 3);
  const auto t0 = LogRateLimit::Clock::now();
  uint64_t skipped = 99;
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) {
    if (limit.admit(t0 + std::chrono::milliseconds(i), &skipped)) {
      ++admitted;
      EXPECT_EQ(skipped, 0u);
    }
  }
  EXPECT_EQ(admitted, 3);
  ASSERT_TRUE(limit.admit(t0 + std::chrono::seconds(11), &skipped));
  EXPECT_EQ(skipped, 997u);
  ASSERT_TRUE(limit.admit(t0 + std::chrono::seconds(12), &skipped));
  EXPECT_EQ(skipped, 0u) << "the count is reported once";
}

TEST_F(LoggingTest, LimitedMessagesSayHowManyWereSkipped) {
  set_log_level(LogLevel::kInfo);
  LogRateLimit limit(std::chrono::hours(1), 2);
  for (int i = 0; i < 50; ++i) log_limited(limit, LogLevel::kWarning, "refused {}", i);
  auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text, "tessera: refused 0\n");
  EXPECT_EQ(got[1].text, "tessera: refused 1\n");
  // Below the threshold nothing is counted or formatted.
  set_log_level(LogLevel::kError);
  log_limited(limit, LogLevel::kWarning, "dropped {}", counted());
  EXPECT_EQ(lines().size(), 2u);
}

// A thousand sessions of a graph that asks for a device this process lacks used to print a
// thousand soft-placement lines: the kind is rate-limited.
TEST_F(LoggingTest, SoftPlacementLinesOfManySessionsAreRateLimited) {
  set_log_level(LogLevel::kInfo);
  Graph g;
  Output y;
  {
    auto scope = g.device("/device:GPU:7");
    y = ops::square(ops::constant(g, 3.0f), "on_a_missing_gpu");
  }
  for (int i = 0; i < 200; ++i) {
    Session s(g);
    ASSERT_EQ(s.run(y).scalar<float>(), 9.0f);
  }
  int soft = 0;
  for (const auto& line : lines()) soft += line.text.find("soft placement") != std::string::npos ? 1 : 0;
  EXPECT_GE(soft, 1) << "the first sessions say where the op went";
  EXPECT_LE(soft, 21) << "at most a burst per window (20), and one more if the window turned";
}

TEST(LogLevelTest, ParsesNamesInAnyCaseAndTensorFlowNumbers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("INFO"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("Warning"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("OFF"), LogLevel::kOff);
  // TF_CPP_MIN_LOG_LEVEL: 0 everything from info, 1 drops info, 2 drops warnings, 3 drops errors.
  EXPECT_EQ(parse_log_level("0"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("1"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("2"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("3"), LogLevel::kOff);
  for (const char* bad : {"", "4", "-1", "01", " info", "info ", "loud", "warnings", "1.0"}) {
    EXPECT_EQ(parse_log_level(bad), std::nullopt) << "'" << bad << "'";
  }
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff}) {
    EXPECT_EQ(parse_log_level(log_level_name(l)), l);
  }
}

TEST_F(LoggingTest, TheEnvironmentSetsTheThreshold) {
  {
    ScopedEnv env("TESSERA_LOG_LEVEL", "ERROR");
    EXPECT_EQ(reset_log_level_from_env(), LogLevel::kError);
    EXPECT_EQ(log_level(), LogLevel::kError);
  }
  {
    ScopedEnv env("TESSERA_LOG_LEVEL", "1");
    EXPECT_EQ(reset_log_level_from_env(), LogLevel::kWarning);
  }
  {
    ScopedEnv env("TESSERA_LOG_LEVEL", "debug");
    EXPECT_EQ(reset_log_level_from_env(), LogLevel::kDebug);
  }
  {
    ScopedEnv env("TESSERA_LOG_LEVEL", std::nullopt);
    EXPECT_EQ(reset_log_level_from_env(), LogLevel::kInfo);  // the default
  }
  {
    ScopedEnv env("TESSERA_LOG_LEVEL", "");
    EXPECT_EQ(reset_log_level_from_env(), LogLevel::kInfo);
  }
  EXPECT_TRUE(lines().empty());  // none of those is worth a word
}

TEST_F(LoggingTest, ABadValueIsReportedAtWarningAndTheDefaultUsed) {
  ScopedEnv env("TESSERA_LOG_LEVEL", "loud");
  EXPECT_EQ(reset_log_level_from_env(), LogLevel::kInfo);
  auto got = lines();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].level, LogLevel::kWarning);
  EXPECT_NE(got[0].text.find("tessera: ignoring TESSERA_LOG_LEVEL='loud'"), std::string::npos) << got[0].text;
  EXPECT_NE(got[0].text.find("using info"), std::string::npos) << got[0].text;
}

// Logs its first messages from many threads at once; 0 when the bad TESSERA_LOG_LEVEL was reported
// exactly once, the default used and every message written.
int log_first_messages_from_threads() {
  std::mutex mu;
  int reports = 0, infos = 0;
  set_log_sink([&](LogLevel level, std::string_view text) {
    std::lock_guard<std::mutex> l(mu);  // the facility serializes already; belt and braces
    if (text.find("TESSERA_LOG_LEVEL='verbose'") != std::string_view::npos) ++reports;
    if (level == LogLevel::kInfo) ++infos;
  });
  tessera::testing::run_threads(8, [](int id) {
    for (int i = 0; i < 10; ++i) TESSERA_LOG(kInfo, "thread {} message {}", id, i);
  });
  set_log_sink(nullptr);
  return reports == 1 && infos == 80 && log_level() == LogLevel::kInfo ? 0 : 1;
}

// A fresh process (the threadsafe death test style re-runs this test in one) reads the variable
// when its first messages are logged, from many threads at once, and reports the bad value once.
TEST(LogLevelDeathTest, AProcessReportsABadValueOnceOnItsFirstMessages) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedEnv env("TESSERA_LOG_LEVEL", "verbose");
  EXPECT_EXIT(std::exit(log_first_messages_from_threads()), ::testing::ExitedWithCode(0), "");
}

// Many threads log two-line messages straight to stderr (fd 2, as a user sees it): every line
// comes out whole, each message's two lines together, each thread's messages in order.
class LoggingThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(LoggingThreadsTest, ManyThreadsWriteWholeLines) {
  const int threads = GetParam();
  constexpr int kMessages = 400;
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  tessera::testing::run_threads(threads, [](int id) {
    const std::string payload(200 + 37 * id, static_cast<char>('a' + id));
    for (int i = 0; i < kMessages; ++i) {
      TESSERA_LOG(kInfo, "thread {} message {} begins\nthread {} message {} ends {}", id, i, id, i, payload);
    }
  });
  const std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);

  std::vector<int> next(static_cast<std::size_t>(threads), 0);
  std::istringstream in(out);
  std::string first, second;
  int messages = 0;
  while (std::getline(in, first)) {
    ASSERT_TRUE(std::getline(in, second)) << "a message cut after: " << first;
    int id = -1, i = -1;
    char tail[16] = {};
    ASSERT_EQ(std::sscanf(first.c_str(), "tessera: thread %d message %d %15s", &id, &i, tail), 3) << first;
    ASSERT_EQ(std::string(tail), "begins") << first;
    ASSERT_TRUE(id >= 0 && id < threads) << first;
    ASSERT_EQ(i, next[static_cast<std::size_t>(id)]++) << first;  // in order, none lost
    const std::string payload(200 + 37 * id, static_cast<char>('a' + id));
    ASSERT_EQ(second, fmt::format("tessera: thread {} message {} ends {}", id, i, payload));
    ++messages;
  }
  EXPECT_EQ(messages, threads * kMessages);
}

INSTANTIATE_TEST_SUITE_P(Threads, LoggingThreadsTest, ::testing::ValuesIn(tessera::testing::kThreadCounts));

}  // namespace
}  // namespace tessera::internal
