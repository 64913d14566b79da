// Sessions on a cluster target, with every task's Server in this process (the multi-process
// versions are in cluster_process_test.cc): placement across tasks, tensors crossing tasks,
// variables shared by sessions, errors, deadlines, dead tasks, close() and stop().
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/device_factory.h"
#include "device/sim_device.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using train::ClusterSpec;
using train::Server;
using train::ServerOptions;

std::string loopback() { return tessera::train::free_loopback_address(); }

// The deadline of calls between tasks and to the master: the default (10 s), which also leaves
// sanitizer builds on a loaded machine time to register partitions. Tests of the bound itself
// set a shorter one.
ServerOptions quick() { return ServerOptions{}; }

SessionOptions client_options() { return SessionOptions{}; }

// Two tasks of one job, both in this process.
struct TwoTasks {
  explicit TwoTasks(const std::string& job)
      : cluster({{job, {loopback(), loopback()}}}), task0(cluster, job, 0, quick()), task1(cluster, job, 1, quick()) {}
  ClusterSpec cluster;
  Server task0;
  Server task1;
};

// One ps task and one worker task, both in this process: the cluster of the tests that keep
// variables on a ps.
struct PsAndWorker {
  PsAndWorker()
      : cluster({{"ps", {loopback()}}, {"worker", {loopback()}}}),
        ps(cluster, "ps", 0, quick()),
        worker(cluster, "worker", 0, quick()) {}
  ClusterSpec cluster;
  Server ps;
  Server worker;
};

// A variable of `g` placed on `device` (a ps task's).
Variable variable_on(Graph& g, const std::string& device, Tensor initial, const std::string& name) {
  auto scope = g.device(device);
  return Variable(g, std::move(initial), name);
}

TEST(ClusterSessionTest, LocalServerRunsFeedsAndFetches) {
  Server server = Server::create_local_server();
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, Shape{2}, "a");
  auto b = ops::constant(g, Tensor::vector<float>({10, 20}), "b");
  auto c = ops::add(a, b);
  Session s(g, server.target());
  auto out = s.run({c, a}, {{a, Tensor::vector<float>({1, 2})}});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 2}));  // a fed tensor, fetched
  // Ops added after the session was created are sent on the next run.
  auto d = ops::mul(c, ops::constant(g, Tensor::scalar<float>(2)));
  EXPECT_EQ(s.run(d, {{a, Tensor::vector<float>({0, 0})}}).to_vector<float>(), (std::vector<float>{20, 40}));
}

// A process's sessions on one master share one connection (and its I/O thread), as TF's clients
// share a gRPC channel: 600 sessions (a channel each would need 1,800 ZeroMQ sockets, past a
// context's 1,023) open, run and close, and the process holds no more threads or descriptors for
// them. Once the last is gone, the next session connects afresh.
TEST(ClusterSessionTest, SessionsOfAProcessShareOneConnectionToTheirMaster) {
  Server server = Server::create_local_server();
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, Shape{}, "a");
  auto c = ops::add(a, ops::constant(g, Tensor::scalar<float>(1)), "c");
  const int pid = static_cast<int>(::getpid());
  {
    Session first(g, server.target());
    ASSERT_EQ(first.run(c, {{a, Tensor::scalar<float>(1)}}).scalar<float>(), 2.0f);
    const int threads = testing::threads_of(pid);
    const int fds = testing::open_fds(pid);
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < 600; ++i) {
      sessions.push_back(std::make_unique<Session>(g, server.target()));
      ASSERT_EQ(sessions.back()->run(c, {{a, Tensor::scalar<float>(static_cast<float>(i))}}).scalar<float>(),
                static_cast<float>(i + 1))
          << "session " << i;
    }
    EXPECT_LE(testing::threads_of(pid), threads + 4);
    EXPECT_LE(testing::open_fds(pid), fds + 4);
    sessions.clear();
    EXPECT_EQ(first.run(c, {{a, Tensor::scalar<float>(7)}}).scalar<float>(), 8.0f);
  }
  Session again(g, server.target());
  EXPECT_EQ(again.run(c, {{a, Tensor::scalar<float>(9)}}).scalar<float>(), 10.0f);
}

// A tensor fetched twice comes back twice, as in-process; a fed tensor fetched twice too.
TEST(ClusterSessionTest, ATensorFetchedTwiceComesBackTwice) {
  Server server = Server::create_local_server();
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, Shape{3}, "a");
  auto c = ops::add(a, ops::constant(g, Tensor::vector<float>({1, 2, 3})), "c");
  Session s(g, server.target());
  const FeedMap feeds{{a, Tensor::vector<float>({10, 20, 30})}};
  auto out = s.run({c, c, a, c, a}, feeds);
  ASSERT_EQ(out.size(), 5u);
  for (int i : {0, 1, 3}) EXPECT_EQ(out[i].to_vector<float>(), (std::vector<float>{11, 22, 33})) << i;
  for (int i : {2, 4}) EXPECT_EQ(out[i].to_vector<float>(), (std::vector<float>{10, 20, 30})) << i;
  Session local(g);
  auto want = local.run({c, c, a, c, a}, feeds);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(out[i].equals(want[i])) << i;
}

