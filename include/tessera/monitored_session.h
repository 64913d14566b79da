// A training loop's session that initializes or restores the model, runs hooks around every step,
// saves checkpoints and recovers from a lost task, as TF1's tf.train.MonitoredTrainingSession.
//
//   Variable step = train::get_or_create_global_step(g);
//   Operation train_op = train::AdamOptimizer(1e-3f).minimize(loss, step);
//   train::MonitoredTrainingSessionOptions opts;
//   opts.master = server.target();                 // "" for an in-process session
//   opts.is_chief = task_index == 0;
//   opts.checkpoint_dir = "/ckpt";                 // restored from when it has a checkpoint
//   opts.hooks = {train::StopAtStepHook(10000), train::NanTensorHook(loss)};
//   train::MonitoredTrainingSession sess(g, opts);
//   while (!sess.should_stop()) sess.run(train_op);
//   sess.close();                                  // hooks' end(): a last checkpoint
//
// The chief makes its session, then restores the latest checkpoint of checkpoint_dir (with a Saver
// over the global variables, made at construction) or runs the variables' initializers, and checks
// that report_uninitialized_variables(g) is empty. Other workers never initialize: they poll that
// op until it is empty (every 50 ms at first, backing off to 1 s), at most max_wait_for_ready
// (DeadlineExceededError). With a checkpoint_dir the chief also saves checkpoints
// ("<dir>/model.ckpt-<global step>", every save_checkpoint_steps steps, else every
// save_checkpoint_secs seconds, at creation and at close) and logs global_step/sec every
// log_step_count_steps steps; those hooks need the graph's "global_step" variable
// (train::get_or_create_global_step), as in TF (FailedPreconditionError without it). Queue runners
// registered in the graph are started for each session, with a Coordinator, and stopped at close.
//
// A run that fails with UnavailableError or AbortedError (a task the session uses died, was cut
// off, or restarted and no longer has the session's graphs), in the session's run or in a hook's
// before_run or after_run (a checkpoint save that meets a dead ps), closes the session and makes a
// new one as above (the chief restores the latest checkpoint), then runs the step again, hooks
// and all; past `recovery_wait` from the failure the error goes to the caller. See Note [Monitored
// session] in host/monitored_session.cc.
//
// Not thread-safe, except should_stop(): one thread at a time runs and closes it (the hooks are
// called from that thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/session.h"
#include "tessera/session_run_hook.h"
#include "tessera/tensor.h"

namespace tessera::train {

struct MonitoredTrainingSessionOptions {
  std::string master;  // a Session target: "" (in-process) or a server's target()
  bool is_chief = true;
  std::string checkpoint_dir;  // "" : no restore, no checkpoints, no step counter
  std::vector<SessionRunHook> hooks;
  // The chief's checkpoints in checkpoint_dir: every save_checkpoint_steps steps when > 0, else
  // every save_checkpoint_secs seconds when > 0; both 0: none (then none at close either).
  int save_checkpoint_secs = 600;
  int save_checkpoint_steps = 0;
  // How long making a new session may keep failing with UnavailableError or AbortedError (at
  // construction, or after a run failed so) before the error goes to the caller.
  std::chrono::milliseconds recovery_wait{30000};
  // How long a worker that is not the chief waits for the chief to initialize the model.
  std::chrono::milliseconds max_wait_for_ready{7200000};
  SessionOptions config;
  // Beyond API.md's fields (after them, so that its aggregate order holds):
  // Hooks the chief alone runs (TF's chief_only_hooks), before `hooks`.
  std::vector<SessionRunHook> chief_only_hooks;
  // The chief's StepCounterHook when checkpoint_dir or summary_dir is set (TF's
  // log_step_count_steps); 0: none. It writes "global_step/sec" to summary_dir's event file.
  int log_step_count_steps = 100;
  // Where the chief writes summaries for TensorBoard ("": checkpoint_dir, as TF): the graph itself
  // when the first session is made, and its summaries (summary::merge_all, when it has any)
  // through a SummarySaverHook every
  // save_summaries_steps global steps when > 0, else every save_summaries_secs seconds when > 0
  // (both 0: never), and the step counter's rate.
  std::string summary_dir;
  int save_summaries_steps = 100;
  int save_summaries_secs = 0;
  // How long close() waits for the queue runner threads after asking them to stop.
  std::chrono::milliseconds stop_grace_period{120000};
};

class MonitoredTrainingSession {
 public:
  // Calls every hook's begin(), makes the Saver and the readiness op, then the session (as above),
  // then every hook's after_create_session. Raises what session creation raises past the waits
  // (DeadlineExceededError for a worker whose model never became ready).
  explicit MonitoredTrainingSession(Graph& g, MonitoredTrainingSessionOptions options = {});
  ~MonitoredTrainingSession();  // close(), ignoring its errors
  MonitoredTrainingSession(const MonitoredTrainingSession&) = delete;
  MonitoredTrainingSession& operator=(const MonitoredTrainingSession&) = delete;

