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

class NetworkLab {
 public:
  // "" where labs can be made here (root or CAP_NET_ADMIN + CAP_SYS_ADMIN, `ip` on the PATH);
  // otherwise why not, for a skip message. Probed once per process by making a namespace and a
  // veth pair in it.
  static const std::string& unavailable_reason();

  // Makes the namespaces, the bridge and the links (also removing leftovers of dead processes
  // first); std::runtime_error naming the failing command when something cannot be made (what was
  // made is removed again).
  explicit NetworkLab(const std::vector<std::string>& hosts);
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
  // failures (a bad SPEC). clear_netem() removes it.
  bool netem(const std::string& host, const std::string& spec);
  void clear_netem(const std::string& host);
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
LabEntry enter_network_lab(const std::vector<std::string>& hosts, const std::string& client,
                           std::chrono::seconds limit);

}  // namespace tessera::testing

// Declares `std::unique_ptr<NetworkLab> lab_var` in a test body, for a lab of the hosts listed
// last: the test process makes the lab, runs the rest of the test body in a child inside
// `client`'s namespace and returns; in the child the body continues with the lab. Skips where no
// lab can be made.
#define TESSERA_ENTER_NETWORK_LAB(lab_var, client, limit, ...)                                    \
  std::unique_ptr<::tessera::testing::NetworkLab> lab_var;                                        \
  do {                                                                                            \
    ::tessera::testing::LabEntry tessera_lab_entry_ = ::tessera::testing::enter_network_lab(     \
        std::vector<std::string>{__VA_ARGS__}, client, limit);                                    \
    if (tessera_lab_entry_.skip) GTEST_SKIP() << tessera_lab_entry_.message;                     \
    if (!tessera_lab_entry_.lab) return;                                                          \
    lab_var = std::move(tessera_lab_entry_.lab);                                                  \
  } while (false)
