// The session run hooks of include/tessera/monitored_session.h, as TF1's basic_session_run_hooks:
// StopAtStepHook, CheckpointSaverHook, NanTensorHook, LoggingTensorHook and StepCounterHook.
//
// A value fetched with a step's run is read before or after the step's own updates (nothing
// orders the read of the global step against its increment), so the hooks that act at a step
// count read the global step again, in a run of their own, once the fetched value says they
// may have to act (as TF's do).
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/logging.h"
#include "host/numpy_format.h"
#include "host/session_run_hooks.h"
#include "tessera/errors.h"
#include "tessera/monitored_session.h"

namespace tessera {
namespace internal {

std::optional<Variable> find_global_step(Graph& g) {
  for (Variable& v : global_variables(g)) {
    if (v.name() == "global_step") return v;
  }
  return std::nullopt;
}

int64_t step_value(const Tensor& t) {
  if (t.dtype() == DType::Int64) return t.scalar<int64_t>();
  if (t.dtype() == DType::Int32) return t.scalar<int32_t>();
  throw InvalidArgumentError(fmt::format("global_step is {}, not an integer", dtype_name(t.dtype())));
}

void GlobalStepHook::begin() {
  global_step_.reset();
  session_ = nullptr;
  if (context_.graph != nullptr) resolve(*context_.graph);
}

void GlobalStepHook::after_create_session(Session& session) {
  session_ = &session;
  if (!global_step_) resolve(session.graph());
}

void GlobalStepHook::resolve(Graph& g) {
  if (global_step_) return;
  global_step_ = find_global_step(g);
  if (!global_step_) throw FailedPreconditionError(fmt::format("Global step should be created to use {}.", hook_name_));
  if ((global_step_->dtype() != DType::Int64 && global_step_->dtype() != DType::Int32) ||
      global_step_->shape() != Shape{}) {
    throw FailedPreconditionError(fmt::format("{}: global_step is {} {}, not an integer scalar", hook_name_,
                                              dtype_name(global_step_->dtype()), global_step_->shape().to_string()));
  }
  on_resolve(g);
}

Session& GlobalStepHook::session() {
  if (session_ == nullptr) {
    throw FailedPreconditionError(fmt::format("{}: used before after_create_session gave it a session", hook_name_));
  }
  return *session_;
}

int64_t GlobalStepHook::read_global_step() { return step_value(session().run(global_step_->value())); }

StepCounterHookImpl::StepCounterHookImpl(int every_n_steps)
    : GlobalStepHook("StepCounterHook"), timer_(0, every_n_steps) {
  if (every_n_steps <= 0) {
    throw InvalidArgumentError(fmt::format("StepCounterHook: every_n_steps must be > 0, got {}", every_n_steps));
  }
}

void StepCounterHookImpl::begin() {
  GlobalStepHook::begin();
  summary_tag_ = "global_step/sec";
  last_global_step_.reset();
  global_step_check_count_ = 0;
  timer_.reset();
}

std::vector<Output> StepCounterHookImpl::before_run() { return {global_step_->value()}; }

void StepCounterHookImpl::after_run(const std::vector<Tensor>& values, bool&) {
  const int64_t stale_global_step = step_value(values.at(0));
  if (timer_.should_trigger_for_step(stale_global_step + 1)) {
    const int64_t global_step = read_global_step();  // the value after this step's updates
    if (timer_.should_trigger_for_step(global_step)) {
      if (auto rate = steps_per_sec(timer_.update_last_triggered_step(global_step))) record(*rate, global_step);
    }
  }
  // A global step that does not move is worth a warning now and then: it is probably not passed
  // to the optimizer (a SyncReplicasOptimizer's workers leave it alone by design, hence not every
  // time).
  if (last_global_step_ && stale_global_step == *last_global_step_) {
    if (++global_step_check_count_ % 20 == 0) {
      global_step_check_count_ = 0;
      TESSERA_LOG(kWarning,
                  "It seems that global step has not been increased. Current value (could be stable): {} vs "
                  "previous value: {}. You could increase the global step by passing it to "
                  "Optimizer::apply_gradients or Optimizer::minimize.",
                  stale_global_step, *last_global_step_);
    }
  } else {
    global_step_check_count_ = 0;
  }
  last_global_step_ = stale_global_step;
}

void StepCounterHookImpl::record(double rate, int64_t) { TESSERA_LOG(kInfo, "{}: {:g}", summary_tag_, rate); }

namespace {

class StopAtStepHookImpl final : public GlobalStepHook {
 public:
  explicit StopAtStepHookImpl(int64_t last_step) : GlobalStepHook("StopAtStepHook"), last_step_(last_step) {}
  std::vector<Output> before_run() override { return {global_step_->value()}; }
  void after_run(const std::vector<Tensor>& values, bool& request_stop) override {
    if (step_value(values.at(0)) + 1 >= last_step_ && read_global_step() >= last_step_) request_stop = true;
  }

