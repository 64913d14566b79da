// train::input_producer, range_input_producer and string_input_producer: a queue of the rows of a
// tensor (for the range, 0 .. limit-1; for the strings, the file names), num_epochs times, filled
// by a registered QueueRunner. The graph it builds (under name scope "input_producer"):
//
//   input -> LimitEpochs(num_epochs) -> RandomShuffle(seed) -> QueueEnqueueMany -> fifo_queue
//
// LimitEpochs (only when num_epochs > 0) passes its input through num_epochs times per session,
// then raises OutOfRangeError: the runner's thread ends quietly, the last thread closes the
// queue, and consumers see OutOfRangeError once it is drained.
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"
#include "tessera/input.h"
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

// Builds the pipeline; the caller has opened the name scope. Errors name `fn`.
FIFOQueue build_input_producer(const char* fn, Graph& g, Output input, int num_epochs, bool shuffle,
                               int capacity, uint64_t seed) {
  const Shape shape = input.shape();
  if (!shape.unknown_rank() && shape.rank() < 1) {
    throw InvalidArgumentError(
        fmt::format("{}: input '{}' must have rank >= 1 (rows along dimension 0), got shape {}", fn,
                    input.name(), shape.to_string()));
  }
  if (num_epochs < 0) {
    throw InvalidArgumentError(fmt::format("{}: num_epochs must be >= 0, got {}", fn, num_epochs));
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
  return build_input_producer("input_producer", g, value, num_epochs, shuffle, capacity, seed);
}

FIFOQueue input_producer(Output input, int num_epochs, bool shuffle, int capacity, uint64_t seed) {
  internal::checked_node(input, "input_producer");
  Graph& g = input.op().graph();
  GraphScope scope = g.name_scope("input_producer");
  return build_input_producer("input_producer", g, input, num_epochs, shuffle, capacity, seed);
}

FIFOQueue range_input_producer(Graph& g, int64_t limit, int num_epochs, bool shuffle, uint64_t seed,
                               int capacity) {
  // At least one row: an empty range would have the runner enqueue nothing forever. The values
  // are int32, as TensorFlow's range of an int32 limit.
  if (limit < 1 || limit > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgumentError(fmt::format("range_input_producer: limit must be in [1, {}], got {}",
                                           std::numeric_limits<int32_t>::max(), limit));
  }
  std::vector<int32_t> range(static_cast<std::size_t>(limit));
  std::iota(range.begin(), range.end(), 0);
  GraphScope scope = g.name_scope("input_producer");
  Output value = ops::constant(g, Tensor::vector<int32_t>(std::move(range)), "range");
  return build_input_producer("range_input_producer", g, value, num_epochs, shuffle, capacity, seed);
}

FIFOQueue string_input_producer(Graph& g, std::vector<std::string> string_tensor, int num_epochs, bool shuffle,
                                uint64_t seed, int capacity) {
  // At least one name, as TensorFlow requires: an empty list would have the runner enqueue nothing
  // forever.
  if (string_tensor.empty()) throw InvalidArgumentError("string_input_producer: string_tensor must not be empty");
  GraphScope scope = g.name_scope("input_producer");
  Output value = ops::constant(g, Tensor::vector(std::move(string_tensor)), "input");
  return build_input_producer("string_input_producer", g, value, num_epochs, shuffle, capacity, seed);
}

}  // namespace tessera::train
