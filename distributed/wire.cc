// Encoding and validation of tessera's wire messages: Note [Wire format] in distributed/wire.h.
#include "distributed/wire.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <queue>
#include <shared_mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "core/device_name.h"
#include "core/executor.h"
#include "core/op_registry.h"
#include "core/string_tensor.h"
#include "distributed/wire_attr_schema.h"
#include "distributed/wire_parse.h"

namespace tessera::internal::wire {

// The wire's dtype numbers are tessera's (and TensorFlow's).
static_assert(pb::DT_FLOAT == static_cast<int>(DType::Float32));
static_assert(pb::DT_DOUBLE == static_cast<int>(DType::Float64));
static_assert(pb::DT_INT32 == static_cast<int>(DType::Int32));
static_assert(pb::DT_INT64 == static_cast<int>(DType::Int64));
static_assert(pb::DT_BOOL == static_cast<int>(DType::Bool));
static_assert(pb::DT_BFLOAT16 == static_cast<int>(DType::BFloat16));
static_assert(pb::DT_HALF == static_cast<int>(DType::Float16));

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string dims_string(const google::protobuf::RepeatedField<int64_t>& dims) {
  std::string out = "[";
  for (int i = 0; i < dims.size(); ++i) out += fmt::format("{}{}", i ? "," : "", dims.Get(i));
  return out + "]";
}

// Product of the nonzero entries of `dims` (all >= 0 or -1 for unknown, which are skipped), or
// nullopt when it overflows int64. Shape::num_elements multiplies dims left to right, so every
// nonzero prefix product must fit, which this guarantees.
template <class Dims>
std::optional<int64_t> checked_product(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) continue;
    if (n > kInt64Max / d) return std::nullopt;
    n *= d;
  }
  return n;
}

}  // namespace

Status check_version(uint32_t version, std::string_view what) {
  if (version == kWireVersion) return Status();
  if (version == 0) {
    return errors::invalid_argument("{} carries no wire version (field 1 is 0 or absent); this build "
                                    "speaks wire version {}", what, kWireVersion);
  }
  return errors::invalid_argument("{} has wire version {}, this build speaks wire version {}", what,
                                  version, kWireVersion);
}

Status parse_message(const void* data, std::size_t size, google::protobuf::MessageLite* out,
                     std::string_view what) {
  if (size > static_cast<std::size_t>(INT_MAX)) {
    return errors::invalid_argument("{} of {} bytes is too large to parse (at most {})", what, size, INT_MAX);
  }
  if (data == nullptr && size != 0) return errors::invalid_argument("{}: null data of {} bytes", what, size);
  if (!out->ParseFromArray(data == nullptr ? "" : data, static_cast<int>(size))) {
    return errors::invalid_argument("malformed {} ({} bytes): not a valid {} message", what, size,
                                    out->GetTypeName());
  }
  return Status();
}

// ---- Dtypes and shapes ----

pb::DType encode_dtype(DType dtype) { return static_cast<pb::DType>(static_cast<int>(dtype)); }

StatusOr<DType> decode_dtype(int value) {
  switch (static_cast<DType>(value)) {
    case DType::Float32:
    case DType::Float64:
    case DType::Int32:
    case DType::Int64:
    case DType::Bool:
    case DType::BFloat16:
    case DType::Float16:
    case DType::String:
      return static_cast<DType>(value);
  }
  return errors::invalid_argument(
      "unknown dtype {} (tessera knows float32=1, float64=2, int32=3, int64=9, bool=10, "
      "bfloat16=14, float16=19)", value);
}

ShapeProto encode_shape(const Shape& shape) {
  ShapeProto p;
  if (shape.unknown_rank()) {
    p.set_unknown_rank(true);
  } else {
    for (int i = 0; i < shape.rank(); ++i) p.add_dims(shape.dim(i));
  }
  return p;
}

StatusOr<Shape> decode_shape(const ShapeProto& proto) {
  if (proto.unknown_rank()) {
    if (proto.dims_size() != 0) {
      return errors::invalid_argument("shape of unknown rank lists {} dims", proto.dims_size());
    }
    return Shape::unknown();
  }
  if (proto.dims_size() > Shape::kMaxRank) {
    return errors::invalid_argument("shape of rank {} is not supported (at most {})", proto.dims_size(),
                                    Shape::kMaxRank);
  }
  for (int64_t d : proto.dims()) {
    if (d < -1) {
      return errors::invalid_argument("shape {} has dimension {} (dims are >= 0, or -1 for unknown)",
                                      dims_string(proto.dims()), d);
    }
  }
  if (!checked_product(proto.dims())) {
    return errors::invalid_argument("shape {} has more than 2^63 elements", dims_string(proto.dims()));
  }
  return Shape(std::vector<int64_t>(proto.dims().begin(), proto.dims().end()));
}

// ---- Tensors ----

TensorMeta encode_tensor_meta(const Tensor& t, uint32_t frame) {
  TensorMeta meta;
  meta.set_frame(frame);
  if (t.is_null()) {
    meta.set_dtype(pb::DT_INVALID);
    return meta;
  }
  meta.set_dtype(encode_dtype(t.dtype()));
  for (int i = 0; i < t.shape().rank(); ++i) meta.add_dims(t.shape().dim(i));
  meta.set_byte_size(t.dtype() == DType::String ? internal::encoded_strings_size(t) : t.bytes());
  return meta;
}

