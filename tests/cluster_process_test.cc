// Clusters of real `tessera server` processes on loopback ports: cross-task arithmetic, a 64 MiB
// tensor between processes, variables on a ps process shared by two clients, kill -9 of a worker
// mid-run (UnavailableError within the bound, then a restarted worker serves a new session), and
// hostile bytes on a server's port. Every wait is bounded; every child is killed at the end.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "core/host_blocks.h"
#include "host/child_process.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using internal::ChildProcess;


// A cluster of `tessera server` processes: jobs -> task count, on free loopback ports.
class Cluster {
 public:
  explicit Cluster(std::vector<std::pair<std::string, int>> jobs) {
    json_ = "{";
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      json_ += (j ? ", \"" : "\"") + jobs[j].first + "\": [";
      for (int t = 0; t < jobs[j].second; ++t) {
        const std::string address = "127.0.0.1:" + std::to_string(tessera::train::free_loopback_port());
        addresses_[{jobs[j].first, t}] = address;
        json_ += (t ? ", \"" : "\"") + address + "\"";
      }
      json_ += "]";
    }
    json_ += "}";
    for (const auto& [task, address] : addresses_) start(task.first, task.second);
  }

  // Starts (or restarts) a task; true once it listens.
  bool start(const std::string& job, int task) {
    auto& child = children_[{job, task}];
    child.reset();
    for (int attempt = 0; attempt < 50; ++attempt) {  // a restarted task may find its port in TIME_WAIT briefly
      child = std::make_unique<ChildProcess>(std::vector<std::string>{TESSERA_CLI_PATH, "server", "--cluster", json_,
                                                                      "--job", job, "--task", std::to_string(task)});
      auto line = child->read_line(60s);
      if (line && line->find("listening on") != std::string::npos) return true;
      child.reset();
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "could not start /job:" << job << "/task:" << task;
    return false;
  }
  void kill9(const std::string& job, int task) {
    auto& child = children_.at({job, task});
    child->signal(SIGKILL);
    child->wait_exit(10s);
  }
  // Sends `signo`; for SIGSTOP, returns once the task is stopped (the signal is asynchronous: a
  // thread running on another core could otherwise still answer a call).
  void signal(const std::string& job, int task, int signo) {
    ChildProcess& child = *children_.at({job, task});
    child.signal(signo);
    if (signo != SIGSTOP) return;
    for (auto until = Clock::now() + 10s; Clock::now() < until; std::this_thread::sleep_for(5ms)) {
      std::ifstream stat("/proc/" + std::to_string(child.pid()) + "/stat");
      std::string pid, comm, state;
      stat >> pid >> comm >> state;  // the command name has no spaces: "(tessera)"
      if (state == "T" || state == "t") return;
    }
    ADD_FAILURE() << "/job:" << job << "/task:" << task << " did not stop";
  }
  std::string target(const std::string& job, int task) const { return "tessera://" + addresses_.at({job, task}); }
  std::string endpoint(const std::string& job, int task) const { return "tcp://" + addresses_.at({job, task}); }

 private:
  std::string json_;
  std::map<std::pair<std::string, int>, std::string> addresses_;
  std::map<std::pair<std::string, int>, std::unique_ptr<ChildProcess>> children_;
};

SessionOptions options(std::chrono::milliseconds rpc_timeout = 5000ms) {
  SessionOptions o;
  o.rpc_timeout = rpc_timeout;
  return o;
}

