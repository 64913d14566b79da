// Conditional accumulators, as TensorFlow 1's tf.ConditionalAccumulator: a sum of gradients that
// drops stale ones, the building block of train::SyncReplicasOptimizer.
//
//   ConditionalAccumulator acc(g, DType::Float32, Shape{2}, /*shared_name=*/"w/grad_accum");
//   Operation apply = acc.apply_grad(grad, local_step);   // dropped when local_step < global step
//   Output mean = acc.take_grad(2);   // waits for 2 gradients; their mean; the global step + 1
//   Session s(g);
//   s.run(apply, feeds_of_worker_0);
//   s.run(apply, feeds_of_worker_1);
//   Tensor m = s.run(mean);
//
// The accumulator lives where its node is placed, in host memory (give it a device scope or
// colocate it with its variable), and, like a queue, is per session in process and per task in a
// cluster, shared by every graph that names the same `shared_name` there (without one, private to
// the session that runs it, as TensorFlow's). A take waits without
// holding a thread; closing the session, a run's timeout or a cancelled step end it with
// CancelledError. Dense gradients only (TF's SparseConditionalAccumulator has no counterpart).
// Dtypes: float16, bfloat16, float32, float64. ConditionalAccumulator is a copyable handle.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera {

class ConditionalAccumulator {
 public:
  ConditionalAccumulator() = default;
  // `shape` may be partial or Shape::unknown(): the first gradient applied then fixes it until the
  // next take. `reduction_type`: "MEAN" (take returns the mean) or "SUM". Raises
  // InvalidArgumentError for another dtype or reduction type.
  ConditionalAccumulator(Graph& g, DType dtype, Shape shape = Shape::unknown(), std::string shared_name = "",
                         std::string name = "", std::string reduction_type = "MEAN");

  // Adds `grad` unless `local_step` (an integer scalar, cast to int64) is smaller than the
  // accumulator's global step. A gradient of another dtype, or of a shape incompatible with the
  // accumulator's, raises InvalidArgumentError here when the graph knows it, else when run.
  Operation apply_grad(Output grad, Output local_step, std::string name = "") const;
  Operation apply_grad(Output grad, int64_t local_step = 0, std::string name = "") const;
  // Waits until `num_required` (>= 1, an int32 scalar) gradients are summed, then returns their
  // mean (or sum), resets the sum and increments the global step.
  Output take_grad(Output num_required, std::string name = "") const;
  Output take_grad(int num_required, std::string name = "") const;
  Output num_accumulated(std::string name = "") const;   // int32 scalar
  // Sets the global step (an int64 scalar).
  Operation set_global_step(Output new_global_step, std::string name = "") const;
  Operation set_global_step(int64_t new_global_step, std::string name = "") const;

  Operation op() const;  // the accumulator node
  Graph& graph() const;
  const std::string& name() const;
  DType dtype() const;
  const Shape& shape() const;

  struct State;

 private:
  std::shared_ptr<const State> state_;
};

}  // namespace tessera
