// train::ServerProcess (include/tessera/server_process.h) against stand-ins for the tessera binary:
// small shell scripts that print the ready line, print another one, say something on stderr and
// exit, or stay silent, so every outcome of a start is checked without a real server (the
// multi-process tests, the demo and bench_cluster start real ones). One real task, whose launcher
// dies without stopping it, checks --exit-with-parent. Also free_loopback_port().
#include "tessera/server_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include "host/child_process.h"
#include "tessera/errors.h"
#include "testing/test_util.h"

namespace tessera::train {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class TrainServerProcessTest : public tessera::testing::TempDirTest {
 protected:
  TrainServerProcessTest() : TempDirTest("tessera_server_process_test") {}

  // An executable /bin/sh script with `body`, standing in for the tessera binary; its arguments
  // are `server --cluster C --job J --task N ...`.
  std::string script(const std::string& body) {
    const fs::path path = dir_ / ("fake_tessera_" + std::to_string(scripts_++));
    {
      std::ofstream out(path);
      out << "#!/bin/sh\n" << body << "\n";
    }
    fs::permissions(path, fs::perms::owner_all);
    return path.string();
  }
  static constexpr const char* kReady = "echo \"tessera server: /job:$5/task:$7 listening on tessera://127.0.0.1:1\"";

  int scripts_ = 0;
};

TEST_F(TrainServerProcessTest, ReadyLineGivesTargetThenSignalsAndWaits) {
  ServerProcess task(script(std::string("echo 'a warning' >&2\n") + kReady + "\nexec sleep 30"),
                     R"({"ps": ["127.0.0.1:1"]})", "ps", 0);
  EXPECT_EQ(task.ready_line(), "tessera server: /job:ps/task:0 listening on tessera://127.0.0.1:1");
  EXPECT_EQ(task.target(), "tessera://127.0.0.1:1");
  EXPECT_GT(task.pid(), 0);
  EXPECT_TRUE(task.running());
  EXPECT_TRUE(testing::wait_until([&] { return task.stderr_tail() == "a warning\n"; }, 5s)) << task.stderr_tail();
  EXPECT_FALSE(task.wait(10ms));  // still running
  task.kill(SIGTERM);
  std::optional<int> status = task.wait(5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  EXPECT_FALSE(task.running());
}

TEST_F(TrainServerProcessTest, PassesArgumentsAndEnvironment) {
  ServerProcessOptions options;
  options.args = {"--keys", "w0.key"};
  options.env = {"PATH=/usr/bin:/bin", "TESSERA_TEST_VALUE=42"};
  options.forward_stderr = false;
  ServerProcess task(script(std::string("echo \"$* $TESSERA_TEST_VALUE\" >&2\n") + kReady + "\nexec sleep 30"),
                     "cluster.json", "worker", 3, options);
  EXPECT_EQ(task.target(), "tessera://127.0.0.1:1");
  EXPECT_TRUE(testing::wait_until(
      [&] {
        return task.stderr_tail() == "server --cluster cluster.json --job worker --task 3 --keys w0.key --exit-with-parent " +
                                         std::to_string(::getpid()) + " 42\n";
      },
      5s))
      << task.stderr_tail();
}

TEST_F(TrainServerProcessTest, ExitBeforeReadyIsUnavailableWithItsStderr) {
  EXPECT_THROW_MSG(ServerProcess(script("echo 'tessera server: UNAVAILABLE: cannot bind 127.0.0.1:1' >&2\nexit 2"),
                                 R"({"ps": ["127.0.0.1:1"]})", "ps", 0),
                   UnavailableError, "exited with status 2 before it was ready; its stderr ends:\ntessera server: UNAVAILABLE: cannot bind");
  EXPECT_THROW_MSG(ServerProcess(script("exit 3"), "{}", "worker", 1), UnavailableError,
                   "tessera server /job:worker/task:1");
}

TEST_F(TrainServerProcessTest, SilenceIsDeadlineExceededAndTheChildIsKilled) {
  const fs::path pid_file = dir_ / "pid";
  ServerProcessOptions options;
  options.start_timeout = 300ms;
  options.forward_stderr = false;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(ServerProcess(script("echo $$ > " + pid_file.string() + "\necho 'still starting' >&2\nexec sleep 30"),
                                 "{}", "ps", 0, options),
                   DeadlineExceededError, "did not print its ready line within 300 ms: killed; its stderr ends:\nstill starting");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_EQ(::kill(pid, 0), -1);  // killed and reaped
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(TrainServerProcessTest, AnotherLineFirstIsUnavailable) {
  EXPECT_THROW_MSG(ServerProcess(script("echo hello\nexec sleep 30"), "{}", "ps", 0), UnavailableError,
                   "printed \"hello\" instead of its ready line");
}

TEST_F(TrainServerProcessTest, MissingProgramIsUnavailable) {
  EXPECT_THROW_MSG(ServerProcess((dir_ / "no_such_tessera").string(), "{}", "ps", 0), UnavailableError,
                   "could not start");
}

TEST_F(TrainServerProcessTest, InvalidTimeout) {
  ServerProcessOptions options;
  options.start_timeout = 0ms;
  EXPECT_THROW_MSG(ServerProcess(script(kReady), "{}", "ps", 0, options), InvalidArgumentError, "start_timeout");
}

// A task that logs much more than a pipe holds still comes up: its stderr is drained as it comes.
TEST_F(TrainServerProcessTest, ChattyStderrDoesNotBlockAndKeepsATail) {
  ServerProcessOptions options;
  options.forward_stderr = false;
  options.start_timeout = 20s;
  ServerProcess task(script(std::string("i=0\nwhile [ $i -lt 4000 ]; do echo \"log line $i with some padding to make it long enough\" >&2; "
                                        "i=$((i+1)); done\n") + kReady + "\nexec sleep 30"),
                     "{}", "ps", 0, options);
  EXPECT_TRUE(testing::wait_until([&] { return task.stderr_tail().find("log line 3999 ") != std::string::npos; }, 5s));
  EXPECT_LE(task.stderr_tail().size(), 4096u);
}

TEST_F(TrainServerProcessTest, DestructorAndMoveAssignmentKillAndReap) {
  const std::string body = std::string(kReady) + "\nexec sleep 30";
  int first_pid = 0;
  {
    ServerProcess task(script(body), "{}", "ps", 0);
    first_pid = task.pid();
    ServerProcess moved(std::move(task));
    EXPECT_EQ(moved.pid(), first_pid);
    EXPECT_EQ(task.pid(), -1);  // NOLINT(bugprone-use-after-move): moved-from is inert
    EXPECT_FALSE(task.running());
    EXPECT_FALSE(task.wait(1ms));
    task.kill(SIGKILL);
    EXPECT_EQ(task.target(), "");

    ServerProcess other(script(body), "{}", "ps", 1);
    const int other_pid = other.pid();
    other = std::move(moved);  // kills and reaps `other`'s child
    EXPECT_EQ(other.pid(), first_pid);
    EXPECT_EQ(::kill(other_pid, 0), -1);
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_EQ(::kill(first_pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

// A launcher that dies without destroying its ServerProcess (kill -9 here; a crash or an abort
// alike) leaves no task behind: the task sees its parent gone (--exit-with-parent) and stops
// within the bound. The test is the launcher's subreaper, so the orphaned task becomes its child
// and is reaped here.
TEST(ServerProcessParentTest, ATaskWhoseLauncherDiesStopsByItself) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0) << std::strerror(errno);
  struct NoLongerSubreaper {
    ~NoLongerSubreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } restore;
  internal::ChildProcess launcher(
      {"/proc/self/exe", "--gtest_also_run_disabled_tests", "--gtest_filter=ServerProcessParentTest.DISABLED_Launcher"});
  pid_t task = -1;
  for (auto until = std::chrono::steady_clock::now() + 60s; task < 0 && std::chrono::steady_clock::now() < until;) {
    std::optional<std::string> line = launcher.read_line(60s);
    if (!line) break;
    const std::string marker = "launcher: task pid ";
    if (line->rfind(marker, 0) == 0) task = static_cast<pid_t>(std::stoi(line->substr(marker.size())));
  }
  ASSERT_GT(task, 0) << "the launcher did not start its task";
  launcher.signal(SIGKILL);
  ASSERT_TRUE(launcher.wait_exit(10s).has_value());
  int status = 0;
  pid_t reaped = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while ((reaped = ::waitpid(task, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  if (reaped == 0) {  // the test fails; the task goes all the same
    ::kill(task, SIGKILL);
    ::waitpid(task, &status, 0);
  }
  ASSERT_EQ(reaped, task) << "the task outlived its launcher by 10 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;  // stopped as on SIGTERM
}

// Run by the test above as a process of its own: starts a task and never lets go of it.
TEST(ServerProcessParentTest, DISABLED_Launcher) {
  const std::string cluster = "{\"worker\": [\"" + free_loopback_address() + "\"]}";
  auto* task = new ServerProcess(TESSERA_CLI_PATH, cluster, "worker", 0);  // never destroyed
  std::printf("launcher: task pid %d\n", task->pid());
  std::fflush(stdout);
  std::this_thread::sleep_for(60s);  // killed long before
}

TEST(FreeLoopbackPortTest, GivesAPortAndAnAddress) {
  const int port = free_loopback_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  const std::string address = free_loopback_address();
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_GT(std::stoi(address.substr(10)), 0);
}

}  // namespace
}  // namespace tessera::train
