#include "transport/rpc_envelope.h"

#include <cstring>

#include "transport/rpc_stream.h"

namespace tessera::internal {

// Note [RPC envelope]
// ~~~~~~~~~~~~~~~~~~~
// A request is [call-id][header][payload...] from a DEALER; the server's ROUTER sees the
// peer's routing id in front. The call-id frame is 12 bytes, "TRP1" and a little-endian 64-bit id,
// so stray traffic is recognized and dropped (counted as malformed) instead of being handed to a
// handler. A reply is [reply envelope][frame...]: "TRR1" and the call id echoed, followed in the
// same frame, for an error, by its 4-byte little-endian ErrorCode and the message (an OK reply's
// envelope is 12 bytes), then the reply's frames. The status once travelled as a frame of its own,
// which cost every reply a frame to send, encode, decode and receive (figures:
// benchmarks/results/xeon-2026-12-06-stop50.md); its own magic keeps a reply of either layout
// from being read as the other (Note [Older replies] in rpc_channel.cc). A message with frames of
// kStreamMinBytes (2 MiB) or more goes out as a head ("TRS1") followed by chunk messages ("TRC1"),
// either way, and a streamed reply's status is frame 0 of what its descriptor numbers: Note
// [Streamed frames] in rpc_stream.cc. A stopping server's goodbye ("TRG1") and its callers'
// answers ("TRA1") are envelopes alone: Note [Goodbye] in rpc_server_peers.cc.
// Most messages now carry their frame 0 inside the envelope's frame: Note [Joined envelopes].
//
// Note [Joined envelopes]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A whole request whose frame 0 (the header) is at most kJoinedMaxBytes travels as [envelope and
// frame 0][frame 1...]: "TRQ1", the call id, then frame 0's bytes, in one frame. A server answers
// such a request's OK reply the same way ("TRK1"), an error as before ("TRR1" and the status), and
// a request in the separate layout ("TRP1") in the separate layout, so callers of the build before
// still read their replies. Each frame costs libzmq a send, an encoding, a decoding and a receive;
// copying a small frame 0 into the envelope's frame and out again costs less (figures:
// benchmarks/README.md, "Figures behind the transport's notes"). A server of a build before this
// drops a joined request as malformed, and its caller meets the deadline: every task of a cluster
// runs the same build (Note [Older replies] in rpc_channel.cc).

namespace {

// `magic` and the little-endian `id`, then the `size` bytes at `tail`, in one frame.
zmq::message_t envelope_with(const char (&magic)[4], uint64_t id, const void* tail, std::size_t size) {
  zmq::message_t m(kCallIdBytes + size);
  auto* p = static_cast<unsigned char*>(m.data());
  std::memcpy(p, magic, 4);
  for (int i = 0; i < 8; ++i) p[4 + i] = static_cast<unsigned char>(id >> (8 * i));
  if (size > 0) std::memcpy(p + kCallIdBytes, tail, size);
  return m;
}

// The call id of an envelope's first kCallIdBytes bytes at `p`.
uint64_t read_id(const unsigned char* p) {
  uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= uint64_t{p[4 + i]} << (8 * i);
  return id;
}

}  // namespace

zmq::message_t envelope_frame(const char (&magic)[4], uint64_t id) { return envelope_with(magic, id, nullptr, 0); }

zmq::message_t call_id_frame(uint64_t id) { return envelope_frame(kMagic, id); }

std::optional<std::pair<Envelope, uint64_t>> parse_envelope(const zmq::message_t& m) {
  if (m.size() < kCallIdBytes) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(m.data());
  Envelope kind;
  if (std::memcmp(p, kJoinedMagic, 4) == 0) {
    kind = Envelope::kJoined;
  } else if (std::memcmp(p, kJoinedReplyMagic, 4) == 0) {
    kind = Envelope::kJoinedReply;
  } else if (m.size() != kCallIdBytes) {
    return std::nullopt;
  } else if (std::memcmp(p, kMagic, 4) == 0) {
    kind = Envelope::kWhole;
  } else if (std::memcmp(p, kReplyMagic, 4) == 0) {
    kind = Envelope::kReply;
  } else if (std::memcmp(p, kHeadMagic, 4) == 0) {
    kind = Envelope::kHead;
  } else if (std::memcmp(p, kChunkMagic, 4) == 0) {
    kind = Envelope::kChunk;
  } else if (std::memcmp(p, kGoodbyeMagic, 4) == 0) {
    kind = Envelope::kGoodbye;
  } else if (std::memcmp(p, kGoodbyeAckMagic, 4) == 0) {
    kind = Envelope::kGoodbyeAck;
  } else {
    return std::nullopt;
  }
  return std::make_pair(kind, read_id(p));
}

std::optional<uint64_t> parse_call_id(const zmq::message_t& m) {
  auto e = parse_envelope(m);
  if (!e || e->first != Envelope::kWhole) return std::nullopt;
  return e->second;
}

zmq::message_t joined_frame(const char (&magic)[4], uint64_t id, const zmq::message_t& first) {
  return envelope_with(magic, id, first.data(), first.size());
}

zmq::message_t joined_first(const zmq::message_t& joined) {
  TESSERA_CHECK(joined.size() >= kCallIdBytes);
  return zmq::message_t(static_cast<const char*>(joined.data()) + kCallIdBytes, joined.size() - kCallIdBytes);
}

zmq::message_t reply_envelope_frame(uint64_t id, const Status& status) {
  if (status.ok()) return envelope_frame(kReplyMagic, id);
  const zmq::message_t tail = status_frame(status);
  return envelope_with(kReplyMagic, id, tail.data(), tail.size());
}

std::optional<std::pair<uint64_t, Status>> parse_reply_envelope(const zmq::message_t& m) {
  if (m.size() < kCallIdBytes || std::memcmp(m.data(), kReplyMagic, 4) != 0) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(m.data());
  const uint64_t id = read_id(p);
  if (m.size() == kCallIdBytes) return std::make_pair(id, Status());
  const zmq::message_t tail(p + kCallIdBytes, m.size() - kCallIdBytes);
  std::optional<Status> status = parse_status(tail);
  if (!status || status->ok()) return std::nullopt;  // an error's code and message, or nothing
  return std::make_pair(id, *std::move(status));
}

std::vector<zmq::message_t> frames_from(std::vector<zmq::message_t>& parts, std::size_t first) {
  std::vector<zmq::message_t> frames;
  if (first >= parts.size()) return frames;
  frames.reserve(parts.size() - first);
  for (std::size_t i = first; i < parts.size(); ++i) frames.push_back(std::move(parts[i]));
  return frames;
}

bool has_streamed_size(const std::vector<zmq::message_t>& frames) {
  for (const zmq::message_t& f : frames) {
    if (f.size() >= kStreamMinBytes) return true;
  }
  return false;
}

zmq::message_t status_frame(const Status& s) {
  if (s.ok()) return zmq::message_t();
  const std::string& msg = s.message();
  zmq::message_t m(4 + msg.size());
  auto* p = static_cast<unsigned char*>(m.data());
  const auto code = static_cast<uint32_t>(s.code());
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(code >> (8 * i));
  if (!msg.empty()) std::memcpy(p + 4, msg.data(), msg.size());
  return m;
}

std::optional<Status> parse_status(const zmq::message_t& m) {
  if (m.size() == 0) return Status();
  if (m.size() < 4) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(m.data());
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i) code |= uint32_t{p[i]} << (8 * i);
  if (code == 0 || code > static_cast<uint32_t>(ErrorCode::kUnauthenticated)) return std::nullopt;
  return Status(static_cast<ErrorCode>(code), std::string(reinterpret_cast<const char*>(p + 4), m.size() - 4));
}

}  // namespace tessera::internal