namespace {
// A string tensor's bytes are its encoding (core/string_tensor.h): its size is the frame's, within
// the limit, and at least a length per element; decode_strings checks the lengths themselves.
Status validate_string_meta(const TensorMeta& meta, uint64_t elements, std::size_t frame_size, uint64_t max_bytes) {
  if (meta.byte_size() != frame_size) {
    return errors::invalid_argument("tensor: byte_size {} of a string tensor of shape {}, the frame holds {}",
                                    meta.byte_size(), dims_string(meta.dims()), frame_size);
  }
  if (frame_size > max_bytes) {
    return errors::resource_exhausted("tensor: {} bytes (shape {} of string) exceed the limit of {} bytes", frame_size,
                                      dims_string(meta.dims()), max_bytes);
  }
  if (elements > frame_size / sizeof(uint64_t)) {
    return errors::invalid_argument("tensor: {} bytes cannot hold the {} strings of shape {}", frame_size, elements,
                                    dims_string(meta.dims()));
  }
  return Status();
}
}  // namespace

Status validate_tensor_meta(const TensorMeta& meta, std::size_t frame_size, uint64_t max_bytes) {
  auto dtype = decode_dtype(meta.dtype());
  if (!dtype.ok()) return dtype.status().with_prefix("tensor: ");
  if (meta.dims_size() > Shape::kMaxRank) {
    return errors::invalid_argument("tensor: rank {} is not supported (at most {})", meta.dims_size(),
                                    Shape::kMaxRank);
  }
  bool empty = false;
  for (int64_t d : meta.dims()) {
    if (d < 0) {
      return errors::invalid_argument("tensor: shape {} has dimension {} (a tensor's dims are >= 0)",
                                      dims_string(meta.dims()), d);
    }
    if (d == 0) empty = true;
  }
  const auto product = checked_product(meta.dims());
  if (!product) {
    return errors::invalid_argument("tensor: shape {} overflows (more than 2^63 elements)",
                                    dims_string(meta.dims()));
  }
  const uint64_t elements = empty ? 0 : static_cast<uint64_t>(*product);
  if (dtype.value() == DType::String) return validate_string_meta(meta, elements, frame_size, max_bytes);
  const uint64_t element_size = dtype_size(dtype.value());
  if (elements > static_cast<uint64_t>(kInt64Max) / element_size) {
    return errors::invalid_argument("tensor: {} {} elements of shape {} overflow (more than 2^63 bytes)",
                                    elements, dtype_name(dtype.value()), dims_string(meta.dims()));
  }
  const uint64_t bytes = elements * element_size;
  if (meta.byte_size() != bytes) {
    return errors::invalid_argument("tensor: byte_size {} does not match shape {} of {} ({} bytes)",
                                    meta.byte_size(), dims_string(meta.dims()), dtype_name(dtype.value()),
                                    bytes);
  }
  if (bytes > max_bytes) {
    return errors::resource_exhausted("tensor: {} bytes (shape {} of {}) exceed the limit of {} bytes",
                                      bytes, dims_string(meta.dims()), dtype_name(dtype.value()), max_bytes);
  }
  if (frame_size != bytes) {
    return errors::invalid_argument("tensor: shape {} of {} needs {} bytes, the frame holds {}",
                                    dims_string(meta.dims()), dtype_name(dtype.value()), bytes, frame_size);
  }
  return Status();
}

Status validate_tensor_content(DType dtype, const void* data, std::size_t size) {
  if (dtype != DType::Bool || size == 0) return Status();
  // A bool that is neither 0 nor 1 is undefined behaviour to read.
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    if (p[i] > 1) {
      return errors::invalid_argument("tensor: bool element {} holds byte {} (bools are 0 or 1)", i, p[i]);
    }
  }
  return Status();
}

StatusOr<Tensor> decode_tensor(const TensorMeta& meta, const void* data, std::size_t size, uint64_t max_bytes) {
  TESSERA_RETURN_IF_ERROR(validate_tensor_meta(meta, size, max_bytes));
  if (size != 0 && data == nullptr) return errors::invalid_argument("tensor: null data of {} bytes", size);
  const DType dtype = static_cast<DType>(meta.dtype());  // validated
  TESSERA_RETURN_IF_ERROR(validate_tensor_content(dtype, data, size));
  try {
    Shape shape(std::vector<int64_t>(meta.dims().begin(), meta.dims().end()));
    if (dtype == DType::String) {
      return internal::decode_strings(std::string_view(static_cast<const char*>(data), size), shape);
    }
    Tensor t(dtype, shape);
    if (size != 0) std::memcpy(t.raw_mutable_data(), data, size);
    return t;
  } catch (const std::bad_alloc&) {
    return errors::resource_exhausted("tensor: cannot allocate {} bytes", size);
  } catch (...) {
    return status_from_current_exception();
  }
}

StatusOr<TensorProto> encode_tensor_proto(const Tensor& t) {
  if (t.is_null()) return errors::invalid_argument("cannot encode a null tensor");
  auto where = DeviceSpec::parse(t.device());
  if (!where.ok() || where.value().type.value_or("") != "CPU") {
    return errors::invalid_argument("cannot encode a tensor in the memory of {} inline: copy it to the host first",
                                    t.device());
  }
  TensorProto p;
  *p.mutable_meta() = encode_tensor_meta(t, 0);
  if (t.dtype() == DType::String) {
    p.set_content(internal::encode_strings(t));
  } else {
    p.set_content(static_cast<const char*>(t.raw_data()), t.bytes());
  }
  return p;
}

StatusOr<Tensor> decode_tensor_proto(const TensorProto& proto, uint64_t max_bytes) {
  return decode_tensor(proto.meta(), proto.content().data(), proto.content().size(), max_bytes);
}

// ---- Attrs ----

