// A master that dies or is cut off ends the steps it started on its workers (Note [Masters that
// vanish] in distributed/worker.cc): three processes, this test (the client), a `master` task and
// a `worker` task holding a queue. The client's step blocks in a dequeue on the worker; the master
// is then killed (or stopped); a new session on the worker itself then enqueues an element and
// must get it back. Were the dead master's dequeue still waiting on the worker, it would take the
// element (it waits first) and the new session's dequeue would time out. Every wait is bounded;
// the children are killed at the end.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host/child_process.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using internal::ChildProcess;

// The ZMTP heartbeat bound of a task's server (RpcServerOptions::heartbeat_timeout): a caller
// silent this long is dropped.
constexpr auto kHeartbeatTimeout = 3s;

// `tessera server` processes for tasks master:0 and worker:0 on free loopback ports.
class TwoTasks {
 public:
  // `master_flags`: more `tessera server` flags for the master task.
  explicit TwoTasks(std::vector<std::string> master_flags = {}) : master_flags_(std::move(master_flags)) {
    for (const char* job : {"master", "worker"}) {
      addresses_[job] = "127.0.0.1:" + std::to_string(train::free_loopback_port());
    }
    json_ = "{\"master\": [\"" + addresses_["master"] + "\"], \"worker\": [\"" + addresses_["worker"] + "\"]}";
    for (const char* job : {"master", "worker"}) start(job);
  }
  void start(const std::string& job) {
    auto& child = children_[job];
    std::vector<std::string> argv{TESSERA_CLI_PATH, "server", "--cluster", json_, "--job", job, "--task", "0"};
    if (job == "master") argv.insert(argv.end(), master_flags_.begin(), master_flags_.end());
    for (int attempt = 0; attempt < 50; ++attempt) {
      child = std::make_unique<ChildProcess>(argv);
      auto line = child->read_line(60s);
      if (line && line->find("listening on") != std::string::npos) return;
      child.reset();
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "could not start /job:" << job << "/task:0";
  }
  ChildProcess& child(const std::string& job) { return *children_.at(job); }
  std::string target(const std::string& job) { return "tessera://" + addresses_.at(job); }
  // SIGSTOP, returning once the process is really stopped (the signal is asynchronous).
  void stop(const std::string& job) {
    ChildProcess& c = child(job);
    c.signal(SIGSTOP);
    for (auto until = Clock::now() + 10s; Clock::now() < until; std::this_thread::sleep_for(5ms)) {
      std::ifstream stat("/proc/" + std::to_string(c.pid()) + "/stat");
      std::string pid, comm, state;
      stat >> pid >> comm >> state;
      if (state == "T" || state == "t") return;
    }
    ADD_FAILURE() << "/job:" << job << " did not stop";
  }

 private:
  std::vector<std::string> master_flags_;
  std::string json_;
  std::map<std::string, std::string> addresses_;
  std::map<std::string, std::unique_ptr<ChildProcess>> children_;
};

// A step whose dequeue, on the worker's queue "q", blocks; run by the client through the master.
struct BlockedClient {
  Graph g;
  Output deq;
  std::unique_ptr<Session> session;
  std::atomic<int> code{-1};  // the run's error code once it ended
  std::string message;
  std::thread thread;

