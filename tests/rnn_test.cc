// nn::dynamic_rnn and the cells of tessera/rnn.h, with cases in the spirit of TensorFlow's
// rnn_test.py and rnn_cell_test.py: a cell's step against its formula computed here, dynamic_rnn
// against the same cell unrolled step by step (values and gradients, batch-major and time-major),
// sequence lengths, TF's variable names, training a sequence model, and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::names_of;

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// A [batch, time, depth] tensor of values in [-1, 1].
Tensor sequences(int64_t batch, int64_t time, int64_t depth, int seed) {
  std::vector<double> v(static_cast<std::size_t>(batch * time * depth));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + seed);
  return Tensor::from_vector<double>(v, Shape{batch, time, depth});
}

// The step-by-step unrolling of `cell` over the time steps of x ([batch, time, depth], a known
// time): outputs [batch, time, units] and the final state (what TF's static_rnn builds).
std::pair<Output, std::vector<Output>> unrolled(const nn::RNNCell& cell, Output x, std::vector<Output> state) {
  const int64_t time = x.shape().dim(1);
  std::vector<Output> outs;
  for (int64_t t = 0; t < time; ++t) {
    Output step = ops::squeeze(ops::slice(x, {0, t, 0}, {-1, 1, -1}), {1});
    auto [y, next] = cell(step, state);
    outs.push_back(ops::expand_dims(y, 1));
    state = next;
  }
  return {ops::concat(outs, 1), state};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// One step of BasicLSTMCell against its formula (rnn_cell_test.py's testBasicLSTMCell computes the
// same with numpy): c' = c s(f + 1) + s(i) tanh(j), h' = tanh(c') s(o), [x, h] W + b split i, j, f, o.
TEST(RNNCellTest, BasicLSTMCellStepIsTheFormula) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<double>({0.5, -1.0}, 1, 2));
  Output c = ops::constant(g, Tensor::matrix<double>({0.3}, 1, 1));
  Output h = ops::constant(g, Tensor::matrix<double>({-0.2}, 1, 1));
  nn::BasicLSTMCell cell(1);
  auto [y, state] = cell(x, {c, h});
  EXPECT_THAT(names_of(global_variables(g)), ElementsAre("basic_lstm_cell/kernel", "basic_lstm_cell/bias"));
  Variable kernel = global_variables(g)[0];
  EXPECT_EQ(kernel.value().shape(), (Shape{3, 4}));
  Session s(g);
  s.run(global_variables_initializer(g));
  // Set a kernel whose every column we know: rows x0, x1, h.
  const std::vector<double> w = {0.1, -0.2, 0.3, 0.4, 0.5, 0.6, -0.7, 0.8, -0.9, 1.0, 1.1, -1.2};
  s.run(kernel.assign(ops::constant(g, Tensor::from_vector<double>(w, Shape{3, 4}))));
  std::vector<Tensor> got = s.run({y, state[0], state[1]});
  double gate[4];
  for (int k = 0; k < 4; ++k) gate[k] = 0.5 * w[k] - 1.0 * w[4 + k] - 0.2 * w[8 + k];
  const double c1 = 0.3 * sigmoid(gate[2] + 1.0) + sigmoid(gate[0]) * std::tanh(gate[1]);
  const double h1 = std::tanh(c1) * sigmoid(gate[3]);
  EXPECT_NEAR(got[1].to_vector<double>()[0], c1, 1e-12);
  EXPECT_NEAR(got[2].to_vector<double>()[0], h1, 1e-12);
  EXPECT_NEAR(got[0].to_vector<double>()[0], h1, 1e-12);
}