// Note [Malloc settings for servers]: `tessera server` runs again, as the same process, with
// glibc's per-thread cache off, and serves (host_blocks_test checks the call's other cases). glibc
// splits GLIBC_TUNABLES at its colons in the memory /proc shows, hence a search of the whole.
TEST(ClusterProcessTest, AServerRunsAgainWithTheTcacheOff) {
  if (!internal::decide_malloc_tuning([](const char*) -> const char* { return nullptr; }).applied) {
    GTEST_SKIP() << "the malloc settings do not apply to this build";
  }
  const std::vector<std::string> env = testing::environment_without_malloc_settings();
  const std::string address = train::free_loopback_address();
  ChildProcess server({TESSERA_CLI_PATH, "server", "--cluster", "{\"worker\": [\"" + address + "\"]}", "--job",
                       "worker", "--task", "0"},
                      env);
  auto line = server.read_line(60s);
  ASSERT_TRUE(line && line->find("listening on") != std::string::npos) << server.stderr_text();
  std::ifstream in("/proc/" + std::to_string(server.pid()) + "/environ");
  const std::string environment((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(environment.find(std::string("GLIBC_TUNABLES=glibc.malloc.tcache_count=0")), std::string::npos);
  Graph g;
  auto sum = ops::add(ops::constant(g, 2.0f), ops::constant(g, 3.0f));
  Session s(g, "tessera://" + address, options());
  EXPECT_FLOAT_EQ(s.run(sum).scalar<float>(), 5.0f);
  s.close();
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait_exit(10s).has_value());
}

// `tessera server --busy-poll US` (ServerOptions::busy_poll) says so when it starts, and serves a
// stream of small runs.
TEST(ClusterProcessTest, ABusyPollingServerSaysSoAndServesSmallRuns) {
  const std::string address = train::free_loopback_address();
  ChildProcess server({TESSERA_CLI_PATH, "server", "--cluster", "{\"worker\": [\"" + address + "\"]}", "--job",
                       "worker", "--task", "0", "--busy-poll", "100"});
  auto line = server.read_line(60s);
  ASSERT_TRUE(line && line->find("listening on") != std::string::npos) << server.stderr_text();
  EXPECT_NE(line->find("(busy polling 100 us)"), std::string::npos) << *line;
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::add(x, ops::constant(g, 1.0f), "y");
  Session s(g, "tessera://" + address, options());
  for (int i = 0; i < 200; ++i) {
    ASSERT_FLOAT_EQ(s.run(y, {{x, Tensor::scalar(static_cast<float>(i))}}).scalar<float>(), i + 1.0f) << "run " << i;
  }
  s.close();
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait_exit(10s).has_value());
}

TEST(ClusterProcessTest, CrossTaskArithmeticAndA64MiBTensor) {
  Cluster cluster({{"worker", 2}});
  Graph g;
  const int64_t n = 16 * 1024 * 1024;  // 64 MiB of float32
  auto x = ops::placeholder(g, DType::Float32, Shape{n}, "x");
  Output y, small;
  {
    auto scope = g.device("/job:worker/task:1");
    y = ops::mul(x, ops::constant(g, Tensor::scalar<float>(2)), "y");
    small = ops::add(ops::constant(g, Tensor::scalar<int32_t>(40)), ops::constant(g, Tensor::scalar<int32_t>(2)));
  }
  auto z = ops::sub(y, x, "z");  // on task 0: = x
  auto total = ops::mul(small, ops::constant(g, Tensor::scalar<int32_t>(10)), "total");
  Session s(g, cluster.target("worker", 0), options());
  EXPECT_EQ(s.run(total).scalar<int32_t>(), 420);
  std::vector<float> data(static_cast<std::size_t>(n));
  std::mt19937 rng(7);
  for (auto& v : data) v = static_cast<float>(rng() % 100000);
  auto out = s.run(z, {{x, Tensor::vector<float>(data)}}).to_vector<float>();
  ASSERT_EQ(out.size(), data.size());
  int64_t wrong = 0;
  for (std::size_t i = 0; i < out.size(); ++i) wrong += out[i] != data[i];
  EXPECT_EQ(wrong, 0);
}

