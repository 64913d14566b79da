// The digits of scikit-learn (examples/data/digits.csv.gz: 1797 rows of 64 pixels 0..16, then the
// digit) read the TensorFlow 1 way, and split 80/20. Shared by the digits example, the training
// benchmarks and the TensorFlow fidelity check (benchmarks/training/), which must see the same rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::examples {

inline constexpr int kDigitsPixels = 64;
inline constexpr int kDigitsClasses = 10;

struct Digits {
  std::vector<float> x;    // rows of 64 pixels as read (0..16)
  std::vector<int32_t> y;  // the digit of each row
};

// Every row of the CSV, in file order, through a file pipeline of one epoch
// (string_input_producer -> TextLineReader -> decode_csv -> batch).
inline Digits read_digits(const std::string& path) {
  Graph g;
  FIFOQueue files = train::string_input_producer(g, {path}, /*num_epochs=*/1, /*shuffle=*/false);
  train::TextLineReader reader(g);
  auto [key, line] = reader.read(files);
  std::vector<Tensor> defaults(kDigitsPixels + 1, Tensor::vector<int32_t>({0}));
  std::vector<Output> columns = train::decode_csv(line, defaults);
  std::vector<Output> pixel_columns;
  for (int i = 0; i < kDigitsPixels; ++i) {
    pixel_columns.push_back(ops::expand_dims(columns[static_cast<std::size_t>(i)], 0));
  }
  auto pixels = ops::cast(ops::concat(pixel_columns, 0), DType::Float32);
  auto rows = train::batch({pixels, columns.back()}, /*batch_size=*/256, /*num_threads=*/1, /*capacity=*/512,
                           /*enqueue_many=*/false, /*allow_smaller_final_batch=*/true);
  Session s(g);
  s.run(global_variables_initializer(g));
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  Digits d;
  try {
    for (;;) {
      auto batch = s.run({rows[0], rows[1]});
      auto px = batch[0].to_vector<float>();
      auto py = batch[1].to_vector<int32_t>();
      d.x.insert(d.x.end(), px.begin(), px.end());
      d.y.insert(d.y.end(), py.begin(), py.end());
    }
  } catch (const OutOfRangeError&) {
    // every line read
  }
  coord.request_stop();
  coord.join(threads);
  return d;
}

struct DigitsSplit {
  Digits train, test;  // pixels scaled to [0, 1]
};

// An 80/20 split by a fixed permutation (std::mt19937 seeded 42), as scikit-learn's
// train_test_split(random_state=...) does; pixels scaled to [0, 1].
inline DigitsSplit split_digits(const Digits& all) {
  const std::size_t n = all.y.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 gen(42);
  std::shuffle(order.begin(), order.end(), gen);
  const std::size_t n_train = n - n / 5;
  DigitsSplit split;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = order[k];
    Digits& part = k < n_train ? split.train : split.test;
    for (int p = 0; p < kDigitsPixels; ++p) {
      part.x.push_back(all.x[i * kDigitsPixels + static_cast<std::size_t>(p)] / 16.0f);
    }
    part.y.push_back(all.y[i]);
  }
  return split;
}

}  // namespace tessera::examples
