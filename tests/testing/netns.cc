// Network labs (tests/testing/netns.h): namespaces, a bridge and veth links made with `ip` (or TAP
// links joined by the userspace netem relay), and the re-run of a test inside one of them.
#include "tests/testing/netns.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "host/child_process.h"
#include "tests/testing/netem_spec.h"

extern char** environ;

namespace tessera::testing {

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using internal::ChildProcess;

constexpr char kLabEnv[] = "TESSERA_NETNS_LAB";

// The full path of `program` (`ip`, `tc`): the PATH, then the sbin folders a test's PATH may lack.
std::string find_program(const std::string& program) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream s(path);
    for (std::string d; std::getline(s, d, ':');) {
      if (!d.empty()) dirs.push_back(d);
    }
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    const std::string candidate = d + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

const std::string& ip_path() {
  static const std::string path = find_program("ip");
  return path;
}

struct CommandResult {
  int exit_code = -1;  // -1: did not start, did not finish in time, or killed by a signal
  std::string output;  // stdout then stderr
};

// Runs `args` (args[0] a full path), at most `limit`.
CommandResult run_command(const std::vector<std::string>& args, std::chrono::milliseconds limit = 20s) {
  CommandResult r;
  ChildProcess child(args);
  if (!child.error().empty()) {
    r.output = child.error();
    return r;
  }
  r.output = child.rest_of_stdout(limit);
  r.output += child.stderr_text(1s);
  if (auto status = child.wait_exit(limit); status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  return r;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// `ip ARGS...`; std::runtime_error naming the command and its output when it fails.
std::string ip(std::vector<std::string> args) {
  if (ip_path().empty()) throw std::runtime_error("no `ip` command (iproute2) on this machine");
  args.insert(args.begin(), ip_path());
  CommandResult r = run_command(args);
  if (r.exit_code != 0) throw std::runtime_error("`" + joined(args) + "` failed: " + trimmed(r.output));
  return r.output;
}

// `ip` without throwing: whether it succeeded.
bool try_ip(std::vector<std::string> args) {
  if (ip_path().empty()) return false;
  args.insert(args.begin(), ip_path());
  return run_command(args).exit_code == 0;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string w; s >> w;) out.push_back(w);
  return out;
}

// Kills every process in namespace `ns` (ours: started by a test in a lab), then deletes it.
void remove_namespace(const std::string& ns) {
  for (int round = 0; round < 50; ++round) {
    if (ip_path().empty()) return;
    CommandResult pids = run_command({ip_path(), "netns", "pids", ns});
    if (pids.exit_code != 0) break;  // gone already
    const auto left = words(pids.output);
    if (left.empty()) break;
    for (const auto& p : left) {
      const int pid = std::atoi(p.c_str());
      if (pid > 1 && pid != ::getpid()) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(100ms);
  }
  try_ip({"netns", "delete", ns});
}

// Removes namespaces named tessera-<pid>-... whose process is gone (a test killed before its
// destructor ran).
void remove_leftovers() {
  CommandResult list = run_command({ip_path(), "netns", "list"});
  if (list.exit_code != 0) return;
  std::stringstream lines(list.output);
  for (std::string line; std::getline(lines, line);) {
    const auto w = words(line);
    if (w.empty() || w[0].rfind("tessera-", 0) != 0) continue;
    const std::string& name = w[0];
    const std::size_t dash = name.find('-', 8);
    if (dash == std::string::npos) continue;
    const int pid = std::atoi(name.substr(8, dash - 8).c_str());
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH) remove_namespace(name);
  }
  // And their folders: <temp>/tessera-<pid>-<lab>-XXXXXX.
  static const std::regex folder("tessera-([0-9]+)-[0-9]+-[A-Za-z0-9]{6}");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, folder)) continue;
    const int pid = std::atoi(m[1].str().c_str());
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) == -1 && errno == ESRCH) fs::remove_all(entry.path(), ec);
  }
}

std::atomic<int> next_lab{0};

}  // namespace