  // One step: the fetches, feeds and targets, plus the hooks' before_run fetches in the same
  // Session::run; returns the caller's fetches only. OutOfRangeError (an input ran out) ends the
  // loop instead of propagating: should_stop() becomes true and the result holds one null Tensor
  // per fetch. Other errors propagate (and close() then skips the hooks' end()).
  // FailedPreconditionError when called after should_stop() became true or after close().
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {});
  void run(Operation target, const FeedMap& feeds = {});

  // True once a hook requested a stop, an input ran out, or a queue runner stopped the
  // coordinator. Thread-safe.
  bool should_stop() const;

  // Calls every hook's end() (unless a run raised), stops the queue runners and closes the
  // session. Idempotent. Raises what end() or a queue runner raised (the session is closed anyway).
  void close();

  // The session of the moment (remade on recovery); for hooks and tests, valid until the next run
  // or close. FailedPreconditionError after close().
  Session& raw_session();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Requests a stop once the global step reaches `last_step` (it fetches the global step with each
// run, and reads it again once that value says the step may be reached).
SessionRunHook StopAtStepHook(int64_t last_step);
// Saves "<dir>/model.ckpt-<global step>" (train::Saver's files; the monitored session's Saver, or
// one over every variable of the graph) when the session is made, then every `save_steps` steps
// or every `save_secs` seconds (exactly one > 0, else InvalidArgumentError), and at end() unless
// that step was just saved. Makes `dir` if missing.
SessionRunHook CheckpointSaverHook(std::string dir, int save_secs = 0, int save_steps = 0);
// Fetches `loss` with each run; when it is NaN, logs "Model diverged with loss = NaN." and raises
// InvalidArgumentError "NaN loss during training." (or, with fail_on_nan_loss = false, requests a
// stop).
SessionRunHook NanTensorHook(Output loss, bool fail_on_nan_loss = true);
// Logs "name = value, name = value (0.012 sec)" at info through tessera's log on the first run
// and every `every_n_iter` runs after (> 0, else InvalidArgumentError). A name is the op's name
// ("loss") for an op's first output, else the output's ("split:1"); values print as TF's hook
// prints them, NumPy's str() with suppress=True (scalars "1.0", "True", "b'text'"; arrays
// "[[ 1.   2.5]\n [-3.   4. ]]", wrapped at 75 columns, past 1000 elements summarized).
SessionRunHook LoggingTensorHook(std::vector<Output> tensors, int every_n_iter);
// Logs "global_step/sec: <rate>" at info every `every_n_steps` global steps (> 0, else
// InvalidArgumentError); with an `output_dir`, also writes it there as the scalar summary
// "global_step/sec" for TensorBoard (through the directory's shared summary::FileWriter).
SessionRunHook StepCounterHook(int every_n_steps = 100, std::string output_dir = "");

}  // namespace tessera::train
