// tessera's wire format: encoding and validating the messages of distributed/wire.proto.
//
//   // Sender: a RunStep feed travels as metadata in the body plus one raw frame of bytes.
//   wire::NamedTensor* feed = request.add_feed();
//   feed->set_name("x:0");
//   *feed->mutable_meta() = wire::encode_tensor_meta(tensor, /*frame=*/1);  // frame 1: tensor.raw_data()
//   // Receiver: never trust the peer.
//   StatusOr<Tensor> t = wire::decode_tensor(feed.meta(), frame.data(), frame.size());
//
//   StatusOr<wire::GraphDef> def = wire::encode_graph(graph.impl(), nodes);
//   Status st = wire::decode_graph(def.value(), &other_graph.impl(), &added);
//
// Note [Wire format]
// ~~~~~~~~~~~~~~~~~~
// Control messages and graphs are Protocol Buffers (proto3, distributed/wire.proto); tensor bytes are
// not. Why protobuf:
//   * A schema: both ends agree on one file; `protoc --decode` shows a message for debugging.
//   * Evolvable: new fields get new numbers and old peers skip them, so the master and workers can
//     be upgraded one at a time; `version` (kWireVersion) is bumped only for changes an old peer would
//     misread, and a mismatch is refused with a clear error instead of being misread.
//   * A parser hardened by years of fuzzing (OSS-Fuzz): every byte a peer sends goes through it
//     first, and everything it accepts is then validated here (dtypes, ranks, sizes, names, ops,
//     attrs, edges) before anything is allocated or added to a graph.
//   * TensorFlow's own choice: NodeDef, GraphDef, AttrValue, DataType and the master/worker services
//     (CreateSession, RunStep, RunGraph, RecvTensor, ...) mirror TF's; a TF user reads them at once.
// Why tensors above kInlineTensorMaxBytes (1 KiB, service_messages.h) travel as raw ZeroMQ frames
// of their own, named by TensorMeta.frame:
//   * Sending: a `bytes` field is a copy into the serialized message (and, for big tensors, a
//     second one into the frame); a raw frame is the tensor's own buffer (zmq_msg_init_data).
//   * Receiving: the frame's buffer can become the tensor's (TensorBuffer::release frees the zmq
//     message), and parsing the header stays cheap whatever the tensors weigh.
// Smaller ones travel in TensorMeta.content (frame 0): a framed tensor below kZeroCopyMinBytes is
// copied on both ends anyway, and up to 1 KiB a frame costs more than the copies into and out of
// the header; at 4 KiB they cost more (benchmarks/README.md, "Figures behind the transport's
// notes"). Attr tensors (Const values) go inline as TensorProto, whatever their size.
// Validation order for a tensor: validate_tensor_meta() checks everything the metadata promises
// against the frame (dtype, rank, dims, element count and byte size without overflow, a size cap)
// before a byte is allocated; validate_tensor_content() checks the bytes themselves (bools must be
// 0 or 1). decode_tensor() does both and copies; a zero-copy receiver calls both, then adopts the
// frame.
//
// Every decode path in this file is safe on arbitrary bytes (it is fuzzed): errors come back as a
// Status, nothing aborts, and no allocation is sized by an unchecked field. Free functions; safe to
// call from any thread (decode_graph mutates the graph it is given: see there).
#pragma once

#include <climits>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/node.h"
#include "core/op_kernel.h"
#include "core/status.h"
#include "tessera/tensor.h"
#include "distributed/wire.pb.h"

namespace google::protobuf {
class Message;
}

