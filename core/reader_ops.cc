// Reader ops: definitions and shape functions ("TextLineReaderV2", "ReaderReadV2") and the public
// train::TextLineReader.
//
// As with queues, the "TextLineReaderV2" node only describes the reader (attr skip_header_lines);
// the reader itself (its open file, its position) is a per-session resource
// (kernels/reader_ops.cc) found by the reader node's name. A "ReaderReadV2" node names the
// filename queue as its NodeSpec::resource (so it runs in host memory beside it, and its kernel
// dequeues file names from it) and the reader node in its attrs ("reader", and
// "skip_header_lines" copied from it, so that the kernel needs no other node).
#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "core/queue_ops.h"
#include "tessera/input.h"

namespace tessera {
namespace internal {
namespace {

Status reader_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  const int64_t skip = c.attr<int64_t>("skip_header_lines");
  if (skip < 0) return c.invalid("skip_header_lines must be >= 0, got {}", skip);
  return Status();
}

// Outputs: the key ("file:line") and the value (the line), string scalars.
Status read_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  const Node* q = c.spec().resource;
  if (q == nullptr || !is_queue_type(q->type)) return c.invalid("must read file names from a FIFOQueue or a RandomShuffleQueue");
  const auto& types = q->attr<std::vector<DType>>("component_types");
  const auto& shapes = q->attr<std::vector<Shape>>("shapes");
  if (types.size() != 1 || types[0] != DType::String) {
    return c.invalid("queue '{}' must hold one string component (file names)", q->name);
  }
  if (!shapes.empty() && !shapes[0].compatible_with(Shape{})) {
    return c.invalid("queue '{}' must hold string scalars (file names), its elements have shape {}", q->name,
                     shapes[0].to_string());
  }
  c.add_output(DType::String, Shape{});
  c.add_output(DType::String, Shape{});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"TextLineReaderV2", reader_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"ReaderReadV2", read_shape, true, true});
TESSERA_NOT_DIFFERENTIABLE("TextLineReaderV2");
TESSERA_NOT_DIFFERENTIABLE("ReaderReadV2");

}  // namespace
}  // namespace internal

namespace train {

TextLineReader::TextLineReader(Graph& g, int skip_header_lines, std::string name) {
  internal::NodeSpec spec{"TextLineReaderV2", name.empty() ? std::string("TextLineReaderV2") : std::move(name)};
  spec.attrs["skip_header_lines"] = static_cast<int64_t>(skip_header_lines);
  op_ = Operation(g.impl().add_node(std::move(spec)));
}

std::pair<Output, Output> TextLineReader::read(FIFOQueue& filename_queue) const {
  internal::Node* reader = op_.node();
  internal::Node* queue = filename_queue.op().node();
  if (queue->graph != reader->graph) {
    throw InvalidArgumentError(fmt::format("TextLineReader::read: queue '{}' is not in the graph of reader '{}'",
                                           queue->name, reader->name));
  }
  internal::NodeSpec spec{"ReaderReadV2", reader->name + "_ReaderReadV2"};
  spec.attrs["reader"] = reader->name;
  spec.attrs["skip_header_lines"] = reader->attr<int64_t>("skip_header_lines");
  spec.resource = queue;
  spec.extra_control_inputs = {op_};
  internal::Node* n = reader->graph->add_node(std::move(spec));
  return {Output(n, 0), Output(n, 1)};
}

}  // namespace train
}  // namespace tessera
