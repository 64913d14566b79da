// tf.nn.dynamic_rnn and the cells of tf.nn.rnn_cell (tessera/rnn.h), as TF 1.15's rnn.py and
// rnn_cell_impl.py build them: a while loop over the time steps, reading each step's inputs from a
// TensorArray the inputs were unstacked into and writing each step's output into another (which
// the loop only writes, so it keeps no history under a gradient: Note [Tensor arrays] in
// core/tensor_array_ops.cc).
#include "tessera/rnn.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/op_functions.h"
#include "host/variable_store.h"
#include "tessera/control_flow.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/tensor_array.h"
#include "tessera/variable.h"
#include "tessera/variable_scope.h"

namespace tessera::nn {
namespace {

using internal::graph_of;

void expect_units(int64_t num_units, const char* cell) {
  if (num_units <= 0) throw InvalidArgumentError(fmt::format("{}: num_units must be positive, not {}", cell, num_units));
}

// The depth of a step's inputs [batch, depth] (known, floating point), or InvalidArgumentError.
int64_t input_depth(const Output& inputs, const char* cell) {
  internal::expect_not_null(inputs, cell, "inputs");
  internal::expect_floating(inputs, cell);
  const Shape s = inputs.shape();
  if (s.unknown_rank() || s.rank() != 2 || s.dim(1) < 0) {
    throw InvalidArgumentError(fmt::format("{}: inputs {} must be [batch, depth] with a known depth, not {}", cell,
                                           inputs.name(), s.to_string()));
  }
  return s.dim(1);
}

// [x, h] kernel + bias.
Output linear(const Output& x, const Output& h, const Variable& kernel, const Variable& bias) {
  return ops::bias_add(ops::matmul(ops::concat({x, h}, 1), kernel.value()), bias.value());
}

layers::Activation or_tanh(layers::Activation a) {
  return a ? a : layers::Activation([](Output x) { return ops::tanh(x); });
}

// What the cells share: their name, units, and making their variables once, in a scope made
// unique where they are first called.
class CellBase : public RNNCell::Impl {
 public:
  CellBase(int64_t units, std::string name) : units_(units), name_(std::move(name)) {}

 protected:
  // Opens the cell's variable scope the first time (true: make the variables now).
  bool build(Graph& g, std::optional<GraphScope>* scope) {
    if (built_) return false;
    built_ = true;
    scope->emplace(variable_scope(g, internal::unique_variable_scope(g, name_)));
    return true;
  }
  int64_t units_;
  std::string name_;
  bool built_ = false;
};

class BasicRNNImpl final : public CellBase {
 public:
  BasicRNNImpl(int64_t units, layers::Activation a, std::string name)
      : CellBase(units, std::move(name)), activation_(or_tanh(std::move(a))) {}
  int64_t output_size() const override { return units_; }
  std::vector<int64_t> state_size() const override { return {units_}; }
  std::pair<Output, std::vector<Output>> call(Output x, const std::vector<Output>& state) override {
    const int64_t depth = input_depth(x, "BasicRNNCell");
    Graph& g = graph_of(x);
    std::optional<GraphScope> scope;
    if (build(g, &scope)) {
      kernel_ = get_variable(g, "kernel", Shape{depth + units_, units_}, x.dtype());
      bias_ = get_variable(g, "bias", Shape{units_}, x.dtype(), initializers::zeros());
    }
    Output h = activation_(linear(x, state[0], kernel_, bias_));
    return {h, {h}};
  }

 private:
  layers::Activation activation_;
  Variable kernel_, bias_;
};

class BasicLSTMImpl final : public CellBase {
 public:
  BasicLSTMImpl(int64_t units, float forget_bias, layers::Activation a, std::string name)
      : CellBase(units, std::move(name)), forget_bias_(forget_bias), activation_(or_tanh(std::move(a))) {}
  int64_t output_size() const override { return units_; }
  std::vector<int64_t> state_size() const override { return {units_, units_}; }
  std::pair<Output, std::vector<Output>> call(Output x, const std::vector<Output>& state) override {
    const int64_t depth = input_depth(x, "BasicLSTMCell");
    Graph& g = graph_of(x);
    std::optional<GraphScope> scope;
    if (build(g, &scope)) {
      kernel_ = get_variable(g, "kernel", Shape{depth + units_, 4 * units_}, x.dtype());
      bias_ = get_variable(g, "bias", Shape{4 * units_}, x.dtype(), initializers::zeros());
    }
    const Output& c = state[0];
    const Output& h = state[1];
    std::vector<Output> gates = ops::split(linear(x, h, kernel_, bias_), 4, 1);  // i, j, f, o
    Output forget = ops::add(gates[2], ops::cast(ops::constant(g, forget_bias_), x.dtype()));
    Output new_c = ops::add(ops::mul(c, ops::sigmoid(forget)), ops::mul(ops::sigmoid(gates[0]), activation_(gates[1])));
    Output new_h = ops::mul(activation_(new_c), ops::sigmoid(gates[3]));
    return {new_h, {new_c, new_h}};
  }