StatusOr<pb::AttrValue> encode_attr(const AttrValue& value) {
  pb::AttrValue p;
  Status st;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          p.set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          p.set_f(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          p.set_b(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          p.set_type(encode_dtype(v));
        } else if constexpr (std::is_same_v<T, Shape>) {
          *p.mutable_shape() = encode_shape(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          p.set_s(v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          auto t = encode_tensor_proto(v);
          if (t.ok()) {
            *p.mutable_tensor() = std::move(t).value();
          } else {
            st = t.status();
          }
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto* list = p.mutable_list_i();
          for (int64_t x : v) list->add_value(x);
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          auto* list = p.mutable_list_type();
          for (DType x : v) list->add_value(encode_dtype(x));
        } else {
          static_assert(std::is_same_v<T, std::vector<Shape>>);
          auto* list = p.mutable_list_shape();
          for (const Shape& x : v) *list->add_value() = encode_shape(x);
        }
      },
      value);
  if (!st.ok()) return st;
  return p;
}

StatusOr<AttrValue> decode_attr(const pb::AttrValue& proto) {
  switch (proto.value_case()) {
    case pb::AttrValue::kI:
      return AttrValue(proto.i());
    case pb::AttrValue::kF:
      return AttrValue(proto.f());
    case pb::AttrValue::kB:
      return AttrValue(proto.b());
    case pb::AttrValue::kType: {
      auto d = decode_dtype(proto.type());
      if (!d.ok()) return d.status();
      return AttrValue(d.value());
    }
    case pb::AttrValue::kShape: {
      auto s = decode_shape(proto.shape());
      if (!s.ok()) return s.status();
      return AttrValue(s.value());
    }
    case pb::AttrValue::kS:
      return AttrValue(proto.s());
    case pb::AttrValue::kTensor: {
      auto t = decode_tensor_proto(proto.tensor());
      if (!t.ok()) return t.status();
      return AttrValue(std::move(t).value());
    }
    case pb::AttrValue::kListI:
      return AttrValue(std::vector<int64_t>(proto.list_i().value().begin(), proto.list_i().value().end()));
    case pb::AttrValue::kListType: {
      std::vector<DType> out;
      out.reserve(static_cast<std::size_t>(proto.list_type().value_size()));  // parsed: bounded by the input
      for (int v : proto.list_type().value()) {
        auto d = decode_dtype(v);
        if (!d.ok()) return d.status();
        out.push_back(d.value());
      }
      return AttrValue(std::move(out));
    }
    case pb::AttrValue::kListShape: {
      std::vector<Shape> out;
      out.reserve(static_cast<std::size_t>(proto.list_shape().value_size()));
      for (const ShapeProto& v : proto.list_shape().value()) {
        auto s = decode_shape(v);
        if (!s.ok()) return s.status();
        out.push_back(s.value());
      }
      return AttrValue(std::move(out));
    }
    case pb::AttrValue::VALUE_NOT_SET:
      break;
  }
  return errors::invalid_argument("attr value is not set (or of a kind this build does not know)");
}

// ---- Graphs ----

namespace {

// Kahn's algorithm, smallest index first (the given order wherever it is topological): nodes
// [0, n) each after the nodes it waits on, `waiting[i]` counting node i's edges and `users[j]`
// listing the nodes that wait on node j. On a cycle, InvalidArgument "<cycle> (through ...)" with
// the names (name_of) of up to five of the nodes left waiting.
StatusOr<std::vector<int>> kahn_order(std::vector<int> waiting, const std::vector<std::vector<int>>& users,
                                      std::string_view cycle, const std::function<std::string(int)>& name_of) {
  const int n = static_cast<int>(waiting.size());
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (waiting[static_cast<std::size_t>(i)] == 0) ready.push(i);
  }
  std::vector<int> order;
  order.reserve(waiting.size());
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[static_cast<std::size_t>(i)]) {
      if (--waiting[static_cast<std::size_t>(u)] == 0) ready.push(u);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    std::string names;
    int listed = 0;
    for (int i = 0; i < n && listed < 5; ++i) {
      if (waiting[static_cast<std::size_t>(i)] > 0) names += fmt::format("{}'{}'", listed++ ? ", " : "", name_of(i));
    }
    return errors::invalid_argument("{} (through {})", cycle, names);
  }
  return order;
}

}  // namespace