// The same across tasks: the tensor is made on the other task, fetched twice, with its input fed
// twice over (once per name, which is the one feed).
TEST(ClusterSessionTest, ATensorOfAnotherTaskFetchedTwiceComesBackTwice) {
  TwoTasks tasks("local");
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, Shape{3}, "a");
  Output c, d;
  {
    auto scope = g.device("/job:local/task:1");
    c = ops::add(a, ops::constant(g, Tensor::vector<float>({1, 2, 3})), "c");
    d = ops::mul(c, c, "d");
  }
  Session s(g, tasks.task0.target());
  const FeedMap feeds{{a, Tensor::vector<float>({10, 20, 30})}};
  auto out = s.run({c, d, c, d, a}, feeds);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{121, 484, 1089}));
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{121, 484, 1089}));
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{10, 20, 30}));
}

// The seed's example, made correct: two tasks of job "local", ops on both, ten threads running y.
TEST(ClusterSessionTest, SeedExampleTwoTasksTenThreads) {
  TwoTasks tasks("local");
  Graph g;
  auto x = ops::constant(g, Tensor::scalar<int32_t>(2), "x");
  Output y2, y;
  {
    auto scope = g.device("/job:local/task:1");
    y2 = ops::sub(x, ops::constant(g, Tensor::scalar<int32_t>(66)), "y2");
  }
  {
    auto scope = g.device("/job:local/task:0");
    auto y1 = ops::add(x, ops::constant(g, Tensor::scalar<int32_t>(300)), "y1");
    y = ops::add(y1, y2, "y");
  }
  Session s(g, tasks.task0.target());
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        try {
          (s.run(y).scalar<int32_t>() == 2 + 300 + 2 - 66 ? good : bad)++;
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
          bad++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 200);
  EXPECT_EQ(bad.load(), 0);
}

TEST(ClusterSessionTest, BigTensorCrossesTasksIntact) {
  TwoTasks tasks("worker");
  Graph g;
  const int64_t n = 16 * 1024 * 1024;  // 64 MiB of float32
  auto x = ops::placeholder(g, DType::Float32, Shape{n}, "x");
  Output y;
  {
    auto scope = g.device("/job:worker/task:1");
    y = ops::add(x, ops::constant(g, Tensor::scalar<float>(1)), "y");  // computed on task 1
  }
  auto z = ops::identity(y, "z");  // back on task 0
  std::vector<float> data(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000003);
  Session s(g, tasks.task0.target());
  auto out = s.run(z, {{x, Tensor::vector<float>(data)}}).to_vector<float>();
  ASSERT_EQ(out.size(), data.size());
  int64_t wrong = 0;
  for (std::size_t i = 0; i < out.size(); ++i) wrong += out[i] != data[i] + 1;
  EXPECT_EQ(wrong, 0);
  // The master placed y on task 1 and z on task 0, and said so to the client.
  EXPECT_EQ(y.op().assigned_device().rfind("/job:worker/replica:0/task:1/device:", 0), 0u) << y.op().assigned_device();
  EXPECT_EQ(z.op().assigned_device().rfind("/job:worker/replica:0/task:0/device:", 0), 0u) << z.op().assigned_device();
}