// GRUCell's step against its formula, bias at TF's initial values (gates 1, candidate 0).
TEST(RNNCellTest, GRUCellStepIsTheFormula) {
  Graph g;
  Output x = ops::constant(g, Tensor::matrix<double>({0.5}, 1, 1));
  Output h = ops::constant(g, Tensor::matrix<double>({-0.4}, 1, 1));
  nn::GRUCell cell(1);
  auto [y, state] = cell(x, {h});
  EXPECT_THAT(names_of(global_variables(g)), ElementsAre("gru_cell/gates/kernel", "gru_cell/gates/bias",
                                                         "gru_cell/candidate/kernel", "gru_cell/candidate/bias"));
  std::vector<Variable> vars = global_variables(g);
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(vars[0].assign(ops::constant(g, Tensor::matrix<double>({0.2, -0.3, 0.7, 0.1}, 2, 2))));
  s.run(vars[2].assign(ops::constant(g, Tensor::matrix<double>({0.9, -0.6}, 2, 1))));
  EXPECT_EQ(s.run(vars[1].value()).to_vector<double>(), (std::vector<double>{1, 1}));
  const double r = sigmoid(0.5 * 0.2 - 0.4 * 0.7 + 1), u = sigmoid(0.5 * -0.3 - 0.4 * 0.1 + 1);
  const double cand = std::tanh(0.5 * 0.9 + (r * -0.4) * -0.6);
  const double h1 = u * -0.4 + (1 - u) * cand;
  std::vector<Tensor> got = s.run({y, state[0]});
  EXPECT_NEAR(got[0].to_vector<double>()[0], h1, 1e-12);
  EXPECT_NEAR(got[1].to_vector<double>()[0], h1, 1e-12);
}

// dynamic_rnn equals the step-by-step unrolling of the same cell (rnn_test.py's
// testDynamicRNNWithTupleStates / static-vs-dynamic checks), for each cell, batch- and time-major;
// its gradients with respect to the inputs, the initial state and the cell's kernel too.
TEST(DynamicRNNTest, EqualsTheUnrolledCell) {
  const int64_t batch = 3, time = 5, depth = 4, units = 6;
  for (const std::string kind : {"rnn", "lstm", "gru", "multi"}) {
    for (bool time_major : {false, true}) {
      Graph g;
      auto make = [&]() -> nn::RNNCell {
        if (kind == "rnn") return nn::BasicRNNCell(units);
        if (kind == "lstm") return nn::BasicLSTMCell(units);
        if (kind == "gru") return nn::GRUCell(units);
        return nn::MultiRNNCell({nn::BasicLSTMCell(units), nn::GRUCell(units)});
      };
      nn::RNNCell cell = make();
      Output x = ops::placeholder(g, DType::Float64, Shape{batch, time, depth}, "x");
      std::vector<Output> init;
      for (int64_t size : cell.state_size()) {
        init.push_back(ops::placeholder(g, DType::Float64, Shape{batch, size}, fmt::format("s{}", init.size())));
      }
      Output fed = time_major ? ops::transpose(x, {1, 0, 2}) : x;
      auto [outputs, state] = nn::dynamic_rnn(cell, fed, {.initial_state = init, .time_major = time_major});
      if (time_major) outputs = ops::transpose(outputs, {1, 0, 2});
      auto [want_outputs, want_state] = unrolled(cell, x, init);  // the same cell: the same variables
      EXPECT_EQ(outputs.shape(), (Shape{batch, time, units}));
      FeedMap feeds = {{x, sequences(batch, time, depth, 1)}};
      for (std::size_t k = 0; k < init.size(); ++k) {
        std::vector<double> v(static_cast<std::size_t>(batch * units));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * static_cast<double>(k + 1) * std::cos(static_cast<double>(i));
        feeds[init[k]] = Tensor::from_vector<double>(v, Shape{batch, units});
      }
      Session s(g);
      s.run(global_variables_initializer(g));
      const std::string what = kind + (time_major ? " time-major" : " batch-major");
      EXPECT_LT(max_abs_diff(s.run(outputs, feeds), s.run(want_outputs, feeds)), 1e-12) << what;
      for (std::size_t k = 0; k < state.size(); ++k) {
        EXPECT_LT(max_abs_diff(s.run(state[k], feeds), s.run(want_state[k], feeds)), 1e-12) << what << " state " << k;
      }
      // The gradients of one loss through both.
      auto loss_of = [&](const Output& o, const std::vector<Output>& st) {
        Output l = ops::reduce_sum(ops::mul(o, o));
        for (const Output& t : st) l = ops::add(l, ops::reduce_sum(ops::sin(t)));
        return l;
      };
      std::vector<Output> wrt{x, init[0], global_variables(g)[0].value()};
      std::vector<Output> d = gradients({loss_of(outputs, state)}, wrt);
      std::vector<Output> want_d = gradients({loss_of(want_outputs, want_state)}, wrt);
      for (std::size_t k = 0; k < wrt.size(); ++k) {
        ASSERT_FALSE(d[k].is_null()) << what << " gradient " << k;
        EXPECT_LT(max_abs_diff(s.run(d[k], feeds), s.run(want_d[k], feeds)), 1e-10) << what << " gradient " << k;
      }
    }
  }
}

