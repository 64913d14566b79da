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
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"
#include "transport/rpc.h"
#include "distributed/wire.h"

namespace tessera::internal {

// One frame holding `message`'s bytes.
zmq::message_t message_frame(const google::protobuf::Message& message);
// Encodes a call: frame 0 a RequestHeader around `body`, then `payload` frames.
RpcMessage make_call(const std::string& method, const google::protobuf::Message& body,
                     std::vector<zmq::message_t> payload = {});
// The status of a reply (the RPC's, then the header's) and, when OK, its body parsed into `body`.
Status parse_reply(const StatusOr<RpcMessage>& reply, google::protobuf::Message* body);
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
