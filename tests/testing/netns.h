// Network labs for multi-process tests: each host (a cluster task, a client) in a Linux network
// namespace of its own, all joined by a bridge, so the cluster's traffic leaves loopback (and
// CURVE keys are required, as in production) while staying inside namespaces the test made.
//
//   TEST(NetnsClusterTest, Something) {
//     TESSERA_ENTER_NETWORK_LAB(lab, "client", std::chrono::seconds(240), "ps0", "w0", "client");
//     // From here on this is a child process inside the namespace of "client" (see below).
//     train::ServerProcess ps(lab->wrapper("ps0", TESSERA_CLI_PATH), cluster_json, "ps", 0, ...);
//     lab->partition("w0", "ps0"); ... lab->heal("w0", "ps0");
//   }
//
// Layout (names carry this process's pid, so leftovers of a dead test can be found and removed):
//   namespace tessera-<pid>-<lab>-br        the bridge br0, and one veth end v<i> per host on it
//   namespace tessera-<pid>-<lab>-<host>    the other end, eth0, with 10.X.Y.<i+1>/24; lo up
// Nothing is made in the root namespace: no interface, address or route. X.Y come from the pid.
//
// Link modes. LinkMode::kernel: the veth pairs above; netem() uses `tc ... netem` and says false
// where the kernel has no sch_netem. LinkMode::impairable: the same where the kernel has netem;
// otherwise each host's link is a pair of TAP devices (eth0 in the host, v<i> on the bridge) joined
// by one userspace relay for the whole lab (tessera_netem_relay, tests/testing/netem_relay.cc),
// started by the lab's owner, controlled through the Unix socket <dir>/relay.ctl and killed with
// the lab; netem() then sets the relay's delay and loss for the host's egress (what tc on eth0
// would do; the grammar in tests/testing/netem_spec.h) and always says true. unplug/plug (the
// TAP v<i> down: the relay's writes to it fail and are dropped), partition/heal and counters (of
// the TAP eth0) work on both kinds of link. TESSERA_NETNS_RELAY=1 in the environment picks the
// relay even where the kernel has netem (to test it there). How the relay differs from netem:
// constant delay and random loss only (no jitter, reordering, rate); it is one userspace thread
// copying each MTU-sized frame with read() and write() (no offloads), so a link carries far less
// than a veth: tessera's 16 MiB transfers reached 160 MB/s through it with no impairment (210 MB/s
// with 500us each way: frames then come in batches) where a veth pair gave 880 MB/s, on a busy
// 2-core machine (benchmarks/transport/netns_transfer --netem "delay 0"); and it shares the CPUs
// with the cluster, so under load its scheduling adds jitter to every frame.
//
// Where the client runs: the test process itself must talk from inside a namespace of the lab,
// but tessera's channels share one process-wide ZeroMQ context whose I/O thread (which makes the
// TCP connections) lives in the namespace it was started in, and gtest may run several tests in
// one process. So setns() of the test's own thread would not do: TESSERA_ENTER_NETWORK_LAB makes
// the lab, then runs this same test again in a fresh process under `ip netns exec <client ns>`
// (the test binary with --gtest_filter naming the test, the lab described in the environment),
// copies its output, fails or skips as it did, and removes the lab; in that child the macro
// attaches to the lab (owning nothing) and the test body runs. Everything the child starts (a
// task through wrapper(), an `ip` command) is bounded, and the parent kills whatever still runs in
// the lab's namespaces when it removes them, so a crashed or hung child leaves nothing behind.
//
// Not thread-safe: one thread drives a NetworkLab.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::testing {

// How a lab joins its hosts to the bridge (see above).
enum class LinkMode { kernel, impairable };

class NetworkLab {
 public:
  // "" where labs can be made here (root or CAP_NET_ADMIN + CAP_SYS_ADMIN, `ip` on the PATH);
  // otherwise why not, for a skip message. Probed once per process by making a namespace and a
  // veth pair in it.
  static const std::string& unavailable_reason();
  // Likewise for labs of `mode`: for impairable ones where the kernel has no netem, also whether
  // TAP devices (/dev/net/tun) and the relay program are there.
  static std::string unavailable_reason(LinkMode mode);
  // Whether this kernel has sch_netem (probed once per process; TESSERA_NETNS_RELAY=1 says no).
  static bool kernel_has_netem();

  // Makes the namespaces, the bridge and the links (also removing leftovers of dead processes
  // first); std::runtime_error naming the failing command when something cannot be made (what was
  // made is removed again). A relay that does not say `ready` within 10 s is such an error.
  explicit NetworkLab(const std::vector<std::string>& hosts, LinkMode mode = LinkMode::kernel);
  // A view of a lab another process made, from describe(): owns and removes nothing.
  static std::unique_ptr<NetworkLab> attach(const std::string& description);
  ~NetworkLab();  // the owner kills every process left in its namespaces, then deletes them
  NetworkLab(const NetworkLab&) = delete;
  NetworkLab& operator=(const NetworkLab&) = delete;

  const std::vector<std::string>& hosts() const { return hosts_; }
  // The namespace of `host` ("tessera-<pid>-<lab>-<host>"); std::out_of_range for an unknown host.
  const std::string& ns(const std::string& host) const;
  // Its address on the bridge ("10.X.Y.Z").
  const std::string& address(const std::string& host) const;
  // "10.X.Y.Z:port".
  std::string endpoint(const std::string& host, int port) const;
  // A folder for the test's files (keys, checkpoints, wrapper scripts), removed with the lab.
  const std::string& dir() const { return dir_; }
  // Whether the calling process lives in the namespace of `host`.
  bool in_namespace(const std::string& host) const;

