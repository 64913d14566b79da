// Queue ops: definitions and shape functions ("FIFOQueue", "RandomShuffleQueueV2",
// "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue", "QueueDequeueMany", "QueueDequeueUpTo",
// "QueueClose", "QueueSize", "QueueIsClosed", and "LimitEpochs" for input pipelines), and the
// public tessera::QueueBase, FIFOQueue and RandomShuffleQueue.
//
// The "FIFOQueue" and "RandomShuffleQueueV2" nodes only describe the queue (attrs capacity,
// component_types, shapes, shared_name; min_after_dequeue and seed for the shuffling one); the
// queue itself is a per-session resource (kernels/queue_resource.h) that the first op to run
// creates. Every other queue op names the queue node as its NodeSpec::resource, which
// places it with the queue, and finds the queue by shared_name, or by the queue node's name.
// Dtypes are checked when the graph is built, shapes too when the queue has them.
#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "core/queue_ops.h"
#include "core/shape_util.h"
#include "tessera/ops.h"
#include "tessera/queue.h"

namespace tessera {
namespace internal {
namespace {

Status queue_shape(ShapeContext& c) {
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  if (c.op_type() == "RandomShuffleQueueV2") {
    const int64_t capacity = c.attr<int64_t>("capacity");
    const int64_t min_after_dequeue = c.attr<int64_t>("min_after_dequeue");
    if (min_after_dequeue < 0) return c.invalid("min_after_dequeue must be >= 0, got {}", min_after_dequeue);
    if (capacity >= 0 && min_after_dequeue >= capacity) {
      return c.invalid("min_after_dequeue {} must be < capacity {}", min_after_dequeue, capacity);
    }
  }
  const auto& types = c.attr<std::vector<DType>>("component_types");
  const auto& shapes = c.attr<std::vector<Shape>>("shapes");
  if (types.empty()) return c.invalid("a queue needs at least one component type");
  if (!shapes.empty() && shapes.size() != types.size()) {
    return c.invalid("{} shapes given for {} component types", shapes.size(), types.size());
  }
  return Status();
}

// The queue node a queue op acts on, or an error naming the op.
StatusOr<const Node*> queue_of(const ShapeContext& c) {
  const Node* q = c.spec().resource;
  if (q == nullptr || !is_queue_type(q->type)) return c.invalid("must act on a FIFOQueue or a RandomShuffleQueue");
  return q;
}

const std::vector<DType>& queue_types(const Node* q) { return q->attr<std::vector<DType>>("component_types"); }
const std::vector<Shape>& queue_shapes(const Node* q) { return q->attr<std::vector<Shape>>("shapes"); }

Status enqueue_shape(ShapeContext& c) {
  auto q = queue_of(c);
  if (!q.ok()) return q.status();
  const auto& types = queue_types(q.value());
  const auto& shapes = queue_shapes(q.value());
  const bool many = c.op_type() == "QueueEnqueueMany";
  if (c.num_inputs() != static_cast<int>(types.size())) {
    return c.invalid("queue '{}' has {} components, {} given", q.value()->name, types.size(), c.num_inputs());
  }
  int64_t batch = -1;
  int batch_from = -1;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != types[i]) {
      return c.invalid("component {} has dtype {} but queue '{}' expects {}", i,
                       dtype_name(c.input_dtype(i)), q.value()->name, dtype_name(types[i]));
    }
    const Shape& in = c.input_shape(i);
    if (!many) {
      if (!shapes.empty() && !shapes[i].compatible_with(in)) {
        return c.invalid("component {} has shape {} but queue '{}' expects {}", i, in.to_string(),
                         q.value()->name, shapes[i].to_string());
      }
      continue;
    }
    if (in.unknown_rank()) continue;
    if (in.rank() < 1) {
      return c.invalid("component {} has shape {}: enqueue_many needs rank >= 1 (rows along "
                       "dimension 0)", i, in.to_string());
    }
    if (!shapes.empty() && !shapes[i].compatible_with(in.sub_shape(1))) {
      return c.invalid("component {} has shape {} but queue '{}' expects rows of shape {}", i,
                       in.to_string(), q.value()->name, shapes[i].to_string());
    }
    if (in.dim(0) >= 0) {
      if (batch >= 0 && in.dim(0) != batch) {
        return c.invalid("components must agree on dimension 0: component {} has {} rows, "
                         "component {} has {}", batch_from, batch, i, in.dim(0));
      }
      batch = in.dim(0);
      batch_from = i;
    }
  }
  return Status();
}

Status dequeue_shape(ShapeContext& c) {
  auto q = queue_of(c);
  if (!q.ok()) return q.status();
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  const auto& types = queue_types(q.value());
  const auto& shapes = queue_shapes(q.value());
  int64_t batch = 0;  // 0: a single element
  if (c.op_type() != "QueueDequeue") {
    const int64_t n = c.attr<int64_t>("n");
    if (n < 0) return c.invalid("n must be >= 0, got {}", n);
    batch = c.op_type() == "QueueDequeueMany" ? n : -1;
  }
  for (std::size_t i = 0; i < types.size(); ++i) {
    Shape s = shapes.empty() ? Shape::unknown() : shapes[i];
    c.add_output(types[i], c.op_type() == "QueueDequeue" ? s : prepend_dim(batch, s));
  }
  return Status();
}

Status close_shape(ShapeContext& c) {
  auto q = queue_of(c);
  if (!q.ok()) return q.status();
  if (c.num_inputs() != 0) return c.invalid("takes no inputs, got {}", c.num_inputs());
  return Status();
}

Status size_shape(ShapeContext& c) {
  auto q = queue_of(c);
  if (!q.ok()) return q.status();
  c.add_output(c.op_type() == "QueueSize" ? DType::Int32 : DType::Bool, Shape{});
  return Status();
}

Status limit_epochs_shape(ShapeContext& c) {
  if (c.num_inputs() != 1) return c.invalid("expects 1 input, got {}", c.num_inputs());
  if (c.attr<int64_t>("num_epochs") < 1) {
    return c.invalid("num_epochs must be >= 1, got {}", c.attr<int64_t>("num_epochs"));
  }
  c.add_output(c.input_dtype(0), c.input_shape(0));
  return Status();
}

// All queue ops are stateful (never deduplicated: two dequeues are two elements) and run in host
// memory next to their queue.
TESSERA_REGISTER_OP(OpDef{"FIFOQueue", queue_shape, /*stateful=*/true, /*host_only=*/true});
TESSERA_REGISTER_OP(OpDef{"RandomShuffleQueueV2", queue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueEnqueue", enqueue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueEnqueueMany", enqueue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueDequeue", dequeue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueDequeueMany", dequeue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueDequeueUpTo", dequeue_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueClose", close_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueSize", size_shape, true, true});
TESSERA_REGISTER_OP(OpDef{"QueueIsClosed", size_shape, true, true});
// Passes its input through num_epochs times, then fails with OutOfRangeError (a per-session
// counter): bounds an input pipeline (train::input_producer).
TESSERA_REGISTER_OP(OpDef{"LimitEpochs", limit_epochs_shape, /*stateful=*/true});

// No gradient crosses a queue, as in TensorFlow (data_flow_grad.py): an enqueued value reaches
// its consumers through the queue's state, not an edge. LimitEpochs only bounds an input.
TESSERA_NOT_DIFFERENTIABLE("FIFOQueue");
TESSERA_NOT_DIFFERENTIABLE("RandomShuffleQueueV2");
TESSERA_NOT_DIFFERENTIABLE("QueueEnqueue");
TESSERA_NOT_DIFFERENTIABLE("QueueEnqueueMany");
TESSERA_NOT_DIFFERENTIABLE("QueueDequeue");
TESSERA_NOT_DIFFERENTIABLE("QueueDequeueMany");
TESSERA_NOT_DIFFERENTIABLE("QueueDequeueUpTo");
TESSERA_NOT_DIFFERENTIABLE("QueueClose");
TESSERA_NOT_DIFFERENTIABLE("QueueSize");
TESSERA_NOT_DIFFERENTIABLE("QueueIsClosed");
TESSERA_NOT_DIFFERENTIABLE("LimitEpochs");

}  // namespace
}  // namespace internal

using internal::Node;
using internal::NodeSpec;

struct QueueBase::State : internal::ResourceNode {  // the queue's node
  using ResourceNode::ResourceNode;
  int capacity = 0;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
};

namespace {

// Adds a queue node of `type` with the attrs every queue has, plus `attrs`, and returns the
// handle's state.
std::shared_ptr<const QueueBase::State> make_queue(Graph& g, const char* type, std::string name,
                                                   internal::AttrMap attrs, int capacity,
                                                   std::vector<DType> dtypes, std::vector<Shape> shapes,
                                                   std::string shared_name) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs = std::move(attrs);
  spec.attrs["capacity"] = static_cast<int64_t>(capacity);
  spec.attrs["component_types"] = dtypes;
  spec.attrs["shapes"] = shapes;
  spec.attrs["shared_name"] = std::move(shared_name);
  Node* n = g.impl().add_node(std::move(spec));
  auto state = std::make_shared<QueueBase::State>(n);
  state->capacity = capacity;
  state->dtypes = std::move(dtypes);
  state->shapes = std::move(shapes);
  return state;
}

}  // namespace

