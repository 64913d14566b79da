// Port 0 in a cluster (API.md, Clusters): a Server whose own address has port 0 binds a free port
// and reports it in target(); its master reaches its own worker there; a task of port 0 that is not
// this one cannot be reached, and a session that needs it fails at once with InvalidArgumentError
// naming it. Ports TensorFlow's server_lib_test.py (create_local_server steps, the invalid
// hostname, two servers on one port, the unstarted server of {"localhost": ["localhost:0"]}) and
// server_lib_sparse_job_test.py (task 37 of a sparse job at "localhost:0").
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using train::ClusterSpec;
using train::Server;

int port_of(const std::string& target) { return std::stoi(target.substr(target.rfind(':') + 1)); }

TEST(ServerPortZeroTest, ASparseJobsTaskOnPortZeroServesASession) {
  Server server(ClusterSpec(ClusterSpec::SparseJobs{{"local", {{37, "localhost:0"}}}}), "local", 37);
  const std::string target = server.target();
  EXPECT_THAT(target, ::testing::StartsWith("tessera://localhost:"));
  EXPECT_GT(port_of(target), 0) << target;
  Graph g;
  Output a;
  {
    auto scope = g.device("/job:local/task:37");
    a = ops::constant(g, Tensor::scalar(1.0f));
  }
  Session s(g, target);
  EXPECT_EQ(s.run(a).scalar<float>(), 1.0f);
  EXPECT_THAT(a.op().assigned_device(), HasSubstr("/job:local/replica:0/task:37"));
}

// TensorFlow's testSetConfiguration builds this server unstarted: its target has port 0 until it
// starts, then the port it bound, which a restart binds again.
TEST(ServerPortZeroTest, TheTargetHasTheBoundPortOnceStartedAndARestartKeepsIt) {
  Server server(ClusterSpec({{"localhost", {"localhost:0"}}}), "localhost", 0, {}, /*start=*/false);
  EXPECT_EQ(server.target(), "tessera://localhost:0");
  EXPECT_EQ(server.cluster().task_address("localhost", 0), "localhost:0");  // the cluster as given
  server.start();
  const std::string bound = server.target();
  ASSERT_GT(port_of(bound), 0) << bound;
  Graph g;
  auto c = ops::constant(g, Tensor::matrix<float>({2, 1}, 1, 2));
  auto d = ops::constant(g, Tensor::matrix<float>({1, 2}, 2, 1));
  auto e = ops::matmul(c, d);
  {
    Session s(g, bound);
    EXPECT_EQ(s.run(e).to_vector<float>(), std::vector<float>{4});
  }
  server.stop();
  server.start();  // the port is free again once stop() returns
  EXPECT_EQ(server.target(), bound);
  Session again(g, bound);
  EXPECT_EQ(again.run(e).to_vector<float>(), std::vector<float>{4});
}

// Two tasks of port 0: each binds a port of its own. A session on task 0 runs what is on task 0;
// what needs task 1 fails at once, saying why, instead of waiting for a port that is not there.
TEST(ServerPortZeroTest, AnotherTaskOnPortZeroCannotBeReachedAndTheErrorSaysWhy) {
  ClusterSpec cluster({{"local", {"localhost:0", "localhost:0"}}});
  Server t0(cluster, "local", 0);
  Server t1(cluster, "local", 1);
  EXPECT_NE(t0.target(), t1.target());
  Graph g;
  auto here = ops::constant(g, Tensor::scalar(3.0f));
  Output there;
  {
    auto scope = g.device("/job:local/task:1");
    there = ops::constant(g, Tensor::scalar(4.0f));
  }
  SessionOptions options;
  options.rpc_timeout = 60s;  // an error at once, not this
  Session s(g, t0.target(), options);
  EXPECT_EQ(s.run(here).scalar<float>(), 3.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    s.run(there);
    ADD_FAILURE() << "a task of port 0 was reached";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/job:local/replica:0/task:1"));
    EXPECT_THAT(e.what(), HasSubstr("localhost:0"));
    EXPECT_THAT(e.what(), HasSubstr("port 0"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  // Task 1 itself serves it.
  Session on_t1(g, t1.target());
  EXPECT_EQ(on_t1.run(there).scalar<float>(), 4.0f);
}

// A session cannot be made on port 0 itself: it names no server (TensorFlow's testResetFails
// waits for a deadline there; an error at once says more).
TEST(ServerPortZeroTest, ASessionOnPortZeroIsInvalidArgumentAtOnce) {
  Graph g;
  ops::constant(g, Tensor::scalar(1.0f));
  try {
    Session s(g, "tessera://localhost:0");
    ADD_FAILURE() << "a session on port 0 was made";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("port 0 names no server"));
  }
}

// TensorFlow's testRunStep and testMultipleSessions on create_local_server().
TEST(ServerPortZeroTest, TheLocalServerStillServesSeveralSessions) {
  Server server = Server::create_local_server();
  EXPECT_GT(port_of(server.target()), 0);
  EXPECT_EQ(server.cluster().task_address("localhost", 0), server.target().substr(std::string("tessera://").size()));
  Graph g;
  auto e = ops::matmul(ops::constant(g, Tensor::matrix<int32_t>({2, 1}, 1, 2)),
                       ops::constant(g, Tensor::matrix<int32_t>({1, 2}, 2, 1)));
  Session s1(g, server.target());
  Session s2(g, server.target());
  EXPECT_EQ(s1.run(e).to_vector<int32_t>(), std::vector<int32_t>{4});
  EXPECT_EQ(s2.run(e).to_vector<int32_t>(), std::vector<int32_t>{4});
}

// TensorFlow's testInvalidHostname and testTwoServersSamePort.
TEST(ServerPortZeroTest, AnAddressWithoutAPortAndATakenPortAreRefused) {
  try {
    Server bad(ClusterSpec({{"local", {"localhost"}}}), "local", 0);
    ADD_FAILURE() << "an address without a port was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("port"));
  }
  Server server = Server::create_local_server();
  const std::string address = server.target().substr(std::string("tessera://").size());
  EXPECT_THROW(Server(ClusterSpec({{"local_2", {address}}}), "local_2", 0), UnavailableError);
}

// `tessera server` on a port-0 address prints the port it bound in its ready line.
TEST(ServerPortZeroTest, TheServerCommandReportsThePortItBound) {
  train::ServerProcess task(TESSERA_CLI_PATH, "{\"worker\": [\"127.0.0.1:0\"]}", "worker", 0);
  ASSERT_GT(port_of(task.target()), 0) << task.ready_line();
  Graph g;
  auto x = ops::add(ops::constant(g, Tensor::scalar(20.0f)), ops::constant(g, Tensor::scalar(22.0f)));
  Session s(g, task.target());
  EXPECT_EQ(s.run(x).scalar<float>(), 42.0f);
}

}  // namespace
}  // namespace tessera
