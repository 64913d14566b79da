// The step exchange: core's LocalRendezvous (slots, named keys handed to a cluster step's) and the
// distributed layer's RendezvousMgr (a task's per-step exchange with the others, Note [Remote
// rendezvous]) against a TensorPuller the test drives.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/rendezvous.h"
#include "distributed/rendezvous_mgr.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

// What a callback got.
struct Got {
  std::mutex mu;
  int calls = 0;
  Status status;
  Tensor value;
  void operator()(const Status& s, Tensor t) {
    std::lock_guard<std::mutex> l(mu);
    ++calls;
    status = s;
    value = std::move(t);
  }
  int count() {
    std::lock_guard<std::mutex> l(mu);
    return calls;
  }
};
Rendezvous::Callback into(Got& g) {
  return [&g](const Status& s, Tensor t) { g(s, std::move(t)); };
}

TEST(LocalRendezvousTest, SendThenReceiveAndReceiveThenSendEachDeliverOnce) {
  LocalRendezvous r(2);
  ASSERT_TRUE(r.send(RendezvousKey::of_slot(0), Tensor::scalar(7)).ok());
  Got first, second;
  r.recv_async(RendezvousKey::of_slot(0), nullptr, into(first));
  EXPECT_EQ(first.count(), 1);
  EXPECT_EQ(first.value.scalar<int32_t>(), 7);
  r.recv_async(RendezvousKey::of_slot(1), nullptr, into(second));
  EXPECT_EQ(second.count(), 0);
  ASSERT_TRUE(r.send(RendezvousKey::of_slot(1), Tensor::scalar(8)).ok());
  EXPECT_EQ(second.count(), 1);
  EXPECT_EQ(second.value.scalar<int32_t>(), 8);
}

