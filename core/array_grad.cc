// Gradient functions of the shape and selection ops (core/shape_ops.cc, core/select_ops.cc), as
// TensorFlow's array_grad.py defines them. GatherV2's is beside its gradient kernel
// (core/nn_ops.cc). Where TensorFlow reads a shape when the op runs, these need it when the graph
// is built (tessera's slice, pad and tile take their arguments as attrs); a shape that is not
// known then is an InvalidArgumentError naming the op.
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/shape_ops.h"

namespace tessera::internal {
namespace {

using Grads = std::vector<Output>;
using Dims = std::vector<int64_t>;

[[noreturn]] void needs_known(const GradContext& c, const Output& x, const char* why) {
  throw InvalidArgumentError(fmt::format("gradients: the gradient of {} needs {} known when the graph is built, got {}",
                                         c.node().debug_name(), why, x.shape().to_string()));
}

// The input's dims, each known when the graph is built.
Dims known_dims(const GradContext& c, const Output& x, const char* why) {
  const Shape s = x.shape();
  if (!s.fully_defined()) needs_known(c, x, why);
  Dims dims;
  for (int i = 0; i < s.rank(); ++i) dims.push_back(s.dim(i));
  return dims;
}

// The op's "axis" attr counted from the front of rank-`rank` inputs.
int64_t front_axis(const GradContext& c, int rank) {
  const int64_t axis = c.node().attr<int64_t>("axis");
  return axis < 0 ? axis + rank : axis;
}

// The rank of x, known when the graph is built.
int known_rank(const GradContext& c, const Output& x) {
  const Shape s = x.shape();
  if (s.unknown_rank()) {
    throw InvalidArgumentError(fmt::format("gradients: the gradient of {} needs its input's rank known when the graph is built",
                                           c.node().debug_name()));
  }
  return s.rank();
}

Grads reshape_back(const GradContext& c) { return {reshape_to_shape_of(c.grad(0), c.input(0))}; }
TESSERA_REGISTER_GRADIENT("Reshape", reshape_back);
TESSERA_REGISTER_GRADIENT("ExpandDims", reshape_back);
TESSERA_REGISTER_GRADIENT("Squeeze", reshape_back);

TESSERA_REGISTER_GRADIENT("Transpose", [](const GradContext& c) -> Grads {
  const auto& perm = c.node().attr<std::vector<int64_t>>("perm");
  if (perm.empty()) return {ops::transpose(c.grad(0))};  // reversing is its own inverse
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return {ops::transpose(c.grad(0), inverse)};
});

// Each input's gradient is its slice of the output's.
TESSERA_REGISTER_GRADIENT("ConcatV2", [](const GradContext& c) -> Grads {
  const int rank = known_rank(c, c.input(0));
  const int64_t axis = front_axis(c, rank);
  Grads out;
  int64_t offset = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Shape s = c.input(i).shape();
    const int64_t n = s.unknown_rank() ? -1 : s.dim(static_cast<int>(axis));
    if (n < 0) needs_known(c, c.input(i), "each input's size along the axis");
    Dims begin(static_cast<std::size_t>(rank), 0);
    Dims size(static_cast<std::size_t>(rank), -1);
    begin[static_cast<std::size_t>(axis)] = offset;
    size[static_cast<std::size_t>(axis)] = n;
    out.push_back(ops::slice(c.grad(0), begin, size));
    offset += n;
  }
  return out;
});

TESSERA_REGISTER_GRADIENT("Split", [](const GradContext& c) -> Grads {
  const int64_t axis = front_axis(c, known_rank(c, c.input(0)));
  Grads pieces;
  for (int i = 0; i < c.num_outputs(); ++i) pieces.push_back(c.grad(i));
  return {ops::concat(pieces, static_cast<int>(axis))};
});

// Zeros around the gradient, where the slice left the input out.
TESSERA_REGISTER_GRADIENT("Slice", [](const GradContext& c) -> Grads {
  const Dims& begin = c.node().attr<Dims>("begin");
  const Dims& size = c.node().attr<Dims>("size");
  const Shape in = c.input(0).shape();
  std::vector<std::pair<int64_t, int64_t>> paddings;
  for (std::size_t i = 0; i < begin.size(); ++i) {
    int64_t after = 0;
    if (size[i] >= 0) {
      const int64_t dim = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
      if (dim < 0) needs_known(c, c.input(0), "its input's shape");
      after = dim - begin[i] - size[i];
    }
    paddings.emplace_back(begin[i], after);
  }
  return {ops::pad(c.grad(0), paddings)};
});

// The input's part of the padded gradient.
TESSERA_REGISTER_GRADIENT("Pad", [](const GradContext& c) -> Grads {
  const Dims& flat = c.node().attr<Dims>("paddings");  // before_0, after_0, before_1, ...
  const Shape in = c.input(0).shape();
  Dims begin;
  Dims size;
  for (std::size_t i = 0; i < flat.size() / 2; ++i) {
    const int64_t dim = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
    if (dim < 0 && flat[2 * i + 1] != 0) needs_known(c, c.input(0), "its input's shape");
    begin.push_back(flat[2 * i]);
    size.push_back(dim);  // -1: to the end, where nothing was padded after
  }
  return {ops::slice(c.grad(0), begin, size)};
});

// Each input element's copies summed: the gradient seen as [m0, d0, m1, d1, ...], summed over the
// multiples.
TESSERA_REGISTER_GRADIENT("Tile", [](const GradContext& c) -> Grads {
  const Dims dims = known_dims(c, c.input(0), "its input's shape");
  const Dims& multiples = c.node().attr<Dims>("multiples");
  Dims split;
  std::vector<int> axes;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    axes.push_back(static_cast<int>(split.size()));
    split.push_back(multiples[i]);
    split.push_back(dims[i]);
  }
  return {ops::reduce_sum(ops::reshape(c.grad(0), split), axes)};
});

// where(cond, x, y): the gradient goes to x where cond holds, to y elsewhere.
TESSERA_REGISTER_GRADIENT("SelectV2", [](const GradContext& c) -> Grads {
  const Output cond = c.input(0);
  const Output g = c.grad(0);
  const Output zeros = ops::zeros_like(g);
  return {Output(), reduce_to_shape_of(ops::where(cond, g, zeros), c.input(1)),
          reduce_to_shape_of(ops::where(cond, zeros, g), c.input(2))};
});

TESSERA_NOT_DIFFERENTIABLE("Fill");
TESSERA_NOT_DIFFERENTIABLE("ZerosLike");
TESSERA_NOT_DIFFERENTIABLE("OnesLike");
TESSERA_NOT_DIFFERENTIABLE("Shape");
TESSERA_NOT_DIFFERENTIABLE("Size");
TESSERA_NOT_DIFFERENTIABLE("Equal");
TESSERA_NOT_DIFFERENTIABLE("NotEqual");
TESSERA_NOT_DIFFERENTIABLE("Less");
TESSERA_NOT_DIFFERENTIABLE("LessEqual");
TESSERA_NOT_DIFFERENTIABLE("Greater");
TESSERA_NOT_DIFFERENTIABLE("GreaterEqual");
TESSERA_NOT_DIFFERENTIABLE("LogicalAnd");
TESSERA_NOT_DIFFERENTIABLE("LogicalOr");
TESSERA_NOT_DIFFERENTIABLE("LogicalNot");
TESSERA_NOT_DIFFERENTIABLE("ArgMax");
TESSERA_NOT_DIFFERENTIABLE("ArgMin");
TESSERA_NOT_DIFFERENTIABLE("OneHot");

}  // namespace
}  // namespace tessera::internal
