// Handwritten digits (scikit-learn's 8x8 digits, examples/data) classified the TensorFlow 1 way:
// the CSV read by a file pipeline (string_input_producer -> TextLineReader -> decode_csv ->
// batch), an 80/20 split, training batches from slice_input_producer -> shuffle_batch filled by
// queue runner threads, a model built from ops, its gradients by tessera::gradients and Adam
// updating the variables, accuracy on the held-out fifth; optionally an ExponentialMovingAverage of
// the weights, updated after each step, whose accuracy is measured too.
#include <chrono>
#include <fstream>
#include <iomanip>
#include <optional>
#include <string>
#include <vector>

#include "examples/digits_data.h"
#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

DigitsResult digits(std::ostream& out, const DigitsOptions& opt) {
  const DigitsSplit data = split_digits(read_digits(opt.data));
  const auto n_train = static_cast<int64_t>(data.train.y.size());
  const auto n_test = static_cast<int64_t>(data.test.y.size());
  out << "digits: " << n_train + n_test << " images read through string_input_producer -> TextLineReader -> "
      << "decode_csv; " << n_train << " to train, " << n_test << " to test\n";

  Graph g;
  std::vector<Output> batch;
  {
    // Training input: one example per run from the training tensors, batched by shuffle_batch. On
    // the host whatever --device says, as TF1 scripts pin their input pipelines to /cpu:0: its
    // queues live in host memory, and on an accelerator each example's gather would be a step of
    // its own with a copy back (on an H200, 3000 steps of the MLP took 55 s that way, 3-4 s this way).
    auto input_scope = g.device("/cpu:0");
    auto train_x = ops::constant(g, Tensor::from_vector<float>(data.train.x, Shape{n_train, kDigitsPixels}));
    auto train_y = ops::constant(g, Tensor::vector<int32_t>(data.train.y));
    auto example = train::slice_input_producer({train_x, train_y}, /*num_epochs=*/0, /*shuffle=*/true, /*seed=*/7);
    batch = train::shuffle_batch(example, opt.batch_size, /*capacity=*/1024, /*min_after_dequeue=*/256,
                                 /*num_threads=*/2, /*seed=*/8);
  }
  auto scope = g.device(opt.device);
  DigitsModel model = digits_model(g, opt.model);
  Output loss = digits_loss(g, opt.model, batch[1], model(batch[0]));
  // The held-out fifth, through the same weights.
  auto test_x = ops::constant(g, Tensor::from_vector<float>(data.test.x, Shape{n_test, kDigitsPixels}));
  auto test_y = ops::constant(g, Tensor::vector<int32_t>(data.test.y));
  auto correct = ops::equal(ops::cast(ops::argmax(model(test_x), 1), DType::Int32), test_y);
  auto accuracy = ops::reduce_mean(ops::cast(correct, DType::Float32), {}, false, "accuracy");
  Variable step = train::get_or_create_global_step(g);
  Operation train_op;
  {
    // TF1's UPDATE_OPS idiom: the step runs after batch normalization's moving averages (none for
    // the models of plain ops).
    GraphScope after = g.control_dependencies(layers::update_ops(g));
    train_op = train::AdamOptimizer(opt.learning_rate).minimize(loss, step);
  }
  // The moving averages of the weights, as a TF1 script keeps them: updated after the training step
  // (its control dependency), the averages reading the weights that step wrote.
  std::optional<train::ExponentialMovingAverage> ema;
  if (opt.moving_average_decay > 0) {
    ema.emplace(opt.moving_average_decay, step.value());
    GraphScope after = g.control_dependencies({train_op});
    train_op = ema->apply(g);
  }
  // TensorBoard, as a TF1 script writes it: summary ops, merge_all, a FileWriter.
  Output merged;
  std::optional<summary::FileWriter> writer;
  if (!opt.logdir.empty()) {
    summary::scalar("train/loss", loss);
    summary::scalar("test/accuracy", accuracy);
    const Variable first_weights = global_variables(g).front();  // the first layer's
    summary::histogram("weights/" + first_weights.name(), first_weights.value());
    merged = summary::merge_all(g);
    writer.emplace(opt.logdir);
    writer->add_graph(g);
  }

  Session s(g);
  s.run(global_variables_initializer(g));
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  DigitsResult r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.steps; ++i) {
    const bool summarize = writer && (i % opt.summary_every == 0 || i + 1 == opt.steps);
    const bool trace = !opt.trace_file.empty() && i + 1 == opt.steps;
    RunOptions run_options;
    run_options.trace = trace;
    RunMetadata metadata;
    std::vector<Output> fetches{loss};
    if (summarize) fetches.push_back(merged);
    auto l = s.run(fetches, {}, {train_op}, run_options, &metadata);
    if (trace) {
      std::ofstream(opt.trace_file) << metadata.trace_json;
      out << "trace of the last step written to " << opt.trace_file << "\n";
    }
    if (summarize) writer->add_summary(l[1], i);
    const float value = l[0].scalar<float>();
    if (i == 0) r.first_loss = value;
    r.last_loss = value;
    if (opt.log_every > 0 && (i % opt.log_every == 0 || i + 1 == opt.steps)) {
      out << "  step " << std::setw(5) << i << "  loss " << std::fixed << std::setprecision(4) << value << "\n";
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  coord.request_stop();
  coord.join(threads);
  r.test_accuracy = s.run(accuracy).scalar<float>();
  r.steps = s.run(step.value()).scalar<int64_t>();
  out << "digits " << opt.model << ": " << r.steps << " Adam steps of " << opt.batch_size << " in " << std::setprecision(1)
      << r.seconds << " s, loss " << std::setprecision(3) << r.first_loss << " -> " << r.last_loss
      << ", test accuracy " << std::setprecision(2) << 100.0 * r.test_accuracy << "%\n";
  if (ema) {
    // Evaluate with the averages: copy each shadow into its weight (what restoring a checkpoint
    // through Saver(g, ema->variables_to_restore(g)) does in an evaluation job).
    std::vector<Operation> copies;
    for (const Variable& w : trainable_variables(g)) copies.push_back(w.assign(ema->average(w)->value()).op());
    s.run({}, {}, {ops::group(copies)});
    r.average_accuracy = s.run(accuracy).scalar<float>();
    out << "  with the moving averages of the weights (decay " << std::setprecision(4) << opt.moving_average_decay
        << "): test accuracy " << std::setprecision(2) << 100.0 * r.average_accuracy << "%\n";
  }
  if (writer) {
    writer->close();
    out << "summaries for TensorBoard: " << opt.logdir << " (tensorboard --logdir " << opt.logdir << ")\n";
  }
  report_placement(out, g, opt.log_placement);
  return r;
}

}  // namespace tessera::examples
