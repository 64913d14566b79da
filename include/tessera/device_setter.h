// Where a replica's ops go in parameter-server training (tessera::train): TensorFlow 1's
// tf.train.replica_device_setter.
//
//   train::ClusterSpec cluster({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"w0:2222", "w1:2222"}}});
//   Graph g;
//   {
//     auto scope = g.device(train::replica_device_setter(cluster, "/job:worker/task:1"));
//     Variable w(g, Tensor::zeros(DType::Float32, {784, 10}), "w");   // "/job:ps/task:0"
//     Variable b(g, Tensor::zeros(DType::Float32, {10}), "b");        // "/job:ps/task:1"
//     auto y = ops::add(ops::matmul(x, w.value()), b.value());        // "/job:worker/task:1"
//     auto step = train::GradientDescentOptimizer(0.1f).minimize(loss(y));
//   }   // each update runs on its variable's ps task; the gradients on the worker
//
// The function keeps its own count (round robin) or loads (greedy_bytes): copies of it share
// them, so one setter spreads every variable it places, whichever copy placed it. Thread-safe.
#pragma once

#include <string>

#include "tessera/cluster.h"
#include "tessera/graph.h"

namespace tessera::train {

using DeviceFunction = tessera::DeviceFunction;

// A device function for Graph::device. Ops of a variable kind (VariableV2, and TensorFlow's other
// variable-like types: Variable, VarHandleOp, AutoReloadVariable, MutableHashTable*,
// MutableDenseHashTable*) go to the tasks of job "ps", in creation order: "round_robin" (task 0,
// 1, ..., again), or "greedy_bytes" (the task holding the fewest bytes so far, ties the lowest
// index; a variable's bytes are its dtype's size times its elements, so its shape must be fully
// defined). Every other op goes to `worker_device`. The request of the scopes opened inside the
// setter's scope is merged over the answer (its fields win: "/cpu:0" inside gives
// "/job:ps/task:0/device:CPU:0"), and a variable made under another job keeps that job and takes
// no ps task. Ops made under colocate_with (an optimizer's slots, a variable's initializer) follow
// what they are colocated with, and updates of a variable (Assign*, Apply*) follow it wherever the
// scopes send them (Note [Placement]). A cluster without a "ps" job sends every op to
// `worker_device` (TensorFlow returns no function there). An unknown strategy or a malformed
// `worker_device` raises InvalidArgumentError.
DeviceFunction replica_device_setter(ClusterSpec cluster, std::string worker_device = "/job:worker",
                                     std::string ps_strategy = "round_robin");

}  // namespace tessera::train