  // An executable script that runs `binary "$@"` inside the namespace of `host` (exec ip netns
  // exec ...: same pid, so signals reach the program): pass it to train::ServerProcess as the
  // tessera binary to run a task there.
  std::string wrapper(const std::string& host, const std::string& binary) const;

  // Pulls the cable of `host`: its veth end on the bridge goes down, so the host reaches nobody
  // (the whole host is cut off, not one pair). plug() puts it back.
  void unplug(const std::string& host);
  void plug(const std::string& host);
  // Cuts `a` and `b` from each other only: blackhole routes to each other's address in both
  // namespaces. Established connections between them fall silent (nothing is sent, nothing
  // reset), new connections fail at once with EINVAL; both still reach everyone else. heal()
  // removes the routes.
  void partition(const std::string& a, const std::string& b);
  void heal(const std::string& a, const std::string& b);
  // Puts `tc netem SPEC` (e.g. "delay 10ms loss 1%") on the egress of `host`'s eth0, replacing
  // what was there; false when this kernel has no netem (sch_netem), std::runtime_error for other
  // failures (a bad SPEC). On relay links: the relay's delay and loss for frames `host` sends
  // (replacing what was set), true; std::runtime_error naming SPEC for what netem_spec.h does not
  // emulate. clear_netem() removes it (on relay links: both directions of the host's link).
  bool netem(const std::string& host, const std::string& spec);
  void clear_netem(const std::string& host);
  // Whether the hosts' links are TAPs joined by the relay (an impairable lab without kernel netem).
  bool relay_links() const { return !control_path_.empty(); }
  // The relay's pid in the owner of a lab with relay links; 0 otherwise (or once it is gone).
  int relay_pid() const { return relay_pid_; }
  // Bytes received and sent on `host`'s eth0 (its link to the bridge) so far.
  struct Counters {
    long long rx_bytes = 0, tx_bytes = 0;
  };
  Counters counters(const std::string& host) const;

  // What attach() takes: one line, no spaces in names.
  std::string describe() const;

 private:
  NetworkLab() = default;
  void create();
  void start_relay();
  void stop_relay();
  // Sends one request to the relay; its answer after "ok", std::runtime_error otherwise.
  std::string relay_request(const std::string& request) const;
  int link_index(const std::string& host) const;
  void destroy();

  struct Host {
    std::string ns, address, bridge_port;
  };
  bool owner_ = false;
  std::string prefix_;     // tessera-<pid>-<lab>
  std::string bridge_ns_;  // <prefix>-br
  std::string dir_;
  std::vector<std::string> hosts_;
  std::map<std::string, Host> by_name_;
  LinkMode mode_ = LinkMode::kernel;  // owner only: what create() makes
  std::string control_path_;  // the relay's socket; empty without relay links
  int relay_pid_ = 0;         // owner only
  int relay_stdin_ = -1;      // owner only: the relay exits when this closes
};

// What enter_network_lab() decided; see TESSERA_ENTER_NETWORK_LAB.
struct LabEntry {
  std::unique_ptr<NetworkLab> lab;  // set in the child: run the test body with it
  bool skip = false;                // skip the test (message says why)
  std::string message;
};

// In the test process: makes a lab of `hosts` (or returns skip when labs cannot be made here),
// runs the current test again in a child process inside the namespace of `client` for at most
// `limit` (then kills it), copies its output to stdout, adds a failure when it failed or did not
// finish, returns skip (with its message) when it skipped, and removes the lab; lab stays null.
// In that child (the environment says so): returns the attached lab.
// `mode` applies to the lab made in the test process (the child attaches to it as it is).
LabEntry enter_network_lab(const std::vector<std::string>& hosts, const std::string& client,
                           std::chrono::seconds limit, LinkMode mode = LinkMode::kernel);

}  // namespace tessera::testing

// Declares `std::unique_ptr<NetworkLab> lab_var` in a test body, for a lab of the hosts listed
// last: the test process makes the lab, runs the rest of the test body in a child inside
// `client`'s namespace and returns; in the child the body continues with the lab. Skips where no
// lab can be made. TESSERA_ENTER_IMPAIRABLE_NETWORK_LAB: the same with LinkMode::impairable, for
// tests that call netem().
#define TESSERA_ENTER_NETWORK_LAB(lab_var, client, limit, ...) \
  TESSERA_ENTER_NETWORK_LAB_IN_MODE(lab_var, ::tessera::testing::LinkMode::kernel, client, limit, __VA_ARGS__)
#define TESSERA_ENTER_IMPAIRABLE_NETWORK_LAB(lab_var, client, limit, ...) \
  TESSERA_ENTER_NETWORK_LAB_IN_MODE(lab_var, ::tessera::testing::LinkMode::impairable, client, limit, __VA_ARGS__)
#define TESSERA_ENTER_NETWORK_LAB_IN_MODE(lab_var, mode, client, limit, ...)                       \
  std::unique_ptr<::tessera::testing::NetworkLab> lab_var;                                        \
  do {                                                                                            \
    ::tessera::testing::LabEntry tessera_lab_entry_ = ::tessera::testing::enter_network_lab(     \
        std::vector<std::string>{__VA_ARGS__}, client, limit, mode);                              \
    if (tessera_lab_entry_.skip) GTEST_SKIP() << tessera_lab_entry_.message;                     \
    if (!tessera_lab_entry_.lab) return;                                                          \
    lab_var = std::move(tessera_lab_entry_.lab);                                                  \
  } while (false)
