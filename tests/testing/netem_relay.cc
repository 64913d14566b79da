// tessera_netem_relay: a userspace netem for kernels without sch_netem. It joins pairs of TAP
// devices, each in a network namespace of its own, and carries Ethernet frames between them with
// a constant delay and a random loss per direction -- what `tc qdisc ... netem delay T loss P%`
// does on an interface's egress. Test and benchmark infrastructure (NetworkLab in
// tests/testing/netns.h, benchmarks/transport/netns_transfer), not part of the library.
//
//   tessera_netem_relay [--seed N] [--control PATH] [--netem SPEC] NS1:IF1=NS2:IF2 ...
//
// Each link: for each end, setns() into /run/netns/NS and make the TAP IF there (IFF_TAP |
// IFF_NO_PI: frames of at most the MTU); the device lives as long as this process holds its fd, so
// the relay dying removes its links. Once every TAP exists it prints `ready` (one line) on stdout
// and relays; the caller then gives the TAPs addresses, masters and `up` with `ip`. The process
// itself goes back to the namespace it started in.
//
// Per direction (1: frames the NS1 end sends, towards NS2; 2: the reverse): loss drops a frame
// before it is queued, with a PRNG seeded by --seed (default: the clock; printed on stderr); delay
// holds it in a FIFO until it is due; at most 1000 frames wait per direction (netem's default
// limit; more are dropped). Delay 0 and loss 0: frames pass at once. A frame whose write fails
// (its TAP is down: EIO) is dropped, as a cable pulled out would. --netem SPEC (tests/testing/
// netem_spec.h) sets both directions of every link at start.
//
// Control: a Unix datagram socket bound at PATH (pathname sockets reach across network
// namespaces; abstract ones do not). A client binds a pathname socket of its own, sends one
// request per datagram and gets one answer to that address, `ok ...` or `error <why>`:
//   set <link> <direction 1|2> <delay-ns> <loss-ppm>   (links numbered from 0 as given)
//   clear <link>                                       (both directions: no delay, no loss)
//   stats <link>   -> ok <passed> <lost> <overflowed> <failed> for direction 1, then for 2
//
// One thread: ppoll over every TAP, the control socket and stdin, its timeout the time to the next
// due frame. Exits (status 0) on SIGTERM or SIGINT, or when stdin reaches end of file (whoever
// started it is gone), and dies with its parent (PR_SET_PDEATHSIG). So its throughput is bounded
// by one core's read()/write() per frame; netns.h says the figure measured.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/netem_spec.h"

namespace {

constexpr std::size_t kQueueLimit = 1000;  // netem's default `limit`
constexpr int kBurst = 256;                // frames read from one TAP before the others get a turn

volatile sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tessera_netem_relay: %s\n", what.c_str());
  std::exit(1);
}

struct Frame {
  std::int64_t due_ns;
  std::vector<unsigned char> bytes;
};

struct Direction {
  std::int64_t delay_ns = 0;
  std::uint32_t loss_ppm = 0;
  std::deque<Frame> queue;
  std::uint64_t passed = 0, lost = 0, overflowed = 0, failed = 0;
};

struct Link {
  std::string spec;
  int fd[2] = {-1, -1};  // the NS1 end, the NS2 end
  Direction dir[2];      // dir[0]: read from fd[0], written to fd[1]; dir[1] the reverse
};

// Makes TAP `ifname` in namespace `ns` (entered for the purpose); its fd, non-blocking.
int make_tap(const std::string& ns, const std::string& ifname) {
  const int nsfd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die("no network namespace /run/netns/" + ns + ": " + std::strerror(errno));
  if (::setns(nsfd, CLONE_NEWNET) != 0) die("setns into " + ns + ": " + std::strerror(errno));
  ::close(nsfd);
  // The TAP is made in the namespace current when /dev/net/tun is opened.
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die(std::string("cannot open /dev/net/tun: ") + std::strerror(errno));
  struct ifreq ifr {};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) die("bad interface name '" + ifname + "'");
  std::memcpy(ifr.ifr_name, ifname.c_str(), ifname.size());
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF " + ns + ":" + ifname + ": " + std::strerror(errno));
  return fd;
}

class Relay {
 public:
  Relay(std::vector<Link> links, std::uint64_t seed, int control_fd)
      : links_(std::move(links)), rng_(seed), control_fd_(control_fd) {}

  void set_all(const tessera::testing::NetemImpairment& imp) {
    for (auto& l : links_) {
      for (auto& d : l.dir) d.delay_ns = imp.delay_ns, d.loss_ppm = imp.loss_ppm;
    }
  }

