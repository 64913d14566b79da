// train::Coordinator, black-box: the behaviours of TensorFlow's coordinator_test.py.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing/latch.h"
#include "tests/testing/test_util.h"

namespace tessera::train {
namespace {

using namespace std::chrono_literals;

// Latches stand for Python's threading.Event; shared by pointer so detached threads may outlive
// the test body.
using tessera::testing::Latch;

// TensorFlow's RaiseOnEvent: waits for `wait_for`, raises `ex` and reports it to the
// coordinator, then sets `then` (if any).
void raise_on_event(Coordinator& coord, std::shared_ptr<Latch> wait_for, std::shared_ptr<Latch> then,
                    std::exception_ptr ex) {
  try {
    wait_for->wait(10s);
    std::rethrow_exception(ex);
  } catch (...) {
    coord.request_stop(std::current_exception());
  }
  if (then) then->open();
}

// Starts a thread (into `threads`) that raises `ex` and reports it to `coord`: RaiseOnEvent with
// its event set at once.
void raise_in_thread(Coordinator& coord, std::vector<std::thread>& threads, std::exception_ptr ex) {
  auto ev = std::make_shared<Latch>();
  threads.emplace_back(raise_on_event, std::ref(coord), ev, nullptr, std::move(ex));
  ev->open();
}

std::string message_of(const std::exception_ptr& ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(CoordinatorTest, StopApi) {
  Coordinator coord;
  EXPECT_FALSE(coord.should_stop());
  EXPECT_FALSE(coord.wait_for_stop(10ms));
  coord.request_stop();
  EXPECT_TRUE(coord.should_stop());
  EXPECT_TRUE(coord.wait_for_stop(10ms));
  EXPECT_TRUE(coord.wait_for_stop());  // forever: returns at once when stopped
}

TEST(CoordinatorTest, StopAsync) {
  Coordinator coord;
  EXPECT_FALSE(coord.should_stop());
  EXPECT_FALSE(coord.wait_for_stop(1ms));
  std::thread t([&] { coord.request_stop(); });
  EXPECT_TRUE(coord.wait_for_stop(10s));
  EXPECT_TRUE(coord.should_stop());
  t.join();
}

TEST(CoordinatorTest, ManyWaitersWakeOnOneStop) {
  for (int n : tessera::testing::kThreadCounts) {
    Coordinator coord;
    std::atomic<int> woke{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&] {
        if (coord.wait_for_stop(10s)) woke.fetch_add(1);
      });
    }
    coord.request_stop();
    coord.join(threads, 10s);
    EXPECT_EQ(woke.load(), n);
    EXPECT_TRUE(threads.empty());
  }
}

TEST(CoordinatorTest, JoinThreadsThatEndOnStop) {
  Coordinator coord;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&] { coord.wait_for_stop(); });
  coord.request_stop();
  coord.join(threads);
  EXPECT_TRUE(threads.empty());
}

TEST(CoordinatorTest, JoinReturnsWhenThreadsEndWithoutAStop) {
  Coordinator coord;
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { ran.fetch_add(1); });
  coord.join(threads);
  EXPECT_EQ(ran.load(), 4);
  EXPECT_FALSE(coord.should_stop());
}

TEST(CoordinatorTest, JoinOfNothingReturns) {
  Coordinator coord;
  std::vector<std::thread> none;
  coord.join(none);
  std::vector<std::thread> not_joinable(2);  // default-constructed: nothing to wait for
  coord.join(not_joinable);
  EXPECT_TRUE(not_joinable.empty());
}