namespace {

// Note [While loops on the wire]
// A while loop's frame (core/node.h's WhileFrame) is not an attr of any node, so a GraphDef says
// which node belongs to which loop in attrs of its own, which decode_graph takes off again and
// rebuilds the frames from (restore_loops):
//   _frame     (string) on every node of a loop's body: the loop's name (its scope, unique);
//   _loop_arg  (int) on a loop's _LoopArg: k for loop variable k, -1 - j for captured tensor j;
//   _loop, _loop_cond, _loop_body  (strings) on the While: its loop's name, and its cond's and
//              body's results as "node:index" (the body's joined by ',');
//   _loop_history  (bool) on the While, true when a gradient reads its history: the loop's own
//              flag (WhileFrame::keep_history), or a node of the same GraphDef that reads it (a
//              master's partition for a task, whose graph got the gradient after the loop).
// The captured tensors are the While's inputs after its loop variables.
constexpr std::string_view kLoopAttrPrefixes[] = {"_frame", "_loop"};
bool is_loop_attr(const std::string& key) {
  for (std::string_view p : kLoopAttrPrefixes) {
    if (key.size() >= p.size() && std::string_view(key).substr(0, p.size()) == p) return true;
  }
  return false;
}

Status encode_loop_attrs(const Node& node, bool history_read, NodeDef* nd) {
  auto set_string = [nd](const char* key, std::string value) {
    (*nd->mutable_attr())[key] = encode_attr(AttrValue(std::move(value))).value();
  };
  auto endpoint = [](const Output& o) { return fmt::format("{}:{}", o.node()->name, o.index()); };
  if (const WhileFrame* f = node.while_frame) {
    set_string("_frame", f->name);
    if (node.type == "_LoopArg") {
      int64_t role = 0;
      bool found = false;
      // (A partition's copy of an argument is another node of the same name.)
      auto is = [&node](const Node* a) { return a != nullptr && (a == &node || a->name == node.name); };
      for (std::size_t k = 0; k < f->args.size() && !found; ++k) {
        if (is(f->args[k])) role = static_cast<int64_t>(k), found = true;
      }
      for (std::size_t j = 0; j < f->capture_args.size() && !found; ++j) {
        if (is(f->capture_args[j])) {
          role = -1 - static_cast<int64_t>(j), found = true;
        }
      }
      if (!found) return errors::internal("encode_graph: '{}' is no argument of its loop '{}'", node.name, f->name);
      (*nd->mutable_attr())["_loop_arg"] = encode_attr(AttrValue(role)).value();
    }
  }
  if (const WhileFrame* f = node.loop) {
    set_string("_loop", f->name);
    set_string("_loop_cond", endpoint(f->cond));
    std::string body;
    for (const Output& o : f->body) {
      if (o.node()->name.find(',') != std::string::npos) {
        return errors::unimplemented("encode_graph: loop '{}' returns '{}', whose name has a ',' (the wire "
                                     "separates a loop's results by ',')", f->name, o.node()->name);
      }
      body += (body.empty() ? "" : ",") + endpoint(o);
    }
    set_string("_loop_body", body);
    if (history_read || f->keep_history.load(std::memory_order_acquire)) {
      (*nd->mutable_attr())["_loop_history"] = encode_attr(AttrValue(true)).value();
    }
  }
  return Status();
}

}  // namespace

StatusOr<GraphDef> encode_graph(const GraphImpl& graph, const std::vector<const Node*>& nodes,
                                bool refer_outside) {
  std::shared_lock<std::shared_mutex> lock(graph.mutex());
  const int n = static_cast<int>(nodes.size());
  std::unordered_map<const Node*, int> pos;
  pos.reserve(nodes.size());
  for (int i = 0; i < n; ++i) {
    const Node* node = nodes[static_cast<std::size_t>(i)];
    if (node == nullptr) return errors::invalid_argument("encode_graph: node {} is null", i);
    if (node->graph != &graph) {
      return errors::invalid_argument("encode_graph: node '{}' belongs to another graph", node->name);
    }
    if (!pos.emplace(node, i).second) {
      return errors::invalid_argument("encode_graph: node '{}' is listed twice", node->name);
    }
    if (node->name.empty() || node->name[0] == '^' || node->name.find(':') != std::string::npos) {
      return errors::invalid_argument("encode_graph: node name '{}' cannot be encoded ('^' starts control "
                                      "inputs, ':' separates output indices)", node->name);
    }
  }

  // Every node another one depends on: data and control inputs, resource, colocation.
  auto for_each_dep = [](const Node* node, auto&& f) -> Status {
    for (const Endpoint& in : node->inputs) TESSERA_RETURN_IF_ERROR(f(in.node, "input"));
    for (const Node* c : node->control_inputs) TESSERA_RETURN_IF_ERROR(f(c, "control input"));
    if (node->resource != nullptr) TESSERA_RETURN_IF_ERROR(f(node->resource, "resource"));
    for (const Node* c : node->colocate_with) TESSERA_RETURN_IF_ERROR(f(c, "colocate_with"));
    return Status();
  };
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> users(nodes.size());
  for (int i = 0; i < n; ++i) {
    const Node* node = nodes[static_cast<std::size_t>(i)];
    TESSERA_RETURN_IF_ERROR(for_each_dep(node, [&](const Node* dep, const char* what) -> Status {
      auto it = dep == nullptr ? pos.end() : pos.find(dep);
      if (it == pos.end() && refer_outside && dep != nullptr && dep->graph == &graph) return Status();
      if (it == pos.end()) {
        return errors::invalid_argument("encode_graph: {} '{}' of node '{}' is not among the nodes encoded",
                                        what, dep == nullptr ? "(null)" : dep->name, node->name);
      }
      ++pending[static_cast<std::size_t>(i)];
      users[static_cast<std::size_t>(it->second)].push_back(i);
      return Status();
    }));
  }
  // Dependencies first; the given order wherever it is topological.
  auto order = kahn_order(std::move(pending), users, "encode_graph: the nodes' edges form a cycle",
                          [&](int i) { return nodes[static_cast<std::size_t>(i)]->name; });
  if (!order.ok()) return order.status();

  // The Whiles whose history (the outputs after the iteration count) a node here reads: a
  // gradient, which needs the loop to keep it (WhileFrame::keep_history).
  std::unordered_set<const Node*> history_read;
  for (const Node* node : nodes) {
    for (const Endpoint& in : node->inputs) {
      if (in.node->loop != nullptr && in.index > static_cast<int>(in.node->loop->args.size())) {
        history_read.insert(in.node);
      }
    }
  }
  GraphDef def;
  def.set_version(kWireVersion);
  def.mutable_node()->Reserve(n);
  for (int i : order.value()) {
    const Node* node = nodes[static_cast<std::size_t>(i)];
    NodeDef* nd = def.add_node();
    nd->set_name(node->name);
    nd->set_op(node->type);
    for (const Endpoint& in : node->inputs) nd->add_input(fmt::format("{}:{}", in.node->name, in.index));
    for (const Node* c : node->control_inputs) nd->add_input("^" + c->name);
    nd->set_device(node->requested_device);
    for (const auto& [key, value] : node->attrs) {
      auto a = encode_attr(value);
      if (!a.ok()) return a.status().with_prefix(fmt::format("encode_graph: node '{}' attr '{}': ", node->name, key));
      (*nd->mutable_attr())[key] = std::move(a).value();
    }
    if (node->resource != nullptr) nd->set_resource(node->resource->name);
    for (const Node* c : node->colocate_with) nd->add_colocate_with(c->name);
    TESSERA_RETURN_IF_ERROR(encode_loop_attrs(*node, history_read.count(node) != 0, nd));
  }
  return def;
}

