// The _Send and _Recv ops (core/graph_partition.h makes them): the ends of an edge between two
// partitions of a step, through the step's Rendezvous (ctx.rendezvous()).
//
// An in-process partition's pair shares a slot and moves the tensor between the two devices'
// memories (make_send_kernel / make_recv_kernel). A pair between two tasks of a cluster is an
// ordinary pair of graph nodes on each task's CPU, whose registered CPU kernels go by the
// transfer's name; the task's rendezvous (distributed/) carries it to the other task.
#pragma once

#include <memory>

#include "core/device.h"
#include "core/op_kernel.h"
#include "core/rendezvous.h"

namespace tessera::internal {

std::unique_ptr<OpKernel> make_send_kernel(const Node& node, RendezvousKey key);
// `src` and `dst`: the sending and receiving devices, nullptr = the host.
std::unique_ptr<OpKernel> make_recv_kernel(const Node& node, RendezvousKey key, Device* src, Device* dst);

}  // namespace tessera::internal
