// Workload transport: tensor transfer between two processes on loopback, tessera's RPC path against
// plain cppzmq (see transfer_bench.h, tessera.cc, raw_zmq.cc).
//
//   BM_transfer_{64B,4KiB,1MiB,16MiB,64MiB}/{tessera,raw_zmq,tessera_queue}
//                                                              bytes_per_second, kWindow in flight
//   BM_rtt_{64B,4KiB,1MiB,16MiB,64MiB}/{tessera,raw_zmq}        real time per echo round trip
//   BM_{transfer,rtt}_{64B,4KiB}/tessera_busy_poll               both ends busy-polling
//   BM_transfer_{64B,4KiB}/tessera_pool                          completions handed to the pool
//   BM_transfer_{64B,4KiB}/tessera_io_thread                     continuations on the I/O thread
//   BM_transfer_{64B,4KiB}/tessera_owned                         a socket the pulling thread owns
//   BM_transfer_{64B,4KiB}/tessera_pool_busy_poll                the same, both ends busy-polling
//
// The benchmarks are registered here rather than with BENCHMARK_CAPTURE so that the impls alternate
// (tessera, raw_zmq, tessera, ...) whatever order the linker gives the two files' initializers.
// Each has its own small MinTime, which --benchmark_min_time does not override, so the whole
// binary stays under a minute on a 2-core machine; --min_time_floor=S raises every one to S.
//
// The peer. The first benchmark that needs it re-executes this binary (/proc/self/exe
// --transport-peer --parent=PID): the child starts two RpcServers (one busy-polling) and a plain
// ROUTER on 127.0.0.1 with ephemeral ports, prints "tessera=ENDPOINT\ntessera_busy_poll=ENDPOINT\n
// raw=ENDPOINT\nready\n" on its stdout (a pipe), then reads its stdin (another pipe) until EOF and
// exits. The child never outlives the parent:
//   * stop_peer() (end of main, and atexit) closes the stdin pipe, waits up to 3 s for the child to
//     exit, then SIGKILLs it, and reaps it;
//   * if the parent dies without that (a crash, a signal), the kernel closes the pipe anyway, and
//     PR_SET_PDEATHSIG delivers SIGKILL to the child.
// Every wait is bounded: the handshake (20 s), the reaping (3 s, then SIGKILL), each call and
// receive (kDeadline).
//
// Between network namespaces (benchmarks/transport/netns_transfer): with TRANSPORT_BENCH_PEER_NETNS
// set, the peer starts as `ip netns exec NS /proc/self/exe ...` (ip execs in place: same pid, same
// parent), and binds TRANSPORT_BENCH_PEER_HOST, an address in that namespace.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "transport/transfer_bench.h"

extern char** environ;