StatusOr<GraphDef> encode_graph(const GraphImpl& graph) {
  std::vector<Node*> all = graph.nodes();
  return encode_graph(graph, std::vector<const Node*>(all.begin(), all.end()));
}

namespace {

// A reference from a NodeDef to a node: one of the def (by index) or one already in the graph.
struct Ref {
  std::string name;
  int local = -1;           // index into the GraphDef
  Node* existing = nullptr;  // Not owned.
  int index = 0;            // output index (data inputs)
};

struct PendingNode {
  const NodeDef* def = nullptr;  // Not owned.
  AttrMap attrs;
  AttrMap loop_attrs;  // Note [While loops on the wire]
  std::vector<Ref> data;
  std::vector<Ref> control;
  std::optional<Ref> resource;
  std::vector<Ref> colocate;
};

Status parse_data_input(const std::string& input, std::string* name, int* index);

// Note [While loops on the wire]: the frames of the loops whose nodes (in order, with their loop
// attrs) decode_graph just added to `g`. A loop must come whole: its While and every node of its
// body in one GraphDef.
Status restore_loops(GraphImpl* g, const std::vector<std::pair<Node*, const AttrMap*>>& loop_nodes) {
  auto string_attr = [](const AttrMap& attrs, const char* key) -> const std::string* {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  };
  std::unordered_map<std::string, WhileFrame*> frames;
  auto frame_named = [&](const std::string& name) {
    auto [it, fresh] = frames.emplace(name, nullptr);
    if (fresh) {
      g->while_frames_.push_back(std::make_unique<WhileFrame>());
      it->second = g->while_frames_.back().get();
      it->second->name = name;
    }
    return it->second;
  };
  auto bad = [](const Node* n, const std::string& why) {
    return errors::invalid_argument("node '{}': malformed while loop: {}", n->name, why);
  };
  // The While of each loop, by name.
  // A loop may have several Whiles: a gradient's copy of a loop's body runs the loops inside it
  // with their own Whiles (core/while_ops.cc).
  std::vector<std::pair<std::string, std::pair<Node*, const AttrMap*>>> while_of;
  for (const auto& [node, attrs] : loop_nodes) {
    for (const auto& [key, value] : *attrs) {
      if (key != "_frame" && key != "_loop_arg" && key != "_loop" && key != "_loop_cond" && key != "_loop_body" &&
          key != "_loop_history") {
        return bad(node, fmt::format("unexpected attr '{}'", key));
      }
    }
    if (const std::string* name = string_attr(*attrs, "_frame")) {
      WhileFrame* f = frame_named(*name);
      node->while_frame = f;
      f->nodes.push_back(node);
      auto role = attrs->find("_loop_arg");
      if (role != attrs->end()) {
        const int64_t* k = std::get_if<int64_t>(&role->second);
        if (k == nullptr || node->type != "_LoopArg") return bad(node, "_loop_arg on a node that is no _LoopArg");
        auto& list = *k >= 0 ? f->args : f->capture_args;
        const int64_t at = *k >= 0 ? *k : -1 - *k;
        if (at > 100000) return bad(node, "argument index out of range");
        if (static_cast<int64_t>(list.size()) <= at) list.resize(static_cast<std::size_t>(at) + 1, nullptr);
        if (list[static_cast<std::size_t>(at)] != nullptr) return bad(node, "two nodes for one loop argument");
        list[static_cast<std::size_t>(at)] = node;
      }
    } else if (attrs->count("_loop_arg")) {
      return bad(node, "_loop_arg without _frame");
    }
    if (const std::string* name = string_attr(*attrs, "_loop")) {
      if (node->type != "While") return bad(node, "_loop on a node that is no While");
      while_of.emplace_back(*name, std::make_pair(node, attrs));
    }
  }
  auto find_endpoint = [&](const std::string& ref, const WhileFrame* f, const Node* w) -> StatusOr<Output> {
    std::string name;
    int index = 0;
    TESSERA_RETURN_IF_ERROR(parse_data_input(ref, &name, &index));
    Node* n = g->find(name);
    if (n == nullptr || n->while_frame != f || index >= static_cast<int>(n->output_dtypes.size())) {
      return bad(w, fmt::format("'{}' is no output of a node of its loop", ref));
    }
    return Output(n, index);
  };
  for (const auto& [name, entry] : while_of) {
    Node* w = entry.first;
    const AttrMap& attrs = *entry.second;
    auto it = frames.find(name);
    if (it == frames.end()) return bad(w, fmt::format("its loop '{}' has no nodes here", name));
    WhileFrame* f = it->second;
    const auto& dtypes = w->attr<std::vector<DType>>("T");
    const std::size_t n = dtypes.size();
    if (f->args.size() != n) return bad(w, fmt::format("{} loop variables, {} arguments", n, f->args.size()));
    for (Node* a : f->args) {
      if (a == nullptr) return bad(w, "a loop variable has no argument");
    }
    for (Node* a : f->capture_args) {
      if (a == nullptr) return bad(w, "a captured tensor has no argument");
    }
    const std::size_t m = f->capture_args.size();
    const bool first = f->cond.is_null();  // the loop's first While: it sets the frame's fields
    if (w->inputs.size() != n + m && w->inputs.size() != n + m + 1) {
      return bad(w, fmt::format("{} inputs for {} loop variables and {} captured tensors", w->inputs.size(), n, m));
    }
    for (std::size_t j = 0; j < m; ++j) {
      const Endpoint& in = w->inputs[n + j];
      if (in.node->output_dtypes[static_cast<std::size_t>(in.index)] != f->capture_args[j]->output_dtypes[0]) {
        return bad(w, fmt::format("captured tensor {} is not of its argument's dtype", j));
      }
      if (first) f->captures.emplace_back(in.node, in.index);
    }
    const std::string* cond = string_attr(attrs, "_loop_cond");
    const std::string* body = string_attr(attrs, "_loop_body");
    if (cond == nullptr || body == nullptr) return bad(w, "no _loop_cond or _loop_body");
    auto c = find_endpoint(*cond, f, w);
    if (!c.ok()) return c.status();
    if (c.value().dtype() != DType::Bool) return bad(w, "its cond is not bool");
    std::vector<Output> results;
    std::size_t start = 0;
    while (start <= body->size() && results.size() <= n) {
      const std::size_t comma = std::min(body->find(',', start), body->size());
      auto r = find_endpoint(body->substr(start, comma - start), f, w);
      if (!r.ok()) return r.status();
      results.push_back(r.value());
      start = comma + 1;
    }
    if (results.size() != n || start <= body->size()) return bad(w, fmt::format("not {} results", n));
    for (std::size_t k = 0; k < n; ++k) {
      if (results[k].dtype() != dtypes[k] || f->args[k]->output_dtypes[0] != dtypes[k]) {
        return bad(w, fmt::format("loop variable {} is not {} throughout", k, dtype_name(dtypes[k])));
      }
    }
    if (first) {
      f->cond = c.value();
      f->body = std::move(results);
    } else if (f->cond != c.value() || f->body != results) {
      return bad(w, "another While runs its loop with another cond or body");
    }
    auto history = attrs.find("_loop_history");
    if (history != attrs.end()) {
      const bool* keep = std::get_if<bool>(&history->second);
      if (keep == nullptr) return bad(w, "_loop_history is not a bool");
      f->keep_history.store(*keep, std::memory_order_release);
    }
    if (w->while_frame == f) return bad(w, "the While is a node of its own loop");
    if (first) f->outer = w->while_frame;
  }
  // Loops run loops inside them, never themselves: no cycle of "a While in loop F runs loop G".
  std::unordered_map<const WhileFrame*, std::vector<const WhileFrame*>> runs;
  for (const auto& [name, entry] : while_of) {
    if (entry.first->while_frame != nullptr) runs[entry.first->while_frame].push_back(frames.at(name));
  }
  // (Kahn's algorithm over the frames: a frame left over is on a cycle.)
  std::unordered_map<const WhileFrame*, int> waiting;
  for (const auto& [name, f] : frames) waiting.emplace(f, 0);
  for (const auto& [f, inner] : runs) {
    for (const WhileFrame* g2 : inner) ++waiting[g2];
  }
  std::vector<const WhileFrame*> ready;
  for (const auto& [f, count] : waiting) {
    if (count == 0) ready.push_back(f);
  }
  std::size_t done = 0;
  while (!ready.empty()) {
    const WhileFrame* f = ready.back();
    ready.pop_back();
    ++done;
    auto it = runs.find(f);
    if (it == runs.end()) continue;
    for (const WhileFrame* g2 : it->second) {
      if (--waiting[g2] == 0) ready.push_back(g2);
    }
  }
  if (done != waiting.size()) {
    for (const auto& [name, entry] : while_of) {
      if (waiting[frames.at(name)] > 0) return bad(entry.first, "its loop runs itself");
    }
  }
  for (const auto& [name, entry] : while_of) entry.first->loop = frames.at(name);
  return Status();
}

// Restores a graph's scopes when decode_graph returns.
class ScopeSaver {
 public:
  explicit ScopeSaver(GraphImpl* g)
      : g_(g), device_(g->device_scope_), colocation_(g->colocation_scope_), control_(g->control_scope_),
        name_(g->name_scope_) {
    g_->control_scope_.clear();
    g_->name_scope_.clear();
  }
  ~ScopeSaver() {
    g_->device_scope_ = device_;
    g_->colocation_scope_ = colocation_;
    g_->control_scope_ = control_;
    g_->name_scope_ = name_;
  }
  ScopeSaver(const ScopeSaver&) = delete;
  ScopeSaver& operator=(const ScopeSaver&) = delete;