// A cluster session's placement comes back to the client's graph (Operation::assigned_device),
// for ops placed in later steps too, naming the task and device each op runs on.
TEST(ClusterSessionTest, AssignedDevicesOnTheClientNameTheTasks) {
  PsAndWorker tasks;
  Graph g;
  Variable v = variable_on(g, "/job:ps/task:0/device:CPU:0", Tensor::scalar<float>(1), "v");
  auto doubled = ops::mul(v.value(), ops::constant(g, Tensor::scalar<float>(2)), "doubled");
  Session s(g, tasks.worker.target());
  EXPECT_EQ(doubled.op().assigned_device(), "");  // nothing placed before a step needs it
  s.run(v.initializer());
  EXPECT_EQ(v.value().op().assigned_device(), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(doubled.op().assigned_device(), "");  // not in that step: not placed yet
  EXPECT_EQ(s.run(doubled).scalar<float>(), 2.0f);
  EXPECT_EQ(doubled.op().assigned_device().rfind("/job:worker/replica:0/task:0/device:", 0), 0u)
      << doubled.op().assigned_device();
  // Ops added after the session was made are placed and reported the same way.
  Output later;
  {
    auto scope = g.device("/job:ps/task:0");
    later = ops::add(v.value(), v.value(), "later");
  }
  EXPECT_EQ(s.run(later).scalar<float>(), 2.0f);
  EXPECT_EQ(later.op().assigned_device().rfind("/job:ps/replica:0/task:0/device:", 0), 0u) << later.op().assigned_device();
}

// A control input added to an op the cluster session already ran takes effect from the next run,
// also when it crosses tasks (TensorFlow 1 allows adding control inputs to a graph in use).
TEST(ClusterSessionTest, AControlInputAddedAfterTheSessionRanTheOpIsHonoured) {
  PsAndWorker tasks;
  Graph g;
  Variable counter;
  Operation bump;
  {
    auto scope = g.device("/job:ps/task:0");
    counter = Variable(g, Tensor::scalar<float>(0), "counter");
    bump = counter.assign_add(ops::constant(g, Tensor::scalar<float>(1))).op();
  }
  Operation marker;
  {
    auto scope = g.device("/job:worker/task:0");
    marker = ops::no_op(g, "marker");
  }
  Session s(g, tasks.worker.target());
  s.run(counter.initializer());
  s.run(marker);
  EXPECT_EQ(s.run(counter.value()).scalar<float>(), 0.0f);  // marker alone runs nothing else
  marker.add_control_input(bump);                            // ps -> worker: crosses tasks
  s.run(marker);
  EXPECT_EQ(s.run(counter.value()).scalar<float>(), 1.0f);
  s.run(marker);
  s.run(marker);
  EXPECT_EQ(s.run(counter.value()).scalar<float>(), 3.0f);
  // New ops and new control inputs together, the input being one of the new ops.
  Operation second;
  {
    auto scope = g.device("/job:ps/task:0");
    second = counter.assign_add(ops::constant(g, Tensor::scalar<float>(10))).op();
  }
  marker.add_control_input(second);
  s.run(marker);
  EXPECT_EQ(s.run(counter.value()).scalar<float>(), 14.0f);
}

// RunOptions::trace on a cluster target: one Chrome trace of the whole step, each task's ops on
// that task's devices, on the master's clock, inside the master's RunGraph call to their task.
TEST(ClusterSessionTest, TracedStepShowsEveryTasksOpsInsideItsRunGraphCall) {
  TwoTasks tasks("worker");
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{4}, "x");
  Output y, z;
  {
    auto scope = g.device("/job:worker/task:1");
    y = ops::mul(x, x, "remote_mul");
  }
  {
    auto scope = g.device("/job:worker/task:0");
    z = ops::add(y, x, "local_add");
  }
  Session s(g, tasks.task0.target());
  const FeedMap feed{{x, Tensor::vector<float>({1, 2, 3, 4})}};
  RunOptions traced;
  traced.trace = true;
  s.run({z}, feed, {}, traced, nullptr);  // plans and registers the partitions
  RunMetadata md;
  const auto before = Clock::now();
  auto out = s.run({z}, feed, {}, traced, &md);
  const auto step_us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - before).count();
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 6, 12, 20}));

  const auto trace = nlohmann::json::parse(md.trace_json);
  std::map<int, std::string> process;  // pid -> device (or the master's task)
  std::map<std::string, nlohmann::json> spans;  // name -> its complete event
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") process[e.at("pid").get<int>()] = e.at("args").at("name");
    if (e.at("ph") == "X") spans[e.at("name").get<std::string>()] = e;
  }
  ASSERT_TRUE(spans.count("remote_mul")) << md.trace_json;
  ASSERT_TRUE(spans.count("local_add")) << md.trace_json;
  ASSERT_TRUE(spans.count("RunGraph /job:worker/replica:0/task:1")) << md.trace_json;
  ASSERT_TRUE(spans.count("RunGraph /job:worker/replica:0/task:0")) << md.trace_json;
  auto device_of = [&](const std::string& name) { return process[spans[name].at("pid").get<int>()]; };
  EXPECT_EQ(device_of("remote_mul").rfind("/job:worker/replica:0/task:1/device:", 0), 0u) << device_of("remote_mul");
  EXPECT_EQ(device_of("local_add").rfind("/job:worker/replica:0/task:0/device:", 0), 0u) << device_of("local_add");
  EXPECT_EQ(device_of("RunGraph /job:worker/replica:0/task:1"), "/job:worker/replica:0/task:0");  // the master's
  // One clock: every span lies within the step as the client timed it, and each task's op within
  // the master's call to that task. Slack: the tasks' clocks are converted through the wall clock
  // (microseconds, measured apart), 5 ms covers that many times over.
  constexpr int64_t kSlackUs = 5000;
  auto start = [&](const std::string& name) { return spans[name].at("ts").get<int64_t>(); };
  auto end = [&](const std::string& name) { return start(name) + spans[name].at("dur").get<int64_t>(); };
  for (const auto& [name, e] : spans) {
    EXPECT_GE(start(name), -kSlackUs) << name;
    EXPECT_LE(end(name), step_us + kSlackUs) << name;
  }
  EXPECT_GE(start("remote_mul"), start("RunGraph /job:worker/replica:0/task:1") - kSlackUs);
  EXPECT_LE(end("remote_mul"), end("RunGraph /job:worker/replica:0/task:1") + kSlackUs);
  EXPECT_GE(start("local_add"), start("RunGraph /job:worker/replica:0/task:0") - kSlackUs);
  EXPECT_LE(end("local_add"), end("RunGraph /job:worker/replica:0/task:0") + kSlackUs);
  // local_add needs remote_mul's output, which crossed the tasks.
  EXPECT_GE(start("local_add"), end("remote_mul") - kSlackUs);

  RunMetadata untraced;
  s.run({z}, feed, {}, RunOptions{}, &untraced);
  EXPECT_TRUE(untraced.trace_json.empty()) << untraced.trace_json;
}