TEST(CoordinatorTest, JoinGraceExpiresListsTheThreadsStillRunning) {
  Coordinator coord;
  auto release = std::make_shared<Latch>();
  auto ended = std::make_shared<std::atomic<int>>(0);
  std::vector<std::thread> threads;
  threads.emplace_back([&coord] { coord.wait_for_stop(); });  // ends on the stop
  threads.emplace_back([release, ended] {                     // ignores it
    release->wait(60s);
    ended->fetch_add(1);
  });
  std::ostringstream straggler;
  straggler << threads[1].get_id();
  coord.request_stop();
  const auto start = std::chrono::steady_clock::now();
  try {
    coord.join(threads, 50ms);
    ADD_FAILURE() << "join should raise: a thread outlived the grace period";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("still running"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(straggler.str()), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(threads.empty());
  // The straggler was left running, owned by a detached joiner; let it end.
  release->open();
  EXPECT_TRUE(tessera::testing::wait_until([&] { return ended->load() == 1; }));
}

TEST(CoordinatorTest, JoinWithoutGraceExpiry) {
  Coordinator coord;
  std::vector<std::thread> threads;
  // Ends a little after the stop, well within the grace period.
  threads.emplace_back([&coord] {
    coord.wait_for_stop();
    std::this_thread::sleep_for(20ms);
  });
  coord.request_stop();
  coord.join(threads, 10s);
}

TEST(CoordinatorTest, JoinRaisesTheFirstReportedException) {
  Coordinator coord;
  auto ev1 = std::make_shared<Latch>();
  auto ev2 = std::make_shared<Latch>();
  std::vector<std::thread> threads;
  threads.emplace_back(raise_on_event, std::ref(coord), ev1, ev2,
                       std::make_exception_ptr(std::runtime_error("First")));
  threads.emplace_back(raise_on_event, std::ref(coord), ev2, nullptr,
                       std::make_exception_ptr(std::runtime_error("Too many")));
  ev1->open();
  EXPECT_THROW_MSG(coord.join(threads), std::runtime_error, "First");
}

TEST(CoordinatorTest, JoinRaisesTypedTesseraErrors) {
  Coordinator coord;
  std::vector<std::thread> threads;
  raise_in_thread(coord, threads, std::make_exception_ptr(InvalidArgumentError("bad input")));
  EXPECT_THROW_MSG(coord.join(threads), InvalidArgumentError, "bad input");
}

TEST(CoordinatorTest, JoinIgnoresOutOfRange) {
  Coordinator coord;
  std::vector<std::thread> threads;
  raise_in_thread(coord, threads, std::make_exception_ptr(OutOfRangeError("end of input")));
  coord.join(threads);
  EXPECT_TRUE(coord.should_stop());  // it still requested a stop
}

TEST(CoordinatorTest, OutOfRangeDoesNotHideALaterError) {
  Coordinator coord;
  coord.request_stop(std::make_exception_ptr(OutOfRangeError("done")));
  coord.request_stop(std::make_exception_ptr(std::runtime_error("real")));
  std::vector<std::thread> none;
  EXPECT_THROW_MSG(coord.join(none), std::runtime_error, "real");
}

TEST(CoordinatorTest, StopOnException) {
  Coordinator coord;
  bool ran = false;
  coord.stop_on_exception([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_FALSE(coord.should_stop());
  coord.stop_on_exception([] { throw std::runtime_error("in body"); });
  EXPECT_TRUE(coord.should_stop());
  std::vector<std::thread> none;
  EXPECT_THROW_MSG(coord.join(none), std::runtime_error, "in body");
}

TEST(CoordinatorTest, StopOnExceptionOutOfRangeOnlyStops) {
  Coordinator coord;
  coord.stop_on_exception([] { throw OutOfRangeError("queue drained"); });
  EXPECT_TRUE(coord.should_stop());
  std::vector<std::thread> none;
  coord.join(none);  // does not raise
}

TEST(CoordinatorTest, StopOnExceptionInThreads) {
  Coordinator coord;
  std::vector<std::thread> threads;
  threads.emplace_back([&] { coord.stop_on_exception([&] { coord.wait_for_stop(); }); });
  threads.emplace_back([&] { coord.stop_on_exception([] { throw AbortedError("worker died"); }); });
  EXPECT_THROW_MSG(coord.join(threads), AbortedError, "worker died");
}

TEST(CoordinatorTest, KeptExceptionTakesPriorityOverStragglers) {
  Coordinator coord;
  auto release = std::make_shared<Latch>();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::thread> threads;
  threads.emplace_back([release, ended] {
    release->wait(60s);
    *ended = true;
  });
  coord.request_stop(std::make_exception_ptr(DataLossError("corrupt record")));
  EXPECT_THROW_MSG(coord.join(threads, 20ms), DataLossError, "corrupt record");
  release->open();
  EXPECT_TRUE(tessera::testing::wait_until([&] { return ended->load(); }));
}

TEST(CoordinatorTest, ClearStopClearsTheExceptionToo) {
  Coordinator coord;
  std::vector<std::thread> threads;
  raise_in_thread(coord, threads, std::make_exception_ptr(std::runtime_error("First")));
  EXPECT_THROW_MSG(coord.join(threads), std::runtime_error, "First");
  coord.clear_stop();
  EXPECT_FALSE(coord.should_stop());
  raise_in_thread(coord, threads, std::make_exception_ptr(std::runtime_error("Second")));
  EXPECT_THROW_MSG(coord.join(threads), std::runtime_error, "Second");
}

TEST(CoordinatorTest, RequestStopRaisesIfJoined) {
  Coordinator coord;
  std::vector<std::thread> none;
  coord.join(none);
  EXPECT_THROW_MSG(coord.request_stop(std::make_exception_ptr(std::runtime_error("Too many"))),
                   std::runtime_error, "Too many");
  coord.request_stop();  // a plain stop is fine
  // OutOfRange is not an error: not raised either.
  coord.request_stop(std::make_exception_ptr(OutOfRangeError("end")));
  // After clear_stop errors are kept again and raised by the next join.
  coord.clear_stop();
  coord.request_stop(std::make_exception_ptr(std::runtime_error("After clear")));
  EXPECT_THROW_MSG(coord.join(none), std::runtime_error, "After clear");
}

TEST(CoordinatorTest, ConcurrentReportsKeepExactlyOneOfThem) {
  for (int n : tessera::testing::kThreadCounts) {
    SCOPED_TRACE(n);
    Coordinator coord;
    auto go = std::make_shared<Latch>();
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(raise_on_event, std::ref(coord), go, nullptr,
                           std::make_exception_ptr(std::runtime_error("error " + std::to_string(i))));
    }
    go->open();
    try {
      coord.join(threads);
      ADD_FAILURE() << "join should raise";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("error ", 0), 0u) << e.what();
    }
  }
}

TEST(CoordinatorTest, ExceptionIsKeptIntact) {
  Coordinator coord;
  auto ex = std::make_exception_ptr(UnavailableError("peer gone"));
  coord.request_stop(ex);
  std::vector<std::thread> none;
  try {
    coord.join(none);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_EQ(message_of(ex), e.what());
  }
  // join raises it again until clear_stop.
  EXPECT_THROW(coord.join(none), UnavailableError);
}

}  // namespace
}  // namespace tessera::train
