// train::SyncReplicasOptimizer (tessera/sync_replicas_optimizer.h): TensorFlow 1's
// sync_replicas_optimizer.py over tessera's conditional accumulators and queues.
#include "tessera/sync_replicas_optimizer.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/accumulator_ops.h"
#include "core/logging.h"
#include "core/node.h"
#include "host/optimizer_rule.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/session.h"

namespace tessera::train {

// Note [Sync replicas]
// Each worker's graph holds the same shared state, found by name on its task: accumulators named
// "<var>/grad_accum" placed with their variables, and "sync_token_q" with the global step (each
// requests that device, see PlacedWith, so every worker finds the same one). A worker's
// train op applies its gradients tagged with its local step, then dequeues a token (the barrier)
// and makes it its local step. The chief's sync op takes replicas_to_aggregate gradients' mean
// from every accumulator, applies them and increments the global step, then enqueues one token
// per replica holding the new step. A take increments its accumulator's global step, so what a
// worker applies with an older local step is dropped: the initial tokens hold step 0, so the
// first round after a (re)start is computed and dropped, as in TensorFlow, which keeps a
// restarted chief correct.
//
// The token carries the new global step because the sync op reads it from its own increment's
// output (the AssignAdd's), not from the variable: a read of the variable in that step could run
// before the increment. So the sync op applies the wrapped optimizer without a global step and
// increments it itself, once.
//
// Stopping: the chief queue runner's thread runs the sync op in a loop; between steps it sees the
// coordinator's stop, but during one it waits in the takes for gradients that may never come.
// The hook's stop (end, destruction, a new session) requests the stop, then runs
// "_AccumulatorCancelTakes" for every accumulator, again every 20 ms until the thread is joined
// (a take may start just after a cancel): the takes fail with CancelledError, which ends a queue
// runner thread quietly. Gradients taken by the interrupted step are lost, as when TensorFlow's
// session closes under it; a restarted chief's init op resets the accumulators' global steps.

struct SyncReplicasOptimizer::State : Optimizer::Rule {
  State(const Optimizer& o, int replicas, int total, std::string n)
      : Rule(std::move(n)),
        opt(o),
        replicas_to_aggregate(replicas),
        total_num_replicas(total),
        tokens_per_step(std::max(total, replicas)) {}

  std::vector<std::pair<Output, Variable>> compute_gradients(Output loss, std::vector<Variable> var_list) override {
    return opt.compute_gradients(std::move(loss), std::move(var_list));
  }
  Operation apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                            std::optional<Variable> global_step, std::string op_name) override;
  std::optional<Variable> get_slot(const Variable& var, const std::string& slot_name) const override {
    return opt.get_slot(var, slot_name);
  }
  std::vector<std::string> get_slot_names() const override { return opt.get_slot_names(); }

  void check_applied(const char* what) const {
    std::lock_guard<std::mutex> l(mu);
    if (!applied) {
      throw FailedPreconditionError(fmt::format("{}: {} should be called after apply_gradients()", name, what));
    }
  }

  const Optimizer opt;
  const int replicas_to_aggregate;
  const int total_num_replicas;
  const int tokens_per_step;

  // Written once by apply_gradients (under mu), read-only after `applied`.
  mutable std::mutex mu;
  bool applied = false;
  std::optional<Variable> global_step;
  std::optional<Variable> local_step;
  Operation local_step_init_op;
  Operation chief_init_op;
  Operation cancel_takes_op;  // fails the waiting takes of every accumulator
  FIFOQueue sync_token_queue;
  QueueRunner chief_queue_runner;
  std::vector<ConditionalAccumulator> accumulators;
};