 private:
  const int64_t last_step_;
};

class CheckpointSaverHookImpl final : public GlobalStepHook {
 public:
  CheckpointSaverHookImpl(std::string dir, int save_secs, int save_steps)
      : GlobalStepHook("CheckpointSaverHook"), dir_(std::move(dir)), timer_(save_secs, save_steps) {
    if (save_secs < 0 || save_steps < 0 || (save_secs > 0) == (save_steps > 0)) {
      throw InvalidArgumentError(fmt::format(
          "CheckpointSaverHook: exactly one of save_secs and save_steps must be > 0, got {} and {}", save_secs,
          save_steps));
    }
    if (dir_.empty()) throw InvalidArgumentError("CheckpointSaverHook: empty checkpoint directory");
    save_path_ = (std::filesystem::path(dir_) / "model.ckpt").string();
  }

  void begin() override {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) throw UnavailableError(fmt::format("CheckpointSaverHook: cannot make {}: {}", dir_, ec.message()));
    saver_.reset();
    timer_.reset();
    GlobalStepHook::begin();
  }

  void after_create_session(Session& session) override {
    GlobalStepHook::after_create_session(session);
    // The state the session starts from (restored, or just initialized) is the checkpoint of its
    // step, as TF's hook saves it.
    const int64_t step = read_global_step();
    save(session, step);
    timer_.update_last_triggered_step(step);
  }

  std::vector<Output> before_run() override { return {global_step_->value()}; }

  void after_run(const std::vector<Tensor>& values, bool&) override {
    if (!timer_.should_trigger_for_step(step_value(values.at(0)) + 1)) return;
    const int64_t step = read_global_step();
    if (timer_.should_trigger_for_step(step)) {
      timer_.update_last_triggered_step(step);
      save(session(), step);
    }
  }

  void end(Session& session) override {
    session_ = &session;
    const int64_t step = read_global_step();
    if (timer_.last_triggered_step() != step) save(session, step);
  }

 private:
  train::Saver& saver(Session& session) {
    if (!saver_) {
      if (context_.saver) saver_ = context_.saver();
      if (!saver_) saver_ = train::Saver(context_.graph != nullptr ? *context_.graph : session.graph());
    }
    return *saver_;
  }
  void save(Session& session, int64_t step) {
    TESSERA_LOG(kInfo, "Saving checkpoints for {} into {}.", step, save_path_);
    saver(session).save(session, save_path_, step);
  }