QueueBase::QueueBase(std::shared_ptr<const State> state) : state_(std::move(state)) {}

FIFOQueue::FIFOQueue(Graph& g, int capacity, std::vector<DType> dtypes, std::vector<Shape> shapes,
                     std::string shared_name, std::string name)
    : QueueBase(make_queue(g, "FIFOQueue", name.empty() ? std::string("fifo_queue") : std::move(name), {},
                           capacity, std::move(dtypes), std::move(shapes), std::move(shared_name))) {}

RandomShuffleQueue::RandomShuffleQueue(Graph& g, int capacity, int min_after_dequeue,
                                       std::vector<DType> dtypes, std::vector<Shape> shapes,
                                       uint64_t seed, std::string shared_name, std::string name)
    : QueueBase(make_queue(g, "RandomShuffleQueueV2",
                           name.empty() ? std::string("random_shuffle_queue") : std::move(name),
                           {{"min_after_dequeue", static_cast<int64_t>(min_after_dequeue)},
                            {"seed", static_cast<int64_t>(seed)}},
                           capacity, std::move(dtypes), std::move(shapes), std::move(shared_name))),
      min_after_dequeue_(min_after_dequeue) {}

namespace {

const QueueBase::State& checked_state(const std::shared_ptr<const QueueBase::State>& s) {
  if (!s) throw InvalidArgumentError("use of a default-constructed queue");
  return *s;
}

}  // namespace