namespace {

// Ops made while it lives are placed with `op`, whatever device scope is active: they request
// `op`'s requested device, as TensorFlow's ops.device(var.device), and are colocated with it.
// Both, because a session places the ops of each step it runs, and a colocation with an op
// outside the step constrains nothing: a worker's train step holds the accumulators but not their
// variables, and every worker must find the accumulator on its variable's task. The enclosing
// device scope is cleared first: merged with a worker's, a ps request would conflict. The device
// scope opens inside the colocation scope: colocate_with sets aside the device scopes around it
// (Note [Device scopes] in core/graph.cc), which would drop the request.
struct PlacedWith {
  PlacedWith(Graph& g, const Operation& op)
      : cleared(g.device("")),
        colocate(g.colocate_with(op)),
        device(op.device().empty() ? GraphScope() : g.device(op.device())) {}
  GraphScope cleared;
  GraphScope colocate;
  GraphScope device;
};

// `n` copies of the int64 scalar `value`, as a vector (TensorFlow's fill([n], value)).
Output fill_with(Graph& g, int n, const Output& value) {
  return ops::add(ops::fill(g, Shape{n}, Tensor::scalar<int64_t>(0)), value);
}

// TensorFlow's get_init_tokens_op.
Operation init_tokens_op(SyncReplicasOptimizer::State& state, int num_tokens) {
  state.check_applied("get_init_tokens_op()");
  const int tokens_needed = state.replicas_to_aggregate - state.total_num_replicas;
  if (num_tokens == -1) {
    num_tokens = state.replicas_to_aggregate;
  } else if (num_tokens < tokens_needed) {
    throw InvalidArgumentError(fmt::format("{}: too few tokens to finish the first step: {} (given) vs {} (needed)",
                                           state.name, num_tokens, tokens_needed));
  }
  Graph& g = state.global_step->op().graph();
  if (num_tokens <= 0) return ops::no_op(g, "no_init_tokens");
  PlacedWith with_step(g, state.global_step->op());
  return state.sync_token_queue.enqueue_many({fill_with(g, num_tokens, state.global_step->value())});
}

}  // namespace

Operation SyncReplicasOptimizer::State::apply_gradients(std::vector<std::pair<Output, Variable>> grads_and_vars,
                                                        std::optional<Variable> step, std::string op_name) {
  if (grads_and_vars.empty()) throw InvalidArgumentError(fmt::format("{}: must supply at least one variable", name));
  if (!step) throw InvalidArgumentError(fmt::format("{}: global step is required to check staleness", name));
  if (step->dtype() != DType::Int64 || step->shape() != Shape{}) {
    throw InvalidArgumentError(fmt::format("{}: the global step '{}' must be an int64 scalar, is {} {}", name,
                                           step->name(), dtype_name(step->dtype()), step->shape().to_string()));
  }
  {
    std::lock_guard<std::mutex> l(mu);
    if (applied) {
      throw FailedPreconditionError(fmt::format(
          "{}: apply_gradients was called already: one SyncReplicasOptimizer synchronizes one train op", name));
    }
  }
  Graph& g = step->op().graph();

  // Only this worker's part of a step, its gradients into the accumulators, is ordered after the
  // caller's control_dependencies scope (the UPDATE_OPS idiom: batch normalization's moving
  // averages first). What the chief runs on its own (the aggregated update, the global step's
  // increment, the token queue's enqueue, chief_init_op) and the accumulators themselves are
  // built outside it: under it they would run the scope's ops, which read the step's feeds, from
  // the chief's queue runner and init op. TF 1.x builds them under the scope and fails that way
  // ("You must feed a value for placeholder") when sync replicas meet UPDATE_OPS.
  std::vector<Operation> caller_deps;
  for (internal::Node* n : g.impl().control_scope_) caller_deps.push_back(Operation(n));
  GraphScope outside = internal::without_control_dependencies(g.impl());

  // The local step lives on this worker: it requests the device a non-variable op gets here (a
  // no-op's, so a device function that sends variables to the ps leaves it on the worker), or
  // nothing, which a cluster's master reads as its own task. Not a colocation with the no-op: a
  // colocation with an op outside the step constrains nothing, and the cost policy may put an
  // unconstrained variable read next to the global step, on the ps, shared by every worker.
  Operation local_anchor = ops::no_op(g, "sync_rep_local_anchor");
  std::optional<Variable> local;
  {
    GraphScope cleared = g.device("");
    GraphScope here = local_anchor.device().empty() ? GraphScope() : g.device(local_anchor.device());
    // A local variable (TF's LOCAL_VARIABLES): each worker's own, outside checkpoints and the
    // readiness check a non-chief waits on.
    local = local_variable(g, Tensor::scalar<int64_t>(0), "sync_rep_local_step");
  }
  Operation local_init = local->assign(step->value()).op();
  std::vector<Operation> chief_init_ops = {local_init};

  std::vector<Operation> train_ops;
  std::vector<std::pair<Output, Variable>> aggregated;
  std::vector<ConditionalAccumulator> accs;
  {
    GraphScope scope = g.name_scope(name);
    for (const auto& [grad, var] : grads_and_vars) {
      if (grad.is_null()) {
        aggregated.emplace_back(grad, var);  // passed through: the wrapped optimizer skips it
        continue;
      }
      PlacedWith with_var(g, var.op());
      ConditionalAccumulator acc(g, grad.dtype(), var.shape(), var.name() + "/grad_accum");
      {
        GraphScope caller = g.control_dependencies(caller_deps);
        train_ops.push_back(acc.apply_grad(grad, local->value()));
      }
      aggregated.emplace_back(acc.take_grad(replicas_to_aggregate), var);
      accs.push_back(acc);
    }
  }

  // The update, with the global step: its increment's output is the new step (Note [Sync replicas]).
  // Its ops follow their variables, not this worker's device scope.
  Operation update;
  {
    GraphScope unscoped = g.device("");
    update = opt.apply_gradients(std::move(aggregated), std::nullopt, op_name);
  }
  Output new_step;
  {
    GraphScope after = g.control_dependencies({update});
    PlacedWith with_step(g, step->op());
    new_step = step->assign_add(ops::constant(g, int64_t{1}));
  }

  FIFOQueue token_queue;
  FIFOQueue dummy_queue;
  {
    PlacedWith with_step(g, step->op());
    token_queue = FIFOQueue(g, -1, {DType::Int64}, {Shape{}}, "sync_token_q", "sync_token_q");
    // The chief queue runner's queue: closing it on a stop must not close the token queue.
    dummy_queue = FIFOQueue(g, 1, {DType::Int32}, {Shape{}}, "dummy_queue", "dummy_queue");
  }
  Output token;
  {
    GraphScope after = g.control_dependencies(train_ops);
    GraphScope unscoped = g.device("");  // with its queue
    token = token_queue.dequeue()[0];
  }
  Operation train_op = local->assign(token).op();

  Operation sync_op;
  {
    PlacedWith with_step(g, step->op());
    sync_op = token_queue.enqueue_many({fill_with(g, tokens_per_step, new_step)});
  }

  std::vector<Operation> cancels;
  for (const ConditionalAccumulator& acc : accs) {
    PlacedWith with_acc(g, acc.op());
    chief_init_ops.push_back(acc.set_global_step(step->value(), acc.op().name() + "_SetGlobalStep"));
    cancels.push_back(internal::accumulator_cancel_takes(acc));
  }

  std::lock_guard<std::mutex> l(mu);
  global_step = step;
  local_step = local;
  local_step_init_op = local_init;
  chief_init_op = ops::group(chief_init_ops, name + "/chief_init");
  cancel_takes_op = ops::group(cancels, name + "/cancel_takes");
  sync_token_queue = token_queue;
  chief_queue_runner = QueueRunner(dummy_queue, {sync_op});
  accumulators = std::move(accs);
  applied = true;
  return train_op;
}

