// Helpers shared by the test suites.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.h"

namespace tessera::testing {

// Thread counts every concurrency test runs at.
inline const std::vector<int> kThreadCounts = {1, 2, 4, 8};

// Runs `body(i)` on `n` threads and joins them.
void run_threads(int n, const std::function<void(int)>& body);

// Polls `cond` every millisecond until it holds or `limit` passes; returns whether it held.
bool wait_until(const std::function<bool()>& cond,
                std::chrono::milliseconds limit = std::chrono::seconds(10));

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