// Between-graph replication: two clients, each with its own graph and its own master, share the
// variable "counter" on the ps task; no update is lost.
TEST(ClusterSessionTest, VariableOnPsSharedByTwoClientsLosesNoUpdate) {
  ClusterSpec cluster({{"ps", {loopback()}}, {"worker", {loopback(), loopback()}}});
  Server ps(cluster, "ps", 0, quick());
  Server w0(cluster, "worker", 0, quick());
  Server w1(cluster, "worker", 1, quick());
  struct Client {
    Graph g;
    Variable v;
    Output add;
    std::unique_ptr<Session> s;
  };
  auto make = [&](const Server& server) {
    auto c = std::make_unique<Client>();
    {
      auto scope = c->g.device("/job:ps/task:0");
      c->v = Variable(c->g, Tensor::scalar<int64_t>(0), "counter");
    }
    c->add = c->v.assign_add(ops::constant(c->g, Tensor::scalar<int64_t>(1)));
    c->s = std::make_unique<Session>(c->g, server.target(), client_options());
    return c;
  };
  auto c0 = make(w0);
  auto c1 = make(w1);
  c0->s->run(c0->v.initializer());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    Client* c = t % 2 == 0 ? c0.get() : c1.get();
    threads.emplace_back([c] {
      for (int i = 0; i < 500; ++i) c->s->run(c->add);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c0->s->run(c0->v.value()).scalar<int64_t>(), 2000);
  EXPECT_EQ(c1->s->run(c1->v.value()).scalar<int64_t>(), 2000);
  // The variable outlives the sessions: a new session of a new client sees it.
  c0->s->close();
  auto c2 = make(w1);
  EXPECT_EQ(c2->s->run(c2->v.value()).scalar<int64_t>(), 2000);
}

// A Saver works through Session::run, so it saves and restores variables that live on a ps task.
TEST(ClusterSessionTest, SaverSavesAndRestoresVariablesOnAPsTask) {
  PsAndWorker tasks;
  Graph g;
  Variable v = variable_on(g, "/job:ps/task:0", Tensor::vector<float>({1, 2, 3}), "weights");
  auto bump = v.assign_add(ops::constant(g, Tensor::vector<float>({10, 10, 10})));
  train::Saver saver(g);
  Session s(g, tasks.worker.target(), client_options());
  s.run(v.initializer());
  namespace fs = std::filesystem;
  const fs::path dir_path = fs::temp_directory_path() / ("tessera_cluster_saver_" + std::to_string(::getpid()));
  fs::remove_all(dir_path);
  fs::create_directories(dir_path);
  const std::string dir = dir_path.string();
  const std::string path = saver.save(s, dir + "/model", 7);
  s.run(bump);
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{11, 12, 13}));
  saver.restore(s, path);
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(train::latest_checkpoint(dir), path);
  fs::remove_all(dir_path);
}

TEST(ClusterSessionTest, ErrorsKeepTheirTypeAndNameTheOp) {
  TwoTasks tasks("worker");
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, Shape::unknown(), "a");
  Output bad;
  {
    auto scope = g.device("/job:worker/task:1");
    bad = ops::matmul(a, a, false, false, "bad_matmul");
  }
  auto out = ops::identity(bad, "out");
  Session s(g, tasks.task0.target(), client_options());
  try {
    s.run(out, {{a, Tensor::vector<float>({1, 2, 3})}});
    FAIL() << "matmul of a vector ran";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_matmul"), std::string::npos) << e.what();
  }
  // A feed of the wrong dtype is refused by the master, naming the tensor.
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  EXPECT_THROW(s.run(ops::identity(p), {{p, Tensor::scalar<float>(1)}}), InvalidArgumentError);
  // And the session keeps working.
  EXPECT_EQ(s.run(out, {{a, Tensor::matrix<float>({1, 0, 0, 1}, 2, 2)}}).to_vector<float>(),
            (std::vector<float>{1, 0, 0, 1}));
}

TEST(ClusterSessionTest, TaskThatNeverCameUpIsUnavailableNamingItAndOthersKeepWorking) {
  ClusterSpec cluster({{"worker", {loopback(), loopback()}}});
  ServerOptions bound;
  bound.rpc_timeout = 2000ms;  // how long the master tries to reach task 1
  Server w0(cluster, "worker", 0, bound);  // task 1 is never started
  Graph g;
  auto x = ops::constant(g, Tensor::scalar<float>(3), "x");
  Output remote;
  {
    auto scope = g.device("/job:worker/task:1");
    remote = ops::neg(x, "remote");
  }
  auto local = ops::square(x, "local");
  Session s(g, w0.target(), client_options());  // does not wait for task 1
  const auto t0 = Clock::now();
  EXPECT_THROW_MSG(s.run(remote), UnavailableError, "/job:worker/replica:0/task:1");  // a task that is down
  EXPECT_LT(Clock::now() - t0, 2000ms + 10s);  // the bound, with slack for a loaded machine
  EXPECT_EQ(s.run(local).scalar<float>(), 9.0f);
}

