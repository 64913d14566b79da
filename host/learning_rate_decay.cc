// The learning-rate schedules of include/tessera/learning_rate_decay.h, as TensorFlow 1's
// learning_rate_decay.py builds them: float32 ops on the global step, named after the function
// ("ExponentialDecay", ...) unless a name is given.
#include "tessera/learning_rate_decay.h"

#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {
namespace {

Output f32(Graph& g, double v) { return ops::constant(g, static_cast<float>(v)); }

// global_step as a float32 scalar, checked.
Output step_as(const Output& global_step, const char* fn, DType dtype) {
  if (global_step.is_null()) throw InvalidArgumentError(fmt::format("global_step is required for {}.", fn));
  const DType from = global_step.dtype();
  if (from == DType::Bool || from == DType::String) {
    throw InvalidArgumentError(fmt::format("{}: global_step {} is {}, not a number", fn, global_step.name(), dtype_name(from)));
  }
  const Shape shape = global_step.shape();
  if (!shape.unknown_rank() && shape.rank() != 0) {
    throw InvalidArgumentError(fmt::format("{}: global_step {} must be a scalar, got shape {}", fn, global_step.name(), shape.to_string()));
  }
  return from == dtype ? global_step : ops::cast(global_step, dtype);
}

void expect_decay_steps(int64_t decay_steps, const char* fn) {
  if (decay_steps <= 0) throw InvalidArgumentError(fmt::format("{}: decay_steps must be positive, got {}", fn, decay_steps));
}

std::string or_default(std::string name, const char* fallback) { return name.empty() ? fallback : std::move(name); }

// The schedule's ops under a name scope, its result named like the scope (as TensorFlow names the
// returned tensor after the function's name scope).
template <class Build>
Output scoped(Graph& g, const std::string& name, Build build) {
  Output body;
  {
    GraphScope scope = g.name_scope(name);
    body = build();
  }
  return ops::identity(body, name);
}

// global_step / decay_steps as float32, rounded down with staircase.
Output progress(Graph& g, const Output& step, int64_t decay_steps, bool staircase) {
  const Output p = ops::div(step, f32(g, static_cast<double>(decay_steps)));
  return staircase ? ops::floor(p) : p;
}

// What every schedule of the step does first: the step checked and cast to float32, decay_steps
// checked; then body(g, step) built under the schedule's name.
template <class Body>
Output decay(const char* fn, const char* default_name, const Output& global_step, int64_t decay_steps,
             std::string name, Body body) {
  const Output step = step_as(global_step, fn, DType::Float32);
  expect_decay_steps(decay_steps, fn);
  Graph& g = step.op().graph();
  return scoped(g, or_default(std::move(name), default_name), [&] { return body(g, step); });
}

}  // namespace

Output exponential_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate, bool staircase,
                         std::string name) {
  return decay("exponential_decay", "ExponentialDecay", global_step, decay_steps, std::move(name), [&](Graph& g, const Output& step) {
    return ops::mul(f32(g, learning_rate), ops::pow(f32(g, decay_rate), progress(g, step, decay_steps, staircase)));
  });
}

Output piecewise_constant(Output x, std::vector<double> boundaries, std::vector<float> values, std::string name) {
  if (boundaries.size() + 1 != values.size()) {
    throw InvalidArgumentError(fmt::format(
        "piecewise_constant: the length of boundaries should be 1 less than the length of values ({} boundaries, {} values)",
        boundaries.size(), values.size()));
  }
  for (std::size_t i = 1; i < boundaries.size(); ++i) {
    if (!(boundaries[i - 1] < boundaries[i])) {
      throw InvalidArgumentError(fmt::format("piecewise_constant: boundaries must increase, got {} then {}", boundaries[i - 1], boundaries[i]));
    }
  }
  const Output at = step_as(x, "piecewise_constant", DType::Float64);
  Graph& g = at.op().graph();
  return scoped(g, or_default(std::move(name), "PiecewiseConstant"), [&] {
    Output result = f32(g, values[0]);
    for (std::size_t i = 0; i < boundaries.size(); ++i) {
      result = ops::where(ops::greater(at, ops::constant(g, boundaries[i])), f32(g, values[i + 1]), result);
    }
    return result;
  });
}

Output polynomial_decay(float learning_rate, Output global_step, int64_t decay_steps, float end_learning_rate, float power,
                        bool cycle, std::string name) {
  return decay("polynomial_decay", "PolynomialDecay", global_step, decay_steps, std::move(name), [&](Graph& g, Output step) {
    Output steps = f32(g, static_cast<double>(decay_steps));
    if (cycle) {
      // The first multiple of decay_steps at or above the step (decay_steps itself at step 0):
      // ceil(step / decay_steps), written as -floor(-x).
      const Output ceil = ops::neg(ops::floor(ops::neg(ops::div(step, steps))));
      const Output multiplier = ops::where(ops::equal(step, f32(g, 0)), f32(g, 1), ceil);
      steps = ops::mul(steps, multiplier);
    } else {
      step = ops::minimum(step, steps);
    }
    const Output remaining = ops::sub(f32(g, 1), ops::div(step, steps));
    return ops::add(ops::mul(f32(g, static_cast<double>(learning_rate) - end_learning_rate), ops::pow(remaining, f32(g, power))),
                    f32(g, end_learning_rate));
  });
}

Output natural_exp_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate, bool staircase,
                         std::string name) {
  return decay("natural_exp_decay", "NaturalExpDecay", global_step, decay_steps, std::move(name), [&](Graph& g, const Output& step) {
    const Output exponent = ops::mul(f32(g, -static_cast<double>(decay_rate)), progress(g, step, decay_steps, staircase));
    return ops::mul(f32(g, learning_rate), ops::exp(exponent));
  });
}

Output inverse_time_decay(float learning_rate, Output global_step, int64_t decay_steps, float decay_rate, bool staircase,
                          std::string name) {
  return decay("inverse_time_decay", "InverseTimeDecay", global_step, decay_steps, std::move(name), [&](Graph& g, const Output& step) {
    const Output denominator = ops::add(f32(g, 1), ops::mul(f32(g, decay_rate), progress(g, step, decay_steps, staircase)));
    return ops::div(f32(g, learning_rate), denominator);
  });
}

Output cosine_decay(float learning_rate, Output global_step, int64_t decay_steps, float alpha, std::string name) {
  return decay("cosine_decay", "CosineDecay", global_step, decay_steps, std::move(name), [&](Graph& g, const Output& step) {
    const Output steps = f32(g, static_cast<double>(decay_steps));
    const Output completed = ops::div(ops::minimum(step, steps), steps);
    const Output cosine = ops::mul(f32(g, 0.5), ops::add(f32(g, 1), ops::cos(ops::mul(f32(g, std::numbers::pi), completed))));
    return ops::mul(f32(g, learning_rate), ops::add(ops::mul(f32(g, 1.0 - alpha), cosine), f32(g, alpha)));
  });
}

}  // namespace tessera::train
