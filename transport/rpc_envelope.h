// The RPC envelope (Note [RPC envelope] in rpc_envelope.cc): the frame in front of every request
// and reply that names the call (a reply's with its status). Internal to the RPC server and
// channel.
//
//   socket.send(call_id_frame(id), zmq::send_flags::sndmore);   // then the request's frames
//   auto e = parse_envelope(first);   // {kWhole, kJoined, kHead or kChunk, id}; nullopt: not ours (dropped)
//   auto r = parse_reply_envelope(first);   // a whole reply's {id, status}
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"

namespace tessera::internal {

// The envelope's magic: a whole message, the head of a streamed one, a chunk of a streamed one
// (Note [Streamed frames] in rpc_stream.cc).
inline constexpr char kMagic[4] = {'T', 'R', 'P', '1'};
// A whole reply (the call id and the status in one frame).
inline constexpr char kReplyMagic[4] = {'T', 'R', 'R', '1'};
inline constexpr char kHeadMagic[4] = {'T', 'R', 'S', '1'};
inline constexpr char kChunkMagic[4] = {'T', 'R', 'C', '1'};
// A stopping server's goodbye, alone in its message, and the caller's answer to it (Note
// [Goodbye] in rpc_server_peers.cc); their id is 0.
inline constexpr char kGoodbyeMagic[4] = {'T', 'R', 'G', '1'};
inline constexpr char kGoodbyeAckMagic[4] = {'T', 'R', 'A', '1'};
// A whole request, and a whole OK reply, whose frame 0 follows the call id in the envelope's own
// frame (Note [Joined envelopes] in rpc_envelope.cc).
inline constexpr char kJoinedMagic[4] = {'T', 'R', 'Q', '1'};
inline constexpr char kJoinedReplyMagic[4] = {'T', 'R', 'K', '1'};
inline constexpr std::size_t kCallIdBytes = 12;
// The largest frame 0 a sender joins to its envelope.
inline constexpr std::size_t kJoinedMaxBytes = 2048;

enum class Envelope { kWhole, kReply, kHead, kChunk, kGoodbye, kGoodbyeAck, kJoined, kJoinedReply };

// The 12-byte envelope frame: `magic` and the little-endian call id.
zmq::message_t envelope_frame(const char (&magic)[4], uint64_t id);
// The envelope of a whole message (kMagic).
zmq::message_t call_id_frame(uint64_t id);
// The envelope's kind and call id; nullopt when `m` is not an envelope frame (12 bytes; a joined
// one: at least 12).
std::optional<std::pair<Envelope, uint64_t>> parse_envelope(const zmq::message_t& m);
// Whether a message whose frame 0 is `first` goes out joined: frame 0 of at most kJoinedMaxBytes.
inline bool joins(const zmq::message_t& first) { return first.size() <= kJoinedMaxBytes; }
// The envelope of `magic` (kJoinedMagic or kJoinedReplyMagic) and `id`, `first`'s bytes after it.
zmq::message_t joined_frame(const char (&magic)[4], uint64_t id, const zmq::message_t& first);
// The frame 0 a joined envelope frame carries, as a frame of its own (a copy).
zmq::message_t joined_first(const zmq::message_t& joined);
// The call id of a whole message's envelope; nullopt for anything else.
std::optional<uint64_t> parse_call_id(const zmq::message_t& m);
// A whole reply's envelope: kReplyMagic and the call id, then, unless `status` is OK, the status
// frame's bytes (an OK reply's envelope is 12 bytes, the same as a request's).
zmq::message_t reply_envelope_frame(uint64_t id, const Status& status);
// The call id and status of a whole reply's envelope; nullopt when `m` is not one.
std::optional<std::pair<uint64_t, Status>> parse_reply_envelope(const zmq::message_t& m);

// The frames of `parts` from index `first` on, moved out (the envelope and descriptor stay behind).
std::vector<zmq::message_t> frames_from(std::vector<zmq::message_t>& parts, std::size_t first);
// Whether any frame is large enough to be streamed (kStreamMinBytes, rpc_stream.h).
bool has_streamed_size(const std::vector<zmq::message_t>& frames);

// A streamed reply's status frame (its frame 0): empty for OK, else the little-endian ErrorCode
// and the message.
zmq::message_t status_frame(const Status& s);
// The status a reply carries; nullopt when the frame is not a status frame.
std::optional<Status> parse_status(const zmq::message_t& m);

}  // namespace tessera::internal