TEST(LocalRendezvousTest, MisuseIsAnInternalErrorAndAbortFailsWaitersAndLaterCalls) {
  LocalRendezvous r(2);
  EXPECT_EQ(r.send(RendezvousKey::of_slot(2), Tensor::scalar(1)).code(), ErrorCode::kInternal);
  ASSERT_TRUE(r.send(RendezvousKey::of_slot(0), Tensor::scalar(1)).ok());
  EXPECT_EQ(r.send(RendezvousKey::of_slot(0), Tensor::scalar(1)).code(), ErrorCode::kInternal);
  // A named key crosses tasks: without a cluster step's rendezvous there is nowhere to send it.
  Status named = r.send(RendezvousKey::named("a;b;t:0"), Tensor::scalar(1));
  EXPECT_EQ(named.code(), ErrorCode::kInternal);
  EXPECT_NE(named.message().find("'a;b;t:0'"), std::string::npos) << named.to_string();
  Got waiting, later;
  r.recv_async(RendezvousKey::of_slot(1), nullptr, into(waiting));
  r.abort(errors::cancelled("stop"));
  ASSERT_EQ(waiting.count(), 1);
  EXPECT_EQ(waiting.status.code(), ErrorCode::kCancelled);
  r.recv_async(RendezvousKey::of_slot(0), nullptr, into(later));
  EXPECT_EQ(later.status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(r.send(RendezvousKey::of_slot(1), Tensor::scalar(1)).code(), ErrorCode::kCancelled);
}

TEST(LocalRendezvousTest, NamedKeysGoToTheRemoteRendezvous) {
  LocalRendezvous remote(0);
  // A LocalRendezvous as the "remote" refuses named keys itself, which shows the call got there.
  LocalRendezvous r(1, &remote);
  Status st = r.send(RendezvousKey::named("x;y;z:0"), Tensor::scalar(1));
  EXPECT_EQ(st.code(), ErrorCode::kInternal);
  EXPECT_TRUE(r.send(RendezvousKey::of_slot(0), Tensor::scalar(2)).ok());
}

// Records pulls; the test completes them.
class FakePuller final : public TensorPuller {
 public:
  struct Call {
    std::string task;
    int64_t step = 0;
    std::string key;
    PullDone done;
  };
  std::function<void()> pull(const std::string& task, int64_t step_id, const std::string& key, PullDone done) override {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back({task, step_id, key, std::move(done)});
    return [this] { gave_up.fetch_add(1); };
  }
  std::mutex mu;
  std::vector<Call> calls;
  std::atomic<int> gave_up{0};
};

const std::string kTask = "/job:worker/replica:0/task:1";
const std::string kHere = kTask + "/device:CPU:0";
const std::string kPs = "/job:ps/replica:0/task:0/device:CPU:0";

// The manager of task kTask over a FakePuller the test drives, with the default start timeout.
class RendezvousMgrTest : public ::testing::Test {
 protected:
  FakePuller puller;
  RendezvousMgr mgr{kTask, &puller};
};

TEST_F(RendezvousMgrTest, ASendIsServedWhicheverComesFirstAndASuccessfulStepLeavesNoState) {
  const std::string k1 = RendezvousKey::name_of(kHere, kPs, "a:0"), k2 = RendezvousKey::name_of(kHere, kPs, "b:0");
  ASSERT_TRUE(mgr.begin_run(5, [](const Status&) {}).ok());
  auto r = mgr.find(5);
  ASSERT_TRUE(r->send(RendezvousKey::named(k1), Tensor::scalar(1)).ok());
  EXPECT_EQ(r->send(RendezvousKey::named(k1), Tensor::scalar(9)).code(), ErrorCode::kInternal);  // sent twice
  std::optional<StatusOr<Tensor>> got1, got2;
  mgr.serve(5, k1, [&](StatusOr<Tensor> t) { got1 = std::move(t); });  // after the send
  mgr.serve(5, k2, [&](StatusOr<Tensor> t) { got2 = std::move(t); });  // before it
  ASSERT_TRUE(got1.has_value());
  EXPECT_EQ(got1->value().scalar<int32_t>(), 1);
  EXPECT_FALSE(got2.has_value());
  ASSERT_TRUE(r->send(RendezvousKey::named(k2), Tensor::scalar(2)).ok());
  ASSERT_TRUE(got2.has_value());
  EXPECT_EQ(got2->value().scalar<int32_t>(), 2);
  r.reset();
  mgr.end_run(5, Status());
  EXPECT_EQ(mgr.num_steps(), 0);
}

TEST_F(RendezvousMgrTest, AKeyFromAnotherTaskIsPulledFromThatTask) {
  const std::string key = RendezvousKey::name_of(kPs, kHere, "v:0");
  Got got;
  mgr.find(9)->recv_async(RendezvousKey::named(key), nullptr, into(got));
  ASSERT_EQ(puller.calls.size(), 1u);
  EXPECT_EQ(puller.calls[0].task, "/job:ps/replica:0/task:0");
  EXPECT_EQ(puller.calls[0].step, 9);
  EXPECT_EQ(puller.calls[0].key, key);
  EXPECT_EQ(got.count(), 0);
  puller.calls[0].done(Tensor::scalar(42));
  ASSERT_EQ(got.count(), 1);
  EXPECT_TRUE(got.status.ok());
  EXPECT_EQ(got.value.scalar<int32_t>(), 42);
  puller.calls[0].done(Tensor::scalar(43));  // a late second reply goes nowhere
  EXPECT_EQ(got.count(), 1);
}

TEST_F(RendezvousMgrTest, ACancelledRunEndsItsPullAndALateReplyIsDropped) {
  CancellationManager cm;
  Got got;
  mgr.find(3)->recv_async(RendezvousKey::named(RendezvousKey::name_of(kPs, kHere, "v:0")), &cm, into(got));
  ASSERT_EQ(puller.calls.size(), 1u);
  cm.start_cancel(errors::deadline_exceeded("too slow"));
  ASSERT_EQ(got.count(), 1);
  EXPECT_EQ(got.status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(puller.gave_up.load(), 1);
  puller.calls[0].done(Tensor::scalar(1));
  EXPECT_EQ(got.count(), 1);
  // Already cancelled: no pull at all.
  Got again;
  mgr.find(3)->recv_async(RendezvousKey::named(RendezvousKey::name_of(kPs, kHere, "w:0")), &cm, into(again));
  EXPECT_EQ(again.status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(puller.calls.size(), 1u);
}

TEST_F(RendezvousMgrTest, AbortFailsPullsServersAndRunsAndEveryLaterExchangeOfTheStep) {
  Status run_cancelled;
  ASSERT_TRUE(mgr.begin_run(11, [&](const Status& s) { run_cancelled = s; }).ok());
  Got pulled;
  mgr.find(11)->recv_async(RendezvousKey::named(RendezvousKey::name_of(kPs, kHere, "v:0")), nullptr, into(pulled));
  std::optional<StatusOr<Tensor>> served;
  mgr.serve(11, RendezvousKey::name_of(kHere, kPs, "a:0"), [&](StatusOr<Tensor> t) { served = std::move(t); });
  mgr.abort_step(11, errors::aborted("ps died"));
  EXPECT_EQ(pulled.status.code(), ErrorCode::kAborted);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->status().code(), ErrorCode::kAborted);
  EXPECT_EQ(run_cancelled.code(), ErrorCode::kAborted);
  // Later: a serve, a send and a run of the step fail at once with the reason.
  std::optional<StatusOr<Tensor>> late;
  mgr.serve(11, "x", [&](StatusOr<Tensor> t) { late = std::move(t); });
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->status().message(), "ps died");
  EXPECT_EQ(mgr.find(11)->send(RendezvousKey::named(RendezvousKey::name_of(kHere, kPs, "b:0")), Tensor::scalar(1)).code(),
            ErrorCode::kAborted);
  EXPECT_EQ(mgr.begin_run(11, [](const Status&) {}).status().code(), ErrorCode::kAborted);
  mgr.end_run(11, errors::aborted("ps died"));
}

TEST_F(RendezvousMgrTest, AFailedRunAbortsItsStepAndStopAbortsEveryLaterOne) {
  ASSERT_TRUE(mgr.begin_run(1, [](const Status&) {}).ok());
  std::optional<StatusOr<Tensor>> served;
  mgr.serve(1, RendezvousKey::name_of(kHere, kPs, "a:0"), [&](StatusOr<Tensor> t) { served = std::move(t); });
  mgr.end_run(1, errors::invalid_argument("bad op"));
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->status().code(), ErrorCode::kInvalidArgument);
  mgr.stop(errors::cancelled("stopping"));
  EXPECT_EQ(mgr.begin_run(2, [](const Status&) {}).status().code(), ErrorCode::kCancelled);
}

