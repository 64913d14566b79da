// A cluster task in a process of its own: a `tessera server` child started and stopped by the
// program that drives the cluster (the demo's parameter-server training, the cluster benchmarks,
// the multi-process tests), plus free loopback addresses to give such tasks (tessera::train).
//
//   std::vector<std::string> addresses = {train::free_loopback_address(), train::free_loopback_address()};
//   std::string cluster = train::ClusterSpec({{"ps", {addresses[0]}}, {"worker", {addresses[1]}}}).to_json();
//   train::ServerProcess ps("/usr/bin/tessera", cluster, "ps", 0);   // returns once it listens
//   train::ServerProcess w0("/usr/bin/tessera", cluster, "worker", 0);
//   Session s(g, w0.target());                          // "tessera://127.0.0.1:40125"
//   ...
//   ps.kill(SIGTERM);
//   ps.wait(std::chrono::seconds(5));                   // its wait status; nullopt if still running
//
// A ClusterSpec lists every task's address before any task starts, so the ports are picked in
// advance: free_loopback_port() finds one that was free a moment ago, and another process may take
// it before the task binds it. The task then exits before it is ready (UnavailableError, with its
// stderr): pick new addresses and start the cluster again.
//
// A ServerProcess is move-only (a moved-from one is inert: pid() is -1, kill() and wait() do
// nothing). Not thread-safe: one thread drives a ServerProcess (a thread of its own reads the
// child's stderr).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::train {

struct ServerProcessOptions {
  // More arguments after `--task N`, e.g. {"--keys", "w0.key", "--cluster-keys", "cluster.keys"}.
  std::vector<std::string> args;
  // The child's environment, "NAME=value" each; empty: this process's.
  std::vector<std::string> env;
  // How long the task has to print its ready line. Must be > 0.
  std::chrono::milliseconds start_timeout{60000};
  // Copy the child's stderr (its log: warnings, a log_device_placement table of a master) to this
  // process's stderr as it comes. Either way the last few KiB are kept for error messages.
  bool forward_stderr = true;
};

class ServerProcess {
 public:
  // Runs `tessera_binary server --cluster CLUSTER --job JOB_NAME --task TASK_INDEX [options.args]
  // --exit-with-parent PID` (`cluster` a file or JSON text, as the command line takes it; PID this
  // process's: the task stops by itself within about 0.1 s once this process is gone, even when it
  // dies without destroying this object) and waits for the line the task
  // prints once it listens ("tessera server: /job:ps/task:0 listening on tessera://HOST:PORT"),
  // at most options.start_timeout. UnavailableError when the program cannot be started, or the task
  // exits or prints another line first (a port taken, a bad flag); DeadlineExceededError when it
  // prints nothing in time (the child is then killed). Their messages name the task and end with
  // the tail of its stderr. InvalidArgumentError for a start_timeout <= 0.
  ServerProcess(std::string tessera_binary, std::string cluster, std::string job_name, int task_index,
                ServerProcessOptions options = {});
  ~ServerProcess();  // SIGKILL if still running, then reaps it (waits up to 10 s)
  ServerProcess(ServerProcess&&) noexcept;
  ServerProcess& operator=(ServerProcess&&) noexcept;  // kills and reaps the process assigned over
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // The ready line, without its newline.
  const std::string& ready_line() const;
  // The target the task reports in its ready line ("tessera://HOST:PORT"): Session(graph, target).
  std::string target() const;
  // The child's process id (-1 when moved from).
  int pid() const;
  // True until wait() has seen the child exit.
  bool running() const;
  // Sends `signo` (SIGTERM: the task stops cleanly; SIGKILL; SIGSTOP, ...) while running.
  void kill(int signo);
  // The wait status (as waitpid gives it: WIFEXITED, WEXITSTATUS, WTERMSIG) once the child has
  // exited within `timeout`; nullopt while it is still running after that.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // The last few KiB the child wrote to stderr so far.
  std::string stderr_tail() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A TCP port on 127.0.0.1 that was free when asked (the operating system's pick). UnavailableError
// when none can be had (no loopback interface).
int free_loopback_port();
// "127.0.0.1:PORT" with a port from free_loopback_port().
std::string free_loopback_address();

}  // namespace tessera::train