namespace {

using SyncStatePtr = std::shared_ptr<SyncReplicasOptimizer::State>;

// The hook of make_session_run_hook. Its calls come from the thread running the training loop;
// destruction may come from another, hence mu_.
class SyncReplicasHook final : public SessionRunHook::Impl {
 public:
  SyncReplicasHook(SyncStatePtr state, bool is_chief, int num_tokens)
      : state_(std::move(state)), is_chief_(is_chief), num_tokens_(num_tokens) {}
  ~SyncReplicasHook() override {
    try {
      stop_threads();
    } catch (const std::exception& e) {
      TESSERA_LOG(kWarning, "SyncReplicasOptimizer: the chief's sync thread failed: {}", e.what());
    }
  }

  void begin() override {
    std::lock_guard<std::mutex> l(mu_);
    begin_locked();
  }

  void after_create_session(Session& session) override {
    Operation local_init;
    Operation init_tokens;
    {
      std::lock_guard<std::mutex> l(mu_);
      begin_locked();
      local_init = local_init_op_;
      init_tokens = init_tokens_op_;
    }
    stop_threads();  // those of a previous session
    session.run(local_init);
    if (!init_tokens.is_null()) session.run(init_tokens);
    if (!is_chief_) return;
    std::lock_guard<std::mutex> l(mu_);
    session_ = &session;
    coord_ = std::make_unique<Coordinator>();
    threads_ = state_->chief_queue_runner.create_threads(session, coord_.get(), /*start=*/true);
  }

  void end(Session&) override { stop_threads(); }

 private:
  // As TensorFlow's begin(): the ops the session will run (built once).
  void begin_locked() {
    if (begun_) return;
    {
      std::lock_guard<std::mutex> l(state_->mu);
      if (!state_->applied) {
        throw FailedPreconditionError(
            "SyncReplicasOptimizer.apply_gradient should be called before using the hook");
      }
    }
    if (is_chief_) {
      local_init_op_ = state_->chief_init_op;
      init_tokens_op_ = init_tokens_op(*state_, num_tokens_);
    } else {
      local_init_op_ = state_->local_step_init_op;
    }
    begun_ = true;
  }

