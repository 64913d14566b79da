// How the master's and workers' calls and replies go onto RPC frames (service_messages.h).
#include "transport/service_messages.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "core/logging.h"
#include "core/string_tensor.h"

namespace tessera::internal {

namespace {
std::atomic<uint64_t> next_request_id{1};
}  // namespace

zmq::message_t message_frame(const google::protobuf::Message& message) {
  zmq::message_t frame(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(frame.data()));
  return frame;
}

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

// The size of a length-delimited field `field` of `size` bytes, 0 when empty (proto3 leaves empty
// fields out), and writing one.
std::size_t bytes_field_size(int field, std::size_t size) {
  if (size == 0) return 0;
  return WireFormatLite::TagSize(field, WireFormatLite::TYPE_BYTES) +
         CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) + size;
}
uint8_t* write_bytes_tag(int field, std::size_t size, uint8_t* p) {
  p = WireFormatLite::WriteTagToArray(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, p);
  return CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
}
std::size_t varint_field_size(int field, uint64_t value) {
  if (value == 0) return 0;
  return WireFormatLite::TagSize(field, WireFormatLite::TYPE_UINT64) + CodedOutputStream::VarintSize64(value);
}

}  // namespace

// The fields in field-number order, zeros and empty ones left out: the bytes the generated
// serializer writes for the header (tests compare them).
zmq::message_t request_frame(uint64_t request_id, std::string_view method, const google::protobuf::Message& body,
                             int64_t deadline_ms) {
  const std::size_t body_size = body.ByteSizeLong();
  if (body_size > static_cast<std::size_t>(INT_MAX) || method.size() > static_cast<std::size_t>(INT_MAX)) {
    // Too large for protobuf either way: as make_request_header leaves it.
    return message_frame(wire::make_request_header(request_id, std::string(method), body, deadline_ms));
  }
  const auto deadline = static_cast<uint64_t>(deadline_ms);  // int64 travels as its two's complement varint
  const std::size_t size = varint_field_size(1, wire::kWireVersion) + varint_field_size(2, request_id) +
                           bytes_field_size(3, method.size()) + varint_field_size(4, deadline) +
                           bytes_field_size(5, body_size);
  zmq::message_t frame(size);
  auto* p = static_cast<uint8_t*>(frame.data());
  p = WireFormatLite::WriteUInt32ToArray(1, wire::kWireVersion, p);
  if (request_id != 0) p = WireFormatLite::WriteUInt64ToArray(2, request_id, p);
  if (!method.empty()) {
    p = write_bytes_tag(3, method.size(), p);
    p = std::copy(method.begin(), method.end(), p);
  }
  if (deadline != 0) p = WireFormatLite::WriteInt64ToArray(4, deadline_ms, p);
  if (body_size != 0) p = body.SerializeWithCachedSizesToArray(write_bytes_tag(5, body_size, p));
  TESSERA_CHECK(p == static_cast<uint8_t*>(frame.data()) + size);
  return frame;
}

zmq::message_t response_frame(uint64_t request_id, const Status& status, const google::protobuf::Message* body) {
  const std::size_t body_size = body == nullptr ? 0 : body->ByteSizeLong();
  if (!status.ok() || body_size > static_cast<std::size_t>(INT_MAX)) {
    // Errors carry a Status message: the generated serializer writes them.
    return message_frame(wire::make_response_header(request_id, status, status.ok() ? body : nullptr));
  }
  const std::size_t size =
      varint_field_size(1, wire::kWireVersion) + varint_field_size(2, request_id) + bytes_field_size(4, body_size);
  zmq::message_t frame(size);
  auto* p = static_cast<uint8_t*>(frame.data());
  p = WireFormatLite::WriteUInt32ToArray(1, wire::kWireVersion, p);
  if (request_id != 0) p = WireFormatLite::WriteUInt64ToArray(2, request_id, p);
  if (body_size != 0) p = body->SerializeWithCachedSizesToArray(write_bytes_tag(4, body_size, p));
  TESSERA_CHECK(p == static_cast<uint8_t*>(frame.data()) + size);
  return frame;
}

