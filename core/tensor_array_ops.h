// What while loops need to know of tensor arrays (Note [Tensor arrays] in core/tensor_array_ops.cc).
#pragma once

#include "core/node.h"

namespace tessera::internal {

// Whether loop variable `arg` (a _LoopArg of `frame`) is only written to by the loop's body: its
// readers are writes (TensorArrayScatter's array input) or none (the body returns it as it is).
// Its value at the start of an iteration is then never read again, not even by the gradient,
// which needs no history of it, and the body's step may take over its buffer.
bool write_only_loop_variable(const WhileFrame& frame, const Node* arg);

}  // namespace tessera::internal
