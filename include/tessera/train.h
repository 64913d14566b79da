// Threads that feed queues, and the coordinator that stops them together (tessera::train).
//
//   train::Coordinator coord;
//   auto threads = train::start_queue_runners(session, coord);
//   coord.stop_on_exception([&] {
//     while (!coord.should_stop()) session.run(train_op);   // OutOfRangeError ends it quietly
//   });
//   coord.request_stop();
//   coord.join(threads);                                     // re-raises the first real error
//
// Coordinator is thread-safe: any thread may request a stop, report an error or wait.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/graph.h"
#include "tessera/queue.h"
#include "tessera/session.h"

namespace tessera::train {

using namespace std::chrono_literals;

class Coordinator {
 public:
  Coordinator();
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Requests a stop. The first non-null `ex` that is not an OutOfRangeError is kept and re-raised
  // by join(). After join() (and before clear_stop()) such an `ex` is re-raised here instead,
  // since no join would report it.
  void request_stop(std::exception_ptr ex = nullptr);
  bool should_stop() const;
  // Waits until a stop is requested or `timeout` passes (negative: forever); true if stopped.
  bool wait_for_stop(std::chrono::milliseconds timeout = -1ms) const;
  // Forgets the stop request and the kept exception.
  void clear_stop();

  // Runs body; an exception it throws requests a stop (OutOfRangeError without being kept).
  template <class F>
  void stop_on_exception(F&& body) {
    try {
      body();
    } catch (...) {
      request_stop(std::current_exception());
    }
  }

  // Waits for `threads` to end: until they all end or a stop is requested, then at most
  // `stop_grace_period` more. Re-raises the kept exception; else, if threads are still alive,
  // raises tessera::Error (InternalError) listing their ids (they are left running, detached).
  // `threads` is emptied. Threads that are not joinable are skipped.
  void join(std::vector<std::thread>& threads, std::chrono::milliseconds stop_grace_period = 120s);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Runs enqueue ops in threads to keep a queue filled. A copyable handle (copies share the
// threads' bookkeeping); thread-safe. See Note [Queue runner threads] in host/queue_runner.cc.
class QueueRunner {
 public:
  QueueRunner() = default;
  QueueRunner(QueueBase& queue, std::vector<Operation> enqueue_ops);

  // One thread per enqueue op, each running its op until the coordinator stops or the queue is
  // closed; the last one to end closes the queue. OutOfRangeError and CancelledError end a thread
  // quietly; another error closes the queue (cancelling pending enqueues) and is reported to
  // `coord` (or kept, see exceptions()). With a coordinator, one more thread closes the queue with
  // cancel_pending_enqueues when a stop is requested, so no enqueue stays blocked; that thread
  // ends only on a stop request, so join them after coord.request_stop(). Returns no threads if
  // this runner's threads are already running for `session`. With `start` = false the enqueue
  // threads wait for start(session) (or a stop request) before running. `session` (and `coord`)
  // must outlive the threads: join them before destroying either.
  std::vector<std::thread> create_threads(Session& session, Coordinator* coord = nullptr,
                                          bool start = true);
  // Lets the threads created with start = false for `session` run.
  void start(Session& session);
  // Errors raised in runner threads started without a coordinator.
  std::vector<std::exception_ptr> exceptions() const;
  const QueueBase& queue() const;
  const std::vector<Operation>& enqueue_ops() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Registers a runner in the graph's collection (used by start_queue_runners).
void add_queue_runner(Graph& g, QueueRunner runner);
std::vector<QueueRunner> queue_runners(Graph& g);
// Starts the threads of every registered runner for `session`.
std::vector<std::thread> start_queue_runners(Session& session, Coordinator& coord);

// A queue of the rows of `input` (dimension 0), `num_epochs` times (0 = forever), each epoch in a
// new random order when `shuffle`; a QueueRunner filling it is registered. When the epochs are
// done the queue closes and consumers see OutOfRangeError once it is drained.
FIFOQueue input_producer(Graph& g, Tensor input, int num_epochs = 0, bool shuffle = true,
                         int capacity = 32, uint64_t seed = 0);
// The same over a tensor computed by the graph (evaluated at each epoch).
FIFOQueue input_producer(Output input, int num_epochs = 0, bool shuffle = true, int capacity = 32,
                         uint64_t seed = 0);

}  // namespace tessera::train