 private:
  float forget_bias_;
  layers::Activation activation_;
  Variable kernel_, bias_;
};

class GRUImpl final : public CellBase {
 public:
  GRUImpl(int64_t units, layers::Activation a, std::string name)
      : CellBase(units, std::move(name)), activation_(or_tanh(std::move(a))) {}
  int64_t output_size() const override { return units_; }
  std::vector<int64_t> state_size() const override { return {units_}; }
  std::pair<Output, std::vector<Output>> call(Output x, const std::vector<Output>& state) override {
    const int64_t depth = input_depth(x, "GRUCell");
    Graph& g = graph_of(x);
    std::optional<GraphScope> scope;
    if (build(g, &scope)) {
      {
        GraphScope gates = variable_scope(g, "gates");
        gates_kernel_ = get_variable(g, "kernel", Shape{depth + units_, 2 * units_}, x.dtype());
        gates_bias_ = get_variable(g, "bias", Shape{2 * units_}, x.dtype(), initializers::ones());
      }
      GraphScope candidate = variable_scope(g, "candidate");
      candidate_kernel_ = get_variable(g, "kernel", Shape{depth + units_, units_}, x.dtype());
      candidate_bias_ = get_variable(g, "bias", Shape{units_}, x.dtype(), initializers::zeros());
    }
    const Output& h = state[0];
    std::vector<Output> ru = ops::split(ops::sigmoid(linear(x, h, gates_kernel_, gates_bias_)), 2, 1);
    Output c = activation_(linear(x, ops::mul(ru[0], h), candidate_kernel_, candidate_bias_));
    const Output& u = ru[1];
    Output new_h = ops::add(ops::mul(u, h), ops::mul(ops::sub(ops::ones_like(u), u), c));
    return {new_h, {new_h}};
  }

