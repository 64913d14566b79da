// Checkpoints: saving and restoring variables (tessera::train, TensorFlow 1's tf.train.Saver).
//
//   tessera::train::Saver saver(g);                 // every variable of g (or a list of them)
//   Session s(g);
//   s.run(global_variables_initializer(g));
//   for (int64_t step = 1; step <= 1000; ++step) {
//     s.run(train_op);
//     if (step % 100 == 0) saver.save(s, "/ckpt/model", step);   // writes /ckpt/model-100, ...
//   }
//   // later, in a fresh process, with the same graph built again:
//   if (auto path = tessera::train::latest_checkpoint("/ckpt")) saver.restore(s, *path);
//
// A Saver adds its ops to the graph when it is built (one placeholder and one assign per variable,
// grouped into one restore target) and then works through Session::run only: saving fetches the
// variables' values in one step, restoring feeds them back in one step. So the same Saver saves and
// restores variables wherever the session keeps them, in this process or on the tasks of a cluster.
// Checkpoint files are written atomically and verified completely (checksums) before anything is
// assigned; see Note [Checkpoint format] in host/saver.cc for the file layout.
//
// Saver is a copyable handle (copies share the list of recent checkpoints). save, restore and the
// other methods are thread-safe; saves through one Saver are serialized.
#pragma once

#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"
#include "tessera/session.h"
#include "tessera/tensor.h"
#include "tessera/variable.h"

namespace tessera::train {

struct SaverOptions {
  // How many recent checkpoints to keep: when a save makes more, the oldest file is deleted.
  // 0 (or negative) keeps every file; the index file then lists only the latest.
  int max_to_keep = 5;
  // When > 0, additionally keep one checkpoint per this many hours of training: a checkpoint that
  // max_to_keep would delete is kept (and forgotten by the Saver) when it was written at least
  // this long after the previous one kept this way (TensorFlow's rule, counted from construction).
  double keep_checkpoint_every_n_hours = 0;
  // Name scope of the ops the Saver adds ("save/w/Assign", "save/restore_all", ...).
  std::string name = "save";
};

// The "checkpoint" index file of a directory (TensorFlow's CheckpointState). The paths are
// resolved against the directory, as latest_checkpoint returns them.
struct CheckpointState {
  std::string model_checkpoint_path;                   // the latest checkpoint
  std::vector<std::string> all_model_checkpoint_paths;  // the ones kept, oldest first
};

class Saver {
 public:
  Saver() = default;  // null: every method raises InvalidArgumentError
  // Saves `var_list`, or every variable created so far in `g` when it is empty (InvalidArgumentError
  // when there is none). Variables must belong to `g` and have distinct names (the checkpoint's keys
  // are the variables' names): else InvalidArgumentError.
  explicit Saver(Graph& g, std::vector<Variable> var_list = {}, SaverOptions options = {});
  // The same with the graph of the variables (`var_list` must not be empty).
  explicit Saver(std::vector<Variable> var_list, SaverOptions options = {});
  // TF's Saver(var_list=dict): each variable saved and restored under its key, the checkpoint's
  // name for it, instead of its own name; e.g. ExponentialMovingAverage::variables_to_restore's map
  // restores the checkpoint's "w/ExponentialMovingAverage" into w. The map must not be empty, its
  // keys not empty, its variables of `g` and each under one key: else InvalidArgumentError.
  // (A template only so that a braced list, Saver(g, {a, b}) or Saver(g, {}, options), still means
  // a var_list: a non-template overload would make those ambiguous. Saver(g, {{"name", v}}) and a
  // map of this type pick this one.)
  template <class VarMap = std::map<std::string, Variable>>
    requires std::same_as<VarMap, std::map<std::string, Variable>>
  explicit Saver(Graph& g, VarMap var_map, SaverOptions options = {})
      : state_(make_state(g, {var_map.begin(), var_map.end()}, /*named=*/true, std::move(options))) {}

  // Writes the values of the variables, read in one session.run, to "<prefix>-<global_step>" (or
  // "<prefix>" without a step) and returns that path. The file is replaced atomically: a reader (or
  // a crash) sees the old file or the new one, never a part. Then updates the directory's
  // "checkpoint" index file and deletes the checkpoints beyond max_to_keep that this Saver wrote.
  // Only checkpoint files directly in the prefix's directory are ever deleted (a path from
  // recover_last_checkpoints that is elsewhere, a link or not a checkpoint is logged and kept).
  // The prefix's directory must exist (NotFoundError); an uninitialized variable raises
  // FailedPreconditionError naming it; a failed write (the checkpoint's or the index's) raises the
  // error of its errno (NotFound, PermissionDenied, ResourceExhausted, ...) and leaves no file
  // behind. Temporary files that saves of processes no longer running left in the directory (a
  // save killed midway) are removed first.
  std::string save(Session& session, const std::string& save_path_prefix,
                   std::optional<int64_t> global_step = std::nullopt);

  // Assigns the variables the values in the checkpoint file `save_path`, in one session.run. The
  // whole file is read and verified first, so nothing is assigned unless everything can be:
  // DataLossError (naming the file and what is wrong) for a corrupted, truncated or foreign file;
  // NotFoundError for a missing file or a variable the file lacks (naming it); InvalidArgumentError
  // naming the variable when the file's dtype or shape does not fit it. Tensors in the file that
  // no variable of this Saver uses are ignored.
  void restore(Session& session, const std::string& save_path) const;

  // The paths of the checkpoints this Saver keeps (written by save or given to
  // recover_last_checkpoints), oldest first.
  std::vector<std::string> last_checkpoints() const;
  // Takes over the checkpoints of an earlier run (e.g. get_checkpoint_state(dir)->
  // all_model_checkpoint_paths), oldest first, so max_to_keep also deletes those; paths whose
  // file is missing are skipped.
  void recover_last_checkpoints(const std::vector<std::string>& checkpoint_paths);

  const std::vector<Variable>& var_list() const;
  // The group that restore runs (its placeholders are fed with the checkpoint's values).
  Operation restore_op() const;

  struct State;

 private:
  // (checkpoint name, variable) pairs; `named`: the names are the caller's, not the variables' own.
  static std::shared_ptr<State> make_state(Graph& g, std::vector<std::pair<std::string, Variable>> vars, bool named,
                                           SaverOptions options);
  std::shared_ptr<State> state_;
};

// The latest checkpoint recorded in `checkpoint_dir`'s "checkpoint" index file; std::nullopt when
// there is no index file or the file it names no longer exists. A malformed index file raises
// DataLossError naming it.
std::optional<std::string> latest_checkpoint(const std::string& checkpoint_dir);

// The parsed index file of `checkpoint_dir`; std::nullopt when there is none (DataLossError when
// malformed).
std::optional<CheckpointState> get_checkpoint_state(const std::string& checkpoint_dir);

// Every tensor of a checkpoint file by name, verified as restore verifies it (same errors).
std::map<std::string, Tensor> read_checkpoint(const std::string& path);

}  // namespace tessera::train
