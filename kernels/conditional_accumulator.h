// The resource behind tessera::ConditionalAccumulator (TensorFlow's ConditionalAccumulator,
// kernels/conditional_accumulator_base.h there): a sum of dense gradients and a count, guarded by
// a global step. See Note [Conditional accumulators] in kernels/conditional_accumulator.cc.
//
//   auto acc = std::make_shared<ConditionalAccumulatorResource>("v/grad_accum", DType::Float32,
//                                                               Shape{2}, /*mean=*/true);
//   acc->try_take(2, &cm, [](const Status& s, Tensor mean) { /* later: the mean of two */ });
//   (void)acc->try_apply(/*local_step=*/0, Tensor::vector<float>({1, 2}));
//   (void)acc->try_apply(/*local_step=*/0, Tensor::vector<float>({3, 4}));  // the take completes
//
// Nothing here blocks: a take that cannot complete at once waits as an attempt with its callback,
// which runs exactly once, never under the accumulator's lock, from the thread whose apply
// completes it, or a cancellation. Instances must be owned by a std::shared_ptr (cancellation
// callbacks hold a weak reference). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/resource_mgr.h"
#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class OpKernelContext;
struct Node;

// The dtypes an accumulator sums: float16, bfloat16 (summed in float32), float32 and float64.
bool is_accumulator_dtype(DType dtype);

class ConditionalAccumulatorResource : public ResourceBase,
                                       public std::enable_shared_from_this<ConditionalAccumulatorResource> {
 public:
  // The mean (or the sum) of the gradients taken, or the failure.
  using TakeCallback = std::function<void(const Status&, Tensor)>;

  // `shape` may be partial (or unknown): the first gradient applied after a take fixes the rest.
  // `mean`: a take returns the mean (TF's reduction_type "MEAN"), else the sum ("SUM").
  ConditionalAccumulatorResource(std::string name, DType dtype, Shape shape, bool mean);
  ~ConditionalAccumulatorResource() override;

  // Adds `grad` to the sum unless `local_step` is older than the global step: a stale gradient
  // is dropped silently (OK, *applied false), unchecked, as TensorFlow does. InvalidArgument when
  // its dtype is not the accumulator's or its shape is incompatible with the accumulator's or
  // with the gradients already summed. May complete a waiting take (its callback runs here).
  Status try_apply(int64_t local_step, const Tensor& grad, bool* applied = nullptr);
  // Waits until at least `num_required` gradients are summed, then returns their mean (or sum),
  // resets the sum and increments the global step. Takes complete in arrival order.
  // InvalidArgument at once unless num_required >= 1. `cm` (may be null) cancels the wait with
  // its reason (CancelledError, or DeadlineExceeded for a deadline); it must outlive the attempt.
  void try_take(int64_t num_required, CancellationManager* cm, TakeCallback done);
  // Sets the global step (a smaller one is allowed, with a warning, as in TensorFlow).
  void set_global_step(int64_t step);
  // Fails every waiting take with `reason` (CancelledError when OK; the sum stays).
  void cancel_pending_takes(const Status& reason);

  int64_t num_accumulated() const;
  int64_t global_step() const;
  int num_pending_takes() const;
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  bool mean() const { return mean_; }

  std::string debug_string() const override;
  // The session or server is closing: fails every waiting take.
  void cancel_all(const Status& reason) override;

 private:
  struct Take {
    int64_t id = 0;
    int64_t num_required = 0;
    CancellationManager* cm = nullptr;  // Not owned.
    CancellationManager::Token token = CancellationManager::kInvalidToken;
    TakeCallback done;
    Status status;
    Tensor result;
  };

  // Completes the takes at the head of the list while enough gradients are summed; completed
  // takes move to `finished`. Requires mu_.
  void flush_locked(std::vector<Take>* finished);
  // The mean (or sum) of what is summed, as a tensor of dtype_; resets the sum. Requires mu_.
  Tensor take_sum_locked();
  void cancel(int64_t id, const Status& reason);
  Status cancelled(const Status& reason) const;
  // Deregisters and runs the callbacks of finished takes. Must not hold mu_.
  static void finish(std::vector<Take>* finished);

  const std::string name_;
  const DType dtype_;
  const Shape shape_;
  const bool mean_;

  mutable std::mutex mu_;
  Tensor sum_;                // guarded by mu_: float32 for 16-bit dtypes; null while count_ == 0
  int64_t count_ = 0;         // guarded by mu_: gradients in sum_
  int64_t global_step_ = 0;   // guarded by mu_
  std::list<Take> takes_;     // guarded by mu_: waiting, in arrival order
  int64_t next_id_ = 0;       // guarded by mu_
};

// The accumulator `accumulator_node` (a "ConditionalAccumulator" node) describes, created in this
// session's (or task's) resources on first use, keyed by shared_name or else the node's name. A
// shared one must agree with the node (dtype, shape, reduction type).
StatusOr<std::shared_ptr<ConditionalAccumulatorResource>> get_accumulator(OpKernelContext& ctx,
                                                                          const Node& accumulator_node);

}  // namespace tessera::internal