 private:
  GraphImpl* g_;  // Not owned.
  std::string device_;
  std::vector<Node*> colocation_;
  std::vector<Node*> control_;
  std::string name_;
};

// "name:index" or "name" (output 0).
Status parse_data_input(const std::string& input, std::string* name, int* index) {
  const auto colon = input.rfind(':');
  *index = 0;
  *name = input.substr(0, colon);
  if (colon != std::string::npos) {
    const char* first = input.data() + colon + 1;
    const char* last = input.data() + input.size();
    auto [end, ec] = std::from_chars(first, last, *index);
    if (first == last || *first < '0' || *first > '9' || ec != std::errc() || end != last) {
      return errors::invalid_argument("bad output index in input '{}' (want \"node:index\")", input);
    }
  }
  if (name->empty()) return errors::invalid_argument("input '{}' names no node", input);
  return Status();
}

}  // namespace

Status decode_graph(const GraphDef& def, GraphImpl* into, std::vector<Node*>* added, int64_t max_nodes) {
  if (into == nullptr) return errors::invalid_argument("decode_graph: null graph");
  TESSERA_RETURN_IF_ERROR(check_version(def.version(), "GraphDef"));
  const int n = def.node_size();
  if (static_cast<int64_t>(into->num_nodes()) + n > max_nodes) {
    return errors::resource_exhausted("a graph of {} nodes (adding {}) exceeds the limit of {} nodes "
                                      "(ServerOptions::max_graph_nodes)",
                                      static_cast<int64_t>(into->num_nodes()) + n, n, max_nodes);
  }
  std::vector<PendingNode> pending(static_cast<std::size_t>(n));
  std::unordered_map<std::string_view, int> local;
  local.reserve(static_cast<std::size_t>(n));

  // Names, ops, attrs, devices: each node on its own.
  for (int i = 0; i < n; ++i) {
    const NodeDef& nd = def.node(i);
    PendingNode& p = pending[static_cast<std::size_t>(i)];
    p.def = &nd;
    const std::string& name = nd.name();
    if (name.empty()) return errors::invalid_argument("GraphDef node {} has no name", i);
    if (name[0] == '^' || name.find(':') != std::string::npos) {
      return errors::invalid_argument("node name '{}' is not valid (no leading '^', no ':')", name);
    }
    if (!local.emplace(name, i).second) {
      return errors::invalid_argument("duplicate name '{}': the GraphDef has two nodes of that name", name);
    }
    if (into->find(name) != nullptr) {
      return errors::invalid_argument("duplicate name '{}': the graph already has a node of that name", name);
    }
    auto bad = [&](const Status& st) { return st.with_prefix(fmt::format("node '{}' ({}): ", name, nd.op())); };
    if (OpRegistry::global().find_op(nd.op()) == nullptr) {
      return errors::invalid_argument("node '{}': unknown op type '{}'", name, nd.op());
    }
    auto spec = op_attr_schema().find(nd.op());
    if (spec == op_attr_schema().end()) {
      return errors::unimplemented("node '{}': op '{}' cannot be received: distributed/wire_attr_schema.cc "
                                   "does not list its attrs", name, nd.op());
    }
    for (const auto& [key, value] : nd.attr()) {
      if (is_loop_attr(key)) {
        auto v = decode_attr(value);
        if (!v.ok()) return bad(v.status().with_prefix(fmt::format("attr '{}': ", key)));
        p.loop_attrs.emplace(key, std::move(v).value());
        continue;
      }
      const AttrSpec* want = nullptr;
      for (const AttrSpec& a : spec->second) {
        if (a.name == key) want = &a;
      }
      if (want == nullptr) return bad(errors::invalid_argument("unexpected attr '{}'", key));
      auto v = decode_attr(value);
      if (!v.ok()) return bad(v.status().with_prefix(fmt::format("attr '{}': ", key)));
      if (v.value().index() != want->kind) {
        return bad(errors::invalid_argument("attr '{}' must be of type {}, got {}", key, kKindNames[want->kind],
                                            kKindNames[v.value().index()]));
      }
      p.attrs.emplace(key, std::move(v).value());
    }
    for (const AttrSpec& a : spec->second) {
      if (a.required && p.attrs.count(std::string(a.name)) == 0) {
        return bad(errors::invalid_argument("missing attr '{}' of type {}", a.name, kKindNames[a.kind]));
      }
    }
    if (!nd.device().empty()) {
      auto d = DeviceSpec::parse(nd.device());
      if (!d.ok()) return bad(d.status());
    }
  }

  // References, by name: to nodes of the def or of the graph.
  auto resolve = [&](const std::string& ref_name, const std::string& node_name, const char* what,
                     Ref* out) -> Status {
    out->name = ref_name;
    auto it = local.find(ref_name);
    if (it != local.end()) {
      out->local = it->second;
      return Status();
    }
    out->existing = into->find(ref_name);
    if (out->existing == nullptr) {
      return errors::invalid_argument("dangling input: {} '{}' of node '{}' names no node of the GraphDef "
                                      "or the graph", what, ref_name, node_name);
    }
    return Status();
  };
  for (PendingNode& p : pending) {
    const NodeDef& nd = *p.def;
    bool control_seen = false;
    for (const std::string& in : nd.input()) {
      Ref ref;
      if (!in.empty() && in[0] == '^') {
        control_seen = true;
        TESSERA_RETURN_IF_ERROR(resolve(in.substr(1), nd.name(), "control input", &ref));
        p.control.push_back(std::move(ref));
        continue;
      }
      if (control_seen) {
        return errors::invalid_argument("node '{}': data input '{}' follows a control input", nd.name(), in);
      }
      std::string src;
      Status st = parse_data_input(in, &src, &ref.index);
      if (!st.ok()) return st.with_prefix(fmt::format("node '{}': ", nd.name()));
      TESSERA_RETURN_IF_ERROR(resolve(src, nd.name(), "input", &ref));
      p.data.push_back(std::move(ref));
    }
    if (!nd.resource().empty()) {
      Ref ref;
      TESSERA_RETURN_IF_ERROR(resolve(nd.resource(), nd.name(), "resource", &ref));
      p.resource = std::move(ref);
    }
    for (const std::string& c : nd.colocate_with()) {
      Ref ref;
      TESSERA_RETURN_IF_ERROR(resolve(c, nd.name(), "colocate_with", &ref));
      p.colocate.push_back(std::move(ref));
    }
  }

  // Order: Kahn's algorithm over the edges between nodes of the def, smallest index first.
  std::vector<int> waiting(static_cast<std::size_t>(n), 0);
  std::vector<std::vector<int>> users(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const PendingNode& p = pending[static_cast<std::size_t>(i)];
    auto edge = [&](const Ref& r) {
      if (r.local < 0) return;
      ++waiting[static_cast<std::size_t>(i)];
      users[static_cast<std::size_t>(r.local)].push_back(i);
    };
    for (const Ref& r : p.data) edge(r);
    for (const Ref& r : p.control) edge(r);
    if (p.resource) edge(*p.resource);
    for (const Ref& r : p.colocate) edge(r);
  }
  auto order = kahn_order(std::move(waiting), users, "GraphDef has a cycle",
                          [&](int i) { return def.node(i).name(); });
  if (!order.ok()) return order.status();

  // Add, in that order. Shape inference validates each op's inputs and attr values.
  std::vector<Node*> made(static_cast<std::size_t>(n), nullptr);
  auto node_of = [&](const Ref& r) { return r.local >= 0 ? made[static_cast<std::size_t>(r.local)] : r.existing; };
  ScopeSaver saver(into);
  for (int i : order.value()) {
    PendingNode& p = pending[static_cast<std::size_t>(i)];
    const NodeDef& nd = *p.def;
    NodeSpec spec;
    spec.type = nd.op();
    spec.name = nd.name();
    spec.attrs = std::move(p.attrs);
    for (const Ref& r : p.data) {
      Node* src = node_of(r);
      const int outputs = static_cast<int>(src->output_dtypes.size());
      if (r.index >= outputs) {
        return errors::invalid_argument("node '{}': bad output index: input '{}:{}', but '{}' ({}) has {} output(s)",
                                        nd.name(), r.name, r.index, r.name, src->type, outputs);
      }
      spec.inputs.emplace_back(src, r.index);
    }
    for (const Ref& r : p.control) spec.extra_control_inputs.emplace_back(node_of(r));
    if (p.resource) spec.resource = node_of(*p.resource);
    std::vector<Node*> colocate;
    for (const Ref& r : p.colocate) colocate.push_back(node_of(r));
    into->device_scope_ = nd.device();
    into->colocation_scope_ = std::move(colocate);
    StatusOr<Node*> made_node = into->try_add_node(std::move(spec));
    if (!made_node.ok()) return made_node.status();
    Node* node = made_node.value();
    if (node->name != nd.name()) {
      // Another thread added a node of this name meanwhile.
      return errors::invalid_argument("duplicate name '{}': the graph already has a node of that name "
                                      "(this one was added as '{}')", nd.name(), node->name);
    }
    made[static_cast<std::size_t>(i)] = node;
    if (added != nullptr) added->push_back(node);
  }
  std::vector<std::pair<Node*, const AttrMap*>> loop_nodes;
  for (int i : order.value()) {
    const PendingNode& p = pending[static_cast<std::size_t>(i)];
    if (!p.loop_attrs.empty()) loop_nodes.emplace_back(made[static_cast<std::size_t>(i)], &p.loop_attrs);
  }
  return loop_nodes.empty() ? Status() : restore_loops(into, loop_nodes);
}

