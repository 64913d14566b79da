// How the master's and workers' calls and replies go onto RPC frames: frame 0 a RequestHeader or
// ResponseHeader (wire.h) around the method's body, then payload frames, tensors among them as
// raw frames that NamedTensor metadata points to. Shared by the master and the worker.
//
//   channel.call(make_call("RecvTensor", request), deadline, [](StatusOr<RpcMessage> reply) {
//     pb::RecvTensorResponse response;
//     Status st = parse_reply(reply, &response);   // the transport's error or the handler's
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"
#include "transport/rpc.h"
#include "distributed/wire.h"

namespace tessera::internal {

// One frame holding `message`'s bytes.
zmq::message_t message_frame(const google::protobuf::Message& message);
// Frame 0 of a call: the bytes of wire::make_request_header(request_id, method, body, deadline_ms),
// written straight into the frame (no header message, no copy of the body in between).
zmq::message_t request_frame(uint64_t request_id, std::string_view method, const google::protobuf::Message& body,
                             int64_t deadline_ms = 0);
// Frame 0 of a reply: the bytes of wire::make_response_header(request_id, status, body), the same
// way when `status` is OK.
zmq::message_t response_frame(uint64_t request_id, const Status& status, const google::protobuf::Message* body);
// Encodes a call: frame 0 a RequestHeader around `body`, then `payload` frames.
RpcMessage make_call(const std::string& method, const google::protobuf::Message& body,
                     std::vector<zmq::message_t> payload = {});
// The status of a reply (the RPC's, then the header's); when OK, `header` holds the reply's header,
// read in place (it views the reply's frame 0).
Status parse_reply_header(const StatusOr<RpcMessage>& reply, wire::ResponseHeaderView* header);
// The status of a reply (the RPC's, then the header's) and, when OK, its body parsed into `body`.
template <class M>
Status parse_reply(const StatusOr<RpcMessage>& reply, M* body) {
  wire::ResponseHeaderView header;
  Status st = parse_reply_header(reply, &header);
  if (!st.ok()) return st;
  return wire::parse_body(header.body(), body);
}
// A reply: frame 0 a ResponseHeader with `status` (and `body` when OK), then `payload`.
void send_reply(const Responder& respond, uint64_t request_id, const Status& status,
                const google::protobuf::Message* body, std::vector<zmq::message_t> payload = {});
// Tensors travelling as NamedTensor metadata plus frames: `frames` are the message's frames
// (frame 0 the header). Validates every tensor against its frame.
StatusOr<Tensor> tensor_from_frames(const wire::TensorMeta& meta, std::vector<zmq::message_t>& frames,
                                    uint64_t max_bytes = wire::kMaxTensorBytes);
// Appends `t` (a host tensor) as the next frame of `frames`; its metadata points there.
StatusOr<wire::TensorMeta> tensor_to_frames(const Tensor& t, std::vector<zmq::message_t>* frames,
                                            std::size_t first_frame);

}  // namespace tessera::internal