TEST(ClusterSessionTest, RunTimeoutIsDeadlineExceeded) {
  Server server = Server::create_local_server();
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  Session s(g, server.target());
  RunOptions ro;
  ro.timeout = 200ms;
  EXPECT_THROW(s.run({deq}, {}, {}, ro), DeadlineExceededError);
}

TEST(ClusterSessionTest, CloseCancelsABlockedRun) {
  Server server = Server::create_local_server();
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  Session s(g, server.target());
  std::atomic<int> code{-1};
  std::thread blocked([&] {
    try {
      s.run(deq);
      code = 0;
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
    }
  });
  std::this_thread::sleep_for(200ms);
  s.close();
  ASSERT_TRUE(tessera::testing::wait_until([&] { return code.load() != -1; }, 5s));
  blocked.join();
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::kCancelled));
  // A run after close() names the session's master: an error seen far from its cause says whose
  // session it was.
  try {
    s.run(deq);
    ADD_FAILURE() << "a run after close() ran";
  } catch (const CancelledError& e) {
    EXPECT_NE(std::string(e.what()).find("attempted to use a closed session (on " + server.target()), std::string::npos)
        << e.what();
  }
}

TEST(ClusterSessionTest, ServerStopWithRunsInFlightCancelsThem) {
  ClusterSpec cluster({{"worker", {loopback()}}});
  auto server = std::make_unique<Server>(cluster, "worker", 0, quick());
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  Session s(g, server->target(), client_options());
  // Build the step's plan first (the run times out), so the runs below are in flight at once.
  RunOptions brief;
  brief.timeout = 50ms;
  EXPECT_THROW(s.run({deq}, {}, {}, brief), DeadlineExceededError);
  std::atomic<int> finished{0}, cancelled{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      try {
        s.run(deq);
      } catch (const CancelledError&) {
        cancelled++;
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
      }
      finished++;
    });
  }
  std::this_thread::sleep_for(300ms);
  const auto t0 = Clock::now();
  server->stop();
  EXPECT_LT(Clock::now() - t0, 3s);
  ASSERT_TRUE(tessera::testing::wait_until([&] { return finished.load() == 3; }, 5s));
  for (auto& t : threads) t.join();
  EXPECT_EQ(cancelled.load(), 3);
}