// ---- Traces ----

namespace {
// How far this process's wall clock (system_clock, µs since the epoch) is ahead of now_micros().
int64_t wall_minus_steady_us() {
  const int64_t wall = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return wall - now_micros();
}
}  // namespace

void encode_trace(const std::vector<TraceRecord>& records, google::protobuf::RepeatedPtrField<pb::TraceSpan>* out) {
  const int64_t shift = wall_minus_steady_us();
  out->Reserve(out->size() + static_cast<int>(records.size()));
  for (const TraceRecord& r : records) {
    pb::TraceSpan* span = out->Add();
    span->set_name(r.name);
    span->set_category(r.category);
    span->set_device(r.device);
    span->set_lane(r.lane);
    span->set_thread(r.thread);
    span->set_start_wall_us(r.start_us + shift);
    span->set_end_wall_us(r.end_us + shift);
  }
}

std::vector<TraceRecord> decode_trace(const google::protobuf::RepeatedPtrField<pb::TraceSpan>& spans) {
  const int64_t shift = wall_minus_steady_us();
  std::vector<TraceRecord> records;
  records.reserve(static_cast<std::size_t>(spans.size()));
  for (const pb::TraceSpan& span : spans) {
    TraceRecord r;
    r.name = span.name();
    r.category = span.category();
    r.device = span.device();
    r.lane = span.lane();
    r.thread = span.thread();
    // A peer's extreme values: shifted in unsigned arithmetic (it wraps), then kept within ±2^61 µs
    // so that differences of them never overflow later.
    auto local = [shift](int64_t wall) {
      constexpr int64_t kLimit = int64_t{1} << 61;
      return std::clamp(static_cast<int64_t>(static_cast<uint64_t>(wall) - static_cast<uint64_t>(shift)), -kLimit,
                        kLimit);
    };
    r.start_us = local(span.start_wall_us());
    r.end_us = std::max(r.start_us, local(span.end_wall_us()));
    records.push_back(std::move(r));
  }
  return records;
}

// ---- Status ----

pb::Status from_status(const tessera::Status& status) {
  pb::Status p;
  p.set_code(static_cast<int32_t>(status.code()));
  if (!status.ok()) p.set_message(status.message());
  return p;
}

tessera::Status to_status(const pb::Status& proto) {
  const int32_t code = proto.code();
  if (code == 0) return tessera::Status();
  if (code < static_cast<int>(ErrorCode::kCancelled) || code > static_cast<int>(ErrorCode::kUnauthenticated)) {
    return tessera::Status(ErrorCode::kUnknown, fmt::format("(error code {}) {}", code, proto.message()));
  }
  return tessera::Status(static_cast<ErrorCode>(code), proto.message());
}

}  // namespace tessera::internal::wire