TEST_F(RendezvousMgrTest, BothEndsOnThisTaskMeetHereAndASecondPullIsRefused) {
  const std::string key = RendezvousKey::name_of(kHere, kTask + "/device:CPU:0", "t:0");
  Got got;
  mgr.find(4)->recv_async(RendezvousKey::named(key), nullptr, into(got));
  EXPECT_TRUE(puller.calls.empty());
  std::optional<StatusOr<Tensor>> twice;
  mgr.serve(4, key, [&](StatusOr<Tensor> t) { twice = std::move(t); });
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->status().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(mgr.find(4)->send(RendezvousKey::named(key), Tensor::scalar(5)).ok());
  ASSERT_EQ(got.count(), 1);
  EXPECT_EQ(got.value.scalar<int32_t>(), 5);
}

TEST_F(RendezvousMgrTest, ConcurrentStepsExchangeEveryTensorExactlyOnce) {
  constexpr int kSteps = 64, kKeys = 16;
  std::atomic<int64_t> sum{0};
  std::atomic<int> delivered{0};
  auto take = [&](StatusOr<Tensor> v) {
    if (!v.ok()) return ADD_FAILURE() << v.status().to_string();
    sum += v.value().scalar<int32_t>();
    ++delivered;
  };
  testing::run_threads(8, [&](int t) {
    for (int step = t; step < kSteps; step += 8) {
      ASSERT_TRUE(mgr.begin_run(step, [](const Status&) {}).ok());
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = RendezvousKey::name_of(kHere, kPs, std::to_string(k) + ":0");
        if ((k + step) % 2 == 0) {
          mgr.serve(step, key, take);
          ASSERT_TRUE(mgr.find(step)->send(RendezvousKey::named(key), Tensor::scalar(step * kKeys + k)).ok());
        } else {
          ASSERT_TRUE(mgr.find(step)->send(RendezvousKey::named(key), Tensor::scalar(step * kKeys + k)).ok());
          mgr.serve(step, key, take);
        }
      }
      mgr.end_run(step, Status());
    }
  });
  const int64_t n = kSteps * kKeys;
  EXPECT_EQ(delivered.load(), n);
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
  EXPECT_EQ(mgr.num_steps(), 0);
}


