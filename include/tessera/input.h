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
#include <string>
#include <utility>
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

// ---- Reading files (TensorFlow 1's string_input_producer, TextLineReader and decode_csv) ----
//
//   auto files = train::string_input_producer(g, {"a.csv", "b.csv.gz"}, /*num_epochs=*/1);
//   train::TextLineReader reader(g, /*skip_header_lines=*/1);
//   auto [key, line] = reader.read(files);                 // "a.csv:2", "1,2.5,x"
//   auto cols = train::decode_csv(line, {Tensor::scalar<int32_t>(0), Tensor::scalar(0.0f),
//                                        Tensor::scalar("")});
//   auto batch = train::shuffle_batch(cols, 32, 256, 64);

// A queue of the file names (string scalars), num_epochs times (0: forever), each epoch in a new
// random order when `shuffle` (train::input_producer over them). At least one name.
FIFOQueue string_input_producer(Graph& g, std::vector<std::string> string_tensor, int num_epochs = 0,
                                bool shuffle = true, uint64_t seed = 0, int capacity = 32);

// Reads the lines of files whose names it takes from a queue (TF's TextLineReader). Each run of
// read()'s outputs yields the next line (without its "\n" or "\r\n") and its key "file:line"
// (line 1-based, skipped header lines counted); at the end of a file the reader dequeues the next
// name, and once the queue is closed and empty a read raises OutOfRangeError. The first
// `skip_header_lines` lines of every file are skipped. Every file is read through zlib: a gzip
// file decompressed, any other as it is. A missing file is NotFoundError naming it.
// The reader's state (open file, position) lives in the session, found by the reader's name; any
// number of threads may read at once and each line goes to exactly one of them. A read waiting
// for a file name holds no thread of the session's pool.
class TextLineReader {
 public:
  explicit TextLineReader(Graph& g, int skip_header_lines = 0, std::string name = "");
  // (key, value): string scalars.
  std::pair<Output, Output> read(FIFOQueue& filename_queue) const;
  Operation op() const { return op_; }  // the reader node

 private:
  Operation op_;
};

// Parses CSV records (a string tensor of any shape) into one tensor per column, each of
// records' shape and of its default's dtype (float32, float64, int32, int64 or string). A
// default is a scalar or a 1-element vector, the value of an empty field; an empty tensor marks a
// column as required (an empty field is then an error). Fields are separated by `field_delim`
// (one character); with `use_quote_delim` a field in double quotes may hold the delimiter, and
// "" inside it is one quote (RFC 4180, as TensorFlow). A record with the wrong number of fields,
// a number that does not parse or a missing required field is InvalidArgumentError naming the
// op and the record. Op "DecodeCSV".
std::vector<Output> decode_csv(Output records, std::vector<Tensor> record_defaults, std::string field_delim = ",",
                               std::string name = "", bool use_quote_delim = true);

}  // namespace tessera::train