Operation QueueBase::enqueue(std::vector<Output> components, std::string name) const {
  return Operation(checked_state(state_).add_op("QueueEnqueue", "_enqueue", std::move(name), std::move(components)));
}

Operation QueueBase::enqueue_many(std::vector<Output> components, std::string name) const {
  return Operation(
      checked_state(state_).add_op("QueueEnqueueMany", "_EnqueueMany", std::move(name), std::move(components)));
}

std::vector<Output> QueueBase::dequeue_op(const char* type, int n, std::string name) const {
  const State& s = checked_state(state_);
  internal::AttrMap attrs;
  const char* suffix = "_Dequeue";
  if (std::string(type) != "QueueDequeue") {
    attrs["n"] = static_cast<int64_t>(n);
    suffix = std::string(type) == "QueueDequeueMany" ? "_DequeueMany" : "_DequeueUpTo";
  }
  Node* node = s.add_op(type, suffix, std::move(name), {}, std::move(attrs));
  std::vector<Output> out;
  for (std::size_t i = 0; i < node->output_dtypes.size(); ++i) out.emplace_back(node, static_cast<int>(i));
  return out;
}

std::vector<Output> QueueBase::dequeue(std::string name) const {
  return dequeue_op("QueueDequeue", 1, std::move(name));
}
std::vector<Output> QueueBase::dequeue_many(int n, std::string name) const {
  return dequeue_op("QueueDequeueMany", n, std::move(name));
}
std::vector<Output> QueueBase::dequeue_up_to(int n, std::string name) const {
  return dequeue_op("QueueDequeueUpTo", n, std::move(name));
}

Operation QueueBase::close(bool cancel_pending_enqueues, std::string name) const {
  internal::AttrMap attrs;
  attrs["cancel_pending_enqueues"] = cancel_pending_enqueues;
  return Operation(
      checked_state(state_).add_op("QueueClose", "_Close", std::move(name), {}, std::move(attrs)));
}

Output QueueBase::size(std::string name) const {
  return Output(checked_state(state_).add_op("QueueSize", "_Size", std::move(name)), 0);
}

Output QueueBase::is_closed(std::string name) const {
  return Output(checked_state(state_).add_op("QueueIsClosed", "_IsClosed", std::move(name)), 0);
}

Operation QueueBase::op() const { return Operation(checked_state(state_).node); }
Graph& QueueBase::graph() const { return *checked_state(state_).node->graph->owner; }
const std::string& QueueBase::name() const { return checked_state(state_).node->name; }
int QueueBase::capacity() const { return checked_state(state_).capacity; }
const std::vector<DType>& QueueBase::dtypes() const { return checked_state(state_).dtypes; }
const std::vector<Shape>& QueueBase::shapes() const { return checked_state(state_).shapes; }

}  // namespace tessera
