// train::MonitoredTrainingSession (include/tessera/monitored_session.h): TF1's
// MonitoredTrainingSession, with its session creators, SessionManager, _HookedSession,
// _CoordinatedSession and _RecoverableSession in one class.
//
// Note [Monitored session]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Construction: the hooks (chief_only_hooks and the chief's StepCounterHook, SummarySaverHook and
// CheckpointSaverHook first, as TF orders them) learn the graph (HookContext), then begin(); then
// the scaffold is made, once, so that it covers what begin() added: a Saver over the global
// variables (the chief restores with it and CheckpointSaverHook saves with it), the initializer
// group and report_uninitialized_variables (Note [Readiness ops] in core/variable_ops.cc).
// Making a session (create_once): Session(g, master, config); the chief restores the latest
// checkpoint of checkpoint_dir (and hands the Saver the older ones, so max_to_keep covers them) or
// runs the initializers, then requires the ready op to report nothing (FailedPreconditionError);
// another worker polls the ready op on that session, 50 ms doubling to 1 s between polls (TF
// waits 30 s), until it is empty or max_wait_for_ready passes (DeadlineExceededError, not
// retried). Then the local variables' initializers run (TF's local_init_op: a worker's own state,
// such as a SyncReplicasOptimizer's local step, which the ready op does not wait for), the
// graph's queue runners start under the one Coordinator, and every hook's
// after_create_session runs. UnavailableError or AbortedError anywhere in that is retried with a
// fresh session (100 ms doubling to 1 s between tries) until recovery_wait has passed.
// Errors that mean a task lost the session's state (is_preemption): Unavailable and Aborted (a
// task that restarted or dropped an idle session answers Aborted, as TF's).
// A run (an attempt): every hook's before_run outputs are appended to the caller's fetches, one
// Session::run, then every hook's after_run with its slice. UnavailableError or AbortedError
// anywhere in the attempt, the hooks' calls included (a CheckpointSaverHook whose save meets a
// dead ps, a hook that reads the global step), logs one line, tears the session down (queue
// runners stopped and joined, session closed) and makes a new one, then makes the attempt again,
// before_run and all: TF's _RecoverableSession wraps its _HookedSession so. A stop a hook asked
// for in a failed attempt is forgotten with it. The first retry is at once, later ones 100 ms
// doubling to 1 s apart (a hook that fails whatever the session must not spin). TF retries
// forever; here every retry shares the bound recovery_wait counted from the first failure of the
// step, after which the last error goes to the caller. OutOfRangeError stops the loop
// (should_stop), as TF's `with` block swallows it; any other error marks the session failed, so
// close() skips end() (TF calls end() only when the block exits cleanly).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/logging.h"
#include "host/session_run_hooks.h"
#include "tessera/errors.h"
#include "tessera/monitored_session.h"
#include "tessera/saver.h"
#include "tessera/train.h"
#include "tessera/variable.h"