namespace tessera::internal::wire {

// The generated messages live in tessera::wire (package tessera.wire). The ones whose names do not
// clash with tessera's own types are visible here too; use pb::Status, pb::AttrValue, pb::DType.
namespace pb = ::tessera::wire;
using pb::CreateSessionRequest;
using pb::CreateSessionResponse;
using pb::GraphDef;
using pb::NamedTensor;
using pb::NodeDef;
using pb::RequestHeader;
using pb::ResponseHeader;
using pb::ShapeProto;
using pb::TensorMeta;
using pb::TensorProto;

// The version this build speaks; every top-level message carries it in field 1.
inline constexpr uint32_t kWireVersion = 1;
// Default cap on one tensor received from a peer (ResourceExhausted above it).
inline constexpr uint64_t kMaxTensorBytes = uint64_t{4} << 30;  // 4 GiB

// ---- Dtypes and shapes ----

pb::DType encode_dtype(DType dtype);
// InvalidArgument for DT_INVALID and numbers tessera does not know.
StatusOr<DType> decode_dtype(int value);
ShapeProto encode_shape(const Shape& shape);
// A partial shape: rank <= Shape::kMaxRank, dims >= -1, no dims with unknown_rank, and the product
// of the known dims fits int64.
StatusOr<Shape> decode_shape(const ShapeProto& proto);

// ---- Tensors ----

// Metadata of `t` whose bytes (t.raw_data(), t.bytes() long) travel as frame `frame`. A null
// tensor encodes as DT_INVALID, which decoding rejects.
TensorMeta encode_tensor_meta(const Tensor& t, uint32_t frame);
// Checks that `meta` describes a tensor tessera can hold and that the frame holding its bytes is
// `frame_size` long: known dtype, rank <= Shape::kMaxRank, every dim >= 0, element count and byte
// size without overflow, byte_size == elements * dtype_size == frame_size. InvalidArgument naming
// what is wrong, or ResourceExhausted when byte_size exceeds `max_bytes`. Allocates nothing.
Status validate_tensor_meta(const TensorMeta& meta, std::size_t frame_size,
                            uint64_t max_bytes = kMaxTensorBytes);
// Checks the bytes of a tensor whose metadata passed: every bool is 0 or 1 (other dtypes accept
// any bit pattern).
Status validate_tensor_content(DType dtype, const void* data, std::size_t size);
// Validates, then copies the `size` bytes at `data` into a new host tensor.
StatusOr<Tensor> decode_tensor(const TensorMeta& meta, const void* data, std::size_t size,
                               uint64_t max_bytes = kMaxTensorBytes);
// A host tensor inline (attr values). InvalidArgument for a null tensor or one in device memory.
StatusOr<TensorProto> encode_tensor_proto(const Tensor& t);
StatusOr<Tensor> decode_tensor_proto(const TensorProto& proto, uint64_t max_bytes = kMaxTensorBytes);

// ---- Attrs ----

StatusOr<pb::AttrValue> encode_attr(const AttrValue& value);
StatusOr<AttrValue> decode_attr(const pb::AttrValue& proto);

// ---- Graphs ----

// The NodeDefs of `nodes` (nodes of `graph`, each once): data inputs "node:index" in input order,
// then control inputs "^node"; the requested device; attrs; resource and colocate_with by name.
// The nodes come out in a topological order of their data, control, resource and colocation
// edges that keeps the given order wherever it already is one (so a graph built by the API comes
// out in creation order). InvalidArgument when a node refers to one outside `nodes`, the edges
// form a cycle (Operation::add_control_input allows one), a name cannot be encoded, or an attr
// tensor is not in host memory. Takes the graph's lock (shared).
// With `refer_outside`, the nodes may also refer to other nodes of `graph` (by name: an
// ExtendSession's new nodes refer to the nodes sent before).
StatusOr<GraphDef> encode_graph(const GraphImpl& graph, const std::vector<const Node*>& nodes,
                                bool refer_outside = false);
// Every node of `graph`.
StatusOr<GraphDef> encode_graph(const GraphImpl& graph);

// Adds the nodes of `def` to `into` through GraphImpl::add_node (so shape inference checks every
// op's inputs and attrs), under their exact names, and appends them to `added` (may be null) in the
// order added. Inputs, resource and colocate_with may name nodes of `def` (in any order: nodes are
// added in a topological order, the def's order where it already is one) or nodes already in
// `into` (ExtendSession). Everything that can be checked without shape inference is checked before
// the first node is added: version, names (non-empty, no ':', no leading '^', unique in the def
// and in `into`: "duplicate name"), known op types, each op's attrs (names and types, see
// op_attr_schema() in wire_attr_schema.h: an op without an entry is Unimplemented), devices
// (well-formed specs), input syntax (data inputs before control inputs), references ("dangling
// input"), cycles. Output indices are checked as each node is added ("bad output index"). On an
// error after that point (shape inference), the nodes already added stay in `into` (a graph cannot
// drop nodes): decode into a graph that can be discarded when that matters.
// Devices: the node's requested_device is `device` exactly, except that an op with a resource and
// no device inherits its resource's request, as add_node does for graphs built by the API (so
// decode(encode(g)) reproduces g). Uses `into`'s scopes (restored before returning), so like any
// graph building it must not run while another thread builds `into`.
// The most nodes a decoded graph may reach (ServerOptions::max_graph_nodes' default).
inline constexpr int64_t kDefaultMaxGraphNodes = 1'000'000;
// ResourceExhausted, before anything is decoded, when `into` would pass `max_nodes` nodes.
Status decode_graph(const GraphDef& def, GraphImpl* into, std::vector<Node*>* added = nullptr,
                    int64_t max_nodes = kDefaultMaxGraphNodes);

// ---- Status ----

pb::Status from_status(const tessera::Status& status);
// Code and message intact; a code tessera does not know becomes Unknown (the number is kept in the
// message); code 0 is OK whatever the message.
tessera::Status to_status(const pb::Status& proto);

// ---- Traces ----

// Appends `records` (spans on this process's now_micros() clock) to `out`, on its wall clock.
void encode_trace(const std::vector<TraceRecord>& records, google::protobuf::RepeatedPtrField<pb::TraceSpan>* out);
// The spans a peer sent, on this process's now_micros() clock. A span that ends before it starts
// ends when it starts, and times are clamped to ±2^61 µs (whatever a peer sends, later arithmetic
// on them cannot overflow); nothing is sized by the peer beyond the message it came in.
std::vector<TraceRecord> decode_trace(const google::protobuf::RepeatedPtrField<pb::TraceSpan>& spans);

// ---- Envelopes ----

// A header whose body is `body` serialized; version set.
RequestHeader make_request_header(uint64_t request_id, std::string method,
                                  const google::protobuf::Message& body, int64_t deadline_ms = 0);
// With the body only when `status` is OK (`body` may be null).
ResponseHeader make_response_header(uint64_t request_id, const tessera::Status& status,
                                    const google::protobuf::Message* body);

// Parse frame 0 of a call. InvalidArgument when the bytes do not parse, the version is not
// kWireVersion, or (requests) the method is empty.
StatusOr<RequestHeader> parse_request_header(const void* data, std::size_t size);
StatusOr<ResponseHeader> parse_response_header(const void* data, std::size_t size);

// The method of a serialized RequestHeader, read without parsing the rest (the body is not
// copied): a view into `data`, "" when the bytes hold no method field, nullopt when they are not
// a well-formed message (a full parse then fails too). For choosing a thread before the parse.
std::optional<std::string_view> peek_request_method(const void* data, std::size_t size);

// Frame 0 of a call read in place, for the paths every call takes (a server's dispatch, a
// caller's reply): no message is built and nothing is copied or allocated; `method` and `body`
// view the bytes read, which must outlive the view. The accessors are the messages' own.
// read_request_header and read_response_header accept exactly the bytes parse_request_header and
// parse_response_header accept, with the same fields and the same errors.
class RequestHeaderView {
 public:
  uint32_t version() const { return version_; }
  uint64_t request_id() const { return request_id_; }
  std::string_view method() const { return method_; }
  int64_t deadline_ms() const { return deadline_ms_; }
  std::string_view body() const { return body_; }

