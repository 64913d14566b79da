// Sessions of clients that vanished (Note [Idle sessions] in distributed/master.cc): a session with
// no call in flight for ServerOptions::session_idle_timeout is closed as CloseSession closes it (its
// partitions deregistered on the workers), later calls naming it say why, a run blocked in flight
// is never reclaimed, and ServerOptions::max_sessions bounds the sessions open at once. Once through
// a master and a worker of this process (where the workers' side can be watched), once through a
// Server and client Sessions.
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/timer.h"
#include "distributed/master.h"
#include "distributed/worker.h"
#include "tessera/tessera.h"

namespace tessera::internal {
namespace {

using namespace std::chrono_literals;
namespace pb = wire::pb;
using Clock = std::chrono::steady_clock;

// Whether `cond` holds within `limit`, asked every 20 ms (a question may cost a connection).
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

const std::string kWorker0 = "/job:worker/replica:0/task:0";

// Runs `call` and waits for its reply, at most `limit` (DeadlineExceeded past it): no test hangs.
template <class M, class Call>
StatusOr<M> call_within(Call&& call, std::chrono::milliseconds limit = 20s) {
  auto result = std::make_shared<std::promise<StatusOr<M>>>();
  auto ready = result->get_future();
  call([result](StatusOr<M> r) { result->set_value(std::move(r)); });
  if (ready.wait_for(limit) != std::future_status::ready) return errors::deadline_exceeded("no reply in time");
  return ready.get();
}

// The worker of this process, recording the graphs the master registers and deregisters.
class WatchedWorker final : public WorkerInterface {
 public:
  explicit WatchedWorker(std::shared_ptr<Worker> w) : w_(std::move(w)) {}
  void get_status(const pb::GetStatusRequest& r, Done<pb::GetStatusResponse> done) override {
    w_->get_status(r, std::move(done));
  }
  void register_graph(const pb::RegisterGraphRequest& r, Done<pb::RegisterGraphResponse> done) override {
    w_->register_graph(r, [this, done = std::move(done)](StatusOr<pb::RegisterGraphResponse> reply) {
      if (reply.ok()) {
        std::lock_guard<std::mutex> l(mu_);
        registered_.insert(reply.value().graph_handle());
      }
      done(std::move(reply));
    });
  }
  void run_graph(const pb::RunGraphRequest& r, std::vector<Tensor> send, Done<RunGraphReply> done) override {
    w_->run_graph(r, std::move(send), std::move(done));
  }
  void recv_tensor(const pb::RecvTensorRequest& r, Done<Tensor> done) override { w_->recv_tensor(r, std::move(done)); }
  void cleanup_graph(const pb::CleanupGraphRequest& r, Done<pb::CleanupGraphResponse> done) override {
    w_->cleanup_graph(r, std::move(done));
  }
  void deregister_graph(const pb::DeregisterGraphRequest& r, Done<pb::DeregisterGraphResponse> done) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      deregistered_.insert(r.graph_handle());
    }
    w_->deregister_graph(r, std::move(done));
  }
  std::set<std::string> registered() {
    std::lock_guard<std::mutex> l(mu_);
    return registered_;
  }
  std::set<std::string> deregistered() {
    std::lock_guard<std::mutex> l(mu_);
    return deregistered_;
  }

 private:
  const std::shared_ptr<Worker> w_;
  std::mutex mu_;
  std::set<std::string> registered_, deregistered_;  // guarded by mu_
};

class OneWorker final : public WorkerCache {
 public:
  OneWorker() : cluster_({{"worker", {"localhost:1"}}}) {}
  void set(WorkerInterface* w) { w_ = w; }
  StatusOr<WorkerInterface*> get(const std::string& task) override {
    if (task != kWorker0) return errors::invalid_argument("no task {}", task);
    return w_;
  }
  const train::ClusterSpec& cluster() const override { return cluster_; }
  std::chrono::milliseconds rpc_timeout() const override { return 10s; }

 private:
  const train::ClusterSpec cluster_;
  WorkerInterface* w_ = nullptr;
};

class MasterSessionGcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = std::make_shared<OneWorker>();
    worker_ = std::make_shared<Worker>(kWorker0, cache_);
    watched_ = std::make_unique<WatchedWorker>(worker_);
    cache_->set(watched_.get());
  }
  void TearDown() override {
    if (master_) master_->stop();
    worker_->stop(1s);
  }
  void make_master(std::chrono::milliseconds idle, int64_t max_sessions = Master::kDefaultMaxSessions) {
    master_ = std::make_unique<Master>(kWorker0, cache_, wire::kDefaultMaxGraphNodes, idle, max_sessions);
  }

  StatusOr<std::string> create(Graph& g) {
    pb::CreateSessionRequest request;
    request.set_version(wire::kWireVersion);
    *request.mutable_graph() = wire::encode_graph(g.impl()).value();
    auto r = call_within<pb::CreateSessionResponse>(
        [&](Done<pb::CreateSessionResponse> done) { master_->create_session(request, std::move(done)); });
    if (!r.ok()) return r.status();
    return r.value().session_handle();
  }
  StatusOr<RunStepReply> run(const std::string& handle, const std::vector<std::string>& fetches) {
    pb::RunStepRequest request;
    request.set_version(wire::kWireVersion);
    request.set_session_handle(handle);
    for (const auto& f : fetches) request.add_fetch(f);
    return call_within<RunStepReply>(
        [&](Done<RunStepReply> done) { master_->run_step(request, {}, std::move(done)); });
  }
  Status extend(const std::string& handle) {
    pb::ExtendSessionRequest request;
    request.set_version(wire::kWireVersion);
    request.set_session_handle(handle);
    return call_within<pb::ExtendSessionResponse>([&](Done<pb::ExtendSessionResponse> done) {
             master_->extend_session(request, std::move(done));
           }).status();
  }
  Status close(const std::string& handle) {
    pb::CloseSessionRequest request;
    request.set_version(wire::kWireVersion);
    request.set_session_handle(handle);
    return call_within<pb::CloseSessionResponse>(
               [&](Done<pb::CloseSessionResponse> done) { master_->close_session(request, std::move(done)); })
        .status();
  }

  std::shared_ptr<OneWorker> cache_;
  std::shared_ptr<Worker> worker_;
  std::unique_ptr<WatchedWorker> watched_;
  std::unique_ptr<Master> master_;
};

bool says_idle(const Status& st) {
  return st.code() == ErrorCode::kAborted && st.message().find("closed after being idle for") != std::string::npos &&
         st.message().find("ServerOptions::session_idle_timeout") != std::string::npos;
}

TEST_F(MasterSessionGcTest, AnIdleSessionIsClosedWithItsPartitionsAndLaterCallsSayWhy) {
  make_master(500ms);
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  auto handle = create(g);
  ASSERT_TRUE(handle.ok()) << handle.status().to_string();
  auto first = run(handle.value(), {y.name()});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FLOAT_EQ(first.value().tensor.at(0).scalar<float>(), 3.0f);
  const std::set<std::string> partitions = watched_->registered();
  ASSERT_FALSE(partitions.empty());
  EXPECT_EQ(master_->num_sessions(), 1u);

  ASSERT_TRUE(eventually([&] { return master_->num_sessions() == 0; }, 20s));
  // Closed as CloseSession closes: every partition deregistered, and gone from the worker.
  ASSERT_TRUE(eventually([&] { return watched_->deregistered() == partitions; }, 10s));
  for (const std::string& graph : partitions) {
    pb::RunGraphRequest request;
    request.set_version(wire::kWireVersion);
    request.set_graph_handle(graph);
    request.set_step_id(12345);
    auto stale = call_within<RunGraphReply>(
        [&](Done<RunGraphReply> done) { worker_->run_graph(request, {}, std::move(done)); });
    EXPECT_EQ(stale.status().code(), ErrorCode::kAborted) << stale.status().to_string();
  }
  auto again = run(handle.value(), {y.name()});
  EXPECT_TRUE(says_idle(again.status())) << again.status().to_string();
  EXPECT_NE(again.status().message().find(handle.value()), std::string::npos) << again.status().to_string();
  Status extended = extend(handle.value());
  EXPECT_TRUE(says_idle(extended)) << extended.to_string();
  // Closing it is not an error (a client calls close() at the end, however late).
  Status closed = close(handle.value());
  EXPECT_TRUE(closed.ok()) << closed.to_string();

  // The master serves new sessions as before.
  auto fresh = create(g);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  auto works = run(fresh.value(), {y.name()});
  ASSERT_TRUE(works.ok()) << works.status().to_string();
  EXPECT_FLOAT_EQ(works.value().tensor.at(0).scalar<float>(), 3.0f);
}