namespace tessera::train {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// UnavailableError and AbortedError, as TF's _PREEMPTION_ERRORS: a task that died, was cut off,
// or no longer has the session or its registered graphs (it restarted, or closed an idle session;
// distributed/master.cc and worker.cc answer Aborted, as TF's).
bool is_preemption(const Error& e) {
  return e.code() == ErrorCode::kUnavailable || e.code() == ErrorCode::kAborted;
}

// The pause between tries: sleeps `*interval` (never past `deadline`), then doubles it, up to 1 s.
void back_off(std::chrono::milliseconds* interval, Clock::time_point deadline) {
  std::this_thread::sleep_for(
      std::max<Clock::duration>(Clock::duration::zero(), std::min<Clock::duration>(*interval, deadline - Clock::now())));
  *interval = std::min(*interval * 2, std::chrono::milliseconds(1000));
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

struct MonitoredTrainingSession::State {
  Graph* graph = nullptr;  // Not owned.
  MonitoredTrainingSessionOptions options;
  std::vector<SessionRunHook> hooks;
  std::optional<Saver> saver;  // none when the graph has no variable
  Operation init_op;
  Operation local_init_op;  // null when the graph has no local variables
  Output ready_op;

  std::unique_ptr<Session> session;
  Coordinator coord;                 // the queue runners' (one for every session made)
  std::vector<std::thread> threads;  // the queue runners' threads for `session`
  std::atomic<bool> stop{false};
  bool failed = false;  // a run raised: close() skips the hooks' end()
  bool closed = false;
  internal::LogRateLimit creation_log{std::chrono::seconds(10), 3};
  internal::LogRateLimit waiting_log{std::chrono::seconds(30), 1};

  // Stops the queue runners and closes the session; a queue runner's error goes to *error when
  // given, else is logged.
  void teardown(std::exception_ptr* error) {
    if (!threads.empty()) {
      coord.request_stop();
      try {
        coord.join(threads, options.stop_grace_period);
      } catch (const std::exception& e) {
        if (error != nullptr && !*error) {
          *error = std::current_exception();
        } else {
          TESSERA_LOG(kWarning, "MonitoredTrainingSession: a queue runner failed: {}", e.what());
        }
      }
    }
    threads.clear();
    coord.clear_stop();
    if (session) {
      try {
        session->close();
      } catch (const std::exception& e) {
        TESSERA_LOG(kDebug, "MonitoredTrainingSession: closing the session: {}", e.what());
      }
      session.reset();
    }
  }

  // The chief's restore or initialization, or another worker's wait for the model.
  void prepare(Session& s) {
    if (options.is_chief) {
      bool restored = false;
      if (!options.checkpoint_dir.empty() && saver) {
        if (auto path = latest_checkpoint(options.checkpoint_dir)) {
          TESSERA_LOG(kInfo, "Restoring parameters from {}", *path);
          saver->restore(s, *path);
          if (auto state = get_checkpoint_state(options.checkpoint_dir)) {
            saver->recover_last_checkpoints(state->all_model_checkpoint_paths);
          }
          restored = true;
        }
      }
      if (!restored) s.run(init_op);
      auto missing = s.run(ready_op).to_vector<std::string>();
      if (!missing.empty()) {
        throw FailedPreconditionError(fmt::format(
            "MonitoredTrainingSession: init operations did not make the model ready: uninitialized variables: {}",
            join_names(missing)));
      }
      return;
    }
    const auto start = Clock::now();
    const auto deadline = start + options.max_wait_for_ready;
    auto interval = std::chrono::milliseconds(50);
    for (;;) {
      auto missing = s.run(ready_op).to_vector<std::string>();
      if (missing.empty()) return;
      const auto now = Clock::now();
      if (now >= deadline) {
        throw DeadlineExceededError(fmt::format(
            "MonitoredTrainingSession: session was not ready after waiting {} ms: uninitialized variables: {}",
            options.max_wait_for_ready.count(), join_names(missing)));
      }
      uint64_t skipped = 0;
      if (internal::log_enabled(internal::LogLevel::kInfo) && waiting_log.admit(&skipped)) {
        TESSERA_LOG(kInfo, "Waiting for model to be ready: uninitialized variables: {}", join_names(missing));
      }
      back_off(&interval, deadline);
    }
  }

  void create_once() {
    session = std::make_unique<Session>(*graph, options.master, options.config);
    prepare(*session);
    // TF's local_init_op: every worker's own state, in each session it makes, once the model is.
    if (!local_init_op.is_null()) session->run(local_init_op);
    if (!queue_runners(*graph).empty()) threads = start_queue_runners(*session, coord);
    for (auto& h : hooks) h.impl()->after_create_session(*session);
  }

  // One attempt of a run on `session` (TF's _HookedSession.run): the hooks' before_run outputs
  // fetched with the caller's, then each hook's after_run with its slice.
  std::vector<Tensor> hooked_run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets) {
    std::vector<Output> all = fetches;
    std::vector<std::size_t> begins;
    for (auto& h : hooks) {
      begins.push_back(all.size());
      auto extra = h.impl()->before_run();
      all.insert(all.end(), extra.begin(), extra.end());
    }
    std::vector<Tensor> results = session->run(all, feeds, targets);
    bool stop_requested = false;
    for (std::size_t i = 0; i < hooks.size(); ++i) {
      const std::size_t end = i + 1 < hooks.size() ? begins[i + 1] : all.size();
      std::vector<Tensor> values(results.begin() + static_cast<std::ptrdiff_t>(begins[i]),
                                 results.begin() + static_cast<std::ptrdiff_t>(end));
      bool request_stop = false;
      hooks[i].impl()->after_run(values, request_stop);
      stop_requested = stop_requested || request_stop;
    }
    if (stop_requested) stop = true;
    results.resize(fetches.size());
    return results;
  }

  // create_once, again while it fails with UnavailableError or AbortedError until `deadline`.
  void create(Clock::time_point deadline) {
    auto interval = std::chrono::milliseconds(100);
    for (;;) {
      try {
        create_once();
        return;
      } catch (const Error& e) {
        teardown(nullptr);
        if (!is_preemption(e) || Clock::now() >= deadline) throw;
        internal::log_limited(creation_log, internal::LogLevel::kInfo,
                              "An error was raised while a session was being created; a new session will be "
                              "created. Error: {}",
                              e.what());
      } catch (...) {
        teardown(nullptr);
        throw;
      }
      back_off(&interval, deadline);
    }
  }
};

MonitoredTrainingSession::MonitoredTrainingSession(Graph& g, MonitoredTrainingSessionOptions options)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.graph = &g;
  st.options = std::move(options);
  const auto& o = st.options;
  if (o.recovery_wait.count() < 0 || o.max_wait_for_ready.count() < 0 || o.stop_grace_period.count() < 0) {
    throw InvalidArgumentError("MonitoredTrainingSession: negative recovery_wait, max_wait_for_ready or stop_grace_period");
  }
  if (o.save_checkpoint_secs < 0 || o.save_checkpoint_steps < 0 || o.log_step_count_steps < 0 ||
      o.save_summaries_steps < 0 || o.save_summaries_secs < 0) {
    throw InvalidArgumentError(
        "MonitoredTrainingSession: negative save_checkpoint_secs, save_checkpoint_steps, log_step_count_steps, "
        "save_summaries_steps or save_summaries_secs");
  }
  if (o.is_chief) {
    st.hooks = o.chief_only_hooks;
    const std::string& summary_dir = o.summary_dir.empty() ? o.checkpoint_dir : o.summary_dir;
    if (!summary_dir.empty()) {
      if (o.log_step_count_steps > 0) st.hooks.push_back(StepCounterHook(o.log_step_count_steps, summary_dir));
      if (o.save_summaries_steps > 0 || o.save_summaries_secs > 0) {
        const bool by_steps = o.save_summaries_steps > 0;
        st.hooks.push_back(internal::make_summary_saver_hook(summary_dir, by_steps ? o.save_summaries_steps : 0,
                                                             by_steps ? 0 : o.save_summaries_secs, Output(),
                                                             /*monitored_sessions_own=*/true));
      }
    }
    if (!o.checkpoint_dir.empty()) {
      if (o.save_checkpoint_steps > 0) {
        st.hooks.push_back(CheckpointSaverHook(o.checkpoint_dir, 0, o.save_checkpoint_steps));
      } else if (o.save_checkpoint_secs > 0) {
        st.hooks.push_back(CheckpointSaverHook(o.checkpoint_dir, o.save_checkpoint_secs, 0));
      }
    }
  }
  st.hooks.insert(st.hooks.end(), o.hooks.begin(), o.hooks.end());
  for (const auto& h : st.hooks) {
    if (h.is_null()) throw InvalidArgumentError("MonitoredTrainingSession: a null hook");
  }

