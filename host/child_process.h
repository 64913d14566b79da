// A child process with its stdout and stderr on pipes: what train::ServerProcess
// (include/tessera/server_process.h) starts `tessera server` tasks with, and what the multi-process
// tests use directly. The destructor SIGKILLs and reaps a child still running, so no path leaves one
// behind. Every wait is bounded.
//
//   tessera::internal::ChildProcess ps({"/path/to/tessera", "server", "--cluster", json, "--job", "ps", "--task", "0"});
//   std::optional<std::string> line = ps.read_line(10s);   // "tessera server: ... listening on ..."
//   ps.signal(SIGTERM);
//   ps.wait_exit(5s);
//
// Not thread-safe: one thread drives a ChildProcess (release_stderr_fd() hands the stderr pipe to
// another reader).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tessera::internal {

class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts args[0] with `args` and environment `env` (this process's when empty). error() says
  // why when it could not start. Without `capture_stderr`, the child writes to this process's
  // stderr (a child that logs a lot must not block on a pipe nobody reads).
  explicit ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                        bool capture_stderr = true);
  ~ChildProcess();  // SIGKILL and reap (waits up to 10 s) when still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_status_; }
  void signal(int signo);

  // The next line of stdout, or nullopt at end of file or after `limit`.
  std::optional<std::string> read_line(std::chrono::milliseconds limit);
  // All of stdout (after what read_line returned) and stderr, up to end of file or `limit`.
  std::string rest_of_stdout(std::chrono::milliseconds limit = std::chrono::seconds(2));
  std::string stderr_text(std::chrono::milliseconds limit = std::chrono::seconds(2));
  // Hands the read end of the stderr pipe to the caller, who reads it (from any thread) and closes
  // it; stderr_text() returns what was read before, then nothing. -1 when already handed over.
  int release_stderr_fd();

  // The wait status once the child exited within `limit`.
  std::optional<int> wait_exit(std::chrono::milliseconds limit);

 private:
  // Appends what `fd` has within `limit`; false at end of file, error or timeout.
  static bool read_some(int fd, std::string* into, std::chrono::milliseconds limit);
  static std::string drain(int fd, std::string* buffer, std::chrono::milliseconds limit);

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  std::optional<int> exit_status_;
  std::string error_;
};

}  // namespace tessera::internal
