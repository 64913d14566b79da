#include "host/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

extern char** environ;

namespace tessera::internal {

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& env,
                           bool capture_stderr) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    ::close(out[0]);
    ::close(out[1]);
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (capture_stderr) posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  // The child starts with default signal dispositions and nothing blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (rc != 0) {
    error_ = "posix_spawn " + args[0] + ": " + std::strerror(rc);
    pid_ = -1;
  }
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait_exit(std::chrono::seconds(10));
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void ChildProcess::signal(int signo) {
  if (running()) ::kill(pid_, signo);
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  for (;;) {
    const size_t nl = out_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_.substr(0, nl);
      out_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0 || !read_some(out_fd_, &out_, left)) return std::nullopt;
  }
}

std::string ChildProcess::rest_of_stdout(std::chrono::milliseconds limit) { return drain(out_fd_, &out_, limit); }

std::string ChildProcess::stderr_text(std::chrono::milliseconds limit) { return drain(err_fd_, &err_, limit); }

int ChildProcess::release_stderr_fd() { return std::exchange(err_fd_, -1); }

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds limit) {
  if (pid_ <= 0) return std::nullopt;
  const auto until = Clock::now() + limit;
  while (!exit_status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_status_ = status;
    } else if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return std::nullopt;
    } else if (Clock::now() >= until) {
      return std::nullopt;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return exit_status_;
}

bool ChildProcess::read_some(int fd, std::string* into, std::chrono::milliseconds limit) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  int n = ::poll(&p, 1, static_cast<int>(limit.count()));
  if (n <= 0) return false;
  char buf[4096];
  ssize_t got = ::read(fd, buf, sizeof buf);
  if (got <= 0) return false;
  into->append(buf, static_cast<size_t>(got));
  return true;
}

std::string ChildProcess::drain(int fd, std::string* buffer, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0 || !read_some(fd, buffer, left)) break;
  }
  return std::exchange(*buffer, std::string());
}

}  // namespace tessera::internal