// A pull for a step that has no run here waits the start timeout, then fails Unavailable and the
// step's state goes (a RecvTensor for a step that never comes costs nothing after that).
TEST_F(RendezvousMgrTest, PullsOfAStepThatNeverStartsFailAfterTheStartTimeoutAndLeaveNoState) {
  RendezvousMgr timed(kTask, &puller, std::chrono::milliseconds(100));  // a short start timeout
  constexpr int kSteps = 2000;
  std::atomic<int> unavailable{0}, other{0};
  for (int step = 1; step <= kSteps; ++step) {
    timed.serve(step, RendezvousKey::name_of(kHere, kPs, "x:0"), [&](StatusOr<Tensor> t) {
      (t.status().code() == ErrorCode::kUnavailable ? unavailable : other)++;
    });
  }
  EXPECT_EQ(timed.num_steps(), kSteps);
  ASSERT_TRUE(tessera::testing::wait_until([&] { return unavailable.load() + other.load() == kSteps; },
                                           std::chrono::seconds(20)));
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(timed.num_steps(), 0);
}

// A run that begins before the start timeout keeps the pulls that came first waiting as long as
// it needs: only steps that never start are dropped.
TEST_F(RendezvousMgrTest, APullWaitsPastTheStartTimeoutOnceTheStepsRunBegan) {
  RendezvousMgr timed(kTask, &puller, std::chrono::milliseconds(100));  // a short start timeout
  const std::string key = RendezvousKey::name_of(kHere, kPs, "late:0");
  Got got;
  timed.serve(9, key, [&](StatusOr<Tensor> t) { got(t.status(), t.ok() ? t.value() : Tensor()); });
  ASSERT_TRUE(timed.begin_run(9, [](const Status&) {}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(got.count(), 0);
  ASSERT_TRUE(timed.find(9)->send(RendezvousKey::named(key), Tensor::scalar(42)).ok());
  ASSERT_EQ(got.count(), 1);
  EXPECT_TRUE(got.status.ok()) << got.status.to_string();
  EXPECT_EQ(got.value.scalar<int32_t>(), 42);
  timed.end_run(9, Status());
  EXPECT_EQ(timed.num_steps(), 0);
}

// serve()'s give-up (the caller's deadline, its connection lost) fails the pull at once, once, and
// frees it; after the pull was served it does nothing.
TEST_F(RendezvousMgrTest, AGiveUpEndsAWaitingPullOnceAndNothingAfterItWasServed) {
  const std::string key = RendezvousKey::name_of(kHere, kPs, "g:0");
  Got waiting;
  const std::size_t timers_before = TimerQueue::global().pending();
  auto give_up = mgr.serve(3, key, [&](StatusOr<Tensor> t) { waiting(t.status(), Tensor()); });
  EXPECT_EQ(TimerQueue::global().pending(), timers_before + 1);
  EXPECT_EQ(mgr.num_steps(), 1);
  give_up(errors::deadline_exceeded("the caller's deadline passed"));
  ASSERT_EQ(waiting.count(), 1);
  EXPECT_EQ(waiting.status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(mgr.num_steps(), 0);
  EXPECT_EQ(TimerQueue::global().pending(), timers_before) << "the step's start timeout went with it";
  give_up(errors::unavailable("again"));
  EXPECT_EQ(waiting.count(), 1);

  // The same key pulled again, then served: the first pull's give-up leaves the second alone.
  Got second;
  auto second_give_up = mgr.serve(3, key, [&](StatusOr<Tensor> t) { second(t.status(), t.ok() ? t.value() : Tensor()); });
  give_up(errors::unavailable("stale"));
  EXPECT_EQ(second.count(), 0);
  ASSERT_TRUE(mgr.begin_run(3, [](const Status&) {}).ok());
  ASSERT_TRUE(mgr.find(3)->send(RendezvousKey::named(key), Tensor::scalar(5)).ok());
  ASSERT_EQ(second.count(), 1);
  EXPECT_EQ(second.value.scalar<int32_t>(), 5);
  second_give_up(errors::unavailable("too late"));
  EXPECT_EQ(second.count(), 1);
  mgr.end_run(3, Status());
  EXPECT_EQ(mgr.num_steps(), 0);
}

// A manager destroyed with a start timer armed is never reached by it.
TEST_F(RendezvousMgrTest, DestroyedWithPullsWaitingTheTimerDoesNotReachIt) {
  std::atomic<int> calls{0};
  {
    RendezvousMgr doomed(kTask, &puller, std::chrono::milliseconds(50));
    doomed.serve(1, RendezvousKey::name_of(kHere, kPs, "d:0"), [&](StatusOr<Tensor>) { calls++; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace tessera::internal
