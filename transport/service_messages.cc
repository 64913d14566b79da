// How the master's and workers' calls and replies go onto RPC frames (service_messages.h).
#include "transport/service_messages.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <optional>
#include <string>
#include <string_view>
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

// Frame 0 of an OK reply whose body is `body_size` bytes: the header's fields, then write_body(p)
// writes the body and returns the end.
template <class WriteBody>
zmq::message_t ok_reply_frame(uint64_t request_id, std::size_t body_size, WriteBody write_body) {
  const std::size_t size =
      varint_field_size(1, wire::kWireVersion) + varint_field_size(2, request_id) + bytes_field_size(4, body_size);
  zmq::message_t frame(size);
  auto* p = static_cast<uint8_t*>(frame.data());
  p = WireFormatLite::WriteUInt32ToArray(1, wire::kWireVersion, p);
  if (request_id != 0) p = WireFormatLite::WriteUInt64ToArray(2, request_id, p);
  if (body_size != 0) p = write_body(write_bytes_tag(4, body_size, p));
  TESSERA_CHECK(p == static_cast<uint8_t*>(frame.data()) + size);
  return frame;
}

// The bytes of `t` (a host tensor) when it travels inside its metadata: at most
// kInlineTensorMaxBytes of them (a string tensor's encoding, made into *strings); else nullopt.
std::optional<std::string_view> inline_bytes(const Tensor& t, std::string* strings) {
  if (t.dtype() == DType::String) {
    if (encoded_strings_size(t) > kInlineTensorMaxBytes) return std::nullopt;
    *strings = encode_strings(t);
    return std::string_view(*strings);
  }
  if (t.bytes() > kInlineTensorMaxBytes) return std::nullopt;
  return std::string_view(static_cast<const char*>(t.raw_data()), t.bytes());
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
  return ok_reply_frame(request_id, body_size, [&](uint8_t* p) { return body->SerializeWithCachedSizesToArray(p); });
}

namespace {

// The TensorMeta tensor_to_frames makes of a tensor, to be written without the message: its bytes
// inline, or its frame appended to the message's.
struct MetaBytes {
  std::string strings;  // a string tensor's encoding, inline
  bool inline_strings = false;
  std::string_view raw;  // a numeric tensor's bytes, inline (the tensor's own)
  uint64_t dtype = 0;
  uint64_t byte_size = 0;
  uint32_t frame = 0;
  const Shape* shape = nullptr;  // the tensor's
  std::size_t dims_bytes = 0;
  std::size_t size = 0;  // serialized

  std::string_view content() const { return inline_strings ? std::string_view(strings) : raw; }
};

// Fills `m` for `t` (a host tensor; else tensor_frame's error; `m` refers to `t`, which must outlive
// it), appending its frame to `frames` (whose first is frame `first_frame` of the message) unless
// it goes inline.
Status meta_bytes(const Tensor& t, std::vector<zmq::message_t>* frames, std::size_t first_frame, MetaBytes* m) {
  if (t.is_null() || !is_host_tensor(t)) return tensor_frame(t).status();
  if (std::optional<std::string_view> content = inline_bytes(t, &m->strings)) {
    m->inline_strings = t.dtype() == DType::String;
    if (!m->inline_strings) m->raw = *content;
    m->byte_size = content->size();
  } else {
    StatusOr<zmq::message_t> f = tensor_frame(t);
    if (!f.ok()) return f.status();
    m->byte_size = f.value().size();
    m->frame = static_cast<uint32_t>(first_frame + frames->size());
    frames->push_back(std::move(f).value());
  }
  m->dtype = static_cast<uint64_t>(wire::encode_dtype(t.dtype()));  // > 0
  m->shape = &t.shape();
  for (int i = 0; i < m->shape->rank(); ++i) {
    m->dims_bytes += CodedOutputStream::VarintSize64(static_cast<uint64_t>(m->shape->dim(i)));
  }
  m->size = varint_field_size(1, m->dtype) + bytes_field_size(2, m->dims_bytes) + varint_field_size(3, m->byte_size) +
            varint_field_size(4, m->frame) + bytes_field_size(5, m->content().size());
  return Status();
}

// The fields in field-number order, zeros and empty ones left out, the dims packed: the
// generated serializer's bytes.
uint8_t* write_meta(const MetaBytes& m, uint8_t* p) {
  p = WireFormatLite::WriteUInt64ToArray(1, m.dtype, p);
  if (m.dims_bytes != 0) {
    p = write_bytes_tag(2, m.dims_bytes, p);
    for (int i = 0; i < m.shape->rank(); ++i) {
      p = CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(m.shape->dim(i)), p);
    }
  }
  if (m.byte_size != 0) p = WireFormatLite::WriteUInt64ToArray(3, m.byte_size, p);
  if (m.frame != 0) p = WireFormatLite::WriteUInt32ToArray(4, m.frame, p);
  const std::string_view content = m.content();
  if (!content.empty()) p = std::copy(content.begin(), content.end(), write_bytes_tag(5, content.size(), p));
  return p;
}