// A tensor over the task's limit is refused before it is allocated, and the session stays usable.
TEST(ClusterSessionTest, FeedOverTheServersTensorLimitIsResourceExhausted) {
  ServerOptions small;
  small.max_tensor_bytes = 1024;
  ClusterSpec cluster({{"worker", {loopback()}}});
  Server server(cluster, "worker", 0, small);
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  auto y = ops::reduce_sum(x);
  Session s(g, server.target(), client_options());
  try {
    s.run(y, {{x, Tensor::vector<float>(std::vector<float>(1024, 1.0f))}});  // 4 KiB
    FAIL() << "a 4 KiB feed passed a 1 KiB limit";
  } catch (const ResourceExhaustedError& e) {
    EXPECT_NE(std::string(e.what()).find("feed 'x:0'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.run(y, {{x, Tensor::vector<float>({1, 2, 3})}}).scalar<float>(), 6.0f);
  ServerOptions bad;
  bad.max_tensor_bytes = 0;
  EXPECT_THROW(Server(cluster, "worker", 0, bad, /*start=*/false), InvalidArgumentError);
}

// Busy polling everywhere (ServerOptions::busy_poll on both tasks: their servers and their channels
// to each other; SessionOptions::busy_poll on the client's channel): steps that cross tasks are
// right, many times over, and a SessionOptions.busy_poll out of range is refused naming it.
TEST(ClusterSessionTest, BusyPollingTasksAndClientRunCrossTaskSteps) {
  ServerOptions busy;
  busy.busy_poll = 200us;
  ClusterSpec cluster({{"worker", {loopback(), loopback()}}});
  Server w0(cluster, "worker", 0, busy);
  Server w1(cluster, "worker", 1, busy);
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  Output y;
  {
    auto scope = g.device("/job:worker/task:1");
    y = ops::mul(x, ops::constant(g, 2.0f), "y");
  }
  auto z = ops::add(y, ops::constant(g, 1.0f), "z");  // on task 0
  SessionOptions options = client_options();
  options.busy_poll = 200us;
  Session s(g, w0.target(), options);
  for (int i = 0; i < 200; ++i) {
    ASSERT_FLOAT_EQ(s.run(z, {{x, Tensor::scalar(static_cast<float>(i))}}).scalar<float>(), 2.0f * i + 1.0f) << i;
  }
  for (auto bad : {-1us, 10001us}) {
    SessionOptions o = client_options();
    o.busy_poll = bad;
    try {
      Session refused(g, w0.target(), o);
      ADD_FAILURE() << "a session with busy_poll " << bad.count() << " us was made";
    } catch (const InvalidArgumentError& e) {
      const std::string says = "SessionOptions.busy_poll must be in [0, 10000] us, got " + std::to_string(bad.count()) + " us";
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(ClusterSessionTest, BadTargetsAreInvalidArgument) {
  Graph g;
  ops::constant(g, Tensor::scalar<float>(1));
  EXPECT_THROW(Session(g, "tessera://nohostport"), InvalidArgumentError);
  EXPECT_THROW(Session(g, "tessera://127.0.0.1:notaport"), InvalidArgumentError);
  EXPECT_THROW(Session(g, "http://127.0.0.1:80"), InvalidArgumentError);
}

// Registers one simulated accelerator in this process unless there is one (the in-process servers
// place on this process's devices).
void ensure_a_sim_device() {
  auto& registry = internal::DeviceRegistry::global();
  auto sims = registry.find_all("/device:SIM:*");
  if (!sims.ok() || sims.value().empty()) {
    ASSERT_TRUE(internal::register_sim_devices(1, registry).ok());
  }
}

// Tensors that leave a task from an accelerator's memory (a variable on the ps's accelerator, read
// by a worker and fetched by the client, updated with a gradient from the worker) go through host
// memory first. A GPU where there is one; else a simulated accelerator stands in (its tensors are
// as foreign to the wire as a GPU's).
TEST(ClusterSessionTest, TensorsLeaveATaskFromAnAcceleratorsMemory) {
  auto& registry = internal::DeviceRegistry::global();
  ASSERT_TRUE(internal::local_devices().ok());
  auto gpus = registry.find_all("/device:GPU:*");
  const bool gpu = gpus.ok() && !gpus.value().empty();
  if (!gpu) {
    ASSERT_NO_FATAL_FAILURE(ensure_a_sim_device());
  }
  const std::string accelerator = gpu ? "GPU:0" : "SIM:0";
  PsAndWorker tasks;
  Graph g;
  Variable w;
  {
    auto scope = g.device("/job:ps/task:0/device:" + accelerator);
    w = Variable(g, Tensor::vector<float>({1, 2, 3}), "w");
  }
  Output y, delta;
  {
    auto scope = g.device("/job:worker/task:0");
    y = ops::mul(w.value(), ops::constant(g, 2.0f), "y");
    delta = ops::mul(y, ops::constant(g, 0.25f));  // w / 2, computed on the worker
  }
  Output step = w.assign_sub(delta);  // on the ps, with its variable
  Session s(g, tasks.worker.target());
  s.run(global_variables_initializer(g));
  auto out = s.run({y, w.value()});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  s.run(step);
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
  // One step that reads the variable across tasks and updates it (the ps's partition sends w and
  // assigns to it), as a parameter-server training step does.
  auto read = s.run({y}, {}, {step.op()});
  EXPECT_EQ(read[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{0.25f, 0.5f, 0.75f}));
}

// Sessions share a server task's variables by name. When two graphs place one on different
// devices (here the ps's simulated accelerator, then the ps's CPU), the kernel that finds the
// value in the other device's memory fails the step with FailedPrecondition naming the variable,
// rather than reading device memory as host memory; the graph that placed it consistently goes on.
TEST(ClusterSessionTest, AVariablePlacedOnTwoDevicesByTwoGraphsIsAClearError) {
  ASSERT_NO_FATAL_FAILURE(ensure_a_sim_device());
  PsAndWorker tasks;
  struct Model {
    Graph g;
    Variable w;
    Output y, step;
  };
  auto build = [](const std::string& device) {
    auto m = std::make_unique<Model>();
    {
      auto scope = m->g.device(device);
      m->w = Variable(m->g, Tensor::vector<float>({1, 2}), "w");
    }
    {
      auto scope = m->g.device("/job:worker/task:0");
      m->y = ops::mul(m->w.value(), ops::constant(m->g, 3.0f), "y");
    }
    m->step = m->w.assign_add(ops::constant(m->g, Tensor::vector<float>({1, 1})));
    return m;
  };
  auto on_sim = build("/job:ps/task:0/device:SIM:0");
  auto on_cpu = build("/job:ps/task:0/device:CPU:0");
  Session a(on_sim->g, tasks.worker.target());
  Session b(on_cpu->g, tasks.worker.target());
  a.run(global_variables_initializer(on_sim->g));
  EXPECT_EQ(a.run(on_sim->y).to_vector<float>(), (std::vector<float>{3, 6}));
  EXPECT_THROW_MSG(b.run(on_cpu->y), FailedPreconditionError, "must place it on the same device");
  EXPECT_THROW_MSG(b.run(on_cpu->step), FailedPreconditionError, "variable w holds its value in the memory of");
  a.run(on_sim->step);
  EXPECT_EQ(a.run(on_sim->y).to_vector<float>(), (std::vector<float>{6, 9}));
}

// A variable pinned only to its task goes to the task's accelerator whatever the graph and the
// policy (Note [Variables keep their device] in distributed/master_session.cc): a session whose
// cost model alone would put it on the ps's CPU (as the chief's evaluation session put the global
// step while training had it on the ps's GPU) uses it where it lives instead of failing; under
// cpu_only it goes to the CPU, and that graph then fails with the clear error.
TEST(ClusterSessionTest, AVariableNamingOnlyItsTaskGoesToItsAcceleratorWhateverTheGraph) {
  ASSERT_NO_FATAL_FAILURE(ensure_a_sim_device());
  PsAndWorker tasks;
  Graph g;
  Variable w = variable_on(g, "/job:ps/task:0", Tensor::vector<float>({1, 2}), "w");
  Output y;
  {
    auto scope = g.device("/job:worker/task:0");
    y = ops::mul(w.value(), ops::constant(g, 3.0f), "y");
  }
  Output step = w.assign_add(ops::constant(g, Tensor::vector<float>({1, 1})));
  SessionOptions accelerator_first;
  accelerator_first.placement_policy = PlacementPolicy::gpu_first;
  Session a(g, tasks.worker.target(), accelerator_first);
  a.run(global_variables_initializer(g));
  a.run(step);
  const std::string first = w.op().assigned_device();
  EXPECT_TRUE(first.find("/job:ps/replica:0/task:0/device:SIM:") == 0 ||
              first.find("/job:ps/replica:0/task:0/device:GPU:") == 0)
      << first;
  Session b(g, tasks.worker.target());  // the cost policy: alone, it puts w with its reader's host
  EXPECT_EQ(b.run(y).to_vector<float>(), (std::vector<float>{6, 9}));
  EXPECT_EQ(w.op().assigned_device(), first) << "b's placement, the latest, keeps the variable's device";
  b.run(step);
  EXPECT_EQ(a.run(w.value()).to_vector<float>(), (std::vector<float>{3, 4}));
  SessionOptions host_only;
  host_only.placement_policy = PlacementPolicy::cpu_only;
  Session c(g, tasks.worker.target(), host_only);
  EXPECT_THROW_MSG(c.run(y), FailedPreconditionError, "must place it on the same device");
}

// A ps that stops as soon as a worker's run has fed it (the "done" queue of TF1 jobs): the
// worker's run still gets its reply, as the run's work was done (Note [Goodbye] in
// transport/rpc_server_peers.cc: without it, a few rounds in forty failed Unavailable under load).
TEST(ClusterSessionTest, ARunThatLetsATaskStopStillGetsItsReply) {
  for (int round = 0; round < 40; ++round) {
    ClusterSpec cluster({{"ps", {loopback()}}, {"worker", {loopback()}}});
    auto ps = std::make_unique<Server>(cluster, "ps", 0, quick());
    Server worker(cluster, "worker", 0, quick());
    std::string ps_error;
    std::thread ps_main([&] {
      try {
        Graph g;
        FIFOQueue done(g, 1, {DType::Int32}, {Shape{}}, "done", "done");
        Session s(g, ps->target());
        RunOptions bounded;
        bounded.timeout = 20s;  // a worker run that never came must not hang the test
        s.run({done.dequeue()[0]}, {}, {}, bounded);
        s.close();
      } catch (const std::exception& e) {
        ps_error = e.what();
      }
      ps.reset();
    });
    Graph g;
    Operation enqueue;
    {
      auto scope = g.device("/job:ps/task:0");
      FIFOQueue done(g, 1, {DType::Int32}, {Shape{}}, "done", "done");
      enqueue = done.enqueue({ops::constant(g, 1)});
    }
    Session s(g, worker.target());
    EXPECT_NO_THROW(s.run(enqueue)) << "round " << round;
    s.close();
    ps_main.join();
    EXPECT_EQ(ps_error, "") << "round " << round;
  }
}

// A graph handle names one registration of one run of its task: a ps restarted at the same
// address must not give a new session's partition the handle an old session still holds. Here
// the old session is closed after the restart, so its master deregisters the handles it had; the
// new session's partition must survive that. (Seen as `tessera demo` failing "attempted to use a
// closed session" after its ps restart, when the handles were counters that began again at 1.)
TEST(ClusterSessionTest, ASessionOfAnEarlierRunOfATaskCannotDeregisterAGraphOfItsNextRun) {
  ClusterSpec cluster({{"ps", {loopback()}}, {"worker", {loopback()}}});
  auto ps = std::make_unique<Server>(cluster, "ps", 0, quick());
  Server worker(cluster, "worker", 0, quick());
  Graph g;
  Output y;
  {
    auto scope = g.device("/job:ps/task:0");
    y = ops::add(ops::placeholder(g, DType::Int32, Shape{}, "x"), ops::constant(g, 1));
  }
  const Output x = g.output("x");
  Session old_session(g, worker.target());
  EXPECT_EQ(old_session.run(y, {{x, Tensor::scalar(int32_t{1})}}).scalar<int32_t>(), 2);
  ps.reset();  // the ps's run ends; the next one starts at the same address, empty
  ps = std::make_unique<Server>(cluster, "ps", 0, quick());
  Session new_session(g, worker.target());
  EXPECT_EQ(new_session.run(y, {{x, Tensor::scalar(int32_t{2})}}).scalar<int32_t>(), 3);
  old_session.close();  // deregisters what the old session registered: on the ps's earlier run
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(new_session.run(y, {{x, Tensor::scalar(int32_t{i})}}).scalar<int32_t>(), i + 1) << "run " << i;
  }
}

// Note [Private resources] (distributed/worker.cc): as TensorFlow's, a queue without a shared
// name is its session's own, also on a ps task shared by two clients, and one with a shared name
// is the task's, shared by every session that names it.
TEST(ClusterSessionTest, QueuesWithoutASharedNameArePrivateToTheirSessionOnATask) {
  PsAndWorker tasks;
  struct Client {
    Graph g;
    FIFOQueue unnamed, named;
    Operation enqueue_unnamed, enqueue_named;
    Output unnamed_size, named_size, dequeued;
    std::unique_ptr<Session> s;
  };
  // The same op names in both clients' graphs; the unnamed queues' capacities differ, which a
  // shared queue would refuse ("shared queue 'fifo_queue' has capacity ...").
  auto make = [&](int capacity) {
    auto c = std::make_unique<Client>();
    {
      auto scope = c->g.device("/job:ps/task:0");
      c->unnamed = FIFOQueue(c->g, capacity, {DType::Int32}, {Shape{}});
      c->named = FIFOQueue(c->g, 8, {DType::Int32}, {Shape{}}, "work_queue");
    }
    c->enqueue_unnamed = c->unnamed.enqueue({ops::constant(c->g, capacity)});
    c->enqueue_named = c->named.enqueue({ops::constant(c->g, capacity)});
    c->unnamed_size = c->unnamed.size();
    c->named_size = c->named.size();
    c->dequeued = c->unnamed.dequeue()[0];
    c->s = std::make_unique<Session>(c->g, tasks.worker.target(), client_options());
    return c;
  };
  auto a = make(4);
  auto b = make(2);
  EXPECT_EQ(a->unnamed.op().name(), b->unnamed.op().name());
  RunOptions bounded;
  bounded.timeout = 20s;
  a->s->run(a->enqueue_unnamed);
  a->s->run(a->enqueue_unnamed);
  b->s->run(b->enqueue_unnamed);
  EXPECT_EQ(a->s->run(a->unnamed_size).scalar<int32_t>(), 2);
  EXPECT_EQ(b->s->run(b->unnamed_size).scalar<int32_t>(), 1);
  // Each dequeues its own elements, in another step signature (another partition) of its session.
  EXPECT_EQ(a->s->run({a->dequeued}, {}, {}, bounded)[0].scalar<int32_t>(), 4);
  EXPECT_EQ(b->s->run({b->dequeued}, {}, {}, bounded)[0].scalar<int32_t>(), 2);
  // The named queue is the task's: both clients' enqueues land in one queue.
  a->s->run(a->enqueue_named);
  b->s->run(b->enqueue_named);
  EXPECT_EQ(a->s->run(a->named_size).scalar<int32_t>(), 2);
  EXPECT_EQ(b->s->run(b->named_size).scalar<int32_t>(), 2);
  // A new session of the same graph starts with an empty private queue; the named one keeps its
  // elements, as variables outlive sessions.
  a->s->close();
  a->s = std::make_unique<Session>(a->g, tasks.worker.target(), client_options());
  EXPECT_EQ(a->s->run(a->unnamed_size).scalar<int32_t>(), 0);
  EXPECT_EQ(a->s->run(a->named_size).scalar<int32_t>(), 2);
}

// The epochs an input producer counts are its session's too (TF: a local variable each session
// initializes): a second client session of the same graph on the task reads its epoch again.
TEST(ClusterSessionTest, EachSessionOnATaskCountsItsOwnEpochs) {
  PsAndWorker tasks;
  Graph g;
  FIFOQueue q;
  Output next;
  {
    auto scope = g.device("/job:ps/task:0");
    q = train::input_producer(g, Tensor::vector<int32_t>({1, 2, 3}), /*num_epochs=*/1, /*shuffle=*/false);
    next = q.dequeue()[0];
  }
  RunOptions bounded;
  bounded.timeout = 20s;
  for (int session = 0; session < 2; ++session) {
    SCOPED_TRACE(session);
    Session s(g, tasks.worker.target(), client_options());
    train::Coordinator coord;
    auto threads = train::start_queue_runners(s, coord);
    std::vector<int32_t> got;
    try {
      for (int i = 0; i < 4; ++i) got.push_back(s.run({next}, {}, {}, bounded)[0].scalar<int32_t>());
    } catch (const OutOfRangeError&) {
    }
    coord.request_stop();
    coord.join(threads);
    EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
    s.close();
  }
}

}  // namespace
}  // namespace tessera