const std::string& NetworkLab::unavailable_reason() {
  static const std::string reason = [] {
    if (ip_path().empty()) return std::string("no `ip` command (iproute2) on this machine");
    const std::string probe = "tessera-" + std::to_string(::getpid()) + "-probe";
    CommandResult made = run_command({ip_path(), "netns", "add", probe});
    if (made.exit_code != 0) {
      return "cannot make network namespaces here (`ip netns add` failed: " + trimmed(made.output) +
             "); these tests need root or CAP_SYS_ADMIN and CAP_NET_ADMIN";
    }
    CommandResult veth = run_command({ip_path(), "-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"});
    // Running a program inside (what every task and the client do) also needs a mount namespace.
    CommandResult exec = run_command({ip_path(), "netns", "exec", probe, ip_path(), "link", "show", "lo"});
    remove_namespace(probe);
    if (veth.exit_code != 0) return "cannot make veth links in a network namespace here: " + trimmed(veth.output);
    if (exec.exit_code != 0) return "cannot run a program in a network namespace here: " + trimmed(exec.output);
    return std::string();
  }();
  return reason;
}

bool NetworkLab::kernel_has_netem() {
  static const bool has = [] {
    if (const char* force = std::getenv("TESSERA_NETNS_RELAY"); force && std::string(force) == "1") return false;
    const std::string tc = find_program("tc");
    if (tc.empty() || ip_path().empty()) return false;
    const std::string probe = "tessera-" + std::to_string(::getpid()) + "-netemprobe";
    if (run_command({ip_path(), "netns", "add", probe}).exit_code != 0) return false;
    bool ok = run_command({ip_path(), "-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name",
                           "probe1"}).exit_code == 0;
    ok = ok && run_command({tc, "-n", probe, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"})
                       .exit_code == 0;
    remove_namespace(probe);
    return ok;
  }();
  return has;
}

namespace {

// The relay program: $TESSERA_NETEM_RELAY, else the one built next to the tests.
std::string relay_program() {
  if (const char* path = std::getenv("TESSERA_NETEM_RELAY"); path && *path) return path;
#ifdef TESSERA_NETEM_RELAY_PATH
  return TESSERA_NETEM_RELAY_PATH;
#else
  return "";
#endif
}

}  // namespace

std::string NetworkLab::unavailable_reason(LinkMode mode) {
  if (const std::string& why = unavailable_reason(); !why.empty()) return why;
  if (mode == LinkMode::kernel || kernel_has_netem()) return "";
  const std::string relay = relay_program();
  if (relay.empty() || ::access(relay.c_str(), X_OK) != 0) {
    return "no netem in this kernel and no userspace relay program ('" + relay + "'; set TESSERA_NETEM_RELAY)";
  }
  const int tun = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (tun < 0) return std::string("no netem in this kernel and no TAP devices (/dev/net/tun: ") + std::strerror(errno) + ")";
  ::close(tun);
  return "";
}

NetworkLab::NetworkLab(const std::vector<std::string>& hosts, LinkMode mode) : owner_(true), hosts_(hosts), mode_(mode) {
  if (hosts.empty() || hosts.size() > 250) throw std::invalid_argument("NetworkLab: 1 to 250 hosts");
  const int pid = static_cast<int>(::getpid());
  prefix_ = "tessera-" + std::to_string(pid) + "-" + std::to_string(next_lab++);
  bridge_ns_ = prefix_ + "-br";
  // A private /24 from the pid: labs never share a bridge, so this only keeps two labs' logs apart.
  const std::string net = "10." + std::to_string(16 + (pid >> 8) % 224) + "." + std::to_string(pid & 255) + ".";
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string& h = hosts[i];
    if (h.empty() || h.size() > 20 || h.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos) {
      throw std::invalid_argument("NetworkLab: host names are [a-z0-9]{1,20}: '" + h + "'");
    }
    if (!by_name_.emplace(h, Host{prefix_ + "-" + h, net + std::to_string(i + 1), "v" + std::to_string(i)}).second) {
      throw std::invalid_argument("NetworkLab: host '" + h + "' listed twice");
    }
  }
  std::string pattern = (fs::temp_directory_path() / (prefix_ + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("NetworkLab: cannot make a folder in " + pattern);
  dir_ = pattern;
  try {
    create();
  } catch (...) {
    destroy();
    throw;
  }
}

void NetworkLab::create() {
  remove_leftovers();
  const bool relay = mode_ == LinkMode::impairable && !kernel_has_netem();
  ip({"netns", "add", bridge_ns_});
  ip({"-n", bridge_ns_, "link", "add", "name", "br0", "type", "bridge"});
  ip({"-n", bridge_ns_, "link", "set", "br0", "up"});
  for (const auto& name : hosts_) ip({"netns", "add", by_name_.at(name).ns});
  if (relay) start_relay();  // the TAPs eth0 and v<i>, made by the relay in those namespaces
  for (const auto& name : hosts_) {
    const Host& h = by_name_.at(name);
    // Made in the bridge's namespace with its peer straight in the host's: no name ever appears in
    // the root namespace, so concurrent labs cannot clash.
    if (!relay) {
      ip({"-n", bridge_ns_, "link", "add", "name", h.bridge_port, "type", "veth", "peer", "name", "eth0", "netns", h.ns});
    }
    ip({"-n", bridge_ns_, "link", "set", h.bridge_port, "master", "br0"});
    ip({"-n", bridge_ns_, "link", "set", h.bridge_port, "up"});
    ip({"-n", h.ns, "addr", "add", h.address + "/24", "dev", "eth0"});
    ip({"-n", h.ns, "link", "set", "eth0", "up"});
    ip({"-n", h.ns, "link", "set", "lo", "up"});
  }
}

void NetworkLab::start_relay() {
  const std::string program = relay_program();
  if (program.empty()) throw std::runtime_error("NetworkLab: no userspace netem relay program (TESSERA_NETEM_RELAY)");
  control_path_ = dir_ + "/relay.ctl";
  if (control_path_.size() >= sizeof(sockaddr_un{}.sun_path) - 24) {
    throw std::runtime_error("NetworkLab: the lab's folder is too long a path for a Unix socket: " + dir_);
  }
  std::vector<std::string> args = {program, "--control", control_path_};
  for (const auto& name : hosts_) {
    const Host& h = by_name_.at(name);
    args.push_back(h.ns + ":eth0=" + bridge_ns_ + ":" + h.bridge_port);  // direction 1: the host's egress
  }
  // Its stdin is a pipe only we write to: end of file there (we are gone) ends it. Not ChildProcess,
  // whose children share our stdin.
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("NetworkLab: pipe: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    throw std::runtime_error(std::string("NetworkLab: pipe: ") + std::strerror(errno));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]), ::close(out[0]);
    throw std::runtime_error(std::string("NetworkLab: fork: ") + std::strerror(errno));
  }
  relay_pid_ = pid;
  relay_stdin_ = in[1];
  std::string said;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (said.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{out[0], POLLIN, 0};
    if (left <= 0ms || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);  // it writes nothing more on stdout
  if (trimmed(said) != "ready") {
    throw std::runtime_error("NetworkLab: the netem relay `" + joined(args) + "` did not say ready within 10 s" +
                             (said.empty() ? std::string() : " (it said '" + trimmed(said) + "')") +
                             "; its stderr is above");
  }
}

void NetworkLab::stop_relay() {
  if (relay_pid_ <= 0) return;
  ::close(relay_stdin_);  // end of file: it exits
  relay_stdin_ = -1;
  ::kill(relay_pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {  // 5 s, then SIGKILL
    if (::waitpid(relay_pid_, nullptr, WNOHANG) == relay_pid_) {
      relay_pid_ = 0;
      return;
    }
    std::this_thread::sleep_for(50ms);
  }
  ::kill(relay_pid_, SIGKILL);
  ::waitpid(relay_pid_, nullptr, 0);
  relay_pid_ = 0;
}

int NetworkLab::link_index(const std::string& host) const {
  for (std::size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i] == host) return static_cast<int>(i);
  }
  throw std::out_of_range("NetworkLab: no host '" + host + "'");
}

std::string NetworkLab::relay_request(const std::string& request) const {
  static std::atomic<int> next_client{0};
  // Our own pathname socket, for the answer: pathname sockets work across network namespaces.
  const std::string self = dir_ + "/c-" + std::to_string(::getpid()) + "-" + std::to_string(next_client++);
  sockaddr_un to{}, from{};
  to.sun_family = from.sun_family = AF_UNIX;
  std::memcpy(to.sun_path, control_path_.c_str(), control_path_.size());
  std::memcpy(from.sun_path, self.c_str(), std::min(self.size(), sizeof(from.sun_path) - 1));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("NetworkLab: socket: ") + std::strerror(errno));
  ::unlink(from.sun_path);
  std::string answer, failure;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    failure = "cannot bind " + self + ": " + std::strerror(errno);
  } else if (::sendto(fd, request.data(), request.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
    failure = "cannot send to " + control_path_ + ": " + std::strerror(errno);
  } else {
    pollfd p{fd, POLLIN, 0};
    char buf[512];
    const ssize_t n = ::poll(&p, 1, 5000) == 1 ? ::recv(fd, buf, sizeof buf, 0) : -1;
    if (n < 0) failure = "no answer within 5 s from " + control_path_;
    else answer.assign(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  ::unlink(from.sun_path);
  if (failure.empty() && answer.rfind("ok", 0) != 0) failure = "it answered '" + answer + "'";
  if (!failure.empty()) throw std::runtime_error("NetworkLab: relay request '" + request + "': " + failure);
  return answer.size() > 3 ? answer.substr(3) : "";
}

void NetworkLab::destroy() {
  if (!owner_) return;
  stop_relay();  // its TAPs hold the namespaces: first
  for (const auto& name : hosts_) remove_namespace(by_name_.at(name).ns);
  remove_namespace(bridge_ns_);
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
}

NetworkLab::~NetworkLab() { destroy(); }

std::unique_ptr<NetworkLab> NetworkLab::attach(const std::string& description) {
  // "<prefix> <dir> <host>=<ns>,<address>,<port> ..."
  std::unique_ptr<NetworkLab> lab(new NetworkLab());
  const auto w = words(description);
  if (w.size() < 3) throw std::invalid_argument("NetworkLab::attach: bad description '" + description + "'");
  lab->prefix_ = w[0];
  lab->bridge_ns_ = w[0] + "-br";
  lab->dir_ = w[1];
  for (std::size_t i = 2; i < w.size(); ++i) {
    if (w[i].rfind("+relay=", 0) == 0) {  // not a host: names are [a-z0-9]
      lab->control_path_ = w[i].substr(7);
      continue;
    }
    const std::size_t eq = w[i].find('='), c1 = w[i].find(',', eq), c2 = w[i].find(',', c1 + 1);
    if (eq == std::string::npos || c1 == std::string::npos || c2 == std::string::npos) {
      throw std::invalid_argument("NetworkLab::attach: bad host '" + w[i] + "'");
    }
    const std::string name = w[i].substr(0, eq);
    lab->hosts_.push_back(name);
    lab->by_name_[name] = Host{w[i].substr(eq + 1, c1 - eq - 1), w[i].substr(c1 + 1, c2 - c1 - 1), w[i].substr(c2 + 1)};
  }
  return lab;
}

std::string NetworkLab::describe() const {
  std::string s = prefix_ + " " + dir_;
  for (const auto& name : hosts_) {
    const Host& h = by_name_.at(name);
    s += " " + name + "=" + h.ns + "," + h.address + "," + h.bridge_port;
  }
  // Relay links name the relay's socket (the child's netem() talks to it); otherwise the links are
  // veth pairs and the child's netem() uses tc, whatever the owner's mode.
  if (relay_links()) s += " +relay=" + control_path_;
  return s;
}

const std::string& NetworkLab::ns(const std::string& host) const { return by_name_.at(host).ns; }
const std::string& NetworkLab::address(const std::string& host) const { return by_name_.at(host).address; }
std::string NetworkLab::endpoint(const std::string& host, int port) const {
  return address(host) + ":" + std::to_string(port);
}

bool NetworkLab::in_namespace(const std::string& host) const {
  struct stat self {}, named {};
  if (::stat("/proc/self/ns/net", &self) != 0) return false;
  if (::stat(("/run/netns/" + ns(host)).c_str(), &named) != 0) return false;
  return self.st_ino == named.st_ino && self.st_dev == named.st_dev;
}

std::string NetworkLab::wrapper(const std::string& host, const std::string& binary) const {
  const std::string path = dir_ + "/in-" + host + "-" + fs::path(binary).filename().string() + ".sh";
  {
    std::ofstream out(path, std::ios::trunc);
    out << "#!/bin/sh\nexec " << ip_path() << " netns exec " << ns(host) << " '" << binary << "' \"$@\"\n";
    if (!out) throw std::runtime_error("NetworkLab: cannot write " + path);
  }
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  return path;
}

void NetworkLab::unplug(const std::string& host) {
  ip({"-n", bridge_ns_, "link", "set", by_name_.at(host).bridge_port, "down"});
}

void NetworkLab::plug(const std::string& host) {
  ip({"-n", bridge_ns_, "link", "set", by_name_.at(host).bridge_port, "up"});
}

void NetworkLab::partition(const std::string& a, const std::string& b) {
  ip({"-n", ns(a), "route", "add", "blackhole", address(b) + "/32"});
  ip({"-n", ns(b), "route", "add", "blackhole", address(a) + "/32"});
}

void NetworkLab::heal(const std::string& a, const std::string& b) {
  ip({"-n", ns(a), "route", "del", "blackhole", address(b) + "/32"});
  ip({"-n", ns(b), "route", "del", "blackhole", address(a) + "/32"});
}

bool NetworkLab::netem(const std::string& host, const std::string& spec) {
  if (relay_links()) {
    NetemImpairment imp;
    if (std::string why; !parse_netem_spec(spec, &imp, &why)) {
      throw std::runtime_error("NetworkLab::netem: netem spec '" + spec + "' is not emulated on relay links: " + why);
    }
    relay_request("set " + std::to_string(link_index(host)) + " 1 " + std::to_string(imp.delay_ns) + " " +
                  std::to_string(imp.loss_ppm));
    return true;
  }
  static const std::string tc = find_program("tc");
  if (tc.empty()) return false;
  std::vector<std::string> args = {tc, "-n", ns(host), "qdisc", "replace", "dev", "eth0", "root", "netem"};
  for (auto& w : words(spec)) args.push_back(std::move(w));
  CommandResult r = run_command(args);
  if (r.exit_code == 0) return true;
  if (r.output.find("qdisc kind is unknown") != std::string::npos) return false;
  throw std::runtime_error("`" + joined(args) + "` failed: " + r.output);
}

void NetworkLab::clear_netem(const std::string& host) {
  if (relay_links()) {
    relay_request("clear " + std::to_string(link_index(host)));
    return;
  }
  static const std::string tc = find_program("tc");
  if (!tc.empty()) run_command({tc, "-n", ns(host), "qdisc", "del", "dev", "eth0", "root"});
}

NetworkLab::Counters NetworkLab::counters(const std::string& host) const {
  // `ip -s link` prints "RX:  bytes packets ..." and the figures on the next line; TX likewise.
  const std::string text = ip({"-n", ns(host), "-s", "link", "show", "dev", "eth0"});
  Counters c;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const bool rx = line.find("RX:") != std::string::npos, tx = line.find("TX:") != std::string::npos;
    if (!rx && !tx) continue;
    std::string figures;
    if (!std::getline(lines, figures)) break;
    const auto w = words(figures);
    if (w.empty()) continue;
    (rx ? c.rx_bytes : c.tx_bytes) = std::atoll(w[0].c_str());
  }
  return c;
}

LabEntry enter_network_lab(const std::vector<std::string>& hosts, const std::string& client,
                           std::chrono::seconds limit, LinkMode mode) {
  LabEntry entry;
  if (const char* description = std::getenv(kLabEnv)) {  // the child: run the body here
    entry.lab = NetworkLab::attach(description);
    if (!entry.lab->in_namespace(client)) {
      ADD_FAILURE() << "this test process should run inside " << entry.lab->ns(client);
      entry.lab.reset();
    }
    return entry;
  }
  if (const std::string why = NetworkLab::unavailable_reason(mode); !why.empty()) {
    entry.skip = true;
    entry.message = why;
    return entry;
  }
  std::unique_ptr<NetworkLab> lab;
  try {
    lab = std::make_unique<NetworkLab>(hosts, mode);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "could not make the network lab: " << e.what();
    return entry;
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = std::string(info->test_suite_name()) + "." + info->name();
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    ADD_FAILURE() << "cannot find this test program (/proc/self/exe)";
    return entry;
  }
  exe[n] = '\0';
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    if (var.rfind("GTEST_OUTPUT=", 0) == 0 || var.rfind(std::string(kLabEnv) + "=", 0) == 0) continue;
    env.push_back(var);
  }
  env.push_back(std::string(kLabEnv) + "=" + lab->describe());
  // The child's stderr (the tasks' logs it forwards) goes straight to ours; its stdout (gtest's
  // report) is read here line by line, so neither pipe can fill up and stall it.
  ChildProcess child({ip_path(), "netns", "exec", lab->ns(client), exe, "--gtest_filter=" + test,
                      "--gtest_also_run_disabled_tests", "--gtest_color=no"},
                     env, /*capture_stderr=*/false);
  if (!child.error().empty()) {
    ADD_FAILURE() << "could not start the test in " << lab->ns(client) << ": " << child.error();
    return entry;
  }
  std::cout << "[ netns    ] running " << test << " inside " << lab->ns(client) << " (lab "
            << lab->describe() << ")" << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string output;
  bool finished = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) break;
    auto line = child.read_line(left);
    if (!line) {
      finished = std::chrono::steady_clock::now() < deadline;  // end of output, not the limit
      break;
    }
    std::cout << "[ child    ] " << *line << "\n";
    output += *line + "\n";
  }
  std::cout.flush();
  std::optional<int> status = finished ? child.wait_exit(10s) : std::nullopt;
  if (!status) {
    child.signal(SIGKILL);
    child.wait_exit(10s);
    ADD_FAILURE() << test << " did not finish within " << limit.count() << " s inside " << lab->ns(client)
                  << ": killed (its output is above)";
    return entry;  // ~lab kills what the child started
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    ADD_FAILURE() << test << " failed inside " << lab->ns(client) << " (wait status " << *status
                  << "; its output is above)";
    return entry;
  }
  if (const std::size_t skipped = output.find("[  SKIPPED ] " + test); skipped != std::string::npos) {
    entry.skip = true;
    entry.message = "skipped inside the lab";
    if (const std::size_t at = output.find(": Skipped\n"); at != std::string::npos && at < skipped) {
      entry.message = output.substr(at + 10, skipped - at - 10);
      while (!entry.message.empty() && (entry.message.back() == '\n' || entry.message.back() == ' ')) {
        entry.message.pop_back();
      }
    }
    return entry;
  }
  if (output.find("[       OK ] " + test) == std::string::npos) {
    ADD_FAILURE() << test << " did not run inside " << lab->ns(client) << " (its output is above)";
  }
  return entry;
}

}  // namespace tessera::testing
