// Recurrent networks, as TensorFlow 1's tf.nn.dynamic_rnn and tf.nn.rnn_cell: a cell is one step
// of the network, dynamic_rnn runs it over the time steps of a batch of sequences in a while loop
// (ops::while_loop, writing each step's output into a TensorArray), so the graph's size does not
// grow with the sequences' length and gradients run the steps backwards.
//
//   Output x = ops::placeholder(g, DType::Float32, Shape{-1, -1, 28}, "x");   // [batch, time, depth]
//   Output lengths = ops::placeholder(g, DType::Int32, Shape{-1}, "lengths");
//   nn::BasicLSTMCell cell(128);
//   auto [outputs, state] = nn::dynamic_rnn(cell, x, {.sequence_length = lengths});
//   Output logits = layers::dense(state[1], 10);   // the last step's h, per sequence
//
// Variables are named as TF 1.15 names them, so checkpoints line up: "rnn/basic_lstm_cell/kernel"
// ([depth + units, 4 units], gates i, j, f, o) and ".../bias"; "rnn/basic_rnn_cell/kernel";
// "rnn/gru_cell/gates/kernel", ".../gates/bias" (starting at 1), ".../candidate/kernel" and
// ".../candidate/bias"; a MultiRNNCell's "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel". A cell
// makes its variables the first time it is called, in a scope made unique in the variable scope
// it is called in (as TF's cells, which are layers), and uses the same variables on every later
// call (TF's weight sharing by reusing a cell object).
//
// Where tessera differs from TF 1.15, and why:
//  - A state is a std::vector<Output> (an LSTM's is {c, h}, TF's LSTMStateTuple; a MultiRNNCell's
//    is its cells' states one after the other), not a nested Python structure.
//  - Only the cells named here (no peepholes, projections or cell clipping of LSTMCell); no
//    parallel_iterations (the loop's steps run one after the other, as in any while_loop) and
//    no swap_memory (a gradient keeps each step's state: [time, batch, units] per state tensor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph.h"
#include "tessera/layers.h"

namespace tessera::nn {

// TF's RNNCell: a copyable handle (copies share the variables); the cells below derive from it.
class RNNCell {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual int64_t output_size() const = 0;
    // The size of each state tensor ([batch, size] each).
    virtual std::vector<int64_t> state_size() const = 0;
    // One step: the output and the next state, of inputs [batch, depth] and the state.
    virtual std::pair<Output, std::vector<Output>> call(Output inputs, const std::vector<Output>& state) = 0;
  };
  explicit RNNCell(std::shared_ptr<Impl> impl);

  int64_t output_size() const;
  std::vector<int64_t> state_size() const;
  // Zeros of [batch_size, size] for each state tensor.
  std::vector<Output> zero_state(Graph& g, int64_t batch_size, DType dtype = DType::Float32) const;
  // One step (TF's cell(inputs, state)). InvalidArgumentError for inputs that are not a floating
  // point [batch, depth] of a known depth, or a state of another number of tensors.
  std::pair<Output, std::vector<Output>> operator()(Output inputs, const std::vector<Output>& state) const;

 protected:
  std::shared_ptr<Impl> impl_;
};

// output = new state = activation([inputs, state] kernel + bias).
class BasicRNNCell : public RNNCell {
 public:
  explicit BasicRNNCell(int64_t num_units, layers::Activation activation = layers::Activation(),
                        std::string name = "");
};

// TF's BasicLSTMCell: state {c, h}; i, j, f, o = split([inputs, h] kernel + bias);
// c' = c sigmoid(f + forget_bias) + sigmoid(i) activation(j); h' = activation(c') sigmoid(o); the
// output is h'. activation defaults to tanh.
class BasicLSTMCell : public RNNCell {
 public:
  explicit BasicLSTMCell(int64_t num_units, float forget_bias = 1.0f, layers::Activation activation = layers::Activation(),
                         std::string name = "");
};

// TF's GRUCell: r, u = sigmoid([inputs, h] gates_kernel + gates_bias); c = activation([inputs, r h]
// candidate_kernel + candidate_bias); h' = u h + (1 - u) c, the output and the state.
class GRUCell : public RNNCell {
 public:
  explicit GRUCell(int64_t num_units, layers::Activation activation = layers::Activation(), std::string name = "");
};

// TF's MultiRNNCell: the cells stacked, each one's output the next one's input; the state is
// every cell's, in order.
class MultiRNNCell : public RNNCell {
 public:
  explicit MultiRNNCell(std::vector<RNNCell> cells);
};

struct DynamicRNNOptions {
  // Int32 or int64 [batch]: a sequence's steps at or past its length output zeros and leave its
  // state as it was, so the final state is each sequence's own last one (null: every step counts).
  Output sequence_length;
  // The state before the first step (empty: zeros).
  std::vector<Output> initial_state;
  // inputs (and outputs) are [time, batch, ...] rather than [batch, time, ...].
  bool time_major = false;
  std::string scope = "rnn";
};

// TF's dynamic_rnn: `cell` over the time steps of `inputs` ([batch, time, depth], depth known);
// returns the outputs ([batch, time, output size]) and the final state. InvalidArgumentError for
// inputs of another rank, an unknown depth, or an initial state of the wrong number of tensors.
std::pair<Output, std::vector<Output>> dynamic_rnn(const RNNCell& cell, Output inputs,
                                                   const DynamicRNNOptions& options = {});

}  // namespace tessera::nn
