// train::QueueRunner and the graph's collection of them (add_queue_runner, queue_runners,
// start_queue_runners).
#include <map>

#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"
#include "tessera/train.h"

namespace tessera::train {

namespace {
constexpr const char* kQueueRunnersCollection = "queue_runners";
}  // namespace

struct QueueRunner::State {
  QueueBase queue;
  std::vector<Operation> enqueue_ops;
  Operation close_op;   // close(): what the last thread to end runs
  Operation cancel_op;  // close(cancel_pending_enqueues = true): on a stop request or an error

  std::mutex mu;
  std::condition_variable started_cv;
  // Per session (the key is only compared, never dereferenced): enqueue threads still running,
  // and whether threads created with start = false may begin.
  std::map<const Session*, int> runs;        // guarded by mu
  std::map<const Session*, bool> started;    // guarded by mu
  std::vector<std::exception_ptr> errors;    // guarded by mu
};

namespace {

using StatePtr = std::shared_ptr<QueueRunner::State>;

// Runs `op` and swallows every error: closing a queue that is already closed, or in a session
// that is closed, is expected during shutdown.
void run_quietly(Session& session, const Operation& op) {
  try {
    session.run(op);
  } catch (...) {
  }
}

// Threads created with start = false wait here for QueueRunner::start (or a stop request, polled:
// the coordinator has no callbacks). False when they should exit without running.
bool wait_until_started(const StatePtr& st, const Session* key, Coordinator* coord) {
  std::unique_lock<std::mutex> l(st->mu);
  for (;;) {
    if (st->started[key]) return true;
    if (coord != nullptr && coord->should_stop()) return false;
    st->started_cv.wait_for(l, std::chrono::milliseconds(10));
  }
}

// Note [Queue runner threads]
// Each enqueue thread loops on its op until the coordinator stops or the op raises.
// OutOfRangeError (an input exhausted, e.g. LimitEpochs) and CancelledError (the queue or the
// session closed) end it quietly; any other error is reported to the coordinator (or kept for
// exceptions()) and closes the queue with cancel_pending_enqueues, so the other threads and the
// consumers do not wait forever. The last thread to end runs close(), so consumers drain the
// queue and then see OutOfRangeError. Nothing may escape a thread body (std::terminate), so
// every session call is guarded: the session may be closed under our feet.
void enqueue_thread(const StatePtr& st, Session* session, Coordinator* coord, Operation op, bool gated) {
  std::exception_ptr error;
  try {
    if (!gated || wait_until_started(st, session, coord)) {
      while (coord == nullptr || !coord->should_stop()) session->run(op);
    }
  } catch (const OutOfRangeError&) {
  } catch (const CancelledError&) {
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    if (coord != nullptr) {
      try {
        coord->request_stop(error);
      } catch (...) {
        // The coordinator was joined already and re-raised it: nobody else would see it.
        std::lock_guard<std::mutex> l(st->mu);
        st->errors.push_back(error);
      }
    } else {
      std::lock_guard<std::mutex> l(st->mu);
      st->errors.push_back(error);
    }
    run_quietly(*session, st->cancel_op);
  }
  bool last = false;
  {
    std::lock_guard<std::mutex> l(st->mu);
    last = --st->runs[session] == 0;
    if (last) {
      st->runs.erase(session);
      st->started.erase(session);
    }
  }
  if (last) run_quietly(*session, st->close_op);
}

// With a coordinator: closes the queue, cancelling blocked enqueues, once a stop is requested.
// Ends only then (as in TensorFlow), so joining these threads needs a stop request.
void close_on_stop_thread(const StatePtr& st, Session* session, Coordinator* coord) {
  try {
    coord->wait_for_stop();
    run_quietly(*session, st->cancel_op);
  } catch (...) {
  }
}

QueueRunner::State& checked(const StatePtr& st) {
  if (!st) throw InvalidArgumentError("use of a default-constructed QueueRunner");
  return *st;
}

}  // namespace

QueueRunner::QueueRunner(QueueBase& queue, std::vector<Operation> enqueue_ops)
    : state_(std::make_shared<State>()) {
  if (enqueue_ops.empty()) throw InvalidArgumentError("QueueRunner needs at least one enqueue op");
  for (const Operation& op : enqueue_ops) {
    if (op.is_null()) throw InvalidArgumentError("QueueRunner: null enqueue op");
    if (&op.graph() != &queue.graph()) {
      throw InvalidArgumentError(
          fmt::format("QueueRunner: enqueue op '{}' is not in the graph of queue '{}'", op.name(), queue.name()));
    }
  }
  state_->queue = queue;
  state_->enqueue_ops = std::move(enqueue_ops);
  state_->close_op = queue.close(false);
  state_->cancel_op = queue.close(true);
}

std::vector<std::thread> QueueRunner::create_threads(Session& session, Coordinator* coord, bool start) {
  const StatePtr& st = state_;
  checked(st);
  {
    std::lock_guard<std::mutex> l(st->mu);
    if (st->runs.count(&session)) return {};  // already running for this session
    st->runs[&session] = static_cast<int>(st->enqueue_ops.size());
    st->started[&session] = start;
    st->errors.clear();
  }
  std::vector<std::thread> threads;
  try {
    for (const Operation& op : st->enqueue_ops) {
      threads.emplace_back(enqueue_thread, st, &session, coord, op, !start);
    }
    if (coord != nullptr) threads.emplace_back(close_on_stop_thread, st, &session, coord);
  } catch (...) {
    // Could not start every thread: stop the ones running, then report.
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->started[&session] = true;
    }
    st->started_cv.notify_all();
    run_quietly(session, st->cancel_op);
    if (coord != nullptr) coord->request_stop();
    for (auto& t : threads) t.join();
    throw;
  }
  return threads;
}

void QueueRunner::start(Session& session) {
  const StatePtr& st = state_;
  checked(st);
  {
    std::lock_guard<std::mutex> l(st->mu);
    auto it = st->started.find(&session);
    if (it == st->started.end()) {
      throw FailedPreconditionError(fmt::format(
          "QueueRunner for queue '{}': no threads created for this session", st->queue.name()));
    }
    it->second = true;
  }
  st->started_cv.notify_all();
}

std::vector<std::exception_ptr> QueueRunner::exceptions() const {
  State& st = checked(state_);
  std::lock_guard<std::mutex> l(st.mu);
  return st.errors;
}

const QueueBase& QueueRunner::queue() const { return checked(state_).queue; }
const std::vector<Operation>& QueueRunner::enqueue_ops() const { return checked(state_).enqueue_ops; }

void add_queue_runner(Graph& g, QueueRunner runner) {
  (void)runner.queue();  // a default-constructed runner raises here
  auto& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  impl.collections_[kQueueRunnersCollection].push_back(std::make_shared<QueueRunner>(std::move(runner)));
}

std::vector<QueueRunner> queue_runners(Graph& g) {
  auto& impl = g.impl();
  std::lock_guard<std::mutex> l(impl.collections_mu_);
  std::vector<QueueRunner> out;
  auto it = impl.collections_.find(kQueueRunnersCollection);
  if (it == impl.collections_.end()) return out;
  for (const auto& p : it->second) out.push_back(*std::static_pointer_cast<QueueRunner>(p));
  return out;
}

std::vector<std::thread> start_queue_runners(Session& session, Coordinator& coord) {
  std::vector<std::thread> threads;
  for (QueueRunner& qr : queue_runners(session.graph())) {
    for (auto& t : qr.create_threads(session, &coord, true)) threads.push_back(std::move(t));
  }
  return threads;
}

}  // namespace tessera::train