// Sequence lengths: outputs past a sequence's length are zeros and its final state is the one
// after its last step (rnn_test.py's testDynamicRNNWithSequenceLength checks); zero state by
// default (TF's initial_state=None).
TEST(DynamicRNNTest, SequenceLengths) {
  const int64_t batch = 3, time = 4, depth = 2, units = 3;
  Graph g;
  nn::BasicLSTMCell cell(units);
  Output x = ops::placeholder(g, DType::Float64, Shape{-1, -1, depth}, "x");
  Output lengths = ops::placeholder(g, DType::Int32, Shape{-1}, "lengths");
  auto [outputs, state] = nn::dynamic_rnn(cell, x, {.sequence_length = lengths});
  EXPECT_EQ(outputs.shape(), (Shape{-1, -1, units}));
  // Each sequence alone, unrolled for its own length, from zeros.
  const Tensor xs = sequences(batch, time, depth, 2);
  const std::vector<int32_t> lens = {4, 1, 0};
  Session s(g);
  s.run(global_variables_initializer(g));
  std::vector<Tensor> got = s.run({outputs, state[0], state[1]}, {{x, xs}, {lengths, Tensor::vector<int32_t>(lens)}});
  std::vector<double> out = got[0].to_vector<double>(), c = got[1].to_vector<double>(), h = got[2].to_vector<double>();
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t len = lens[static_cast<std::size_t>(b)];
    Output one = ops::slice(ops::constant(g, xs), {b, 0, 0}, {1, std::max<int64_t>(len, 0), depth});
    std::vector<Output> zeros = cell.zero_state(g, 1, DType::Float64);
    std::vector<Output> want_c{zeros[0]}, want_h{zeros[1]};
    Output want_out;
    if (len > 0) {
      auto [o, st] = unrolled(cell, one, zeros);
      want_out = o;
      want_c = {st[0]};
      want_h = {st[1]};
    }
    std::vector<Tensor> w = s.run({want_c[0], want_h[0]});
    for (int64_t u = 0; u < units; ++u) {
      EXPECT_NEAR(c[static_cast<std::size_t>(b * units + u)], w[0].to_vector<double>()[static_cast<std::size_t>(u)], 1e-12);
      EXPECT_NEAR(h[static_cast<std::size_t>(b * units + u)], w[1].to_vector<double>()[static_cast<std::size_t>(u)], 1e-12);
    }
    std::vector<double> wo = len > 0 ? s.run(want_out).to_vector<double>() : std::vector<double>{};
    for (int64_t t = 0; t < time; ++t) {
      for (int64_t u = 0; u < units; ++u) {
        const double at = out[static_cast<std::size_t>((b * time + t) * units + u)];
        if (t < len) {
          EXPECT_NEAR(at, wo[static_cast<std::size_t>(t * units + u)], 1e-12) << b << " " << t;
        } else {
          EXPECT_EQ(at, 0.0) << "sequence " << b << " step " << t;
        }
      }
    }
  }
  // No time steps at all: the zero state; the outputs, as TF1's, cannot be stacked from an empty
  // array whose element shape ([batch, units]) is known only when run.
  const FeedMap none = {{x, Tensor(DType::Float64, Shape{2, 0, depth})}, {lengths, Tensor::vector<int32_t>({0, 0})}};
  EXPECT_THAT(s.run(state[1], none).to_vector<double>(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(outputs, none); }), HasSubstr("is not fully defined"));
}

