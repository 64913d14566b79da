#include "transport/rpc_envelope.h"

#include <cstring>

#include "transport/rpc_stream.h"

namespace tessera::internal {

// Note [RPC envelope]
// ~~~~~~~~~~~~~~~~~~~
// A request is [call-id][header][payload...] from a DEALER; the server's ROUTER sees the
// peer's routing id in front. A reply is [call-id][status][frame...]: the call-id echoed, then an
// empty status frame for OK or 4 bytes of little-endian ErrorCode and the message, then the reply's
// frames. The call-id frame is 12 bytes, "TRP1" and a little-endian 64-bit id, so stray traffic is
// recognized and dropped (counted as malformed) instead of being handed to a handler. A message with
// frames of kStreamMinBytes (2 MiB) or more goes out as a head ("TRS1") followed by chunk messages
// ("TRC1"), either way: Note [Streamed frames] in rpc_stream.cc. A stopping server's goodbye
// ("TRG1") and its callers' answers ("TRA1") are envelopes alone: Note [Goodbye] in rpc_server.cc.

zmq::message_t envelope_frame(const char (&magic)[4], uint64_t id) {
  zmq::message_t m(kCallIdBytes);
  auto* p = static_cast<unsigned char*>(m.data());
  std::memcpy(p, magic, 4);
  for (int i = 0; i < 8; ++i) p[4 + i] = static_cast<unsigned char>(id >> (8 * i));
  return m;
}

zmq::message_t call_id_frame(uint64_t id) { return envelope_frame(kMagic, id); }

std::optional<std::pair<Envelope, uint64_t>> parse_envelope(const zmq::message_t& m) {
  if (m.size() != kCallIdBytes) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(m.data());
  Envelope kind;
  if (std::memcmp(p, kMagic, 4) == 0) {
    kind = Envelope::kWhole;
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
  uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= uint64_t{p[4 + i]} << (8 * i);
  return std::make_pair(kind, id);
}

std::optional<uint64_t> parse_call_id(const zmq::message_t& m) {
  auto e = parse_envelope(m);
  if (!e || e->first != Envelope::kWhole) return std::nullopt;
  return e->second;
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
