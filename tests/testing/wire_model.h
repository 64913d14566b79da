// The math part of the graph the wire tests round-trip (tests/wire_test.cc, which adds a queue),
// also a seed of the graph_decode fuzzer (fuzz/gen_corpus.cc): a variable, constants, random ops,
// a control dependency, device requests, colocation, name scopes. Public API only.
#pragma once

#include "tessera/tessera.h"

namespace tessera::testing {

struct WireModel {
  Output x;          // a constant [2, 2] that the callers' later ops reuse
  Output result;     // tanh(reduce_sum(...)) + 3 over the variable, constants and random ops
  Operation init;    // global_variables_initializer
};

inline WireModel build_wire_model(Graph& g) {
  WireModel m;
  Variable w(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), "w");
  m.x = ops::constant(g, Tensor::matrix<float>({0.5f, -1, 2, 0.25f}, 2, 2), "x");
  Output r;
  {
    auto dev = g.device("/job:localhost/replica:0/task:0/device:CPU:0");
    r = ops::random_uniform(g, Shape{2, 2}, DType::Float32, /*seed=*/7, "r");
  }
  Output n = ops::random_normal(g, Shape{2, 2}, DType::Float32, /*seed=*/11, 1.0f, 0.5f, "n");
  Output y;
  {
    auto ns = g.name_scope("layer");
    auto cdeps = g.control_dependencies({w.initializer()});
    y = ops::matmul(m.x, w.value(), false, true, "mm");
  }
  Output z;
  {
    auto colo = g.colocate_with(w.op());
    z = ops::add(y, ops::mul(r, ops::constant(g, 0.0f, "zero")), "z");
  }
  Output s = ops::reduce_sum(ops::add(z, ops::mul(n, ops::constant(g, 0.0f))), {1}, true, "s");
  m.result = ops::add(ops::tanh(s), ops::cast(ops::constant(g, int32_t{3}), DType::Float32), "result");
  m.init = global_variables_initializer(g);
  return m;
}

}  // namespace tessera::testing