namespace transport_bench {
namespace {

constexpr std::string_view kPeerFlag = "--transport-peer";
constexpr std::string_view kParentFlag = "--parent=";
constexpr auto kHandshakeTimeout = std::chrono::seconds(20);
constexpr auto kExitGrace = std::chrono::seconds(3);

struct PeerProcess {
  bool tried = false;
  pid_t pid = -1;
  int to_child = -1;  // the child's stdin; closing it tells the child to exit
  PeerEndpoints endpoints;
  std::string error;
};

PeerProcess& the_peer() {
  static PeerProcess* const p = new PeerProcess();  // leaked: stop_peer may run from atexit
  return *p;
}

// Reads from `fd` until the text holds "ready\n", EOF, or `timeout`. True on "ready\n".
bool read_handshake(int fd, std::string* text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (text->find("ready\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // EOF: the child died
    text->append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

// The value of "name=value" on its own line of `text`, "" if absent.
std::string field(const std::string& text, const std::string& name) {
  const std::string key = name + "=";
  std::size_t at = text.rfind("\n" + key);
  at = at == std::string::npos ? (text.rfind(key, 0) == 0 ? 0 : std::string::npos) : at + 1;
  if (at == std::string::npos) return "";
  const std::size_t begin = at + key.size();
  return text.substr(begin, text.find('\n', begin) - begin);
}

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// The child: both servers, the handshake, then wait for EOF on stdin.
int run_peer(int argc, char** argv) {
  pid_t parent = -1;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.substr(0, kParentFlag.size()) == kParentFlag) parent = std::atoi(a.substr(kParentFlag.size()).data());
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent <= 0 || ::getppid() != parent) _exit(1);  // the parent died before prctl took effect
  ::signal(SIGPIPE, SIG_IGN);
  const std::string tessera = start_tessera_peer(false);
  const std::string tessera_busy_poll = start_tessera_peer(true);
  const std::string raw = start_raw_peer();
  if (tessera.empty() || tessera_busy_poll.empty() || raw.empty()) _exit(1);
  std::printf("tessera=%s\ntessera_busy_poll=%s\nraw=%s\nready\n", tessera.c_str(), tessera_busy_poll.c_str(),
              raw.c_str());
  std::fflush(stdout);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);  // the parent stops reading the pipe after the handshake
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    break;  // EOF (or an error): the parent is done or gone
  }
  _exit(0);  // the servers' threads are not joined: nothing of theirs needs to outlive the process
}

// The busy-polling server and the pool's hand-off are measured where they matter, on small
// messages (4 KiB and less): a wake-up is most of their cost.
constexpr std::size_t kBusyPollMaxBytes = 4096;

// `floor` (seconds, 0 for none): every benchmark runs at least that long per repetition.
void register_benchmarks(double floor) {
  for (const Size& s : kSizes) {
    for (auto [impl, fn] : {std::pair{"tessera", &tessera_transfer}, std::pair{"raw_zmq", &raw_transfer},
                            std::pair{"tessera_queue", &tessera_queue_transfer},
                            std::pair{"tessera_pool", &tessera_pool_transfer},
                            std::pair{"tessera_owned", &tessera_owned_transfer},
                            std::pair{"tessera_io_thread", &tessera_io_thread_transfer},
                            std::pair{"raw_zmq_streamed", &raw_streamed_transfer},
                            std::pair{"tessera_busy_poll", &tessera_busy_poll_transfer},
                            std::pair{"tessera_pool_busy_poll", &tessera_pool_busy_poll_transfer}}) {
      if (fn == &raw_streamed_transfer && s.bytes < kStreamedMinBytes) continue;
      if ((fn == &tessera_busy_poll_transfer || fn == &tessera_pool_transfer || fn == &tessera_pool_busy_poll_transfer ||
           fn == &tessera_owned_transfer || fn == &tessera_io_thread_transfer) &&
          s.bytes > kBusyPollMaxBytes) {
        continue;
      }
      benchmark::RegisterBenchmark((std::string("BM_transfer_") + s.name + "/" + impl).c_str(), fn, s)
          ->UseRealTime()
          ->MinTime(std::max(0.2, floor))
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const Size& s : kSizes) {
    for (auto [impl, fn] : {std::pair{"tessera", &tessera_rtt}, std::pair{"raw_zmq", &raw_rtt},
                            std::pair{"tessera_busy_poll", &tessera_busy_poll_rtt}}) {
      if (fn == &tessera_busy_poll_rtt && s.bytes > kBusyPollMaxBytes) continue;
      benchmark::RegisterBenchmark((std::string("BM_rtt_") + s.name + "/" + impl).c_str(), fn, s)
          ->UseRealTime()
          ->MinTime(std::max(s.bytes >= (std::size_t{16} << 20) ? 0.2 : 0.1, floor))
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

const PeerEndpoints* peer() {
  PeerProcess& p = the_peer();
  if (p.tried) {
    if (p.pid <= 0) return nullptr;
    // A peer that died (killed, crashed) fails the remaining benchmarks at once instead of each
    // waiting for its deadline.
    int status = 0;
    if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
      p.error = "the peer process exited (" +
                (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                     : "status " + std::to_string(WEXITSTATUS(status))) +
                ")";
      p.pid = -1;
      close_fd(&p.to_child);
      return nullptr;
    }
    return &p.endpoints;
  }
  p.tried = true;
  int in[2], out[2];  // in: parent -> child stdin; out: child stdout -> parent
  if (::pipe2(in, O_CLOEXEC) != 0) {
    p.error = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  if (::pipe2(out, O_CLOEXEC) != 0) {
    p.error = std::string("pipe: ") + std::strerror(errno);
    ::close(in[0]);
    ::close(in[1]);
    return nullptr;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);  // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::string self = "/proc/self/exe";
  std::string flag(kPeerFlag);
  std::string parent = std::string(kParentFlag) + std::to_string(::getpid());
  std::vector<std::string> args = {self, flag, parent};
  if (const char* ns = std::getenv("TRANSPORT_BENCH_PEER_NETNS"); ns != nullptr && *ns != '\0') {
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    args = {"/usr/sbin/ip", "netns", "exec", ns, std::string(exe, n > 0 ? static_cast<std::size_t>(n) : 0), flag,
            parent};
    if (const char* ip = std::getenv("TRANSPORT_BENCH_IP"); ip != nullptr && *ip != '\0') args[0] = ip;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    p.error = "posix_spawn " + args[0] + ": " + std::strerror(rc);
    ::close(in[1]);
    ::close(out[0]);
    return nullptr;
  }
  p.pid = pid;
  p.to_child = in[1];
  std::atexit(stop_peer);
  std::string text;
  const bool ready = read_handshake(out[0], &text, kHandshakeTimeout);
  ::close(out[0]);
  p.endpoints.tessera = field(text, "tessera");
  p.endpoints.tessera_busy_poll = field(text, "tessera_busy_poll");
  p.endpoints.raw = field(text, "raw");
  if (!ready || p.endpoints.tessera.empty() || p.endpoints.tessera_busy_poll.empty() || p.endpoints.raw.empty()) {
    p.error = "the peer process did not complete its handshake within " +
              std::to_string(kHandshakeTimeout.count()) + " s (got '" + text + "')";
    stop_peer();
    return nullptr;
  }
  return &p.endpoints;
}

const std::string& peer_error() { return the_peer().error; }

std::string peer_host() {
  const char* host = std::getenv("TRANSPORT_BENCH_PEER_HOST");
  return host != nullptr && *host != '\0' ? host : "127.0.0.1";
}

void stop_peer() {
  PeerProcess& p = the_peer();
  close_fd(&p.to_child);
  if (p.pid <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + kExitGrace;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid || (r < 0 && errno != EINTR)) break;  // exited (or not our child any more)
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(p.pid, SIGKILL);
      while (::waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  p.pid = -1;
}

}  // namespace transport_bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == transport_bench::kPeerFlag) {
    return transport_bench::run_peer(argc, argv);
  }
  // --min_time_floor=S: no benchmark runs shorter than S seconds per repetition (the suite's full
  // run passes its --benchmark_min_time; the defaults keep the binary under a minute).
  double floor = 0;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    constexpr std::string_view kFloor = "--min_time_floor=";
    if (std::string_view a = argv[i]; a.substr(0, kFloor.size()) == kFloor) {
      char* end = nullptr;
      floor = std::strtod(argv[i] + kFloor.size(), &end);
      if (end == argv[i] + kFloor.size() || *end != '\0' || !(floor >= 0 && floor <= 60)) {
        std::fprintf(stderr, "bad %s (seconds, 0 to 60)\n", argv[i]);
        return 1;
      }
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  transport_bench::register_benchmarks(floor);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  transport_bench::stop_peer();
  // The peer's endpoints were ephemeral; a failed start was reported by each benchmark it skipped.
  return 0;
}
