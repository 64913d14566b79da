// Runs that wait hold no thread (issue 21, class 2), and what a server remembers of past runs stays
// bounded and packed (RecentMemo): the process's timer (core/timer.h), the
// in-process session's asynchronous steps (SessionImpl::run_step_async, Note [Asynchronous steps]
// in core/direct_session.cc) and a real `tessera server` process with hundreds of remote runs
// blocked on a queue, whose threads are counted. Every wait is bounded.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <future>
#include <memory_resource>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unordered_map>

#include <gtest/gtest.h>

#include "core/direct_session.h"
#include "core/map_util.h"
#include "core/recent_memo.h"
#include "core/timer.h"
#include "host/child_process.h"
#include "testing/sim_device.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using internal::SessionImpl;
using internal::TimerQueue;
using tessera::testing::threads_of;

// ---- TimerQueue ----

// The timer's and the rendezvous' maps give back the buckets a burst grew (erasing never does):
// once under 1/16 full they are rehashed to fit; small maps are left alone.
TEST(ShrinkIfSparseTest, GivesBackTheBucketsOfABurstOnlyOnceMostlyEmpty) {
  std::unordered_map<int64_t, int> map;
  for (int64_t i = 0; i < 100'000; ++i) map.emplace(i, 0);
  const std::size_t grown = map.bucket_count();
  ASSERT_GE(grown, 100'000u);
  for (int64_t i = 0; i < 80'000; ++i) map.erase(i);
  internal::shrink_if_sparse(map);  // 20,000 left: over 1/16 of the buckets, kept
  EXPECT_EQ(map.bucket_count(), grown);
  for (int64_t i = 80'000; i < 99'990; ++i) map.erase(i);
  internal::shrink_if_sparse(map);
  EXPECT_LT(map.bucket_count(), 1'000u);
  EXPECT_EQ(map.size(), 10u);
  for (int64_t i = 99'990; i < 100'000; ++i) EXPECT_EQ(map.count(i), 1u) << i;
  std::unordered_map<int64_t, int> small;
  small.reserve(500);
  const std::size_t buckets = small.bucket_count();
  internal::shrink_if_sparse(small);  // empty, but small: not worth a rehash
  EXPECT_EQ(small.bucket_count(), buckets);
}

// ---- RecentMemo (Note [Memory of things past]) ----

TEST(RecentMemoTest, RemembersTheLatestKeysAndForgetsTheOldestFirst) {
  internal::RecentMemo<int64_t, std::string> memo(3);
  EXPECT_TRUE(memo.remember(1, "one"));
  EXPECT_TRUE(memo.remember(2, "two"));
  EXPECT_FALSE(memo.remember(2, "again")) << "a key remembered already keeps its value";
  EXPECT_TRUE(memo.remember(3, "three"));
  ASSERT_NE(memo.find(2), nullptr);
  EXPECT_EQ(*memo.find(2), "two");
  EXPECT_TRUE(memo.remember(4, "four"));  // full: 1 goes
  EXPECT_EQ(memo.find(1), nullptr);
  EXPECT_EQ(memo.size(), 3u);
  EXPECT_EQ(memo.take(3), "three");
  EXPECT_EQ(memo.find(3), nullptr);
  EXPECT_EQ(memo.take(3), "") << "a key not remembered gives a default value";
  EXPECT_EQ(memo.size(), 2u);
}

// A key taken and remembered again lives in its new slot: its old slot coming round forgets
// nothing, and each remembered key stays for `capacity` rememberings after its latest.
TEST(RecentMemoTest, AKeyRememberedAgainIsNotForgottenByItsOldSlot) {
  internal::RecentMemo<std::string, int> memo(3);
  memo.remember("a", 1);  // slots: a b c
  memo.remember("b", 2);
  memo.remember("c", 3);
  EXPECT_EQ(memo.take("b"), 2);
  memo.remember("b", 20);  // into a's slot: a goes
  EXPECT_EQ(memo.find("a"), nullptr);
  memo.remember("d", 4);  // into b's old slot: b stays
  ASSERT_NE(memo.find("b"), nullptr);
  EXPECT_EQ(*memo.find("b"), 20);
  memo.remember("e", 5);  // c's slot
  EXPECT_EQ(memo.find("c"), nullptr);
  memo.remember("f", 6);  // b's new slot
  EXPECT_EQ(memo.find("b"), nullptr);
  EXPECT_EQ(memo.size(), 3u);
  for (const char* k : {"d", "e", "f"}) EXPECT_NE(memo.find(k), nullptr) << k;
}

// Counts what a memory resource is asked for; the memo's pool takes its chunks from the default.
class CountingResource : public std::pmr::memory_resource {
 public:
  int allocations = 0;
  std::size_t live = 0;

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    ++allocations;
    live += bytes;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    live -= bytes;
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

// 100,000 steps aborted through a memo of 1024 cost a few chunks, allocated while it fills and
// reused after: not a block per entry scattered through the heap. Repeated reasons share one copy.
TEST(RecentMemoTest, EntriesComeFromAPoolAllocatedWhileTheMemoFills) {
  CountingResource counting;
  std::pmr::memory_resource* previous = std::pmr::set_default_resource(&counting);
  {
    internal::RecentMemo<int64_t, Status> memo(1024);
    Status kept;
    for (int64_t step = 0; step < 1024; ++step) {
      memo.remember(step, internal::same_reason(&kept, errors::cancelled("the client's connection was lost")));
    }
    const int filling = counting.allocations;
    const std::size_t filled = counting.live;
    EXPECT_GT(filling, 0) << "entries come from the memo's pool, which draws on the default resource";
    EXPECT_LT(filling, 64) << "a block per entry";
    for (int64_t step = 1024; step < 100'000; ++step) {
      memo.remember(step, internal::same_reason(&kept, errors::cancelled("the client's connection was lost")));
    }
    EXPECT_EQ(counting.allocations, filling) << "forgotten entries' room is reused";
    EXPECT_EQ(counting.live, filled);
    EXPECT_EQ(memo.size(), 1024u);
    ASSERT_NE(memo.find(99'999), nullptr);
    EXPECT_EQ(memo.find(100'000 - 1025), nullptr);
    // One message for them all: each entry's Status is the one kept.
    EXPECT_EQ(&memo.find(99'999)->message(), &memo.find(98'976)->message());
    EXPECT_EQ(memo.find(99'999)->code(), ErrorCode::kCancelled);
    // Another reason is kept anew.
    memo.remember(200'000, internal::same_reason(&kept, errors::aborted("step 7 was cleaned up")));
    EXPECT_EQ(memo.find(200'000)->message(), "step 7 was cleaned up");
    EXPECT_NE(&memo.find(200'000)->message(), &memo.find(99'999)->message());
    EXPECT_EQ(memo.find(99'999)->message(), "the client's connection was lost");
  }
  EXPECT_EQ(counting.live, 0u) << "the memo gives its pool back when destroyed";
  std::pmr::set_default_resource(previous);
}

TEST(TimerQueueTest, RunsFunctionsInDeadlineOrderNotSchedulingOrder) {
  TimerQueue timer;
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> all;
  const auto now = Clock::now();
  auto note = [&](int i) {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(i);
    if (order.size() == 3) all.set_value();
  };
  ASSERT_TRUE(timer.schedule(now + 150ms, [&] { note(3); }).ok());
  ASSERT_TRUE(timer.schedule(now + 50ms, [&] { note(1); }).ok());
  ASSERT_TRUE(timer.schedule(now + 100ms, [&] { note(2); }).ok());
  ASSERT_EQ(all.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_GE(Clock::now() - now, 150ms);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(TimerQueueTest, ACancelledFunctionNeverRunsAndItsCapturesAreReleased) {
  TimerQueue timer;
  std::atomic<bool> ran{false};
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owned;
  auto id = timer.schedule(Clock::now() + 100ms, [&ran, owned] { ran = true; });
  ASSERT_TRUE(id.ok());
  owned.reset();
  EXPECT_EQ(timer.pending(), 1u);
  EXPECT_TRUE(timer.cancel(id.value()));
  EXPECT_TRUE(watch.expired()) << "the cancelled function (and what it owns) is destroyed at once";
  EXPECT_FALSE(timer.cancel(id.value())) << "a second cancel finds nothing";
  // A later function runs: the cancelled one would have run before it.
  std::promise<void> later;
  ASSERT_TRUE(timer.schedule(Clock::now() + 200ms, [&later] { later.set_value(); }).ok());
  ASSERT_EQ(later.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(ran.load());
}

TEST(TimerQueueTest, CancelAfterTheFunctionRanIsFalse) {
  TimerQueue timer;
  std::promise<void> ran;
  auto id = timer.schedule(Clock::now(), [&ran] { ran.set_value(); });
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(timer.cancel(id.value()));
}

TEST(TimerQueueTest, AFunctionMayScheduleAndCancelOnTheTimer) {
  TimerQueue timer;
  std::promise<void> second;
  std::atomic<bool> cancelled_ran{false};
  auto doomed = timer.schedule(Clock::now() + 300ms, [&cancelled_ran] { cancelled_ran = true; });
  ASSERT_TRUE(doomed.ok());
  ASSERT_TRUE(timer
                  .schedule(Clock::now() + 20ms,
                            [&] {
                              EXPECT_TRUE(timer.cancel(doomed.value()));
                              EXPECT_TRUE(timer.schedule(Clock::now() + 20ms, [&second] { second.set_value(); }).ok());
                            })
                  .ok());
  ASSERT_EQ(second.get_future().wait_for(10s), std::future_status::ready);
  std::this_thread::sleep_for(400ms);
  EXPECT_FALSE(cancelled_ran.load());
}

TEST(TimerQueueTest, DestroyingTheTimerDropsWhatHasNotRun) {
  auto owned = std::make_shared<int>(1);
  std::weak_ptr<int> watch = owned;
  std::atomic<bool> ran{false};
  {
    TimerQueue timer;
    ASSERT_TRUE(timer.schedule(Clock::now() + 1h, [&ran, owned] { ran = true; }).ok());
    owned.reset();
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(ran.load());
}

// ---- SessionImpl::run_step_async ----

struct AsyncResult {
  std::promise<void> done;
  Status status;
  std::vector<Tensor> outputs;
};

// Starts an asynchronous step; the result's future is ready when `done` has run.
std::shared_ptr<AsyncResult> start_async(SessionImpl& session, std::vector<Output> fetches, FeedMap feeds,
                                         std::vector<Operation> targets, RunOptions options = {}) {
  auto r = std::make_shared<AsyncResult>();
  session.run_step_async(std::move(fetches), std::move(feeds), std::move(targets), options, 0, false, nullptr,
                         [r](Status s, std::vector<Tensor> out, std::vector<internal::TraceRecord>) {
                           r->status = std::move(s);
                           r->outputs = std::move(out);
                           r->done.set_value();
                         });
  return r;
}

// A dequeue from an empty queue that nothing fills: a step that fetches it waits until its
// deadline or a close.
Output blocking_dequeue(Graph& g) { return FIFOQueue(g, 2, {DType::Float32}, {Shape{}}, "q").dequeue()[0]; }

TEST(AsyncStepTest, BlockedStepsHoldNoThreadAndFinishWhenTheQueueFills) {
  Graph g;
  FIFOQueue q(g, 1000, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  auto doubled = ops::mul(deq, ops::constant(g, Tensor::scalar(2.0f)));
  auto value = ops::placeholder(g, DType::Float32, Shape{}, "value");
  auto enq = q.enqueue({value});
  SessionOptions so;
  so.inter_op_threads = 2;
  auto session = SessionImpl::make(g, so, nullptr);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  SessionImpl& s = *session.value();

  const int before = threads_of(::getpid());
  constexpr int kBlocked = 300;
  std::vector<std::shared_ptr<AsyncResult>> results;
  std::vector<std::future<void>> futures;
  for (int i = 0; i < kBlocked; ++i) {
    results.push_back(start_async(s, {doubled}, {}, {}));
    futures.push_back(results.back()->done.get_future());
  }
  // Every step has started (its dequeue waits) and none has finished.
  std::this_thread::sleep_for(300ms);
  for (auto& f : futures) ASSERT_EQ(f.wait_for(0ms), std::future_status::timeout);
  const int blocked = threads_of(::getpid());
  EXPECT_LE(blocked, before + 4) << kBlocked << " blocked steps made " << blocked - before << " threads";

  float expected = 0;
  for (int i = 0; i < kBlocked; ++i) {
    s.run({}, {{value, Tensor::scalar(static_cast<float>(i))}}, {enq}, {}, nullptr);
    expected += 2.0f * static_cast<float>(i);
  }
  float total = 0;
  for (int i = 0; i < kBlocked; ++i) {
    ASSERT_EQ(futures[i].wait_for(10s), std::future_status::ready) << "step " << i;
    ASSERT_TRUE(results[i]->status.ok()) << results[i]->status.to_string();
    ASSERT_EQ(results[i]->outputs.size(), 1u);
    total += results[i]->outputs[0].scalar<float>();
  }
  EXPECT_EQ(total, expected) << "every element was dequeued by exactly one step";
}

TEST(AsyncStepTest, TheTimeoutEndsABlockedStepWithDeadlineExceeded) {
  Graph g;
  auto deq = blocking_dequeue(g);
  auto session = SessionImpl::make(g, SessionOptions{}, nullptr);
  ASSERT_TRUE(session.ok());
  RunOptions ro;
  ro.timeout = 150ms;
  const auto t0 = Clock::now();
  auto r = start_async(*session.value(), {deq}, {}, {}, ro);
  ASSERT_EQ(r->done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_GE(Clock::now() - t0, 150ms);
  EXPECT_EQ(r->status.code(), ErrorCode::kDeadlineExceeded) << r->status.to_string();
  EXPECT_NE(r->status.message().find("150 ms"), std::string::npos) << r->status.to_string();
}

TEST(AsyncStepTest, AStepThatEndsBeforeItsDeadlineLeavesNoTimerBehind) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::add(x, x);
  auto session = SessionImpl::make(g, SessionOptions{}, nullptr);
  ASSERT_TRUE(session.ok());
  RunOptions ro;
  ro.timeout = 1h;
  const std::size_t before = TimerQueue::global().pending();
  for (int i = 0; i < 50; ++i) {
    auto r = start_async(*session.value(), {y}, {{x, Tensor::scalar(static_cast<float>(i))}}, {}, ro);
    ASSERT_EQ(r->done.get_future().wait_for(10s), std::future_status::ready);
    ASSERT_TRUE(r->status.ok()) << r->status.to_string();
    EXPECT_EQ(r->outputs[0].scalar<float>(), 2.0f * static_cast<float>(i));
  }
  EXPECT_EQ(TimerQueue::global().pending(), before) << "each finished step removed its deadline";
}

TEST(AsyncStepTest, BadInputIsTheStepsErrorNotACrash) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  auto y = ops::add(x, x);
  auto session = SessionImpl::make(g, SessionOptions{}, nullptr);
  ASSERT_TRUE(session.ok());
  auto r = start_async(*session.value(), {y}, {{x, Tensor::scalar(1.0f)}}, {});
  ASSERT_EQ(r->done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(r->status.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r->status.message().find("'x:0'"), std::string::npos) << r->status.to_string();
}

TEST(AsyncStepTest, CloseCancelsEveryBlockedStepAndReturns) {
  Graph g;
  auto deq = blocking_dequeue(g);
  auto session = SessionImpl::make(g, SessionOptions{}, nullptr);
  ASSERT_TRUE(session.ok());
  std::vector<std::shared_ptr<AsyncResult>> results;
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 50; ++i) {
    results.push_back(start_async(*session.value(), {deq}, {}, {}));
    futures.push_back(results.back()->done.get_future());
  }
  std::this_thread::sleep_for(200ms);
  session.value()->close();
  for (std::size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(futures[i].wait_for(10s), std::future_status::ready);
    EXPECT_EQ(results[i]->status.code(), ErrorCode::kCancelled) << results[i]->status.to_string();
  }
  auto after = start_async(*session.value(), {deq}, {}, {});
  ASSERT_EQ(after->done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(after->status.code(), ErrorCode::kCancelled);
}

// A step over the host and a simulated accelerator: its device partition runs asynchronously too,
// and a blocked multi-device step times out as a whole.
const auto* const kSim = ::testing::AddGlobalTestEnvironment(new tessera::testing::SimEnvironment);

TEST(AsyncStepSimTest, AStepSpanningDevicesRunsAndTimesOut) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{4}, "x");
  Output y;
  {
    auto scope = g.device("/device:SIM:0");
    y = ops::mul(x, x);
  }
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{4}}, "q");
  auto blocked = ops::add(y, q.dequeue()[0]);
  auto session = SessionImpl::make(g, SessionOptions{}, nullptr);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4});
  auto r = start_async(*session.value(), {y}, {{x, in}}, {});
  ASSERT_EQ(r->done.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(r->status.ok()) << r->status.to_string();
  EXPECT_EQ(r->outputs[0].to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));

  RunOptions ro;
  ro.timeout = 150ms;
  auto t = start_async(*session.value(), {blocked}, {{x, in}}, {}, ro);
  ASSERT_EQ(t->done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(t->status.code(), ErrorCode::kDeadlineExceeded) << t->status.to_string();
}

// ---- A real server: blocked remote runs cost no thread ----

TEST(BlockedRemoteRunsTest, HundredsOfBlockedRemoteDequeuesAddNoServerThreads) {
  const std::string address = train::free_loopback_address();
  const std::string cluster = "{\"worker\": [\"" + address + "\"]}";
  train::ServerProcess server(TESSERA_CLI_PATH, cluster, "worker", 0);
  Graph g;
  FIFOQueue q(g, 1000, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  auto value = ops::placeholder(g, DType::Float32, Shape{}, "value");
  auto enq = q.enqueue({value});
  Session s(g, "tessera://" + address);
  s.run({}, {{value, Tensor::scalar(0.0f)}}, {enq});  // the session and its partitions exist
  EXPECT_EQ(s.run(deq).scalar<float>(), 0.0f);
  std::this_thread::sleep_for(200ms);
  const int idle = threads_of(server.pid());
  ASSERT_GT(idle, 0);

  constexpr int kBlocked = 200;
  std::atomic<int> started{0}, finished{0};
  std::atomic<double> total{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kBlocked; ++i) {
    clients.emplace_back([&] {
      started++;
      try {
        const float v = s.run(deq).scalar<float>();
        double t = total.load();
        while (!total.compare_exchange_weak(t, t + v)) {
        }
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
      }
      finished++;
    });
  }
  // Every client has sent its run; give the server time to take them all in.
  ASSERT_TRUE(tessera::testing::wait_until([&] { return started.load() == kBlocked; }, 30s));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(finished.load(), 0) << "the queue is empty: no run can have finished";
  const int blocked = threads_of(server.pid());
  std::printf("server threads: %d idle, %d with %d runs blocked\n", idle, blocked, kBlocked);
  EXPECT_LE(blocked, idle + 8) << kBlocked << " blocked runs took the server from " << idle << " to " << blocked
                               << " threads";

  double expected = 0;
  for (int i = 1; i <= kBlocked; ++i) {
    s.run({}, {{value, Tensor::scalar(static_cast<float>(i))}}, {enq});
    expected += i;
  }
  ASSERT_TRUE(tessera::testing::wait_until([&] { return finished.load() == kBlocked; }, 60s));
  for (auto& c : clients) c.join();
  EXPECT_EQ(total.load(), expected);
}


// Run by the next test as a child process: a client whose run blocks on task's queue "q"
// until the process is killed.
TEST(BlockedRemoteRunsTest, DISABLED_BlockedDequeueClient) {
  const char* target = std::getenv("TESSERA_BLOCKED_CLIENT_TARGET");
  ASSERT_NE(target, nullptr);
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}}, "q");
  auto deq = q.dequeue()[0];
  Session s(g, target);
  std::printf("blocked-client: dequeuing\n");
  std::fflush(stdout);
  s.run(deq);  // blocks: the test kills this process
  std::printf("blocked-client: dequeued\n");
}

// A client killed while its step waits on a queue takes the step with it (Note [Lost callers] in
// transport/rpc_server_peers.cc): the server ends the step, the worker's dequeue leaves the queue,
// and the next element goes to a live client. Were the dead client's dequeue still waiting, it
// would take the element (it waits first) and the live client's run would time out.
TEST(BlockedRemoteRunsTest, AKilledClientsBlockedStepEndsAndTakesNothing) {
  const std::string address = train::free_loopback_address();
  const std::string cluster = "{\"worker\": [\"" + address + "\"]}";
  train::ServerProcess server(TESSERA_CLI_PATH, cluster, "worker", 0);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("TESSERA_BLOCKED_CLIENT_TARGET=tessera://" + address);
  for (int round = 0; round < 3; ++round) {
    internal::ChildProcess client({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=BlockedRemoteRunsTest.DISABLED_BlockedDequeueClient"},
                                  env);
    bool dequeuing = false;
    for (auto until = Clock::now() + 30s; !dequeuing && Clock::now() < until;) {
      auto line = client.read_line(30s);
      if (!line) break;
      dequeuing = line->find("blocked-client: dequeuing") != std::string::npos;
    }
    ASSERT_TRUE(dequeuing) << "the client did not start";
    std::this_thread::sleep_for(500ms);  // its RunStep reaches the server and blocks there
    client.signal(SIGKILL);
    ASSERT_TRUE(client.wait_exit(10s).has_value());
  }
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}}, "q");
  auto value = ops::placeholder(g, DType::Float32, Shape{}, "value");
  auto enq = q.enqueue({value});
  auto deq = q.dequeue()[0];
  Session s(g, "tessera://" + address);
  RunOptions ro;
  ro.timeout = 10s;
  for (int i = 0; i < 3; ++i) {
    s.run({}, {{value, Tensor::scalar(static_cast<float>(i))}}, {enq});
    EXPECT_EQ(s.run({deq}, {}, {}, ro)[0].scalar<float>(), static_cast<float>(i))
        << "element " << i << " went to a killed client's step";
  }
}

}  // namespace
}  // namespace tessera
