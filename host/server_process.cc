// train::ServerProcess: a `tessera server` task as a child process (host/child_process.h), and free
// loopback ports for such tasks. In host/ with ChildProcess: process and socket plumbing of this
// machine, nothing of transport/ (the task's own serving is train::Server, transport/server.cc).
// It relies on the command line's ready line ("tessera server: /job:J/task:N listening on TARGET",
// tools/tessera_main.cc).
#include "tessera/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "host/child_process.h"
#include "tessera/errors.h"

namespace tessera::train {

namespace {

using namespace std::chrono_literals;

constexpr std::size_t kStderrTailBytes = 4096;
constexpr std::string_view kReadyMarker = " listening on ";

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to forward to: the tail still has it
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

}  // namespace

// The child, and the thread that drains its stderr into a bounded tail (forwarding it when asked),
// so that a task that logs a lot never blocks on a full pipe and a failure can quote what it said.
class ServerProcess::Impl {
 public:
  Impl(const std::vector<std::string>& args, const std::vector<std::string>& env, bool forward_stderr)
      : child_(std::make_unique<internal::ChildProcess>(args, env, /*capture_stderr=*/true)),
        forward_stderr_(forward_stderr) {
    err_fd_ = child_->release_stderr_fd();
    if (child_->error().empty() && err_fd_ >= 0) {
      pump_ = std::thread([this] { pump(); });
    } else {
      eof_ = true;
    }
  }
  ~Impl() {
    child_.reset();  // SIGKILL and reap when still running: the pipe's write end closes with it
    stop_.store(true);
    if (pump_.joinable()) pump_.join();
    if (err_fd_ >= 0) ::close(err_fd_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  internal::ChildProcess& child() { return *child_; }
  const internal::ChildProcess& child() const { return *child_; }

  std::string tail() const {
    std::lock_guard<std::mutex> l(mu_);
    return tail_;
  }
  // The tail once the child's stderr reached end of file, or after `limit`.
  std::string final_tail(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, limit, [this] { return eof_; });
    return tail_;
  }

  std::string ready_line;

 private:
  void pump() {
    // A closed stderr of ours must not kill this process with SIGPIPE (the child, writing there
    // itself, would only have killed itself): blocked here, such a write fails with EPIPE instead.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    char buf[4096];
    while (!stop_.load()) {
      pollfd p{err_fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, 100);  // wakes to look at stop_, in case the pipe never closes
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (n == 0) continue;
      const ssize_t got = ::read(err_fd_, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      const auto size = static_cast<std::size_t>(got);
      if (forward_stderr_) write_all(STDERR_FILENO, buf, size);
      std::lock_guard<std::mutex> l(mu_);
      tail_.append(buf, size);
      if (tail_.size() > kStderrTailBytes) tail_.erase(0, tail_.size() - kStderrTailBytes);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      eof_ = true;
    }
    cv_.notify_all();
  }

  std::unique_ptr<internal::ChildProcess> child_;
  const bool forward_stderr_;
  int err_fd_ = -1;  // the read end of the child's stderr; only pump() reads it
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string tail_;  // GUARDED_BY(mu_)
  bool eof_ = false;  // GUARDED_BY(mu_)
  std::thread pump_;
};

ServerProcess::ServerProcess(std::string tessera_binary, std::string cluster, std::string job_name, int task_index,
                             ServerProcessOptions options) {
  if (options.start_timeout.count() <= 0) {
    throw InvalidArgumentError(
        fmt::format("ServerProcessOptions::start_timeout must be > 0, got {} ms", options.start_timeout.count()));
  }
  const std::string task = fmt::format("/job:{}/task:{}", job_name, task_index);
  std::vector<std::string> args = {tessera_binary, "server", "--cluster", std::move(cluster), "--job",
                                   std::move(job_name), "--task", std::to_string(task_index)};
  args.insert(args.end(), options.args.begin(), options.args.end());
  // The task stops by itself if this process dies without destroying this object (a crash, an
  // abort, kill -9), instead of living on with nobody to stop it.
  args.insert(args.end(), {"--exit-with-parent", std::to_string(::getpid())});
  auto impl = std::make_unique<Impl>(args, options.env, options.forward_stderr);
  internal::ChildProcess& child = impl->child();
  if (!child.error().empty()) {
    throw UnavailableError(fmt::format("tessera server {}: could not start {}: {}", task, tessera_binary, child.error()));
  }
  // Why it did not come up, with the end of what it wrote on stderr (once that is complete).
  auto failure = [&](const std::string& what) {
    std::string tail = impl->final_tail(1s);
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    return fmt::format("tessera server {} (pid {}) {}{}", task, child.pid(), what,
                       tail.empty() ? std::string("; nothing on its stderr") : "; its stderr ends:\n" + tail);
  };
  const auto started = internal::ChildProcess::Clock::now();
  std::optional<std::string> line = child.read_line(options.start_timeout);
  if (line && line->find(kReadyMarker) != std::string::npos) {
    impl->ready_line = std::move(*line);
    impl_ = std::move(impl);
    return;
  }
  if (line) {
    child.signal(SIGKILL);
    child.wait_exit(10s);
    throw UnavailableError(failure(fmt::format("printed \"{}\" instead of its ready line", *line)));
  }
  // The deadline (read_line gives up with less than a millisecond left), or the end of its stdout
  // (it exited, or is exiting: give it a second to be reaped).
  const bool late = internal::ChildProcess::Clock::now() + 1ms >= started + options.start_timeout;
  if (auto status = child.wait_exit(late ? 0ms : 1000ms)) {
    throw UnavailableError(failure(describe_wait_status(*status) + " before it was ready"));
  }
  child.signal(SIGKILL);
  child.wait_exit(10s);
  if (late) {
    throw DeadlineExceededError(failure(
        fmt::format("did not print its ready line within {} ms: killed", options.start_timeout.count())));
  }
  throw UnavailableError(failure("stopped writing to its stdout before it was ready: killed"));
}

ServerProcess::~ServerProcess() = default;
ServerProcess::ServerProcess(ServerProcess&&) noexcept = default;
ServerProcess& ServerProcess::operator=(ServerProcess&&) noexcept = default;

const std::string& ServerProcess::ready_line() const {
  static const std::string kNone;
  return impl_ ? impl_->ready_line : kNone;
}

std::string ServerProcess::target() const {
  const std::string& line = ready_line();
  const std::size_t at = line.find(kReadyMarker);
  if (at == std::string::npos) return "";
  const std::size_t begin = at + kReadyMarker.size();
  return line.substr(begin, line.find(' ', begin) - begin);
}

int ServerProcess::pid() const { return impl_ ? static_cast<int>(impl_->child().pid()) : -1; }

bool ServerProcess::running() const { return impl_ && impl_->child().running(); }

void ServerProcess::kill(int signo) {
  if (impl_) impl_->child().signal(signo);
}

std::optional<int> ServerProcess::wait(std::chrono::milliseconds timeout) {
  if (!impl_) return std::nullopt;
  return impl_->child().wait_exit(timeout);
}

std::string ServerProcess::stderr_tail() const { return impl_ ? impl_->tail() : std::string(); }

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw UnavailableError(fmt::format("no free loopback port: socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  std::string error;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = fmt::format("bind 127.0.0.1:0: {}", std::strerror(errno));
  } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    error = fmt::format("getsockname: {}", std::strerror(errno));
  } else {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port == 0) throw UnavailableError("no free loopback port: " + error);
  return port;
}

std::string free_loopback_address() { return "127.0.0.1:" + std::to_string(free_loopback_port()); }

}  // namespace tessera::train
