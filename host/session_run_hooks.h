// The library's session run hooks (include/tessera/monitored_session.h) from the inside: what a
// MonitoredTrainingSession tells them before begin(), the timer that decides when they act, and
// the step counter, whose rate a summary writer may also record (derive from StepCounterHookImpl
// and override record()).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tessera/graph.h"
#include "tessera/saver.h"
#include "tessera/session.h"
#include "tessera/session_run_hook.h"
#include "tessera/variable.h"

namespace tessera::internal {

// What a monitored session tells the hooks of this library before calling their begin(): its graph
// (TF's default graph) and a way to its Saver (TF's Scaffold saver), made after every begin().
struct HookContext {
  Graph* graph = nullptr;  // Not owned.
  std::function<std::optional<train::Saver>()> saver;
};

// A hook that takes a HookContext. Without one (a hook driven by hand), it finds the graph through
// the session given to after_create_session.
class ContextualHook : public train::SessionRunHook::Impl {
 public:
  void set_context(HookContext context) { context_ = std::move(context); }

 protected:
  HookContext context_;
};

// The graph's "global_step" variable (as get_or_create_global_step makes it), without making one.
std::optional<Variable> find_global_step(Graph& g);

// TF's SecondOrStepTimer: triggers once every `every_secs` seconds or every `every_steps` steps
// (exactly one > 0), and on the first step asked about. Not thread-safe.
class SecondOrStepTimer {
 public:
  using Clock = std::chrono::steady_clock;
  SecondOrStepTimer(double every_secs, int64_t every_steps) : every_secs_(every_secs), every_steps_(every_steps) {}

  void reset() { last_step_.reset(); }
  bool should_trigger_for_step(int64_t step) const {
    if (!last_step_) return true;
    if (*last_step_ == step) return false;
    if (every_secs_ > 0 && Clock::now() >= last_time_ + std::chrono::duration<double>(every_secs_)) return true;
    return every_steps_ > 0 && step >= *last_step_ + every_steps_;
  }
  // Records a trigger at `step` now; returns the seconds and steps since the previous one (none
  // for the first).
  struct Elapsed {
    std::optional<double> secs;
    std::optional<int64_t> steps;
  };
  Elapsed update_last_triggered_step(int64_t step) {
    const Clock::time_point now = Clock::now();
    Elapsed e;
    if (last_step_) {
      e.secs = std::chrono::duration<double>(now - last_time_).count();
      e.steps = step - *last_step_;
    }
    last_time_ = now;
    last_step_ = step;
    return e;
  }
  std::optional<int64_t> last_triggered_step() const { return last_step_; }

 private:
  const double every_secs_;
  const int64_t every_steps_;
  std::optional<int64_t> last_step_;
  Clock::time_point last_time_{};
};

// Steps per second over an Elapsed; none for the first trigger or no time elapsed.
inline std::optional<double> steps_per_sec(const SecondOrStepTimer::Elapsed& e) {
  if (!e.secs || !e.steps || *e.secs <= 0) return std::nullopt;
  return static_cast<double>(*e.steps) / *e.secs;
}

// The base of the hooks that read the global step: finds it in begin() (FailedPreconditionError
// "Global step should be created to use <hook>." without one, as TF) and reads it through the
// session of the latest after_create_session.
class GlobalStepHook : public ContextualHook {
 public:
  explicit GlobalStepHook(std::string hook_name) : hook_name_(std::move(hook_name)) {}
  void begin() override;
  void after_create_session(Session& session) override;

 protected:
  // Finds the global step in `g` (once); FailedPreconditionError without one.
  void resolve(Graph& g);
  int64_t read_global_step();
  Session& session();
  virtual void on_resolve(Graph&) {}  // more ops of the hook's own, made with the global step

  const std::string hook_name_;
  std::optional<Variable> global_step_;
  Session* session_ = nullptr;  // the latest session. Not owned.
};

// StepCounterHook: logs "global_step/sec: <rate>" (record()) every N global steps.
class StepCounterHookImpl : public GlobalStepHook {
 public:
  explicit StepCounterHookImpl(int every_n_steps);
  void begin() override;
  std::vector<Output> before_run() override;
  void after_run(const std::vector<Tensor>& values, bool& request_stop) override;

 protected:
  // A rate measured at `global_step`: logged at info as "<tag>: <rate>".
  virtual void record(double steps_per_sec, int64_t global_step);
  std::string summary_tag_;  // "global_step/sec"

 private:
  SecondOrStepTimer timer_;
  std::optional<int64_t> last_global_step_;
  int global_step_check_count_ = 0;
};

// An int32 or int64 scalar's value (the global step as fetched).
int64_t step_value(const Tensor& t);

// The hooks of host/summary_hooks.cc. The monitored session's own SummarySaverHook
// (monitored_sessions_own) writes the graph when the first session is made, and no summaries for a
// graph without any (TF's scaffold-driven one); a user's requires summaries. The step counter also
// writes "global_step/sec" to output_dir's event file.
train::SessionRunHook make_summary_saver_hook(std::string output_dir, int save_steps, int save_secs,
                                              Output summary_op, bool monitored_sessions_own);
train::SessionRunHook make_summary_step_counter_hook(int every_n_steps, std::string output_dir);

}  // namespace tessera::internal
