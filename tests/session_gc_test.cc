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
    if (cut_) return done(errors::unavailable("cut off"));
    {
      std::lock_guard<std::mutex> l(mu_);
      deregistered_.insert(r.graph_handle());
    }
    w_->deregister_graph(r, std::move(done));
  }
  void keep_alive(const pb::KeepAliveRequest& r, Done<pb::KeepAliveResponse> done) override {
    if (cut_) return done(errors::unavailable("cut off"));
    ++keep_alives_;
    w_->keep_alive(r, std::move(done));
  }
  // From now on the master's calls that would end or renew its partitions are lost, as when the
  // master has died or is cut off from the worker.
  void cut() { cut_ = true; }
  int keep_alives() const { return keep_alives_; }
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
  std::atomic<bool> cut_{false};
  std::atomic<int> keep_alives_{0};
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
  void make_master(std::chrono::milliseconds idle, int64_t max_sessions = Master::kDefaultMaxSessions,
                   std::chrono::milliseconds lease = {}) {
    master_ = std::make_unique<Master>(kWorker0, cache_, wire::kDefaultMaxGraphNodes, idle, max_sessions, lease);
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

// ---- Partition leases (Note [Partition leases] in distributed/worker.cc) ----

// Registers the one-constant graph "c" for master session `session` with a lease of `lease`: its
// graph handle.
std::string register_leased(Worker& worker, const std::string& session, std::chrono::milliseconds lease) {
  Graph g;
  ops::constant(g, 4.0f, "c");
  pb::RegisterGraphRequest request;
  request.set_version(wire::kWireVersion);
  request.set_session_handle(session);
  *request.mutable_graph() = wire::encode_graph(g.impl()).value();
  request.add_fetch("c:0");
  request.set_lease_ms(lease.count());
  auto r = call_within<pb::RegisterGraphResponse>(
      [&](Done<pb::RegisterGraphResponse> done) { worker.register_graph(request, std::move(done)); });
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value().graph_handle() : std::string();
}

Status run_graph(Worker& worker, const std::string& graph) {
  static std::atomic<int64_t> step{1000};
  pb::RunGraphRequest request;
  request.set_version(wire::kWireVersion);
  request.set_graph_handle(graph);
  request.set_step_id(step++);
  auto r = call_within<RunGraphReply>([&](Done<RunGraphReply> done) { worker.run_graph(request, {}, std::move(done)); });
  if (r.ok() && (r.value().recv.size() != 1 || r.value().recv[0].scalar<float>() != 4.0f)) {
    return errors::internal("the graph ran but fetched the wrong value");
  }
  return r.status();
}

// The sessions among `sessions` a KeepAlive renewing them finds no partition of.
std::vector<std::string> keep_alive(Worker& worker, const std::vector<std::string>& sessions,
                                    std::chrono::milliseconds lease) {
  pb::KeepAliveRequest request;
  request.set_version(wire::kWireVersion);
  for (const auto& s : sessions) request.add_session_handle(s);
  request.set_lease_ms(lease.count());
  auto r = call_within<pb::KeepAliveResponse>(
      [&](Done<pb::KeepAliveResponse> done) { worker.keep_alive(request, std::move(done)); });
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  return {r.value().unknown_session().begin(), r.value().unknown_session().end()};
}

TEST_F(MasterSessionGcTest, ALeaseNotRenewedDropsItsSessionsPartitionsAndTheirRunsSayWhy) {
  const std::string leased = register_leased(*worker_, "master/session/1", 300ms);
  const std::string leased_too = register_leased(*worker_, "master/session/1", 300ms);
  const std::string unleased = register_leased(*worker_, "master/session/2", 0ms);
  ASSERT_EQ(worker_->num_graphs(), 3u);
  EXPECT_TRUE(run_graph(*worker_, leased).ok());
  // Nobody renews session 1's lease: both its partitions go, session 2's stays.
  ASSERT_TRUE(eventually([&] { return worker_->num_graphs() == 1; }, 20s));
  for (const std::string& graph : {leased, leased_too}) {
    Status gone = run_graph(*worker_, graph);
    EXPECT_EQ(gone.code(), ErrorCode::kAborted) << gone.to_string();
    EXPECT_NE(gone.message().find("of session 'master/session/1' was dropped: its master did not renew its lease"),
              std::string::npos)
        << gone.to_string();
  }
  EXPECT_TRUE(run_graph(*worker_, unleased).ok());
  // A renewal too late finds nothing: the worker says so.
  EXPECT_EQ(keep_alive(*worker_, {"master/session/1"}, 300ms), std::vector<std::string>{"master/session/1"});
}

TEST_F(MasterSessionGcTest, KeepAlivesKeepPartitionsPastTheirLeaseAndNameSessionsTheWorkerHasNot) {
  const std::string graph = register_leased(*worker_, "master/session/1", 600ms);
  // Renewed every 50 ms for four leases: kept. A session it never had is named in the answer.
  for (auto end = Clock::now() + 2400ms; Clock::now() < end; std::this_thread::sleep_for(50ms)) {
    ASSERT_EQ(keep_alive(*worker_, {"master/session/1", "master/session/9"}, 600ms),
              std::vector<std::string>{"master/session/9"});
  }
  EXPECT_EQ(worker_->num_graphs(), 1u);
  EXPECT_TRUE(run_graph(*worker_, graph).ok());
  // A renewal may lengthen the lease (the master's partition_lease changed).
  EXPECT_TRUE(keep_alive(*worker_, {"master/session/1"}, 3600s).empty());
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(worker_->num_graphs(), 1u);
  EXPECT_TRUE(run_graph(*worker_, graph).ok());
  // Then renewed with a short lease again and left: dropped.
  EXPECT_TRUE(keep_alive(*worker_, {"master/session/1"}, 300ms).empty());
  ASSERT_TRUE(eventually([&] { return worker_->num_graphs() == 0; }, 20s));
}

TEST_F(MasterSessionGcTest, DeregisteringASessionsLastPartitionEndsItsLease) {
  const std::string a = register_leased(*worker_, "master/session/1", 1h);
  const std::string b = register_leased(*worker_, "master/session/1", 1h);
  auto deregister = [&](const std::string& graph) {
    pb::DeregisterGraphRequest request;
    request.set_version(wire::kWireVersion);
    request.set_graph_handle(graph);
    ASSERT_TRUE(call_within<pb::DeregisterGraphResponse>([&](Done<pb::DeregisterGraphResponse> done) {
                  worker_->deregister_graph(request, std::move(done));
                }).ok());
  };
  deregister(a);
  EXPECT_TRUE(keep_alive(*worker_, {"master/session/1"}, 1h).empty());  // b is still under it
  deregister(b);
  EXPECT_EQ(keep_alive(*worker_, {"master/session/1"}, 1h), std::vector<std::string>{"master/session/1"});
  EXPECT_EQ(worker_->num_graphs(), 0u);
}

// The master renews what its open sessions registered: an idle session keeps its partitions for
// many leases. Once the master is cut off (its renewals and its deregistrations lost, as when it
// dies between steps), the worker drops them by itself.
TEST_F(MasterSessionGcTest, AMasterRenewsItsOpenSessionsLeasesAndACutOffMastersPartitionsAreDropped) {
  make_master(/*idle=*/0ms, Master::kDefaultMaxSessions, /*lease=*/600ms);
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  auto handle = create(g);
  ASSERT_TRUE(handle.ok()) << handle.status().to_string();
  ASSERT_TRUE(run(handle.value(), {y.name()}).ok());
  const std::set<std::string> partitions = watched_->registered();
  ASSERT_FALSE(partitions.empty());
  std::this_thread::sleep_for(2400ms);  // four leases with no run
  EXPECT_GE(watched_->keep_alives(), 3);
  EXPECT_EQ(worker_->num_graphs(), partitions.size());
  auto later = run(handle.value(), {y.name()});
  ASSERT_TRUE(later.ok()) << later.status().to_string();
  EXPECT_FLOAT_EQ(later.value().tensor.at(0).scalar<float>(), 3.0f);
  EXPECT_EQ(watched_->registered(), partitions);  // the same partitions ran: none registered again

  watched_->cut();
  master_->stop();  // its DeregisterGraph calls are lost
  EXPECT_EQ(worker_->num_graphs(), partitions.size());
  ASSERT_TRUE(eventually([&] { return worker_->num_graphs() == 0; }, 20s));
}

// Closing a session ends its renewals: only open sessions are named.
TEST_F(MasterSessionGcTest, AClosedSessionIsRenewedNoMore) {
  make_master(0ms, Master::kDefaultMaxSessions, 200ms);
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  auto handle = create(g);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(run(handle.value(), {y.name()}).ok());
  ASSERT_TRUE(close(handle.value()).ok());
  ASSERT_TRUE(eventually([&] { return worker_->num_graphs() == 0; }, 10s));
  const int before = watched_->keep_alives();
  std::this_thread::sleep_for(600ms);  // twelve renewal periods
  EXPECT_EQ(watched_->keep_alives(), before);
}

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
  // At once: the second session has the same timeout (under a sanitizer, the checks of the first
  // below may take a second).
  EXPECT_FLOAT_EQ(second->run(y).scalar<float>(), 3.0f);
  try {
    first.run(y);
    ADD_FAILURE() << "a reclaimed session ran";
  } catch (const AbortedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("closed after being idle for"), std::string::npos) << m;
    EXPECT_NE(m.find("ServerOptions::session_idle_timeout"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(first.close());  // closing a reclaimed session is not an error
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

// Through a Server, with its transport: KeepAlive travels, and an idle session's partitions outlive
// many leases.
TEST(ServerSessionGcTest, AnIdleSessionKeepsItsPartitionsForManyLeases) {
  ServerOptions o;
  o.partition_lease = 600ms;
  Server server = Server::create_local_server(o);
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "y");
  Session s(g, server.target());
  EXPECT_FLOAT_EQ(s.run(y).scalar<float>(), 3.0f);
  std::this_thread::sleep_for(2400ms);  // four leases
  EXPECT_FLOAT_EQ(s.run(y).scalar<float>(), 3.0f);  // AbortedError had the partition been dropped
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
  ServerOptions short_lease;
  short_lease.partition_lease = 50ms;
  refused(short_lease, "ServerOptions.partition_lease must be 0 (never dropped) or >= 100 ms, got 50 ms");
  Server never = Server::create_local_server(with(0ms, 1));  // 0: never reclaimed
  ServerOptions busy;
  busy.busy_poll = -1us;
  refused(busy, "ServerOptions.busy_poll must be in [0, 10000] us, got -1 us");
  busy.busy_poll = 10001us;
  refused(busy, "ServerOptions.busy_poll must be in [0, 10000] us, got 10001 us");
}

TEST(ServerOptionsTest, ABusyPollingServerRunsSteps) {
  ServerOptions o;
  o.busy_poll = 200us;
  Server server = Server::create_local_server(o);
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {});
  auto y = ops::add(x, ops::constant(g, 1.0f), "y");
  Session s(g, server.target());
  for (int i = 0; i < 200; ++i) EXPECT_FLOAT_EQ(s.run(y, {{x, Tensor::scalar<float>(static_cast<float>(i))}}).scalar<float>(), i + 1.0f);
}

}  // namespace
}  // namespace tessera::internal
