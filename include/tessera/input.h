// Input pipelines as TensorFlow 1 builds them (tessera::train): each function adds a queue, the
// ops that fill it and a QueueRunner registered in the graph (start_queue_runners starts it),
// and returns what consumers run.
//
//   auto [x, y] = ...;                                           // one example per run
//   auto batch = train::shuffle_batch({x, y}, /*batch_size=*/32, /*capacity=*/256,
//                                     /*min_after_dequeue=*/64, /*num_threads=*/4, /*seed=*/7);
//   Session s(g);
//   train::Coordinator coord;
//   auto threads = train::start_queue_runners(s, coord);
//   s.run({batch[0], batch[1]});                                 // [32, ...] each
//
// The end of the input (an input producer's num_epochs consumed) closes the queues in turn, and
// consumers see OutOfRangeError once they are drained. A batching queue needs the element shapes:
// every input's static shape must be fully defined (InvalidArgumentError naming the function and
// the input otherwise). Graph building is single-threaded, as for every op constructor.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/graph.h"
#include "tessera/queue.h"

namespace tessera::train {

// Batches of `batch_size` elements: a FIFOQueue of `capacity` elements filled by `num_threads`
// runs of one enqueue op (elements from several threads arrive in any order). Each tensor is one
// element, or, with `enqueue_many`, a batch of them along dimension 0. Outputs have a leading
// batch dimension: batch_size, or -1 with `allow_smaller_final_batch` (dequeue_up_to: the last
// batch may be smaller once the input ends).
std::vector<Output> batch(std::vector<Output> tensors, int batch_size, int num_threads = 1,
                          int capacity = 32, bool enqueue_many = false,
                          bool allow_smaller_final_batch = false);

// As batch, from a RandomShuffleQueue: each batch is drawn uniformly from the queued elements, of
// which at least `min_after_dequeue` stay queued until the input ends (so the mix is good).
// `seed` 0: a different order in every session.
std::vector<Output> shuffle_batch(std::vector<Output> tensors, int batch_size, int capacity,
                                  int min_after_dequeue, int num_threads = 1, uint64_t seed = 0,
                                  bool enqueue_many = false, bool allow_smaller_final_batch = false);

// One row (along dimension 0) of every tensor per run, the same row of each: the row indices
// come from range_input_producer(n, num_epochs, shuffle, seed, capacity), where n is dimension 0
// of the tensors (static, and the same for all).
std::vector<Output> slice_input_producer(std::vector<Output> tensors, int num_epochs = 0,
                                         bool shuffle = true, uint64_t seed = 0, int capacity = 32);

// A queue of the int32 scalars 0 .. limit-1, each epoch in a new random order when `shuffle`
// (train::input_producer over them).
FIFOQueue range_input_producer(Graph& g, int64_t limit, int num_epochs = 0, bool shuffle = true,
                               uint64_t seed = 0, int capacity = 32);

}  // namespace tessera::train