RpcMessage make_call(const std::string& method, const google::protobuf::Message& body,
                     std::vector<zmq::message_t> payload) {
  RpcMessage m;
  m.frames.reserve(payload.size() + 1);
  m.frames.push_back(request_frame(next_request_id.fetch_add(1, std::memory_order_relaxed), method, body));
  for (auto& f : payload) m.frames.push_back(std::move(f));
  return m;
}

Status parse_reply_header(const StatusOr<RpcMessage>& reply, wire::ResponseHeaderView* header) {
  if (!reply.ok()) return reply.status();
  const auto& frames = reply.value().frames;
  if (frames.empty()) return errors::internal("an empty reply");
  auto read = wire::read_response_header(frames[0].data(), frames[0].size());
  if (!read.ok()) return read.status();
  *header = read.value();
  return header->status();
}

void send_reply(const Responder& respond, uint64_t request_id, const Status& status,
                const google::protobuf::Message* body, std::vector<zmq::message_t> payload) {
  RpcMessage out;
  out.frames.reserve(payload.size() + 1);
  out.frames.push_back(response_frame(request_id, status, status.ok() ? body : nullptr));
  if (status.ok()) {
    for (auto& f : payload) out.frames.push_back(std::move(f));
  }
  respond(std::move(out));
}

StatusOr<Tensor> tensor_from_frames(const wire::TensorMeta& meta, std::vector<zmq::message_t>& frames,
                                    uint64_t max_bytes) {
  const uint32_t index = meta.frame();
  if (index == 0) {  // inline
    const std::string& content = meta.content();
    return wire::decode_tensor(meta, content.data(), content.size(), max_bytes);
  }
  if (index >= frames.size()) {
    return errors::invalid_argument("a tensor refers to frame {}, but the message has frames 1..{}", index,
                                    frames.size() - 1);
  }
  if (!meta.content().empty()) {
    return errors::invalid_argument("a tensor in frame {} carries {} bytes inline as well", index,
                                    meta.content().size());
  }
  TESSERA_RETURN_IF_ERROR(wire::validate_tensor_meta(meta, frames[index].size(), max_bytes));
  auto dtype = wire::decode_dtype(meta.dtype());
  if (!dtype.ok()) return dtype.status();
  TESSERA_RETURN_IF_ERROR(wire::validate_tensor_content(dtype.value(), frames[index].data(), frames[index].size()));
  // (A string tensor's frame is its encoding: frame_to_tensor decodes it, element by element.)
  std::vector<int64_t> dims(meta.dims().begin(), meta.dims().end());
  Shape shape(dims);
  return frame_to_tensor(std::move(frames[index]), dtype.value(), shape, dtype_size(dtype.value()));
}

StatusOr<wire::TensorMeta> tensor_to_frames(const Tensor& t, std::vector<zmq::message_t>* frames,
                                            std::size_t first_frame) {
  if (!t.is_null() && is_host_tensor(t)) {
    if (t.dtype() == DType::String) {
      if (encoded_strings_size(t) <= kInlineTensorMaxBytes) {
        wire::TensorMeta meta = wire::encode_tensor_meta(t, 0);
        meta.set_content(encode_strings(t));
        return meta;
      }
    } else if (t.bytes() <= kInlineTensorMaxBytes) {
      wire::TensorMeta meta = wire::encode_tensor_meta(t, 0);
      meta.set_content(static_cast<const char*>(t.raw_data()), t.bytes());
      return meta;
    }
  }
  auto frame = tensor_frame(t);  // null and device tensors: its error
  if (!frame.ok()) return frame.status();
  const auto index = static_cast<uint32_t>(first_frame + frames->size());
  frames->push_back(std::move(frame).value());
  return wire::encode_tensor_meta(t, index);
}

}  // namespace tessera::internal
