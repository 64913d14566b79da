// A recurrent network, the TensorFlow 1 way: tf.nn.dynamic_rnn of an LSTM cell over batches of
// sequences made in the graph, trained with Adam. The task is Hochreiter and Schmidhuber's adding
// problem: each step of a sequence holds a value in [0, 1) and a marker, two steps are marked, and
// the target is the sum of the two marked values, which the network must hold in its state until
// the sequence ends (a constant guess errs by a mean square of 1/6). The loop's ops run on the
// host whatever the device scope says (Note [While loops] in core/while_ops.cc).
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <utility>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

SequenceResult sequence(std::ostream& out, const SequenceOptions& o) {
  const int batch = o.batch_size, time = o.time_steps;
  Graph g;
  std::optional<GraphScope> on_device;
  if (!o.device.empty()) on_device.emplace(g.device(o.device));
  // A batch of sequences, drawn anew by every run: values, and markers at one step of each half.
  auto make_batch = [&](uint64_t seed) {
    Output values = ops::random_uniform(g, Shape{batch, time}, DType::Float32, seed);
    auto position = [&](uint64_t s, int from, int count) {
      Output u = ops::random_uniform(g, Shape{batch}, DType::Float32, s);
      Output at = ops::cast(ops::floor(ops::mul(u, ops::constant(g, static_cast<float>(count)))), DType::Int32);
      return ops::one_hot(ops::add(at, ops::constant(g, from)), time);
    };
    Output markers = ops::add(position(seed + 1, 0, time / 2), position(seed + 2, time / 2, time - time / 2));
    Output inputs = ops::concat({ops::expand_dims(values, 2), ops::expand_dims(markers, 2)}, 2);  // [batch, time, 2]
    Output target = ops::reduce_sum(ops::mul(values, markers), {1}, /*keep_dims=*/true);        // [batch, 1]
    return std::pair{inputs, target};
  };
  auto [x, y] = make_batch(o.seed);
  nn::BasicLSTMCell cell(o.units);
  auto [outputs, state] = nn::dynamic_rnn(cell, x);
  Output prediction = layers::dense(state[1], 1, {.name = "readout"});
  Output loss = ops::reduce_mean(ops::square(ops::sub(prediction, y)));
  Operation train = train::AdamOptimizer(o.learning_rate).minimize(loss);

  on_device.reset();
  Session s(g);
  s.run(global_variables_initializer(g));
  out << fmt::format("adding problem: sequences of {} steps, batches of {}, an LSTM of {} units (nn::dynamic_rnn)\n",
                     time, batch, o.units);
  SequenceResult r;
  const auto start = std::chrono::steady_clock::now();
  float recent = 0;
  for (int step = 1; step <= o.steps; ++step) {
    const float l = s.run({loss}, {}, {train})[0].scalar<float>();
    if (step == 1) r.first_loss = l;
    recent = step <= 1 ? l : 0.9f * recent + 0.1f * l;  // a running mean: each batch is drawn anew
    if (o.log_every > 0 && (step % o.log_every == 0 || step == o.steps)) {
      out << fmt::format("step {:4d}  loss {:.4f}  (mean of recent batches {:.4f})\n", step, l, recent);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.last_loss = recent;
  out << fmt::format("{} steps in {:.2f} s ({:.0f} steps/s); the constant guess's loss is 0.1667\n", o.steps,
                     r.seconds, o.steps / r.seconds);
  report_placement(out, g, o.log_placement);
  return r;
}

}  // namespace tessera::examples
