// Helpers shared by the test suites.
#pragma once

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.h"

// 1 where the transport's malloc settings (Note [Malloc settings for transport] in
// core/host_blocks.cc) apply and can be observed: glibc 2.33 or later (mallinfo2), no sanitizer
// (they replace malloc).
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33) && !defined(__SANITIZE_ADDRESS__) && !defined(TESSERA_TSAN)
#define TESSERA_TEST_MALLOC_TUNING 1
#endif
#endif
#ifndef TESSERA_TEST_MALLOC_TUNING
#define TESSERA_TEST_MALLOC_TUNING 0
#endif

namespace tessera::internal {
class ChildProcess;
}  // namespace tessera::internal

namespace tessera::testing {

// Thread counts every concurrency test runs at.
inline const std::vector<int> kThreadCounts = {1, 2, 4, 8};

// Runs `body(i)` on `n` threads and joins them.
void run_threads(int n, const std::function<void(int)>& body);

// Polls `cond` every millisecond until it holds or `limit` passes; returns whether it held.
bool wait_until(const std::function<bool()>& cond,
                std::chrono::milliseconds limit = std::chrono::seconds(10));

// Sets (or unsets, for nullopt) an environment variable for the scope's life.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A process's threads, open file descriptors and resident memory (KiB), from /proc; -1 when it
// cannot be read (the process is gone).
int threads_of(int pid);
int open_fds(int pid);
long rss_kib(int pid);
// A field of /proc/PID/status given in KiB ("RssAnon", "RssFile", ...); -1 where absent.
long proc_status_kib(int pid, const std::string& field);
// This process's environment ("NAME=value" each) without malloc settings (GLIBC_TUNABLES,
// MALLOC_*, TESSERA_MALLOC_TUNING): for a child whose malloc settings a test chooses.
std::vector<std::string> environment_without_malloc_settings();
// The first line starting with "probe:" that `probe` (a test run as a child process of its own, to
// report what it saw) prints within `limit`; nullopt when it prints none or ends first.
std::optional<std::string> probe_line(internal::ChildProcess& probe,
                                      std::chrono::milliseconds limit = std::chrono::seconds(60));

// A fixture that gives each test a fresh folder of its own, `dir_` (ctest runs tests in parallel
// processes): <temp>/<prefix>_<pid>_<test name>, removed with what it holds after the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override;
  void TearDown() override;

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

// The names of `vars`, in order (for ElementsAre on global_variables(g) and the like).
inline std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> names;
  for (const Variable& v : vars) names.push_back(v.name());
  return names;
}

// The message of the `E` that `f` throws; "" and a test failure when it throws something else or
// nothing.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// A FIFOQueue of scalars of `dtype` and the enqueue of a fed scalar: the queue that session tests
// put values into one step at a time.
//
//   testing::FedQueue q(g, 10, DType::Float32);
//   s.run(q.enqueue, q.feed(Tensor::scalar(5.0f)));
struct FedQueue {
  FedQueue(Graph& g, int capacity, DType dtype, std::string shared_name = "", std::string value_name = "")
      : queue(g, capacity, {dtype}, {Shape{}}, std::move(shared_name)),
        value(ops::placeholder(g, dtype, Shape{}, std::move(value_name))),
        enqueue(queue.enqueue({value})) {}

  // The feeds of an enqueue step that puts `t` in the queue.
  FeedMap feed(Tensor t) const { return {{value, std::move(t)}}; }

  FIFOQueue queue;
  Output value;  // the placeholder the enqueue step feeds
  Operation enqueue;
};

// Expects that `b`, a queue with `a`'s shared name but other attributes, cannot share the queue
// that `a` makes in `s`: running b's queue op or its size() fails with InvalidArgumentError saying
// `what` (TensorFlow's testIncompatibleSharedQueues, for each queue type).
void expect_share_refused(Session& s, const QueueBase& a, const QueueBase& b, const std::string& what);

// Garbage for a transport: 1 to 4 message parts of random bytes, each shorter than `max_size`.
std::vector<std::string> random_parts(std::mt19937& rng, std::size_t max_size);

// The reduction ops, by op type (the kernel and shape inference suites cover each).
struct NamedReduction {
  const char* type;
  Output (*build)(Output, std::vector<int> axes, bool keep_dims, std::string name);
};
inline const NamedReduction kReductions[] = {
    {"Sum", ops::reduce_sum}, {"Mean", ops::reduce_mean}, {"Max", ops::reduce_max}};

}  // namespace tessera::testing

// Asserts that `stmt` throws `Type` and that its message contains `substring`.
#define EXPECT_THROW_MSG(stmt, Type, substring)                                      \
  do {                                                                               \
    try {                                                                            \
      stmt;                                                                          \
      ADD_FAILURE() << "expected " #Type " from: " #stmt;                            \
    } catch (const Type& e) {                                                        \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)            \
          << "message '" << e.what() << "' lacks '" << (substring) << "'";           \
    } catch (const std::exception& e) {                                              \
      ADD_FAILURE() << "expected " #Type ", got another exception: " << e.what();    \
    }                                                                                \
  } while (0)