  const std::string dir_;
  std::string save_path_;
  SecondOrStepTimer timer_;
  std::optional<train::Saver> saver_;
};

class NanTensorHookImpl final : public train::SessionRunHook::Impl {
 public:
  NanTensorHookImpl(Output loss, bool fail_on_nan_loss) : loss_(loss), fail_(fail_on_nan_loss) {
    if (loss.is_null()) throw InvalidArgumentError("NanTensorHook: null loss");
    if (loss.dtype() != DType::Float32 && loss.dtype() != DType::Float64) {
      throw InvalidArgumentError(fmt::format("NanTensorHook: loss {} is {}, not float32 or float64", loss.name(),
                                             dtype_name(loss.dtype())));
    }
  }
  std::vector<Output> before_run() override { return {loss_}; }
  void after_run(const std::vector<Tensor>& values, bool& request_stop) override {
    const Tensor& v = values.at(0);
    bool nan = false;  // fetched values are in host memory
    for (int64_t i = 0; i < v.num_elements() && !nan; ++i) {
      nan = v.dtype() == DType::Float32 ? std::isnan(v.data<float>()[i]) : std::isnan(v.data<double>()[i]);
    }
    if (!nan) return;
    if (fail_) {
      TESSERA_LOG(kError, "Model diverged with loss = NaN.");
      throw InvalidArgumentError("NaN loss during training.");
    }
    TESSERA_LOG(kWarning, "Model diverged with loss = NaN.");
    request_stop = true;
  }

 private:
  const Output loss_;
  const bool fail_;
};

class LoggingTensorHookImpl final : public train::SessionRunHook::Impl {
 public:
  LoggingTensorHookImpl(std::vector<Output> tensors, int every_n_iter)
      : tensors_(std::move(tensors)), timer_(0, every_n_iter) {
    if (every_n_iter <= 0) throw InvalidArgumentError(fmt::format("LoggingTensorHook: invalid every_n_iter={}.", every_n_iter));
    for (const Output& o : tensors_) {
      if (o.is_null()) throw InvalidArgumentError("LoggingTensorHook: a null tensor");
      // The op's name for its first output, as TF's users name the tensors they log ("loss").
      tags_.push_back(o.index() == 0 ? o.op().name() : o.name());
    }
  }
  void begin() override {
    timer_.reset();
    iter_count_ = 0;
  }
  std::vector<Output> before_run() override {
    should_trigger_ = timer_.should_trigger_for_step(iter_count_);
    return should_trigger_ ? tensors_ : std::vector<Output>{};
  }
  void after_run(const std::vector<Tensor>& values, bool&) override {
    if (should_trigger_) {
      const auto elapsed = timer_.update_last_triggered_step(iter_count_);
      std::string line;
      for (std::size_t i = 0; i < tags_.size(); ++i) {
        if (i) line += ", ";
        line += tags_[i] + " = " + numpy_str(values.at(i));  // as TF prints the fetched value
      }
      if (elapsed.secs) line += fmt::format(" ({:.3f} sec)", *elapsed.secs);
      TESSERA_LOG(kInfo, "{}", line);
    }
    ++iter_count_;
  }

 private:
  const std::vector<Output> tensors_;
  std::vector<std::string> tags_;
  SecondOrStepTimer timer_;
  int64_t iter_count_ = 0;
  bool should_trigger_ = false;
};

}  // namespace
}  // namespace internal

namespace train {

SessionRunHook StopAtStepHook(int64_t last_step) {
  return SessionRunHook(std::make_shared<internal::StopAtStepHookImpl>(last_step));
}

SessionRunHook CheckpointSaverHook(std::string dir, int save_secs, int save_steps) {
  return SessionRunHook(std::make_shared<internal::CheckpointSaverHookImpl>(std::move(dir), save_secs, save_steps));
}

SessionRunHook NanTensorHook(Output loss, bool fail_on_nan_loss) {
  return SessionRunHook(std::make_shared<internal::NanTensorHookImpl>(loss, fail_on_nan_loss));
}

SessionRunHook LoggingTensorHook(std::vector<Output> tensors, int every_n_iter) {
  return SessionRunHook(std::make_shared<internal::LoggingTensorHookImpl>(std::move(tensors), every_n_iter));
}

SessionRunHook StepCounterHook(int every_n_steps, std::string output_dir) {
  if (!output_dir.empty()) return internal::make_summary_step_counter_hook(every_n_steps, std::move(output_dir));
  return SessionRunHook(std::make_shared<internal::StepCounterHookImpl>(every_n_steps));
}

}  // namespace train
}  // namespace tessera