// TF's variable names, a cell's variables made once and shared by later calls, two cells' made
// unique.
TEST(DynamicRNNTest, VariableNamesAndSharing) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 7, 5}, "x");
  nn::MultiRNNCell cell({nn::BasicLSTMCell(8), nn::BasicLSTMCell(4)});
  nn::dynamic_rnn(cell, x);
  nn::dynamic_rnn(cell, x);  // the same cell again: no new variables
  nn::GRUCell gru(3);
  nn::dynamic_rnn(gru, x, {.scope = "encoder"});
  nn::dynamic_rnn(nn::BasicRNNCell(2), x, {.scope = "encoder"});
  EXPECT_THAT(names_of(global_variables(g)),
              ElementsAre("rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel",
                          "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias",
                          "rnn/multi_rnn_cell/cell_1/basic_lstm_cell/kernel",
                          "rnn/multi_rnn_cell/cell_1/basic_lstm_cell/bias", "encoder/gru_cell/gates/kernel",
                          "encoder/gru_cell/gates/bias", "encoder/gru_cell/candidate/kernel",
                          "encoder/gru_cell/candidate/bias", "encoder/basic_rnn_cell/kernel",
                          "encoder/basic_rnn_cell/bias"));
  EXPECT_EQ(global_variables(g)[0].value().shape(), (Shape{5 + 8, 32}));
  EXPECT_EQ(global_variables(g)[2].value().shape(), (Shape{8 + 4, 16}));
}

// Training: an LSTM learns to output the first step's value after six steps of noise (a memory
// task only a state that keeps it solves), with Adam, through the loop's gradient.
TEST(DynamicRNNTest, TrainsAnLSTMToRemember) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 6, 1}, "x");
  Output y = ops::placeholder(g, DType::Float32, Shape{-1, 1}, "y");
  nn::BasicLSTMCell cell(16);
  auto [outputs, state] = nn::dynamic_rnn(cell, x);
  Output pred = layers::dense(state[1], 1);
  Output loss = ops::reduce_mean(ops::square(ops::sub(pred, y)));
  Operation train = train::AdamOptimizer(0.02f).minimize(loss);
  // A fixed batch of 32 sequences: first step +-1, then noise in [-0.3, 0.3].
  std::vector<float> xs, ys;
  for (int b = 0; b < 32; ++b) {
    const float first = (b * 7 % 5) < 2 ? 1.0f : -1.0f;
    ys.push_back(first);
    xs.push_back(first);
    for (int t = 1; t < 6; ++t) xs.push_back(0.3f * std::sin(static_cast<float>(b * 13 + t * 5)));
  }
  const FeedMap feeds = {{x, Tensor::from_vector<float>(xs, Shape{32, 6, 1})},
                         {y, Tensor::from_vector<float>(ys, Shape{32, 1})}};
  Session s(g);
  s.run(global_variables_initializer(g));
  const float before = s.run(loss, feeds).scalar<float>();
  for (int k = 0; k < 300; ++k) s.run(train, feeds);
  const float after = s.run(loss, feeds).scalar<float>();
  EXPECT_GT(before, 0.3f);
  EXPECT_LT(after, 0.01f) << "loss " << before << " -> " << after;
}

TEST(DynamicRNNTest, Errors) {
  Graph g;
  nn::BasicLSTMCell cell(4);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { nn::dynamic_rnn(cell, ops::placeholder(g, DType::Float32, Shape{2, 3})); }),
              HasSubstr("must be [batch, time, depth] with a known depth"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { nn::dynamic_rnn(cell, ops::placeholder(g, DType::Float32, Shape{2, 3, -1})); }),
              HasSubstr("known depth"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { nn::dynamic_rnn(cell, ops::placeholder(g, DType::Int32, Shape{2, 3, 1})); }),
              HasSubstr("not a floating point tensor"));
  Output x = ops::placeholder(g, DType::Float32, Shape{2, 3, 1}, "x");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                nn::dynamic_rnn(cell, x, {.initial_state = {ops::placeholder(g, DType::Float32, Shape{2, 4})}});
              }),
              HasSubstr("initial_state has 1 tensors, the cell's state 2"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { nn::BasicLSTMCell(0); }), HasSubstr("num_units must be positive"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { nn::MultiRNNCell({}); }), HasSubstr("no cells"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                nn::dynamic_rnn(cell, x, {.sequence_length = ops::placeholder(g, DType::Float32, Shape{2})});
              }),
              HasSubstr("not int32 or int64"));
}

}  // namespace
}  // namespace tessera
