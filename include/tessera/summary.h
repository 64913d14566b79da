// Summaries and event files for TensorBoard, as TF1's tf.summary.
//
//   Output loss_summary = summary::scalar("loss", loss);
//   summary::histogram("weights", w.value());
//   Output merged = summary::merge_all(g);                 // every summary op of the graph
//   summary::FileWriter writer("/tmp/logs/run1");
//   writer.add_graph(g);                                   // TensorBoard's graph tab
//   for (int64_t step = 0; step < 1000; ++step) {
//     auto v = sess.run({merged}, {}, {train_op});
//     writer.add_summary(v[0], step);                      // TensorBoard's scalars, histograms
//   }
//   writer.close();
//
// `tensorboard --logdir /tmp/logs` shows the run, with no converter: the files are TensorFlow's
// (events.out.tfevents.<time>.<host>, TFRecord framing with masked CRC-32C, `Event` protos).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/session_run_hook.h"
#include "tessera/tensor.h"

namespace tessera::summary {

// A String scalar: a serialized `Summary` holding one value tagged `name` (with the enclosing
// name scopes, as TF's), from a numeric scalar `value` (any shape other than a scalar, or a
// non-numeric dtype: InvalidArgumentError). Names may hold letters, digits and `_ . - /` only
// (what TensorBoard accepts); anything else is an InvalidArgumentError naming the character.
// The op is added to the graph's summaries, which merge_all collects.
Output scalar(std::string name, Output value);
// A histogram of every element of a numeric `values` over TensorFlow's default buckets (limits
// ±1e-12·1.1^k up to ±1e20, then ±DBL_MAX, and 0). A NaN or infinite element makes the run fail
// with InvalidArgumentError "Nan in summary histogram for: <name>" (TF's message).
Output histogram(std::string name, Output values);
// One serialized Summary holding every value of `summaries` (String scalars or vectors of
// serialized Summaries); a tag found twice fails the run with InvalidArgumentError.
Output merge(std::vector<Output> summaries, std::string name = "");
// merge() of every summary op added to `g` so far; a null Output when there is none (TF: None).
Output merge_all(Graph& g);

// Writes the event file of one run into `logdir` (made, with its parents, when missing; one that
// cannot be made or written is an Error of the matching type at construction). Events go through a
// queue of `max_queue` entries to a writer thread, which flushes the file every `flush_secs` and
// when the queue fills. A write that fails later (disk full, directory removed) never raises into
// the training loop: it is logged once, the events are kept, and the next flush tries again, in a
// new file if the old one is gone (as TF's EventsWriter). Thread-safe.
class FileWriter {
 public:
  explicit FileWriter(std::string logdir, int max_queue = 10,
                      std::chrono::seconds flush_secs = std::chrono::seconds(120));
  ~FileWriter();  // close()
  FileWriter(FileWriter&&) noexcept;
  FileWriter& operator=(FileWriter&&) noexcept;

  // An event holding the Summary serialized in `serialized` (a String scalar, as summary ops and
  // merge produce; anything else is InvalidArgumentError) at `global_step`.
  void add_summary(const Tensor& serialized, int64_t global_step);
  // The graph as a GraphDef (op names, types, devices, inputs, attrs and output shapes), which
  // TensorBoard's graph tab renders.
  void add_graph(const Graph& g);
  // Writes every queued event and flushes the file (the failure of a retry is logged, not raised).
  void flush();
  // flush(), then closes the file; further add_* calls are FailedPreconditionError until reopen().
  // Idempotent.
  void close();
  // After close(): a new event file in the same directory.
  void reopen();

  const std::string& logdir() const;
  // The path of the event file being written ("" after close()).
  std::string path() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::summary

namespace tessera::train {

// Writes the value of `summary_op` (by default summary::merge_all of the graph when the hook
// begins; no summaries then is InvalidArgumentError) to output_dir's FileWriter (one per
// directory, shared with StepCounterHook's), fetched with the first run and then every
// `save_steps` global steps, or, with save_steps = 0, every `save_secs` seconds (exactly one of them
// > 0, else InvalidArgumentError); written at the global step read after that run, and flushed at
// end(). Needs the graph's "global_step" variable (FailedPreconditionError without it), as TF's.
SessionRunHook SummarySaverHook(std::string output_dir, int save_steps = 100, Output summary_op = {},
                                int save_secs = 0);

}  // namespace tessera::train
