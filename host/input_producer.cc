// train::input_producer: a queue of the rows of a tensor, num_epochs times, filled by a
// registered QueueRunner. The graph it builds (under name scope "input_producer"):
//
//   input -> LimitEpochs(num_epochs) -> RandomShuffle(seed) -> QueueEnqueueMany -> fifo_queue
//
// LimitEpochs (only when num_epochs > 0) passes its input through num_epochs times per session,
// then raises OutOfRangeError: the runner's thread ends quietly, the last thread closes the
// queue, and consumers see OutOfRangeError once it is drained.
#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train.h"

namespace tessera::train {

namespace {

Output limit_epochs(Output x, int num_epochs) {
  internal::Node* n = internal::checked_node(x, "limit_epochs");
  internal::NodeSpec spec{"LimitEpochs", "limit_epochs"};
  spec.inputs = {x};
  spec.attrs["num_epochs"] = static_cast<int64_t>(num_epochs);
  return Output(n->graph->add_node(std::move(spec)), 0);
}

// Builds the pipeline; the caller has opened the name scope.
FIFOQueue build_input_producer(Graph& g, Output input, int num_epochs, bool shuffle, int capacity,
                               uint64_t seed) {
  const Shape shape = input.shape();
  if (!shape.unknown_rank() && shape.rank() < 1) {
    throw InvalidArgumentError(
        fmt::format("input_producer: input '{}' must have rank >= 1 (rows along dimension 0), "
                    "got shape {}", input.name(), shape.to_string()));
  }
  if (num_epochs < 0) {
    throw InvalidArgumentError(fmt::format("input_producer: num_epochs must be >= 0, got {}", num_epochs));
  }
  Output rows = input;
  if (num_epochs > 0) rows = limit_epochs(rows, num_epochs);
  if (shuffle) rows = ops::random_shuffle(rows, seed);
  std::vector<Shape> element_shapes;
  if (!shape.unknown_rank()) element_shapes.push_back(shape.sub_shape(1));
  FIFOQueue queue(g, capacity, {input.dtype()}, std::move(element_shapes), "", "fifo_queue");
  Operation enqueue = queue.enqueue_many({rows});
  add_queue_runner(g, QueueRunner(queue, {enqueue}));
  return queue;
}

}  // namespace

FIFOQueue input_producer(Graph& g, Tensor input, int num_epochs, bool shuffle, int capacity,
                         uint64_t seed) {
  if (input.is_null()) throw InvalidArgumentError("input_producer: null input tensor");
  GraphScope scope = g.name_scope("input_producer");
  Output value = ops::constant(g, std::move(input), "input");
  return build_input_producer(g, value, num_epochs, shuffle, capacity, seed);
}

FIFOQueue input_producer(Output input, int num_epochs, bool shuffle, int capacity, uint64_t seed) {
  internal::checked_node(input, "input_producer");
  Graph& g = input.op().graph();
  GraphScope scope = g.name_scope("input_producer");
  return build_input_producer(g, input, num_epochs, shuffle, capacity, seed);
}

}  // namespace tessera::train
