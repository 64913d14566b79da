// Fuzz target: frame 0 of a call as a peer may send it. The input is parsed as a RequestHeader and
// as a ResponseHeader; a request's body is parsed as the message of its method and then decoded as
// far as a server would without a socket (graphs through decode_graph, tensor metadata through
// validate_tensor_meta); a response's body as every response message. Properties: what parses
// has version 1 (and a method, for requests), and re-serializing a parsed header parses back to
// the same header. A RunGraph response's trace spans go where a master puts them.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/executor.h"
#include "fuzz/fuzz_util.h"
#include "core/direct_session.h"
#include "distributed/wire.h"

namespace {

using namespace tessera;
namespace wire = tessera::internal::wire;
namespace pb = ::tessera::wire;

// Frames are not part of this input: a NamedTensor's frame is taken to be as long as its metadata
// claims, which is the most validate_tensor_meta lets through (it allocates nothing).
void check_tensor_meta(const pb::TensorMeta& meta) {
  Status st = wire::validate_tensor_meta(meta, static_cast<std::size_t>(meta.byte_size()));
  if (st.ok()) FUZZ_CHECK(meta.byte_size() <= wire::kMaxTensorBytes);
}

void check_named(const google::protobuf::RepeatedPtrField<pb::NamedTensor>& tensors) {
  for (const pb::NamedTensor& t : tensors) check_tensor_meta(t.meta());
}

// What a master does with a worker's trace spans: bring them onto its clock and into a Chrome
// trace. Properties: one record per span, none ending before it starts.
void check_trace(const google::protobuf::RepeatedPtrField<pb::TraceSpan>& spans) {
  std::vector<internal::TraceRecord> records = wire::decode_trace(spans);
  FUZZ_CHECK(records.size() == static_cast<std::size_t>(spans.size()));
  for (const internal::TraceRecord& r : records) FUZZ_CHECK(r.end_us >= r.start_us);
  const std::string json = internal::trace_to_json(std::move(records), internal::now_micros());
  FUZZ_CHECK(!json.empty());
}

// What the master and workers do with a received GraphDef: decode it into a graph of their own.
void check_graph(const pb::GraphDef& def) {
  Graph g;
  std::vector<internal::Node*> added;
  Status st = wire::decode_graph(def, &g.impl(), &added);
  if (st.ok()) FUZZ_CHECK(static_cast<int>(added.size()) == def.node_size());
}

template <class M, class F>
void body(std::string_view bytes, F&& decode) {
  auto parsed = wire::parse_body<M>(bytes);
  if (!parsed.ok()) return;
  FUZZ_CHECK(parsed.value().version() == wire::kWireVersion);
  decode(parsed.value());
}

void request_body(const std::string& method, std::string_view bytes) {
  if (method == "CreateSession") {
    body<pb::CreateSessionRequest>(bytes, [](const auto& m) { check_graph(m.graph()); });
  } else if (method == "ExtendSession") {
    body<pb::ExtendSessionRequest>(bytes, [](const auto& m) { check_graph(m.graph()); });
  } else if (method == "RunStep") {
    body<pb::RunStepRequest>(bytes, [](const auto& m) { check_named(m.feed()); });
  } else if (method == "CloseSession") {
    body<pb::CloseSessionRequest>(bytes, [](const auto&) {});
  } else if (method == "GetStatus") {
    body<pb::GetStatusRequest>(bytes, [](const auto&) {});
  } else if (method == "RegisterGraph") {
    body<pb::RegisterGraphRequest>(bytes, [](const auto& m) { check_graph(m.graph()); });
  } else if (method == "RunGraph") {
    body<pb::RunGraphRequest>(bytes, [](const auto& m) { check_named(m.send()); });
  } else if (method == "RecvTensor") {
    body<pb::RecvTensorRequest>(bytes, [](const auto&) {});
  } else if (method == "CleanupGraph") {
    body<pb::CleanupGraphRequest>(bytes, [](const auto&) {});
  } else if (method == "DeregisterGraph") {
    body<pb::DeregisterGraphRequest>(bytes, [](const auto&) {});
  } else if (method == "KeepAlive") {
    body<pb::KeepAliveRequest>(bytes, [](const auto&) {});
  }
  // Any other method is refused by the server before its body is looked at.
}

// A response does not name its method: the body is tried as each response message.
void response_body(std::string_view bytes) {
  body<pb::CreateSessionResponse>(bytes, [](const auto&) {});
  body<pb::ExtendSessionResponse>(bytes, [](const auto&) {});
  body<pb::RunStepResponse>(bytes, [](const auto& m) { check_named(m.tensor()); });
  body<pb::CloseSessionResponse>(bytes, [](const auto&) {});
  body<pb::GetStatusResponse>(bytes, [](const auto&) {});
  body<pb::RegisterGraphResponse>(bytes, [](const auto&) {});
  body<pb::RunGraphResponse>(bytes, [](const auto& m) {
    check_named(m.recv());
    check_trace(m.trace());
  });
  body<pb::RecvTensorResponse>(bytes, [](const auto& m) { check_tensor_meta(m.tensor()); });
  body<pb::CleanupGraphResponse>(bytes, [](const auto&) {});
  body<pb::DeregisterGraphResponse>(bytes, [](const auto&) {});
  body<pb::KeepAliveResponse>(bytes, [](const auto&) {});
}

void check_request(const uint8_t* data, size_t size) {
  // The method peeked at without a parse (never_blocks in transport/server.cc picks a thread by
  // it) is the one a parse finds, and the peek refuses what a parse refuses.
  pb::RequestHeader plain;
  const bool parses = size <= static_cast<size_t>(INT_MAX) && plain.ParseFromArray(data, static_cast<int>(size));
  const std::optional<std::string_view> peeked = wire::peek_request_method(data, size);
  FUZZ_CHECK(peeked.has_value() == parses);
  if (parses) FUZZ_CHECK(*peeked == plain.method());
  // The header read in place (Note [Headers read in place] in distributed/wire_headers.cc) is the
  // parsed one, field for field, and a refusal the same error.
  auto h = wire::parse_request_header(data, size);
  auto view = wire::read_request_header(data, size);
  FUZZ_CHECK(view.ok() == h.ok());
  if (!h.ok()) {
    FUZZ_CHECK(view.status().message() == h.status().message());
    return;
  }
  FUZZ_CHECK(view.value().version() == h.value().version());
  FUZZ_CHECK(view.value().request_id() == h.value().request_id());
  FUZZ_CHECK(view.value().method() == h.value().method());
  FUZZ_CHECK(view.value().deadline_ms() == h.value().deadline_ms());
  FUZZ_CHECK(view.value().body() == h.value().body());
  const pb::RequestHeader& header = h.value();
  FUZZ_CHECK(header.version() == wire::kWireVersion);
  FUZZ_CHECK(!header.method().empty());
  const std::string again = header.SerializeAsString();
  auto reparsed = wire::parse_request_header(again.data(), again.size());
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(reparsed.value().request_id() == header.request_id());
  FUZZ_CHECK(reparsed.value().method() == header.method());
  FUZZ_CHECK(reparsed.value().deadline_ms() == header.deadline_ms());
  FUZZ_CHECK(reparsed.value().body() == header.body());
  request_body(header.method(), header.body());
}

void check_response(const uint8_t* data, size_t size) {
  auto h = wire::parse_response_header(data, size);
  auto view = wire::read_response_header(data, size);
  FUZZ_CHECK(view.ok() == h.ok());
  if (!h.ok()) {
    FUZZ_CHECK(view.status().message() == h.status().message());
    return;
  }
  const pb::ResponseHeader& header = h.value();
  FUZZ_CHECK(header.version() == wire::kWireVersion);
  const tessera::Status status = wire::to_status(header.status());
  FUZZ_CHECK(view.value().request_id() == header.request_id());
  FUZZ_CHECK(view.value().body() == header.body());
  FUZZ_CHECK(view.value().status().code() == status.code() && view.value().status().message() == status.message());
  FUZZ_CHECK(status.ok() == (header.status().code() == 0));
  if (!status.ok()) {
    // The status survives the trip back intact (an unknown code as Unknown, number in the message).
    const tessera::Status back = wire::to_status(wire::from_status(status));
    FUZZ_CHECK(back.code() == status.code() && back.message() == status.message());
    return;
  }
  const std::string again = header.SerializeAsString();
  auto reparsed = wire::parse_response_header(again.data(), again.size());
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(reparsed.value().request_id() == header.request_id());
  FUZZ_CHECK(reparsed.value().body() == header.body());
  response_body(header.body());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::quiet_protobuf();
  try {
    check_request(data, size);
    check_response(data, size);
  } catch (const tessera::Error&) {
    // A typed error is an acceptable answer to bad input.
  }
  return 0;
}