  void run() {
    std::vector<pollfd> fds;
    for (auto& l : links_) {
      fds.push_back({l.fd[0], POLLIN, 0});
      fds.push_back({l.fd[1], POLLIN, 0});
    }
    const std::size_t control_at = fds.size();
    if (control_fd_ >= 0) fds.push_back({control_fd_, POLLIN, 0});
    const std::size_t stdin_at = fds.size();
    fds.push_back({STDIN_FILENO, POLLIN, 0});
    sigset_t unblocked;
    sigemptyset(&unblocked);
    while (!stop_requested) {
      const std::int64_t next = flush_due();
      timespec timeout{}, *timeout_ptr = nullptr;
      if (next >= 0) {
        timeout.tv_sec = next / 1000000000;
        timeout.tv_nsec = next % 1000000000;
        timeout_ptr = &timeout;
      }
      for (auto& p : fds) p.revents = 0;
      const int n = ::ppoll(fds.data(), fds.size(), timeout_ptr, &unblocked);
      if (n < 0) {
        if (errno == EINTR) continue;
        die(std::string("ppoll: ") + std::strerror(errno));
      }
      for (std::size_t i = 0; i < links_.size(); ++i) {
        for (int end = 0; end < 2; ++end) {
          const short ev = fds[2 * i + end].revents;
          if (ev & (POLLERR | POLLNVAL)) die("TAP " + links_[i].spec + " failed");
          if (ev & POLLIN) read_frames(links_[i], end);
        }
      }
      if (control_fd_ >= 0 && (fds[control_at].revents & POLLIN)) serve_control();
      if (fds[stdin_at].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[256];
        const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) break;  // the parent is gone
      }
    }
  }

  void print_totals() const {
    for (const auto& l : links_) {
      std::fprintf(stderr, "tessera_netem_relay: %s: 1: %llu passed, %llu lost, %llu overflowed, %llu failed; "
                   "2: %llu passed, %llu lost, %llu overflowed, %llu failed\n", l.spec.c_str(),
                   (unsigned long long)l.dir[0].passed, (unsigned long long)l.dir[0].lost,
                   (unsigned long long)l.dir[0].overflowed, (unsigned long long)l.dir[0].failed,
                   (unsigned long long)l.dir[1].passed, (unsigned long long)l.dir[1].lost,
                   (unsigned long long)l.dir[1].overflowed, (unsigned long long)l.dir[1].failed);
    }
  }

 private:
  // Writes every frame that is due; nanoseconds to the next one, or -1 when none waits.
  std::int64_t flush_due() {
    std::int64_t next = -1;
    const std::int64_t now = now_ns();
    for (auto& l : links_) {
      for (int d = 0; d < 2; ++d) {
        Direction& dir = l.dir[d];
        while (!dir.queue.empty() && dir.queue.front().due_ns <= now) {
          deliver(dir, l.fd[1 - d], dir.queue.front().bytes.data(), dir.queue.front().bytes.size());
          dir.queue.pop_front();
        }
        if (!dir.queue.empty()) {
          const std::int64_t wait = dir.queue.front().due_ns - now;
          if (next < 0 || wait < next) next = wait;
        }
      }
    }
    return next;
  }

  static void deliver(Direction& dir, int fd, const unsigned char* bytes, std::size_t size) {
    if (::write(fd, bytes, size) == static_cast<ssize_t>(size)) {
      ++dir.passed;
    } else {
      ++dir.failed;  // the TAP is down (EIO) or its queue is full: the frame is lost on the wire
    }
  }

  void read_frames(Link& l, int end) {
    Direction& dir = l.dir[end];
    const int out = l.fd[1 - end];
    for (int i = 0; i < kBurst; ++i) {
      const ssize_t got = ::read(l.fd[end], buffer_.data(), buffer_.size());
      if (got <= 0) return;  // EAGAIN: all read (or a transient error: poll says again)
      if (dir.loss_ppm > 0 && loss_(rng_) < dir.loss_ppm) {
        ++dir.lost;
        continue;
      }
      const std::int64_t now = now_ns();
      if (dir.delay_ns == 0 && dir.queue.empty()) {
        deliver(dir, out, buffer_.data(), static_cast<std::size_t>(got));
        continue;
      }
      if (dir.queue.size() >= kQueueLimit) {
        ++dir.overflowed;
        continue;
      }
      // A delay lowered while frames wait must not let new ones overtake them: FIFO.
      std::int64_t due = now + dir.delay_ns;
      if (!dir.queue.empty() && due < dir.queue.back().due_ns) due = dir.queue.back().due_ns;
      dir.queue.push_back(Frame{due, std::vector<unsigned char>(buffer_.data(), buffer_.data() + got)});
    }
  }

  void serve_control() {
    while (true) {
      char request[512];
      sockaddr_un from{};
      socklen_t from_len = sizeof from;
      const ssize_t got = ::recvfrom(control_fd_, request, sizeof request - 1, 0,
                                     reinterpret_cast<sockaddr*>(&from), &from_len);
      if (got < 0) return;
      request[got] = '\0';
      const std::string answer = handle(request);
      if (from_len > sizeof(sa_family_t)) {
        ::sendto(control_fd_, answer.data(), answer.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), from_len);
      }
    }
  }

  std::string handle(const std::string& request) {
    std::stringstream s(request);
    std::string verb;
    long long link = -1;
    s >> verb >> link;
    if (s.fail() || link < 0 || link >= static_cast<long long>(links_.size())) {
      return "error bad request '" + request + "' (link index 0 to " + std::to_string(links_.size() - 1) + ")";
    }
    Link& l = links_[static_cast<std::size_t>(link)];
    if (verb == "clear") {
      for (auto& d : l.dir) d.delay_ns = 0, d.loss_ppm = 0;
      return "ok";
    }
    if (verb == "stats") {
      std::string out = "ok";
      for (const auto& d : l.dir) {
        for (const auto count : {d.passed, d.lost, d.overflowed, d.failed}) out.append(" ").append(std::to_string(count));
      }
      return out;
    }
    if (verb == "set") {
      long long direction = 0, delay = -1, loss = -1;
      s >> direction >> delay >> loss;
      if (s.fail() || (direction != 1 && direction != 2) || delay < 0 || delay > 60000000000LL || loss < 0 ||
          loss > 1000000) {
        return "error bad request '" + request + "' (set <link> <1|2> <delay-ns 0..60e9> <loss-ppm 0..1e6>)";
      }
      Direction& d = l.dir[direction - 1];
      d.delay_ns = delay;
      d.loss_ppm = static_cast<std::uint32_t>(loss);
      return "ok";
    }
    return "error unknown request '" + request + "' (set, clear, stats)";
  }

  std::vector<Link> links_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<std::uint32_t> loss_{0, 999999};
  int control_fd_;
  std::array<unsigned char, 65536> buffer_{};
};

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::uint64_t seed = static_cast<std::uint64_t>(now_ns());
  std::string control_path, netem;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--seed" || a == "--control" || a == "--netem") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--seed") seed = std::strtoull(v.c_str(), nullptr, 10);
      else if (a == "--control") control_path = v;
      else netem = v;
    } else if (a.rfind("--", 0) == 0) {
      die("usage: tessera_netem_relay [--seed N] [--control PATH] [--netem SPEC] NS1:IF1=NS2:IF2 ...");
    } else {
      specs.push_back(a);
    }
  }
  if (specs.empty()) die("no links given (NS1:IF1=NS2:IF2 ...)");
  tessera::testing::NetemImpairment initial;
  if (std::string why; !netem.empty() && !tessera::testing::parse_netem_spec(netem, &initial, &why)) {
    die("bad --netem '" + netem + "': " + why);
  }

  // SIGTERM/SIGINT only while in ppoll: blocked otherwise, so no request or frame is cut short.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::fprintf(stderr, "tessera_netem_relay: seed %llu\n", (unsigned long long)seed);

  const int home = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) die(std::string("cannot open /proc/self/ns/net: ") + std::strerror(errno));
  std::vector<Link> links;
  for (const auto& spec : specs) {
    const std::size_t eq = spec.find('='), c1 = spec.find(':'), c2 = spec.find(':', eq + 1);
    if (eq == std::string::npos || c1 == std::string::npos || c1 > eq || c2 == std::string::npos) {
      die("bad link '" + spec + "' (NS1:IF1=NS2:IF2)");
    }
    Link l;
    l.spec = spec;
    l.fd[0] = make_tap(spec.substr(0, c1), spec.substr(c1 + 1, eq - c1 - 1));
    l.fd[1] = make_tap(spec.substr(eq + 1, c2 - eq - 1), spec.substr(c2 + 1));
    links.push_back(std::move(l));
  }
  if (::setns(home, CLONE_NEWNET) != 0) die(std::string("setns back home: ") + std::strerror(errno));
  ::close(home);

  int control_fd = -1;
  if (!control_path.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (control_path.size() >= sizeof addr.sun_path) die("control path too long: " + control_path);
    std::memcpy(addr.sun_path, control_path.c_str(), control_path.size());
    control_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ::unlink(control_path.c_str());
    if (control_fd < 0 || ::bind(control_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      die("cannot bind " + control_path + ": " + std::strerror(errno));
    }
  }
  Relay relay(std::move(links), seed, control_fd);
  relay.set_all(initial);
  std::printf("ready\n");
  std::fflush(stdout);
  relay.run();
  relay.print_totals();
  if (!control_path.empty()) ::unlink(control_path.c_str());
  return 0;
}