 private:
  layers::Activation activation_;
  Variable gates_kernel_, gates_bias_, candidate_kernel_, candidate_bias_;
};

class MultiImpl final : public RNNCell::Impl {
 public:
  explicit MultiImpl(std::vector<RNNCell> cells) : cells_(std::move(cells)) {
    if (cells_.empty()) throw InvalidArgumentError("MultiRNNCell: no cells");
  }
  int64_t output_size() const override { return cells_.back().output_size(); }
  std::vector<int64_t> state_size() const override {
    std::vector<int64_t> sizes;
    for (const RNNCell& c : cells_) {
      for (int64_t s : c.state_size()) sizes.push_back(s);
    }
    return sizes;
  }
  std::pair<Output, std::vector<Output>> call(Output x, const std::vector<Output>& state) override {
    Graph& g = graph_of(x);
    std::optional<GraphScope> scope;
    const bool first = !built_;
    if (first) {
      built_ = true;
      scope.emplace(variable_scope(g, internal::unique_variable_scope(g, "multi_rnn_cell")));
    }
    std::vector<Output> next;
    std::size_t at = 0;
    for (std::size_t i = 0; i < cells_.size(); ++i) {
      const std::size_t n = cells_[i].state_size().size();
      std::vector<Output> own(state.begin() + static_cast<std::ptrdiff_t>(at),
                              state.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      std::optional<GraphScope> cell_scope;
      if (first) cell_scope.emplace(variable_scope(g, fmt::format("cell_{}", i)));
      auto [out, s] = cells_[i](x, own);
      x = out;
      next.insert(next.end(), s.begin(), s.end());
    }
    return {x, next};
  }

 private:
  std::vector<RNNCell> cells_;
  bool built_ = false;
};

}  // namespace

RNNCell::RNNCell(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {
  if (impl_ == nullptr) throw InvalidArgumentError("RNNCell: null implementation");
}

int64_t RNNCell::output_size() const { return impl_->output_size(); }
std::vector<int64_t> RNNCell::state_size() const { return impl_->state_size(); }

std::vector<Output> RNNCell::zero_state(Graph& g, int64_t batch_size, DType dtype) const {
  if (batch_size < 0) throw InvalidArgumentError(fmt::format("zero_state: batch_size {} is negative", batch_size));
  std::vector<Output> zeros;
  for (int64_t s : state_size()) {
    zeros.push_back(ops::fill(g, Shape{batch_size, s}, Tensor::zeros(dtype, Shape{})));
  }
  return zeros;
}

std::pair<Output, std::vector<Output>> RNNCell::operator()(Output inputs, const std::vector<Output>& state) const {
  const std::size_t want = impl_->state_size().size();
  if (state.size() != want) {
    throw InvalidArgumentError(fmt::format("RNNCell: a state of {} tensors for a cell whose state has {}",
                                           state.size(), want));
  }
  for (std::size_t k = 0; k < state.size(); ++k) {
    if (state[k].is_null()) throw InvalidArgumentError(fmt::format("RNNCell: state[{}] is null", k));
  }
  return impl_->call(std::move(inputs), state);
}

BasicRNNCell::BasicRNNCell(int64_t num_units, layers::Activation activation, std::string name)
    : RNNCell((expect_units(num_units, "BasicRNNCell"),
               std::make_shared<BasicRNNImpl>(num_units, std::move(activation),
                                              name.empty() ? "basic_rnn_cell" : std::move(name)))) {}

BasicLSTMCell::BasicLSTMCell(int64_t num_units, float forget_bias, layers::Activation activation, std::string name)
    : RNNCell((expect_units(num_units, "BasicLSTMCell"),
               std::make_shared<BasicLSTMImpl>(num_units, forget_bias, std::move(activation),
                                               name.empty() ? "basic_lstm_cell" : std::move(name)))) {}

GRUCell::GRUCell(int64_t num_units, layers::Activation activation, std::string name)
    : RNNCell((expect_units(num_units, "GRUCell"),
               std::make_shared<GRUImpl>(num_units, std::move(activation), name.empty() ? "gru_cell" : std::move(name)))) {}

MultiRNNCell::MultiRNNCell(std::vector<RNNCell> cells) : RNNCell(std::make_shared<MultiImpl>(std::move(cells))) {}

std::pair<Output, std::vector<Output>> dynamic_rnn(const RNNCell& cell, Output inputs, const DynamicRNNOptions& o) {
  internal::expect_not_null(inputs, "dynamic_rnn", "inputs");
  internal::expect_floating(inputs, "dynamic_rnn");
  const Shape s = inputs.shape();
  if (s.unknown_rank() || s.rank() != 3 || s.dim(2) < 0) {
    throw InvalidArgumentError(fmt::format(
        "dynamic_rnn: inputs {} must be [{}, depth] with a known depth, not {}", inputs.name(),
        o.time_major ? "time, batch" : "batch, time", s.to_string()));
  }
  Graph& g = graph_of(inputs);
  GraphScope scope = variable_scope(g, o.scope.empty() ? std::string("rnn") : o.scope);
  // [time, batch, depth].
  Output steps = o.time_major ? inputs : ops::transpose(inputs, {1, 0, 2});
  const Shape ts = steps.shape();
  Output n = ts.dim(0) >= 0 ? ops::constant(g, static_cast<int32_t>(ts.dim(0)))
                            : ops::gather(ops::shape(steps), ops::constant(g, 0));
  // Zeros of [batch, size] (the batch only known when run): a column of zeros, [batch, 1], from
  // the inputs (even of no time steps), broadcast against a row of zeros.
  std::vector<Output> state = o.initial_state;
  const std::vector<int64_t> sizes = cell.state_size();
  if (state.empty()) {
    Output column = ops::expand_dims(
        ops::reduce_sum(ops::zeros_like(ops::slice(steps, {0, 0, 0}, {-1, -1, 1})), {0, 2}), 1);
    for (int64_t size : sizes) {
      state.push_back(ops::add(column, ops::fill(g, Shape{size}, Tensor::zeros(inputs.dtype(), Shape{}))));
    }
  }
  if (state.size() != sizes.size()) {
    throw InvalidArgumentError(fmt::format("dynamic_rnn: initial_state has {} tensors, the cell's state {}",
                                           state.size(), sizes.size()));
  }
  Output lengths = o.sequence_length;
  if (!lengths.is_null()) {
    if (lengths.dtype() != DType::Int32 && lengths.dtype() != DType::Int64) {
      throw InvalidArgumentError(fmt::format("dynamic_rnn: sequence_length {} is {}, not int32 or int64",
                                             lengths.name(), dtype_name(lengths.dtype())));
    }
    lengths = ops::cast(lengths, DType::Int32);
  }
  const TensorArray in = TensorArray(g, inputs.dtype(), n, {.name = "input_ta"}).unstack(steps);
  const TensorArray out(g, inputs.dtype(), n, {.name = "output_ta"});
  std::vector<Output> vars{ops::constant(g, 0), out.flow()};
  vars.insert(vars.end(), state.begin(), state.end());
  ops::WhileOptions options;
  options.name = "while";
  const std::size_t k = state.size();
  const std::vector<Output> r = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], n); },
      [&](const std::vector<Output>& v) {
        const Output& t = v[0];
        std::vector<Output> before(v.begin() + 2, v.end());
        auto [y, after] = cell(in.read(t), before);
        if (after.size() != k) {
          throw InvalidArgumentError(fmt::format("dynamic_rnn: the cell returned a state of {} tensors, not {}",
                                                 after.size(), k));
        }
        if (!lengths.is_null()) {
          // Sequences already over: zeros out, state as it was (TF's _rnn_step).
          Output live = ops::expand_dims(ops::less(t, lengths), 1);
          y = ops::where(live, y, ops::zeros_like(y));
          for (std::size_t j = 0; j < k; ++j) after[j] = ops::where(live, after[j], before[j]);
        }
        std::vector<Output> next{ops::add(t, ops::constant(g, 1)), out.with_flow(v[1]).write(t, y).flow()};
        next.insert(next.end(), after.begin(), after.end());
        return next;
      },
      vars, options);
  Output outputs = out.with_flow(r[1]).stack();  // [time, batch, units]
  if (!o.time_major) outputs = ops::transpose(outputs, {1, 0, 2});
  return {outputs, std::vector<Output>(r.begin() + 2, r.end())};
}

}  // namespace tessera::nn