 private:
  friend StatusOr<RequestHeaderView> read_request_header(const void* data, std::size_t size);
  uint32_t version_ = 0;
  uint64_t request_id_ = 0;
  std::string_view method_;
  int64_t deadline_ms_ = 0;
  std::string_view body_;
};
class ResponseHeaderView {
 public:
  uint32_t version() const { return version_; }
  uint64_t request_id() const { return request_id_; }
  // The handler's status: to_status of the status field, OK when there is none.
  const tessera::Status& status() const { return status_; }
  std::string_view body() const { return body_; }

 private:
  friend StatusOr<ResponseHeaderView> read_response_header(const void* data, std::size_t size);
  uint32_t version_ = 0;
  uint64_t request_id_ = 0;
  tessera::Status status_;
  std::string_view body_;
};
StatusOr<RequestHeaderView> read_request_header(const void* data, std::size_t size);
StatusOr<ResponseHeaderView> read_response_header(const void* data, std::size_t size);

// Parses a method message (a header's body) into `out` and checks its version field (field 1,
// which every top-level message of wire.proto has). InvalidArgument naming the message type.
Status parse_body(std::string_view bytes, google::protobuf::Message* out);
// The same for a message whose type is known here: its version() is read directly, and the type
// name is looked up only for an error (no reflection, no allocation on the way).
template <class M>
  requires requires(const M& m) { { m.version() } -> std::convertible_to<uint32_t>; }
Status parse_body(std::string_view bytes, M* out) {
  if (bytes.size() <= static_cast<std::size_t>(INT_MAX) &&
      out->ParseFromArray(bytes.empty() ? "" : bytes.data(), static_cast<int>(bytes.size())) &&
      out->version() == kWireVersion) {
    return Status();
  }
  return parse_body(bytes, static_cast<google::protobuf::Message*>(out));  // names what is wrong
}
template <class M>
StatusOr<M> parse_body(std::string_view bytes) {
  M message;
  Status st = parse_body(bytes, &message);
  if (!st.ok()) return st;
  return message;
}

}  // namespace tessera::internal::wire