TEST(ClusterProcessTest, PsVariableSharedByTwoClientsExactAfterConcurrentAssignAdd) {
  Cluster cluster({{"ps", 1}, {"worker", 2}});
  struct Client {
    Graph g;
    Variable v;
    Output add;
    std::unique_ptr<Session> s;
  };
  auto make = [&](int worker) {
    auto c = std::make_unique<Client>();
    {
      auto scope = c->g.device("/job:ps/task:0");
      c->v = Variable(c->g, Tensor::scalar<int64_t>(0), "counter");
    }
    c->add = c->v.assign_add(ops::constant(c->g, Tensor::scalar<int64_t>(1)));
    c->s = std::make_unique<Session>(c->g, cluster.target("worker", worker), options());
    return c;
  };
  auto c0 = make(0);
  auto c1 = make(1);
  c0->s->run(c0->v.initializer());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    Client* c = t % 2 == 0 ? c0.get() : c1.get();
    threads.emplace_back([c, &errors] {
      for (int i = 0; i < 500; ++i) {
        try {
          c->s->run(c->add);
        } catch (const Error& e) {
          if (errors++ == 0) ADD_FAILURE() << e.what();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(c0->s->run(c0->v.value()).scalar<int64_t>(), 2000);
  EXPECT_EQ(c1->s->run(c1->v.value()).scalar<int64_t>(), 2000);
}

TEST(ClusterProcessTest, KilledWorkerIsUnavailableWithinTheBoundAndARestartedOneServes) {
  Cluster cluster({{"worker", 2}});
  Graph g;
  // A step that blocks on task 1 (a dequeue from an empty queue there), so the kill hits it mid-run.
  Output deq, remote;
  {
    auto scope = g.device("/job:worker/task:1");
    FIFOQueue q(g, 2, {DType::Float32}, {Shape{}}, "q");
    deq = q.dequeue()[0];
    remote = ops::neg(ops::constant(g, Tensor::scalar<float>(5)), "remote");
  }
  auto local = ops::square(ops::constant(g, Tensor::scalar<float>(3)), "local");
  auto result = ops::add(deq, local, "result");
  Session s(g, cluster.target("worker", 0), options(2000ms));
  EXPECT_EQ(s.run(remote).scalar<float>(), -5.0f);
  std::atomic<int> code{-1};
  std::string message;
  Clock::time_point failed_at;
  std::thread blocked([&] {
    try {
      s.run(result);
      code = 0;
    } catch (const Error& e) {
      message = e.what();
      failed_at = Clock::now();
      code = static_cast<int>(e.code());
    }
  });
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(code.load(), -1) << "the step should be blocked on task 1's queue";
  const auto killed_at = Clock::now();
  cluster.kill9("worker", 1);
  ASSERT_TRUE(tessera::testing::wait_until([&] { return code.load() != -1; }, 15s));
  blocked.join();
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::kUnavailable)) << message;
  EXPECT_NE(message.find("/job:worker/replica:0/task:1"), std::string::npos) << message;
  EXPECT_LT(failed_at - killed_at, 10s);  // the default bound; in practice milliseconds (the connection resets)
  // Runs not touching task 1 keep working.
  EXPECT_EQ(s.run(local).scalar<float>(), 9.0f);
  // A restarted task 1 serves a new session.
  ASSERT_TRUE(cluster.start("worker", 1));
  Session fresh(g, cluster.target("worker", 0), options());
  EXPECT_EQ(fresh.run(remote).scalar<float>(), -5.0f);
}

// A ps killed mid-training and restarted comes back empty; restoring the latest checkpoint puts
// back the state of that checkpoint, and training continues from there.
TEST(ClusterProcessTest, PsKilledMidTrainingResumesFromTheLatestCheckpoint) {
  Cluster cluster({{"ps", 1}, {"worker", 1}});
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera_ps_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Graph g;
  Variable step_count, w;
  {
    auto scope = g.device("/job:ps/task:0");
    step_count = Variable(g, Tensor::scalar<int64_t>(0), "global_step");
    w = Variable(g, Tensor::scalar<float>(0), "w");
  }
  auto train = ops::group({step_count.assign_add(ops::constant(g, Tensor::scalar<int64_t>(1))).op(),
                           w.assign_add(ops::constant(g, Tensor::scalar<float>(0.5f))).op()});
  train::Saver saver(g);
  int64_t saved_step = 0;
  {
    Session s(g, cluster.target("worker", 0), options());
    s.run(global_variables_initializer(g));
    for (int i = 1; i <= 25; ++i) {
      s.run(train);
      if (i % 10 == 0) {
        saver.save(s, (dir / "model").string(), i);
        saved_step = i;
      }
    }
    cluster.kill9("ps", 0);  // steps 21..25 are lost with it
    EXPECT_THROW(s.run(train), UnavailableError);
  }
  ASSERT_TRUE(cluster.start("ps", 0));
  Session s(g, cluster.target("worker", 0), options());
  // The restarted ps is empty: its variables must be restored before use.
  EXPECT_THROW(s.run(w.value()), FailedPreconditionError);
  auto latest = train::latest_checkpoint(dir.string());
  ASSERT_TRUE(latest);
  saver.restore(s, *latest);
  EXPECT_EQ(s.run(step_count.value()).scalar<int64_t>(), saved_step);
  EXPECT_EQ(saved_step, 20);
  EXPECT_FLOAT_EQ(s.run(w.value()).scalar<float>(), 0.5f * 20);
  for (int i = 0; i < 5; ++i) s.run(train);
  EXPECT_EQ(s.run(step_count.value()).scalar<int64_t>(), 25);
  fs::remove_all(dir);
}

// A worker that stops answering (SIGSTOP: its sockets stay open, nothing replies) fails the runs
// that need it within the heartbeat timeout; runs not touching it carry on; after SIGCONT it serves
// the same session again.
TEST(ClusterProcessTest, StoppedWorkerFailsItsRunsInBoundedTimeAndServesAgainAfterSigcont) {
  Cluster cluster({{"worker", 2}});
  Graph g;
  Output remote;
  {
    auto scope = g.device("/job:worker/task:1");
    remote = ops::neg(ops::constant(g, Tensor::scalar<float>(5)), "remote");
  }
  auto local = ops::square(ops::constant(g, Tensor::scalar<float>(3)), "local");
  Session s(g, cluster.target("worker", 0), options(2000ms));
  EXPECT_EQ(s.run(remote).scalar<float>(), -5.0f);
  cluster.signal("worker", 1, SIGSTOP);
  const auto t0 = Clock::now();
  EXPECT_THROW_MSG(s.run(remote), UnavailableError, "/job:worker/replica:0/task:1");  // a stopped task
  EXPECT_LT(Clock::now() - t0, 10s);
  EXPECT_EQ(s.run(local).scalar<float>(), 9.0f);
  cluster.signal("worker", 1, SIGCONT);
  bool served = false;
  for (auto until = Clock::now() + 15s; !served && Clock::now() < until;) {
    try {
      served = s.run(remote).scalar<float>() == -5.0f;
    } catch (const UnavailableError&) {
      std::this_thread::sleep_for(100ms);  // reconnecting
    }
  }
  EXPECT_TRUE(served);
}

TEST(ClusterProcessTest, GarbageAndTruncatedFramesLeaveTheServerServing) {
  Cluster cluster({{"worker", 1}});
  // Raw TCP garbage (not even ZMTP).
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::string ep = cluster.endpoint("worker", 0);
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1))));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    std::mt19937 rng(1);
    std::string junk(4096, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    [[maybe_unused]] auto n = ::write(fd, junk.data(), junk.size());
    ::close(fd);
  }
  // Well-framed ZeroMQ messages whose contents are garbage or cut short.
  {
    zmq::context_t ctx;
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(cluster.endpoint("worker", 0));
    std::mt19937 rng(2);
    for (int i = 0; i < 200; ++i) {
      std::string junk(static_cast<std::size_t>(rng() % 64), '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      // Our envelope's magic with a random call id, then a header that is junk or truncated.
      std::string call_id = std::string("TRP1") + std::string(8, static_cast<char>(i));
      dealer.send(zmq::buffer(call_id), zmq::send_flags::sndmore);
      dealer.send(zmq::buffer(junk), zmq::send_flags::none);
    }
    std::this_thread::sleep_for(200ms);
  }
  Graph g;
  auto c = ops::add(ops::constant(g, Tensor::scalar<float>(1)), ops::constant(g, Tensor::scalar<float>(2)));
  Session s(g, cluster.target("worker", 0), options());
  EXPECT_EQ(s.run(c).scalar<float>(), 3.0f);
}

}  // namespace
}  // namespace tessera
