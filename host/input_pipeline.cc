// train::batch, shuffle_batch and slice_input_producer (tessera/input.h). batch and shuffle_batch
// build, under name scope "batch" or "shuffle_batch":
//
//   tensors -> QueueEnqueue(Many) -> fifo_queue | random_shuffle_queue -> QueueDequeueMany(UpTo)
//
// and register a QueueRunner that runs the one enqueue op in num_threads threads, as TensorFlow's
// _enqueue does. When the input ends (an upstream queue closed and drained: the enqueue op raises
// OutOfRangeError) the runner's threads end and the last one closes the queue, so consumers drain
// it and then see OutOfRangeError; dequeue_up_to hands out the smaller final batch first.
#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"
#include "tessera/input.h"
#include "tessera/ops.h"
#include "tessera/train.h"

namespace tessera::train {

namespace {

// The graph of `tensors` (at least one, none null, all of one graph), or InvalidArgumentError
// naming `fn`.
Graph& graph_of(const char* fn, const std::vector<Output>& tensors) {
  if (tensors.empty()) throw InvalidArgumentError(fmt::format("{}: needs at least one tensor", fn));
  Graph* g = nullptr;
  for (const Output& t : tensors) {
    internal::checked_node(t, fn);
    if (g != nullptr && &t.op().graph() != g) {
      throw InvalidArgumentError(fmt::format("{}: tensor '{}' is not in the graph of tensor '{}'", fn,
                                             t.name(), tensors.front().name()));
    }
    g = &t.op().graph();
  }
  return *g;
}

void check_at_least(const char* fn, const char* what, int64_t value, int64_t least) {
  if (value < least) throw InvalidArgumentError(fmt::format("{}: {} must be >= {}, got {}", fn, what, least, value));
}

// A batching queue's element shapes: each input's static shape (with `enqueue_many`, its rows'),
// which must be fully defined, as TensorFlow requires.
std::vector<Shape> element_shapes(const char* fn, const std::vector<Output>& tensors, bool enqueue_many) {
  std::vector<Shape> shapes;
  for (const Output& t : tensors) {
    Shape s = t.shape();
    if (enqueue_many && !s.unknown_rank()) {
      if (s.rank() < 1) {
        throw InvalidArgumentError(fmt::format(
            "{}: with enqueue_many, tensor '{}' must have rank >= 1 (examples along dimension 0), "
            "got shape {}", fn, t.name(), s.to_string()));
      }
      s = s.sub_shape(1);
    }
    if (!s.fully_defined()) {
      throw InvalidArgumentError(fmt::format(
          "{}: all shapes must be fully defined, tensor '{}' has {}shape {}", fn, t.name(),
          enqueue_many ? "element " : "", s.to_string()));
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

std::vector<DType> dtypes_of(const std::vector<Output>& tensors) {
  std::vector<DType> dtypes;
  for (const Output& t : tensors) dtypes.push_back(t.dtype());
  return dtypes;
}

// What batch and shuffle_batch share: checks the arguments, then, in name scope `fn`, makes the
// queue with make_queue(graph, dtypes, shapes), its enqueue op and the runner, and returns the
// dequeue.
template <class MakeQueue>
std::vector<Output> build_batch(const char* fn, const std::vector<Output>& tensors, int batch_size,
                                int num_threads, int capacity, bool enqueue_many,
                                bool allow_smaller_final_batch, MakeQueue make_queue) {
  Graph& g = graph_of(fn, tensors);
  check_at_least(fn, "batch_size", batch_size, 1);
  check_at_least(fn, "num_threads", num_threads, 1);
  check_at_least(fn, "capacity", capacity, 1);
  std::vector<Shape> shapes = element_shapes(fn, tensors, enqueue_many);
  GraphScope scope = g.name_scope(fn);
  QueueBase queue = make_queue(g, dtypes_of(tensors), std::move(shapes));
  Operation enqueue = enqueue_many ? queue.enqueue_many(tensors) : queue.enqueue(tensors);
  add_queue_runner(g, QueueRunner(queue, std::vector<Operation>(static_cast<std::size_t>(num_threads), enqueue)));
  return allow_smaller_final_batch ? queue.dequeue_up_to(batch_size) : queue.dequeue_many(batch_size);
}

}  // namespace

std::vector<Output> batch(std::vector<Output> tensors, int batch_size, int num_threads, int capacity,
                          bool enqueue_many, bool allow_smaller_final_batch) {
  return build_batch("batch", tensors, batch_size, num_threads, capacity, enqueue_many,
                     allow_smaller_final_batch,
                     [capacity](Graph& g, std::vector<DType> dtypes, std::vector<Shape> shapes) {
                       return FIFOQueue(g, capacity, std::move(dtypes), std::move(shapes));
                     });
}

std::vector<Output> shuffle_batch(std::vector<Output> tensors, int batch_size, int capacity,
                                  int min_after_dequeue, int num_threads, uint64_t seed,
                                  bool enqueue_many, bool allow_smaller_final_batch) {
  const char* fn = "shuffle_batch";
  check_at_least(fn, "min_after_dequeue", min_after_dequeue, 0);
  if (min_after_dequeue >= capacity) {
    throw InvalidArgumentError(fmt::format("{}: min_after_dequeue ({}) must be < capacity ({})", fn,
                                           min_after_dequeue, capacity));
  }
  return build_batch(fn, tensors, batch_size, num_threads, capacity, enqueue_many,
                     allow_smaller_final_batch,
                     [&](Graph& g, std::vector<DType> dtypes, std::vector<Shape> shapes) {
                       return RandomShuffleQueue(g, capacity, min_after_dequeue, std::move(dtypes),
                                                 std::move(shapes), seed);
                     });
}

std::vector<Output> slice_input_producer(std::vector<Output> tensors, int num_epochs, bool shuffle,
                                         uint64_t seed, int capacity) {
  const char* fn = "slice_input_producer";
  Graph& g = graph_of(fn, tensors);
  // The number of rows: dimension 0, known when the graph is built and the same for every tensor.
  int64_t rows = -1;
  for (const Output& t : tensors) {
    const Shape& s = t.shape();
    if (!s.unknown_rank() && s.rank() < 1) {
      throw InvalidArgumentError(fmt::format("{}: tensor '{}' must have rank >= 1 (rows along dimension 0), got shape {}",
                                             fn, t.name(), s.to_string()));
    }
    if (s.unknown_rank() || s.dim(0) < 0) {
      throw InvalidArgumentError(fmt::format("{}: dimension 0 of tensor '{}' must be known when the graph is built, got shape {}",
                                             fn, t.name(), s.to_string()));
    }
    if (rows >= 0 && s.dim(0) != rows) {
      throw InvalidArgumentError(fmt::format("{}: tensor '{}' has {} rows but tensor '{}' has {}", fn, t.name(),
                                             s.dim(0), tensors.front().name(), rows));
    }
    rows = s.dim(0);
  }
  FIFOQueue indices = range_input_producer(g, rows, num_epochs, shuffle, seed, capacity);
  GraphScope scope = g.name_scope(fn);
  Output index = indices.dequeue()[0];
  std::vector<Output> out;
  for (const Output& t : tensors) {
    // With its tensor, so a run moves one row between devices, not the whole tensor.
    GraphScope with_tensor = g.colocate_with(t);
    out.push_back(ops::gather(t, index));
  }
  return out;
}

}  // namespace tessera::train
