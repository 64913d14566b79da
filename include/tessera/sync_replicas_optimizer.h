// Synchronous data-parallel training, as TensorFlow 1's tf.train.SyncReplicasOptimizer: every
// worker computes gradients on its own batch; the chief averages replicas_to_aggregate of them per
// variable and applies the mean once; gradients computed from stale variables are dropped.
//
//   Variable step = train::get_or_create_global_step(g);
//   train::GradientDescentOptimizer sgd(0.1f);
//   train::SyncReplicasOptimizer opt(sgd, /*replicas_to_aggregate=*/2, /*total_num_replicas=*/3);
//   Operation train_op = opt.minimize(loss, step);        // the global step is required
//   train::SessionRunHook hook = opt.make_session_run_hook(is_chief);
//   // with a MonitoredTrainingSession: opts.hooks.push_back(hook); or by hand:
//   hook.impl()->begin();
//   Session s(g, server.target());
//   if (is_chief) s.run(global_variables_initializer(g));
//   hook.impl()->after_create_session(s);                 // chief: starts the sync thread
//   for (...) s.run(train_op);                            // a step waits for the others'
//   hook.impl()->end(s);                                  // chief: stops and joins it
//
// End training by the global step (StopAtStepHook), not by a count of each worker's own steps:
// a fast worker may give two gradients to one step and make a slower one's stale, so fewer
// global steps happen than the workers' counts add up to, and the last worker to finish its count
// waits for a token that no step will enqueue (TensorFlow behaves the same). To release workers
// still waiting at the end, run get_init_tokens_op(number of workers) once.
//
// What apply_gradients builds (Note [Sync replicas] in host/sync_replicas_optimizer.cc): per
// variable with a gradient, a ConditionalAccumulator placed with it (its device requested, and
// colocated); a local step variable "sync_rep_local_step" on this worker (placed with a no-op made
// in the current device scope); a token FIFOQueue "sync_token_q" shared by name and placed with the
// global step. The train op it returns applies this worker's gradients with its local step, then
// waits for a token and makes it its local step. The chief's sync op (run by the chief queue
// runner, which the chief's hook starts) takes the mean gradients, applies them with the wrapped
// optimizer, increments the global step once and enqueues max(total_num_replicas,
// replicas_to_aggregate) tokens holding it. With total_num_replicas > replicas_to_aggregate the
// extra workers are backups: the slowest gradients of each step are dropped as stale.
//
// Misuse raises as TensorFlow raises ValueError: InvalidArgumentError for bad arguments (replicas
// <= 0, no global step, no gradients, too few init tokens), FailedPreconditionError for calls out
// of order (get_chief_queue_runner, get_init_tokens_op or the hook's begin before apply_gradients;
// apply_gradients twice). A copyable handle: copies (also those made as a plain Optimizer) share
// the state. Build the graph from one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/accumulator.h"
#include "tessera/optimizer.h"
#include "tessera/queue.h"
#include "tessera/session_run_hook.h"
#include "tessera/train.h"

namespace tessera::train {

class SyncReplicasOptimizer : public Optimizer {
 public:
  // `opt` updates the variables (its handle is kept: copies share state). `total_num_replicas`
  // -1: replicas_to_aggregate. Raises InvalidArgumentError unless replicas_to_aggregate >= 1 and
  // total_num_replicas >= 1 (or -1).
  SyncReplicasOptimizer(const Optimizer& opt, int replicas_to_aggregate, int total_num_replicas = -1,
                        std::string name = "sync_replicas");

  // compute_gradients, get_slot and get_slot_names are the wrapped optimizer's. apply_gradients
  // (and so minimize) builds the synchronization and returns each worker's train op; it needs
  // `global_step`.

  // The hook that makes the synchronization run: begin() builds the init ops (and raises
  // FailedPreconditionError before apply_gradients); after_create_session(session) sets the local
  // step to the global step, and on the chief also the accumulators' global steps, enqueues the
  // init tokens (get_init_tokens_op(num_tokens)) and starts the chief queue runner's threads;
  // end(session) stops and joins them (as does the hook's destruction), cancelling a sync step
  // that waits for gradients, and re-raises an error the sync op raised. The session must
  // outlive the threads: call end() before destroying it (or close it first).
  SessionRunHook make_session_run_hook(bool is_chief, int num_tokens = -1) const;

  // The runner of the chief's sync op, over a dummy queue (as TensorFlow's).
  QueueRunner get_chief_queue_runner() const;
  // An op that enqueues `num_tokens` tokens (-1: replicas_to_aggregate) holding the global step,
  // so the first step can start; a no-op for 0. InvalidArgumentError when fewer than
  // replicas_to_aggregate - total_num_replicas.
  Operation get_init_tokens_op(int num_tokens = -1) const;
  // What the chief runs once its session exists: local step and accumulators' global steps set to
  // the global step. (The init ops after apply_gradients; FailedPreconditionError before.)
  Operation chief_init_op() const;
  // What every other worker runs: its local step set to the global step.
  Operation local_step_init_op() const;
  Variable local_step() const;
  // The accumulators apply_gradients made, in the order of its gradients (null ones skipped).
  std::vector<ConditionalAccumulator> accumulators() const;
  int replicas_to_aggregate() const;
  int total_num_replicas() const;

  struct State;

 private:
  explicit SyncReplicasOptimizer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tessera::train
