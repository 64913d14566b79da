// Linear regression by stochastic gradient descent, the TensorFlow 1 way: an input pipeline of
// queue runner threads, and several training threads updating shared variables at once.
#include <iomanip>
#include <thread>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

int linear_regression(std::ostream& out, int steps_per_thread, bool log_placement) {
  constexpr int kBatch = 64;
  constexpr int kTrainers = 4;
  Graph g;

  // Input pipeline: batches of (x, y) with y = 3x + 2 + noise, made by two runner threads.
  FIFOQueue batches(g, /*capacity=*/16, {DType::Float32, DType::Float32}, {Shape{kBatch}, Shape{kBatch}},
                    "", "batches");
  {
    auto x = ops::random_uniform(g, {kBatch}, DType::Float32, /*seed=*/1);
    auto noise = ops::random_normal(g, {kBatch}, DType::Float32, /*seed=*/2, 0.0f, 0.1f);
    auto y = ops::add(ops::add(ops::mul(x, ops::constant(g, 3.0f)), ops::constant(g, 2.0f)), noise);
    auto enqueue = batches.enqueue({x, y});
    train::add_queue_runner(g, train::QueueRunner(batches, {enqueue, enqueue}));
  }

  // Model and hand-written gradients of the mean squared error.
  Variable w(g, Tensor::scalar(0.0f), "w");
  Variable b(g, Tensor::scalar(0.0f), "b");
  auto batch = batches.dequeue();
  auto err = ops::sub(ops::add(ops::mul(batch[0], w.value()), b.value()), batch[1]);
  auto loss = ops::reduce_mean(ops::square(err), {}, false, "loss");
  // 0.2: the slow direction of this least-squares problem (x uniform in [0, 1)) shrinks by 2.6% a
  // step, so the 160 updates of `tessera demo --steps 40` leave w and b within 0.1 of the truth
  // even when racing trainers lose some (use_locking is off, as in TF1). At 0.1 that margin was
  // gone: 1 run in 6 on a loaded machine ended at w = 2.66.
  auto lr = ops::constant(g, 0.2f, "learning_rate");
  auto grad_w = ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(ops::mul(err, batch[0])));
  auto grad_b = ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(err));
  auto train_op = ops::group({w.assign_sub(ops::mul(lr, grad_w)).op(),
                              b.assign_sub(ops::mul(lr, grad_b)).op()}, "train");

  Session session(g);
  session.run(global_variables_initializer(g));
  train::Coordinator coord;
  auto threads = train::start_queue_runners(session, coord);

  // The loss before any update (on one batch): the trainers start at once, and thread 0's first
  // step may come after the others' updates.
  const float first_loss = session.run(loss).scalar<float>();
  float last_loss = 0.0f;
  std::mutex mu;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      coord.stop_on_exception([&] {
        for (int step = 0; step < steps_per_thread && !coord.should_stop(); ++step) {
          auto r = session.run({loss}, {}, {train_op});
          std::lock_guard<std::mutex> l(mu);
          if (t == 0 && step % (steps_per_thread / 6 + 1) == 0) {
            out << "step " << std::setw(4) << step << "  loss " << std::fixed << std::setprecision(5)
                << r[0].scalar<float>() << "\n";
          }
          if (t == 0) last_loss = r[0].scalar<float>();
        }
      });
    });
  }
  // Wait for the trainers (the last threads), then stop the input pipeline.
  for (int t = 0; t < kTrainers; ++t) {
    threads.back().join();
    threads.pop_back();
  }
  coord.request_stop();
  coord.join(threads);
  auto wb = session.run({w.value(), b.value()});
  const float fw = wb[0].scalar<float>(), fb = wb[1].scalar<float>();
  out << "linear_regression: " << kTrainers << " threads x " << steps_per_thread << " steps: w = "
      << fw << " (true 3), b = " << fb << " (true 2), loss " << first_loss << " -> " << last_loss << "\n";
  report_placement(out, g, log_placement);
  const bool ok = last_loss < first_loss && std::abs(fw - 3.0f) < 0.2f && std::abs(fb - 2.0f) < 0.2f;
  return ok ? 0 : 1;
}

}  // namespace tessera::examples