TEST_F(MasterSessionGcTest, OnlyTheLast1024ReclaimedHandlesAreRemembered) {
  make_master(100ms);
  Graph g;
  ops::constant(g, 1.0f, "c");
  const int n = static_cast<int>(Master::kRememberedReclaimed) + 6;
  std::vector<std::string> handles;
  for (int i = 0; i < n; ++i) {
    auto h = create(g);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    handles.push_back(h.value());
  }
  ASSERT_TRUE(eventually([&] { return master_->num_sessions() == 0; }, 30s));
  int idle = 0, unknown = 0;
  for (const std::string& h : handles) {
    auto r = run(h, {"c:0"});
    ASSERT_EQ(r.status().code(), ErrorCode::kAborted) << r.status().to_string();
    if (says_idle(r.status())) {
      ++idle;
    } else if (r.status().message().find("no session") != std::string::npos) {
      ++unknown;
    }
  }
  EXPECT_EQ(idle, static_cast<int>(Master::kRememberedReclaimed));
  EXPECT_EQ(unknown, n - idle);
}

// Only the master's own check is on the timer here: stop() takes it off, and a destroyed master is
// never touched by it.
TEST_F(MasterSessionGcTest, StopCancelsTheCheckAndNoSessionIsArmedWithoutATimeout) {
  const std::size_t before = TimerQueue::global().pending();
  Graph g;
  ops::constant(g, 1.0f, "c");
  make_master(0ms);  // never
  ASSERT_TRUE(create(g).ok());
  EXPECT_EQ(TimerQueue::global().pending(), before);
  master_.reset();
  make_master(1h);
  ASSERT_TRUE(create(g).ok());
  EXPECT_EQ(TimerQueue::global().pending(), before + 1);
  ASSERT_TRUE(create(g).ok());  // one check, whatever the number of sessions
  EXPECT_EQ(TimerQueue::global().pending(), before + 1);
  master_.reset();
  EXPECT_EQ(TimerQueue::global().pending(), before);
  // A check about to fire when its master goes.
  make_master(20ms);
  ASSERT_TRUE(create(g).ok());
  master_.reset();
  std::this_thread::sleep_for(100ms);
}

TEST_F(MasterSessionGcTest, TheSessionCapCountsOpenSessionsAndClosingFreesASlot) {
  make_master(1h, /*max_sessions=*/2);
  Graph g;
  ops::constant(g, 1.0f, "c");
  auto a = create(g);
  auto b = create(g);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = create(g);
  ASSERT_EQ(c.status().code(), ErrorCode::kResourceExhausted) << c.status().to_string();
  EXPECT_NE(c.status().message().find("has 2 open sessions (ServerOptions::max_sessions)"), std::string::npos)
      << c.status().to_string();
  EXPECT_EQ(master_->num_sessions(), 2u);  // the refused one made nothing
  ASSERT_TRUE(close(a.value()).ok());
  EXPECT_TRUE(create(g).ok());
}

// ---- Through a server and client sessions ----

using train::Server;
using train::ServerOptions;

ServerOptions with(std::chrono::milliseconds idle, int64_t max_sessions = 10'000) {
  ServerOptions o;
  o.session_idle_timeout = idle;
  o.max_sessions = max_sessions;
  return o;
}

// The timeouts here leave a loaded machine (a sanitizer build on two cores) time between a client's
// calls: a second's pause there would fail these tests, not a slow one.
constexpr std::chrono::milliseconds kTimeout = 1s;