// A field `field` holding a message of `size` bytes, written even when empty (a set submessage).
std::size_t message_field_size(int field, std::size_t size) {
  return WireFormatLite::TagSize(field, WireFormatLite::TYPE_MESSAGE) +
         CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) + size;
}

}  // namespace

StatusOr<RpcMessage> recv_tensor_reply(uint64_t request_id, const Tensor& t) {
  RpcMessage reply;
  if (t.is_null()) {  // dead: RecvTensorResponse's version and is_dead, no tensor
    const std::size_t body_size = varint_field_size(1, wire::kWireVersion) + varint_field_size(3, 1);
    reply.frames.emplace_back(ok_reply_frame(request_id, body_size, [&](uint8_t* p) {
      p = WireFormatLite::WriteUInt32ToArray(1, wire::kWireVersion, p);
      return WireFormatLite::WriteBoolToArray(3, true, p);
    }));
    return reply;
  }
  reply.frames.reserve(2);
  reply.frames.emplace_back();  // frame 0, written below; the tensor's frame (if any) after it
  MetaBytes meta;
  TESSERA_RETURN_IF_ERROR(meta_bytes(t, &reply.frames, 0, &meta));
  // RecvTensorResponse: version, then the tensor (always present).
  const std::size_t body_size = varint_field_size(1, wire::kWireVersion) + message_field_size(2, meta.size);
  reply.frames[0] = ok_reply_frame(request_id, body_size, [&](uint8_t* p) {
    p = WireFormatLite::WriteUInt32ToArray(1, wire::kWireVersion, p);
    return write_meta(meta, write_bytes_tag(2, meta.size, p));
  });
  return reply;
}

StatusOr<RpcMessage> named_tensors_reply(uint64_t request_id, google::protobuf::Message* response,
                                         google::protobuf::RepeatedPtrField<wire::NamedTensor>* entries, int field,
                                         const std::vector<Tensor>& tensors) {
  if (static_cast<std::size_t>(entries->size()) != tensors.size()) {
    return errors::internal("a reply names {} tensors and carries {}", entries->size(), tensors.size());
  }
  RpcMessage reply;
  reply.frames.reserve(1 + tensors.size());
  reply.frames.emplace_back();  // frame 0, written below
  std::vector<MetaBytes> metas(tensors.size());
  std::vector<std::string> names(tensors.size());
  std::vector<std::size_t> entry_sizes(tensors.size());
  std::size_t body_size = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(meta_bytes(tensors[i], &reply.frames, 0, &metas[i]));
    names[i] = std::move(*entries->Mutable(static_cast<int>(i))->mutable_name());
    // NamedTensor: the name, then the metadata (always present).
    entry_sizes[i] = bytes_field_size(1, names[i].size()) + message_field_size(2, metas[i].size);
    body_size += message_field_size(field, entry_sizes[i]);
  }
  entries->Clear();
  const std::size_t rest_size = response->ByteSizeLong();
  body_size += rest_size;
  if (body_size > static_cast<std::size_t>(INT_MAX)) {
    return errors::resource_exhausted("a reply of {} bytes is too large for one message", body_size);
  }
  reply.frames[0] = ok_reply_frame(request_id, body_size, [&](uint8_t* p) {
    // The other fields first, then the entries: a parser appends a repeated field's entries in
    // the order they come, wherever they are (the protobuf encoding's rule for repeated fields).
    p = response->SerializeWithCachedSizesToArray(p);
    for (std::size_t i = 0; i < metas.size(); ++i) {
      p = write_bytes_tag(field, entry_sizes[i], p);
      if (!names[i].empty()) p = std::copy(names[i].begin(), names[i].end(), write_bytes_tag(1, names[i].size(), p));
      p = write_meta(metas[i], write_bytes_tag(2, metas[i].size, p));
    }
    return p;
  });
  return reply;
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
    std::string strings;
    if (std::optional<std::string_view> content = inline_bytes(t, &strings)) {
      wire::TensorMeta meta = wire::encode_tensor_meta(t, 0);
      meta.set_content(content->data(), content->size());
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
