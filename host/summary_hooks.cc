// The hooks that write summaries (include/tessera/summary.h, include/tessera/monitored_session.h):
// SummarySaverHook and the StepCounterHook that also records "global_step/sec", both writing
// through one FileWriter per log directory (TF's FileWriterCache), so that a monitored session's
// summaries and step rates land in one event file.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/summary.pb.h"
#include "host/session_run_hooks.h"
#include "tessera/errors.h"
#include "tessera/summary.h"

namespace tessera {
namespace internal {

std::shared_ptr<summary::FileWriter> shared_file_writer(const std::string& logdir) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<summary::FileWriter>> writers;
  std::error_code ec;
  std::string key = std::filesystem::absolute(logdir, ec).lexically_normal().string();
  if (ec) key = logdir;
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  std::lock_guard<std::mutex> l(mu);
  if (auto w = writers[key].lock()) return w;
  auto w = std::make_shared<summary::FileWriter>(logdir);
  writers[key] = w;
  return w;
}

namespace {

Tensor scalar_summary_tensor(const std::string& tag, double value) {
  tensorboard::Summary s;
  tensorboard::Summary::Value* v = s.add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return Tensor::scalar(s.SerializeAsString());
}

// TF's SummarySaverHook: fetches the summary op with the first run and with the first run that
// takes the global step save_steps or more past the last write (or starts save_secs or more after
// it), and writes it at the global step read after that run (TF reads it again then too).
class SummarySaverHookImpl final : public GlobalStepHook {
 public:
  SummarySaverHookImpl(std::string output_dir, int save_steps, int save_secs, Output summary_op,
                       bool require_summaries, bool write_graph)
      : GlobalStepHook("SummarySaverHook"),
        output_dir_(std::move(output_dir)),
        summary_op_(summary_op),
        given_op_(!summary_op.is_null()),
        require_summaries_(require_summaries),
        write_graph_(write_graph),
        timer_(save_secs, save_steps) {
    if (save_steps < 0 || save_secs < 0 || (save_steps > 0) == (save_secs > 0)) {
      throw InvalidArgumentError(fmt::format(
          "SummarySaverHook: exactly one of save_steps and save_secs must be > 0, got {} and {}", save_steps,
          save_secs));
    }
    if (output_dir_.empty()) throw InvalidArgumentError("SummarySaverHook: empty output_dir");
  }

  void begin() override {
    if (!given_op_) summary_op_ = Output();
    next_step_.reset();
    timer_.reset();
    graph_written_ = false;
    GlobalStepHook::begin();
    if (!writer_) writer_ = shared_file_writer(output_dir_);
  }

  // The monitored session's own hook writes the graph once, when the first session is made (TF's
  // chief writes it from its CheckpointSaverHook), so TensorBoard's graph tab shows the job.
  void after_create_session(Session& session) override {
    GlobalStepHook::after_create_session(session);
    if (write_graph_ && !graph_written_) {
      writer_->add_graph(session.graph());
      graph_written_ = true;
    }
  }

  std::vector<Output> before_run() override {
    request_ = !next_step_ || timer_.should_trigger_for_step(*next_step_);
    std::vector<Output> fetches{global_step_->value()};
    if (request_ && !summary_op_.is_null()) fetches.push_back(summary_op_);
    return fetches;
  }

  void after_run(const std::vector<Tensor>& values, bool&) override {
    // The value fetched with the run may be read before or after the run's own increment; taken as
    // the later one, the next run's step is estimated at most one low, so a summary is never
    // fetched before save_steps have passed (TF adds one, assuming the earlier read). The step a
    // summary is written at is always read again after its run.
    int64_t global_step = step_value(values.at(0));
    if (!next_step_ || request_) global_step = read_global_step();
    if (request_) {
      timer_.update_last_triggered_step(global_step);
      if (values.size() > 1) writer_->add_summary(values[1], global_step);
    }
    next_step_ = global_step + 1;
  }

  void end(Session&) override {
    if (writer_) writer_->flush();
  }

 protected:
  void on_resolve(Graph& g) override {
    if (!summary_op_.is_null()) return;
    summary_op_ = summary::merge_all(g);
    if (summary_op_.is_null() && require_summaries_) {
      throw InvalidArgumentError("SummarySaverHook: no summary_op given and the graph has no summaries");
    }
  }

 private:
  const std::string output_dir_;
  Output summary_op_;
  const bool given_op_;
  const bool require_summaries_;
  const bool write_graph_;
  bool graph_written_ = false;
  SecondOrStepTimer timer_;
  std::optional<int64_t> next_step_;
  bool request_ = false;
  std::shared_ptr<summary::FileWriter> writer_;
};

// StepCounterHook with an output directory: the rate goes to the log and, as the scalar
// "global_step/sec", to the directory's event file.
class SummaryStepCounterHookImpl final : public StepCounterHookImpl {
 public:
  SummaryStepCounterHookImpl(int every_n_steps, std::string output_dir)
      : StepCounterHookImpl(every_n_steps), output_dir_(std::move(output_dir)) {}

  void begin() override {
    StepCounterHookImpl::begin();
    if (!writer_) writer_ = shared_file_writer(output_dir_);
  }
  void end(Session&) override {
    if (writer_) writer_->flush();
  }

 protected:
  void record(double rate, int64_t global_step) override {
    StepCounterHookImpl::record(rate, global_step);
    writer_->add_summary(scalar_summary_tensor(summary_tag_, rate), global_step);
  }

 private:
  const std::string output_dir_;
  std::shared_ptr<summary::FileWriter> writer_;
};

}  // namespace

train::SessionRunHook make_summary_saver_hook(std::string output_dir, int save_steps, int save_secs,
                                              Output summary_op, bool monitored_sessions_own) {
  return train::SessionRunHook(std::make_shared<SummarySaverHookImpl>(
      std::move(output_dir), save_steps, save_secs, summary_op, /*require_summaries=*/!monitored_sessions_own,
      /*write_graph=*/monitored_sessions_own));
}

train::SessionRunHook make_summary_step_counter_hook(int every_n_steps, std::string output_dir) {
  return train::SessionRunHook(std::make_shared<SummaryStepCounterHookImpl>(every_n_steps, std::move(output_dir)));
}

}  // namespace internal

namespace train {

SessionRunHook SummarySaverHook(std::string output_dir, int save_steps, Output summary_op, int save_secs) {
  return internal::make_summary_saver_hook(std::move(output_dir), save_steps, save_secs, summary_op,
                                           /*monitored_sessions_own=*/false);
}

}  // namespace train
}  // namespace tessera