TEST(ServerSessionGcTest, AnIdleSessionIsReclaimedAndFreesItsSlot) {
  // One slot: a second session gets in only once the first is reclaimed, which shows when without
  // touching the first (a run would restart its clock).
  Server server = Server::create_local_server(with(kTimeout, 1));
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  Session first(g, server.target());
  EXPECT_FLOAT_EQ(first.run(y).scalar<float>(), 3.0f);
  std::optional<Session> second;
  ASSERT_TRUE(eventually(
      [&] {
        try {
          second.emplace(g, server.target());
          return true;
        } catch (const ResourceExhaustedError&) {
          return false;
        }
      },
      20s));
  try {
    first.run(y);
    ADD_FAILURE() << "a reclaimed session ran";
  } catch (const AbortedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("closed after being idle for"), std::string::npos) << m;
    EXPECT_NE(m.find("ServerOptions::session_idle_timeout"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(first.close());  // closing a reclaimed session is not an error
  EXPECT_FLOAT_EQ(second->run(y).scalar<float>(), 3.0f);
}

TEST(ServerSessionGcTest, ARunBlockedLongerThanTheTimeoutIsNotReclaimed) {
  Server server = Server::create_local_server(with(kTimeout));
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  auto value = ops::placeholder(g, DType::Float32, Shape{}, "value");
  auto enq = q.enqueue({value});
  Session blocked(g, server.target());
  RunOptions bounded;  // no test hangs, even when the run is lost
  bounded.timeout = 30s;
  std::promise<float> got;
  auto got_future = got.get_future();
  std::thread dequeuer([&] {
    try {
      got.set_value(blocked.run({deq}, {}, {}, bounded)[0].scalar<float>());
    } catch (...) {
      got.set_exception(std::current_exception());
    }
  });
  // Three timeouts with the run in flight and nothing else on the session.
  EXPECT_EQ(got_future.wait_for(3 * kTimeout), std::future_status::timeout);
  Session other(g, server.target());
  other.run(enq, {{value, Tensor::scalar(7.0f)}});
  ASSERT_EQ(got_future.wait_for(25s), std::future_status::ready);
  dequeuer.join();
  EXPECT_FLOAT_EQ(got_future.get(), 7.0f);  // throws what the run raised (Cancelled when reclaimed)
  // Its clock restarted when the run ended: the session works on.
  blocked.run(enq, {{value, Tensor::scalar(8.0f)}});
  EXPECT_FLOAT_EQ(blocked.run(deq).scalar<float>(), 8.0f);
}

TEST(ServerSessionGcTest, ASessionUsedMoreOftenThanTheTimeoutSurvives) {
  Server server = Server::create_local_server(with(kTimeout));
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  Session s(g, server.target());
  const auto end = Clock::now() + 3 * kTimeout;
  int runs = 0;
  while (Clock::now() < end) {
    EXPECT_FLOAT_EQ(s.run(y).scalar<float>(), 3.0f);
    ++runs;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GE(runs, 10);
  EXPECT_FLOAT_EQ(s.run(y).scalar<float>(), 3.0f);
}

TEST(ServerSessionGcTest, AtTheCapCreatingASessionIsResourceExhaustedUntilOneCloses) {
  Server server = Server::create_local_server(with(1h, 2));
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  Session a(g, server.target());
  Session b(g, server.target());
  try {
    Session c(g, server.target());
    ADD_FAILURE() << "a third session was created";
  } catch (const ResourceExhaustedError& e) {
    EXPECT_NE(std::string(e.what()).find("has 2 open sessions (ServerOptions::max_sessions)"), std::string::npos)
        << e.what();
  }
  EXPECT_FLOAT_EQ(b.run(y).scalar<float>(), 3.0f);  // the open ones are unaffected
  a.close();
  Session d(g, server.target());
  EXPECT_FLOAT_EQ(d.run(y).scalar<float>(), 3.0f);
}

TEST(ServerSessionGcTest, InvalidLimitsAreRefused) {
  auto refused = [](const ServerOptions& o, const std::string& says) {
    try {
      Server::create_local_server(o);
      ADD_FAILURE() << "started with " << says;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(with(1h, 0), "ServerOptions.max_sessions must be > 0, got 0");
  refused(with(1h, -3), "ServerOptions.max_sessions must be > 0, got -3");
  refused(with(-1ms), "ServerOptions.session_idle_timeout must be >= 0 (0: never), got -1 ms");
  Server never = Server::create_local_server(with(0ms, 1));  // 0: never reclaimed
}

}  // namespace
}  // namespace tessera::internal