  // Stops the chief's sync thread (Note [Sync replicas]) and re-raises what it failed with.
  void stop_threads() {
    Session* session = nullptr;
    std::unique_ptr<Coordinator> coord;
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      session = session_;
      coord = std::move(coord_);
      threads = std::move(threads_);
      session_ = nullptr;
      threads_.clear();
    }
    if (coord == nullptr) return;
    coord->request_stop();
    std::mutex m;
    std::condition_variable cv;
    bool joined = false;  // guarded by m
    const Operation cancel = state_->cancel_takes_op;
    std::thread canceller([&] {
      RunOptions bounded;
      bounded.timeout = std::chrono::seconds(10);
      std::unique_lock<std::mutex> lock(m);
      while (!joined) {
        lock.unlock();
        try {
          session->run(std::vector<Output>{}, FeedMap{}, std::vector<Operation>{cancel}, bounded);
        } catch (const std::exception&) {
          // A closed session: its runs were cancelled already.
        }
        lock.lock();
        cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return joined; });
      }
    });
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
    {
      std::lock_guard<std::mutex> lock(m);
      joined = true;
    }
    cv.notify_all();
    canceller.join();
    std::vector<std::thread> none;
    coord->join(none, std::chrono::milliseconds(0));  // re-raises an error the sync op raised
  }

  const SyncStatePtr state_;
  const bool is_chief_;
  const int num_tokens_;

  std::mutex mu_;
  bool begun_ = false;                  // guarded by mu_
  Operation local_init_op_;             // guarded by mu_
  Operation init_tokens_op_;            // guarded by mu_: null on a non-chief
  Session* session_ = nullptr;          // guarded by mu_: the chief's threads run on it. Not owned.
  std::unique_ptr<Coordinator> coord_;  // guarded by mu_
  std::vector<std::thread> threads_;    // guarded by mu_
};

}  // namespace

SyncReplicasOptimizer::SyncReplicasOptimizer(const Optimizer& opt, int replicas_to_aggregate, int total_num_replicas,
                                             std::string name)
    : SyncReplicasOptimizer([&] {
        if (replicas_to_aggregate < 1) {
          throw InvalidArgumentError(fmt::format(
              "SyncReplicasOptimizer: replicas_to_aggregate must be positive, got {}", replicas_to_aggregate));
        }
        if (total_num_replicas == -1) total_num_replicas = replicas_to_aggregate;
        if (total_num_replicas < 1) {
          throw InvalidArgumentError(fmt::format(
              "SyncReplicasOptimizer: total_num_replicas must be positive (or -1), got {}", total_num_replicas));
        }
        TESSERA_LOG(kInfo, "SyncReplicas: replicas_to_aggregate={}; total_num_replicas={}", replicas_to_aggregate,
                    total_num_replicas);
        return std::make_shared<State>(opt, replicas_to_aggregate, total_num_replicas, std::move(name));
      }()) {}

SyncReplicasOptimizer::SyncReplicasOptimizer(std::shared_ptr<State> state) : Optimizer(state), state_(std::move(state)) {}

SessionRunHook SyncReplicasOptimizer::make_session_run_hook(bool is_chief, int num_tokens) const {
  return SessionRunHook(std::make_shared<SyncReplicasHook>(state_, is_chief, num_tokens));
}

QueueRunner SyncReplicasOptimizer::get_chief_queue_runner() const {
  state_->check_applied("get_chief_queue_runner()");
  return state_->chief_queue_runner;
}

Operation SyncReplicasOptimizer::get_init_tokens_op(int num_tokens) const {
  return init_tokens_op(*state_, num_tokens);
}

Operation SyncReplicasOptimizer::chief_init_op() const {
  state_->check_applied("chief_init_op()");
  return state_->chief_init_op;
}

Operation SyncReplicasOptimizer::local_step_init_op() const {
  state_->check_applied("local_step_init_op()");
  return state_->local_step_init_op;
}

Variable SyncReplicasOptimizer::local_step() const {
  state_->check_applied("local_step()");
  return *state_->local_step;
}

std::vector<ConditionalAccumulator> SyncReplicasOptimizer::accumulators() const {
  state_->check_applied("accumulators()");
  return state_->accumulators;
}

int SyncReplicasOptimizer::replicas_to_aggregate() const { return state_->replicas_to_aggregate; }
int SyncReplicasOptimizer::total_num_replicas() const { return state_->total_num_replicas; }

}  // namespace tessera::train