  State* raw = &st;
  for (auto& h : st.hooks) {
    if (auto* contextual = dynamic_cast<internal::ContextualHook*>(h.impl())) {
      contextual->set_context(internal::HookContext{&g, [raw] { return raw->saver; }});
    }
  }
  for (auto& h : st.hooks) h.impl()->begin();

  // The scaffold (TF's Scaffold.finalize), after begin() so that it covers what the hooks added.
  if (!global_variables(g).empty()) st.saver = Saver(g);
  st.init_op = global_variables_initializer(g);
  st.ready_op = report_uninitialized_variables(g);
  if (!local_variables(g).empty()) st.local_init_op = local_variables_initializer(g);

  st.create(Clock::now() + o.recovery_wait);
}

MonitoredTrainingSession::~MonitoredTrainingSession() {
  try {
    close();
  } catch (const std::exception& e) {
    TESSERA_LOG(kDebug, "MonitoredTrainingSession: closing: {}", e.what());
  }
}

std::vector<Tensor> MonitoredTrainingSession::run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                                  const std::vector<Operation>& targets) {
  State& st = *state_;
  if (st.closed) throw FailedPreconditionError("MonitoredTrainingSession: run after close()");
  if (should_stop()) throw FailedPreconditionError("MonitoredTrainingSession: run called even after should_stop requested");

  std::optional<Clock::time_point> deadline;  // of the recovery, from the step's first failure
  std::chrono::milliseconds pause{100};        // before an attempt after the second failure
  bool retried = false;                        // the first retry is at once
  for (;;) {
    try {
      if (!st.session) {
        if (!deadline) deadline = Clock::now() + st.options.recovery_wait;
        st.create(*deadline);
      }
      return st.hooked_run(fetches, feeds, targets);
    } catch (const OutOfRangeError&) {
      st.stop = true;
      return std::vector<Tensor>(fetches.size());
    } catch (const Error& e) {
      if (!is_preemption(e) || (deadline && Clock::now() >= *deadline)) {
        st.failed = true;
        throw;
      }
      if (!deadline) deadline = Clock::now() + st.options.recovery_wait;
      TESSERA_LOG(kInfo,
                  "An error was raised. This may be due to a preemption in a connected worker or parameter "
                  "server. The current session will be closed and a new session will be created. Error: {}",
                  e.what());
      st.teardown(nullptr);
      if (retried) back_off(&pause, *deadline);
      retried = true;
    } catch (...) {
      st.failed = true;
      throw;
    }
  }
}

void MonitoredTrainingSession::run(Operation target, const FeedMap& feeds) { run({}, feeds, {target}); }

bool MonitoredTrainingSession::should_stop() const { return state_->stop || state_->coord.should_stop(); }

void MonitoredTrainingSession::close() {
  State& st = *state_;
  if (st.closed) return;
  st.closed = true;
  std::exception_ptr error;
  if (!st.failed && st.session) {
    try {
      for (auto& h : st.hooks) h.impl()->end(*st.session);
    } catch (...) {
      error = std::current_exception();
    }
  }
  st.teardown(&error);
  if (error) std::rethrow_exception(error);
}

Session& MonitoredTrainingSession::raw_session() {
  if (!state_->session) throw FailedPreconditionError("MonitoredTrainingSession: no session (closed)");
  return *state_->session;
}

}  // namespace tessera::train
