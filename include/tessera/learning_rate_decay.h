// Learning-rate schedules, as TensorFlow 1's tf.train learning_rate_decay functions: each returns
// a float32 scalar computed from the global step every run, which the optimizers take as their
// learning rate.
//
//   Variable step = train::get_or_create_global_step(g);
//   Output lr = train::exponential_decay(0.1f, step, /*decay_steps=*/1000, /*decay_rate=*/0.96f,
//                                        /*staircase=*/true);
//   Operation train_op = train::GradientDescentOptimizer(lr).minimize(loss, step);
//
// global_step is an integer or floating point scalar (a Variable stands for its value); it is cast
// to float32. A null global_step, decay_steps <= 0, or boundaries and values that do not match are
// InvalidArgumentErrors naming the function. On a cluster the schedule runs where its ops are
// placed, reading the global step from its ps task like any other variable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph.h"

namespace tessera::train {

// learning_rate * decay_rate ^ (global_step / decay_steps); with staircase the exponent is
// rounded down, so the rate changes every decay_steps steps.
Output exponential_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate,
                         bool staircase = false, std::string name = "");

// values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <= boundaries[i],
// values.back() after boundaries.back(). boundaries increase strictly and are one fewer than
// values. x (an integer or floating point scalar) is compared as float64: exactly, for a step.
Output piecewise_constant(Output x, std::vector<double> boundaries, std::vector<float> values, std::string name = "");

// (learning_rate - end_learning_rate) * (1 - step / decay_steps) ^ power + end_learning_rate, with
// step = min(global_step, decay_steps); with cycle, decay_steps grows to the first multiple of
// itself at or above global_step instead, so the rate restarts.
Output polynomial_decay(float learning_rate, Output global_step, int64_t decay_steps, float end_learning_rate = 0.0001f,
                        float power = 1.0f, bool cycle = false, std::string name = "");

// learning_rate * exp(-decay_rate * global_step / decay_steps) (the exponent's step count rounded
// down with staircase).
Output natural_exp_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate,
                         bool staircase = false, std::string name = "");

// learning_rate / (1 + decay_rate * global_step / decay_steps) (rounded down with staircase).
Output inverse_time_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate,
                          bool staircase = false, std::string name = "");

// learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * min(global_step, decay_steps) / decay_steps)) + alpha).
Output cosine_decay(float learning_rate, Output global_step, int64_t decay_steps, float alpha = 0.0f,
                    std::string name = "");

}  // namespace tessera::train
