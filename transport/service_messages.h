// How the master's and workers' calls and replies go onto RPC frames: frame 0 a RequestHeader or
// ResponseHeader (wire.h) around the method's body, then payload frames, tensors among them as
// raw frames that NamedTensor metadata points to (small tensors inside the metadata). Shared by the
// master and the worker.
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
// The reply to a RecvTensor call that found `t` (a host tensor): frame 0 a ResponseHeader whose
// body is a RecvTensorResponse with tensor_to_frames' metadata of `t` (its bytes inline up to
// kInlineTensorMaxBytes, else frame 1), written straight into the frame: the bytes of
// wire::make_response_header(request_id, OK, &response), without the messages in between.
StatusOr<RpcMessage> recv_tensor_reply(uint64_t request_id, const Tensor& t);
// An OK reply whose body is `response` with `tensors` as its repeated NamedTensor field `field`
// (RunGraphResponse::recv, RunStepResponse::tensor): `entries` is that field, one entry per
// tensor with its name set; each tensor's metadata is tensor_to_frames' (inline, or a frame after
// frame 0). Written straight into frame 0 like recv_tensor_reply, the entries after the
// response's other fields (the same message to a parser). The names are moved out of `entries`,
// which is left empty (a failure may leave it half moved). Internal when the counts differ; a
// tensor that cannot be sent, its error.
StatusOr<RpcMessage> named_tensors_reply(uint64_t request_id, google::protobuf::Message* response,
                                         google::protobuf::RepeatedPtrField<wire::NamedTensor>* entries, int field,
                                         const std::vector<Tensor>& tensors);
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
// Tensors of at most this many bytes (a string tensor: its encoding) travel inside the header
// (TensorMeta.content), larger ones as frames of their own (Note [Wire format] in wire.h).
inline constexpr std::size_t kInlineTensorMaxBytes = 1024;
// Tensors travelling as NamedTensor metadata plus frames: `frames` are the message's frames
// (frame 0 the header). The tensor `meta` describes, its bytes inline (meta.frame() == 0, any
// size) or in the frame it names, validated against them; a framed one from kZeroCopyMinBytes is
// the frame itself where the alignment allows (frame_to_tensor).
StatusOr<Tensor> tensor_from_frames(const wire::TensorMeta& meta, std::vector<zmq::message_t>& frames,
                                    uint64_t max_bytes = wire::kMaxTensorBytes);
// The metadata of `t` (a host tensor), its bytes inline when they are at most kInlineTensorMaxBytes,
// else appended as the next frame of `frames` (whose first is frame `first_frame` of the message),
// which the metadata names.
StatusOr<wire::TensorMeta> tensor_to_frames(const Tensor& t, std::vector<zmq::message_t>* frames,
                                            std::size_t first_frame);

}  // namespace tessera::internal
