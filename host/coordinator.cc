// train::Coordinator: a stop flag, the first real error, and a join with a grace period.
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train.h"

namespace tessera::train {

struct Coordinator::State {
  mutable std::mutex mu;
  // Signalled on a stop request and whenever a thread being joined ends.
  mutable std::condition_variable cv;
  bool stop = false;               // guarded by mu
  bool joined = false;             // guarded by mu: join() returned (or raised) since clear_stop
  std::exception_ptr kept;         // guarded by mu: the first non-OutOfRange error reported
};

namespace {

bool is_out_of_range(const std::exception_ptr& ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const OutOfRangeError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Note [Joining with a grace period]
// std::thread offers no timed join, and destroying a joinable thread terminates the process. So
// join() moves each thread into a small joiner thread that owns it, joins it and counts it done
// under the coordinator's lock. When the grace period runs out the joiners of threads still
// running are detached: each keeps owning its thread and joins it whenever it ends, and the
// shared counters outlive the Coordinator.
struct JoinGroup {
  explicit JoinGroup(std::size_t n) : done(n, false) {}
  std::vector<bool> done;  // guarded by Coordinator::State::mu
  int finished = 0;        // guarded by Coordinator::State::mu
};

}  // namespace

Coordinator::Coordinator() : state_(std::make_shared<State>()) {}
Coordinator::~Coordinator() = default;

void Coordinator::request_stop(std::exception_ptr ex) {
  if (ex && is_out_of_range(ex)) ex = nullptr;  // the normal end of input, not an error
  std::lock_guard<std::mutex> l(state_->mu);
  if (state_->joined && ex) {
    // join() already ran: nobody would see this error, so raise it here (as TensorFlow does).
    std::rethrow_exception(ex);
  }
  if (ex && !state_->kept) state_->kept = ex;
  state_->stop = true;
  state_->cv.notify_all();
}

bool Coordinator::should_stop() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->stop;
}

bool Coordinator::wait_for_stop(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(state_->mu);
  if (timeout.count() < 0) {
    state_->cv.wait(l, [&] { return state_->stop; });
    return true;
  }
  return state_->cv.wait_for(l, timeout, [&] { return state_->stop; });
}

void Coordinator::clear_stop() {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->stop = false;
  state_->joined = false;
  state_->kept = nullptr;
}

void Coordinator::join(std::vector<std::thread>& threads, std::chrono::milliseconds stop_grace_period) {
  struct Joiner {
    std::thread thread;
    std::thread::id id;  // of the thread it joins
  };
  std::vector<Joiner> joiners;
  std::vector<std::thread*> live;
  for (std::thread& t : threads) {
    if (t.joinable()) live.push_back(&t);  // else never started or already joined
  }
  auto group = std::make_shared<JoinGroup>(live.size());
  std::shared_ptr<State> state = state_;
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::thread::id id = live[i]->get_id();
    auto owned = std::make_shared<std::thread>(std::move(*live[i]));
    auto join_and_count = [owned, group, state, i] {
      owned->join();
      std::lock_guard<std::mutex> l(state->mu);
      group->done[i] = true;
      ++group->finished;
      state->cv.notify_all();
    };
    try {
      joiners.push_back({std::thread(join_and_count), id});
    } catch (const std::system_error&) {
      join_and_count();  // no thread to spare: join it here, without a grace period
      joiners.push_back({std::thread(), id});
    }
  }
  threads.clear();

  const int total = static_cast<int>(joiners.size());
  std::unique_lock<std::mutex> l(state->mu);
  // Until every thread ends or a stop is requested...
  state->cv.wait(l, [&] { return group->finished == total || state->stop; });
  // ...then at most the grace period more.
  if (group->finished < total) {
    state->cv.wait_for(l, stop_grace_period, [&] { return group->finished == total; });
  }
  const std::vector<bool> done = group->done;
  l.unlock();

  // Joiners are joined or detached without the lock: a finishing joiner takes it.
  std::vector<std::thread::id> stragglers;
  for (std::size_t i = 0; i < joiners.size(); ++i) {
    if (done[i]) {
      if (joiners[i].thread.joinable()) joiners[i].thread.join();  // its thread ended: prompt
    } else {
      joiners[i].thread.detach();  // keeps owning (and will join) its thread
      stragglers.push_back(joiners[i].id);
    }
  }

  l.lock();
  state->joined = true;
  if (state->kept) {
    std::exception_ptr ex = state->kept;
    l.unlock();
    std::rethrow_exception(ex);
  }
  if (!stragglers.empty()) {
    l.unlock();
    std::ostringstream ids;
    for (std::size_t i = 0; i < stragglers.size(); ++i) ids << (i ? " " : "") << stragglers[i];
    throw InternalError(fmt::format(
        "Coordinator stopped with threads still running: {} ({} of {} threads did not end within "
        "the stop grace period of {} ms)",
        ids.str(), stragglers.size(), total, stop_grace_period.count()));
  }
}

}  // namespace tessera::train
