// The queue runners of a test's session: started for the scope's life, then stopped and joined.
//
//   Session s(g);
//   tessera::testing::ScopedQueueRunners runners(s);   // train::start_queue_runners
//   ... s.run(batch) ...
//   // at scope exit: request_stop, join (a runner error or a thread still alive fails the test)
#pragma once

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/train.h"

namespace tessera::testing {

class ScopedQueueRunners {
 public:
  explicit ScopedQueueRunners(Session& s) : threads_(train::start_queue_runners(s, coord_)) {}
  ~ScopedQueueRunners() {
    coord_.request_stop();
    try {
      coord_.join(threads_, std::chrono::seconds(10));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "queue runner: " << e.what();
    }
  }
  ScopedQueueRunners(const ScopedQueueRunners&) = delete;
  ScopedQueueRunners& operator=(const ScopedQueueRunners&) = delete;

  train::Coordinator& coord() { return coord_; }

 private:
  train::Coordinator coord_;
  std::vector<std::thread> threads_;
};

}  // namespace tessera::testing
