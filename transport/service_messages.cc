// How the master's and workers' calls and replies go onto RPC frames (service_messages.h).
#include "transport/service_messages.h"

#include <atomic>
#include <utility>

namespace tessera::internal {

namespace {
std::atomic<uint64_t> next_request_id{1};
}  // namespace

zmq::message_t message_frame(const google::protobuf::Message& message) {
  zmq::message_t frame(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(frame.data()));
  return frame;
}

RpcMessage make_call(const std::string& method, const google::protobuf::Message& body,
                     std::vector<zmq::message_t> payload) {
  RpcMessage m;
  m.frames.reserve(payload.size() + 1);
  m.frames.push_back(message_frame(
      wire::make_request_header(next_request_id.fetch_add(1, std::memory_order_relaxed), method, body)));
  for (auto& f : payload) m.frames.push_back(std::move(f));
  return m;
}

Status parse_reply(const StatusOr<RpcMessage>& reply, google::protobuf::Message* body) {
  if (!reply.ok()) return reply.status();
  const auto& frames = reply.value().frames;
  if (frames.empty()) return errors::internal("an empty reply");
  auto header = wire::parse_response_header(frames[0].data(), frames[0].size());
  if (!header.ok()) return header.status();
  Status st = wire::to_status(header.value().status());
  if (!st.ok()) return st;
  return wire::parse_body(header.value().body(), body);
}

void send_reply(const Responder& respond, uint64_t request_id, const Status& status,
                const google::protobuf::Message* body, std::vector<zmq::message_t> payload) {
  RpcMessage out;
  out.frames.reserve(payload.size() + 1);
  out.frames.push_back(message_frame(wire::make_response_header(request_id, status, status.ok() ? body : nullptr)));
  if (status.ok()) {
    for (auto& f : payload) out.frames.push_back(std::move(f));
  }
  respond(std::move(out));
}

StatusOr<Tensor> tensor_from_frames(const wire::TensorMeta& meta, std::vector<zmq::message_t>& frames,
                                    uint64_t max_bytes) {
  const uint32_t index = meta.frame();
  if (index == 0 || index >= frames.size()) {
    return errors::invalid_argument("a tensor refers to frame {}, but the message has frames 1..{}", index,
                                    frames.size() - 1);
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
  auto frame = tensor_frame(t);
  if (!frame.ok()) return frame.status();
  const auto index = static_cast<uint32_t>(first_frame + frames->size());
  frames->push_back(std::move(frame).value());
  return wire::encode_tensor_meta(t, index);
}

}  // namespace tessera::internal