  explicit BlockedClient(const std::string& master_target) {
    {
      auto scope = g.device("/job:worker/task:0");
      FIFOQueue q(g, 10, {DType::Float32}, {Shape{}}, "q");
      deq = q.dequeue()[0];
    }
    SessionOptions options;
    options.rpc_timeout = 5000ms;
    session = std::make_unique<Session>(g, master_target, options);
    thread = std::thread([this] {
      try {
        session->run(deq);
        code = 0;
      } catch (const Error& e) {
        message = e.what();
        code = static_cast<int>(e.code());
      }
    });
  }
  ~BlockedClient() {
    if (thread.joinable()) thread.join();
  }
};

// A session on the worker task itself enqueues `value` and dequeues within `limit`: the value
// comes back unless a step of another master still waits on the queue and took it.
void expect_own_element_back(const std::string& worker_target, float value, std::chrono::milliseconds limit) {
  Graph g;
  testing::FedQueue q(g, 10, DType::Float32, "q", "value");
  auto deq = q.queue.dequeue()[0];
  Session s(g, worker_target);
  s.run({}, q.feed(Tensor::scalar(value)), {q.enqueue});
  RunOptions ro;
  ro.timeout = limit;
  try {
    EXPECT_EQ(s.run({deq}, {}, {}, ro)[0].scalar<float>(), value);
  } catch (const DeadlineExceededError& e) {
    ADD_FAILURE() << "the element went to the dead master's step: " << e.what();
  }
}

TEST(MasterDeathTest, AKilledMastersBlockedStepOnAWorkerIsCancelled) {
  TwoTasks cluster;
  BlockedClient client(cluster.target("master"));
  std::this_thread::sleep_for(1s);  // the RunStep reaches the master, its RunGraph the worker
  ASSERT_EQ(client.code.load(), -1) << "the dequeue should be blocked: " << client.message;
  cluster.child("master").signal(SIGKILL);
  ASSERT_TRUE(cluster.child("master").wait_exit(10s).has_value());
  // The client loses its master at once (the connection resets).
  ASSERT_TRUE(tessera::testing::wait_until([&] { return client.code.load() != -1; }, 15s));
  EXPECT_EQ(client.code.load(), static_cast<int>(ErrorCode::kUnavailable)) << client.message;
  // The worker's connection from the master reset too: within the heartbeat bound, whatever the
  // scheduling, its step has been cancelled.
  std::this_thread::sleep_for(kHeartbeatTimeout);
  expect_own_element_back(cluster.target("worker"), 7.0f, 10s);
  // And the worker serves on: a second round of the same.
  expect_own_element_back(cluster.target("worker"), 8.0f, 10s);
}

// A master that stops answering (SIGSTOP: a hung process, or a cut cable) is dropped by the
// worker after the heartbeat timeout, and its step ends the same way.
TEST(MasterDeathTest, AStoppedMastersBlockedStepOnAWorkerIsCancelledAfterTheHeartbeatTimeout) {
  TwoTasks cluster;
  BlockedClient client(cluster.target("master"));
  std::this_thread::sleep_for(1s);
  ASSERT_EQ(client.code.load(), -1) << "the dequeue should be blocked: " << client.message;
  cluster.stop("master");
  const auto stopped_at = Clock::now();
  // The client's own connection to the master misses its heartbeats too.
  ASSERT_TRUE(tessera::testing::wait_until([&] { return client.code.load() != -1; }, 30s));
  EXPECT_EQ(client.code.load(), static_cast<int>(ErrorCode::kUnavailable)) << client.message;
  // The worker's server pings each heartbeat interval (1 s) and drops the master kHeartbeatTimeout
  // after an unanswered ping: twice that covers it.
  const auto waited = Clock::now() - stopped_at;
  if (waited < 2 * kHeartbeatTimeout) std::this_thread::sleep_for(2 * kHeartbeatTimeout - waited);
  expect_own_element_back(cluster.target("worker"), 9.0f, 10s);
  cluster.child("master").signal(SIGKILL);
  cluster.child("master").signal(SIGCONT);
}

// A master killed between steps has no run in flight for the heartbeat to end, and never
// deregisters its partitions: the worker drops them once their lease (1 s here) runs out, and says
// so (Note [Partition leases] in distributed/worker.cc). While the master lived, it renewed them.
TEST(MasterDeathTest, AMasterKilledBetweenStepsLeavesNoPartitionsOnItsWorker) {
  TwoTasks cluster({"--partition-lease", "1"});
  Graph g;
  Output size;
  {
    auto scope = g.device("/job:worker/task:0");
    FIFOQueue q(g, 10, {DType::Float32}, {Shape{}}, "q");
    size = q.size();
  }
  SessionOptions options;
  options.rpc_timeout = 2000ms;
  Session session(g, cluster.target("master"), options);
  EXPECT_EQ(session.run(size).scalar<int32_t>(), 0);
  const std::string alive = cluster.child("worker").stderr_text(3s);  // three leases, renewed
  EXPECT_EQ(alive.find("renewed no lease"), std::string::npos) << alive;

  cluster.child("master").signal(SIGKILL);
  ASSERT_TRUE(cluster.child("master").wait_exit(10s).has_value());
  std::string said;
  EXPECT_TRUE(tessera::testing::wait_until(
      [&] {
        said += cluster.child("worker").stderr_text(200ms);
        return said.find("renewed no lease") != std::string::npos;
      },
      15s))
      << said;
  EXPECT_NE(said.find("dropped 1 partition of 1 session"), std::string::npos) << said;
  EXPECT_NE(said.find("whose master renewed no lease for 1 s"), std::string::npos) << said;
  // The worker serves on.
  expect_own_element_back(cluster.target("worker"), 6.0f, 10s);
}

}  // namespace
}  // namespace tessera
