// Fuzz target: the frame-count limit of the RPC server (RpcServerOptions::max_frames,
// ServerOptions::max_frames_per_request). The server reads the rest of each message with
// recv_rest_bounded (transport/socket_io.h), which keeps at most max_parts parts and receives and
// drops the others one at a time, so a peer's message of a million frames costs the memory of the
// parts kept. The input says how many frames a message has, how big each is and the limit; the
// message goes over an inproc:// socket pair of a context made once for the process, and is read as
// the server reads it: its first frame with recv, the rest with recv_rest_bounded.
//
// Input:
//   bytes 0-1  little endian: the frames sent, N = 1 + value % 4096
//   bytes 2-3  little endian: the limit, 1 + value % (N + 2): below, at and above what arrives
//   byte 4     flags: bit 0 DEALER -> ROUTER (as the server: the first frame is the routing id
//              ROUTER adds, and all N frames sent are "the rest"), else PAIR -> PAIR (the first
//              frame is the first one sent, the rest are the other N - 1); bit 1 large frames
//   the rest   the pool: frame i's size is its byte i (cyclically; times 257 for large frames, at
//              most 1 MiB in all) and its bytes are the pool's from offset i on, cyclically, each
//              xor'ed with i's low byte (no pool: frame i is i % 3 bytes of i's low byte)
//
// Properties: of the R frames after the first, the kept ones are exactly the first min(R, limit),
// byte for byte and in order, and the function returns R - min(R, limit) (the dropped ones); the
// socket is left at the boundary of the next message: a two-frame message sent afterwards is the
// next one received, intact, and then nothing is left to read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "fuzz/fuzz_util.h"
#include "transport/socket_io.h"

namespace {

using tessera::internal::recv_rest_bounded;

constexpr std::size_t kMaxFrames = 4096;
constexpr std::size_t kMaxTotalBytes = std::size_t{1} << 20;
constexpr uint8_t kRouter = 1;
constexpr uint8_t kLarge = 2;

zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);  // no limit: a message is never refused or blocked on
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);  // a frame that never comes fails a check, not the timeout
  s.set(zmq::sockopt::sndtimeo, 10000);
  return s;
}

// The sockets, made once: a context and a new pair per input would dominate the run.
struct Pairs {
  zmq::context_t ctx = tessera::internal::make_context();
  zmq::socket_t pair_in = make_socket(ctx, zmq::socket_type::pair);
  zmq::socket_t pair_out = make_socket(ctx, zmq::socket_type::pair);
  zmq::socket_t router = make_socket(ctx, zmq::socket_type::router);
  zmq::socket_t dealer = make_socket(ctx, zmq::socket_type::dealer);
  Pairs() {
    pair_in.bind("inproc://frame-limit-pair");
    pair_out.connect("inproc://frame-limit-pair");
    router.bind("inproc://frame-limit-router");
    dealer.connect("inproc://frame-limit-router");
  }
};
Pairs& pairs() {
  static Pairs* p = new Pairs;  // never destroyed: zmq contexts do not like static destruction
  return *p;
}

std::string frame_bytes(std::size_t i, std::size_t size, const uint8_t* pool, std::size_t pool_size) {
  std::string out(size, static_cast<char>(i & 0xff));
  if (pool_size == 0) return out;
  for (std::size_t k = 0; k < size; ++k) {
    out[k] = static_cast<char>(pool[(i + k) % pool_size] ^ (i & 0xff));
  }
  return out;
}

bool same(const zmq::message_t& m, const std::string& want) {
  return m.size() == want.size() && (want.empty() || std::memcmp(m.data(), want.data(), want.size()) == 0);
}

void run(const uint8_t* data, size_t size) {
  if (size < 5) return;
  const std::size_t n = 1 + (static_cast<std::size_t>(data[0]) | static_cast<std::size_t>(data[1]) << 8) % kMaxFrames;
  const std::size_t limit = 1 + (static_cast<std::size_t>(data[2]) | static_cast<std::size_t>(data[3]) << 8) % (n + 2);
  const uint8_t flags = data[4];
  const uint8_t* pool = data + 5;
  const std::size_t pool_size = size - 5;
  const bool router = (flags & kRouter) != 0;

  std::vector<std::string> frames;
  frames.reserve(n);
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t len = pool_size == 0 ? i % 3 : pool[i % pool_size];
    if (flags & kLarge) len *= 257;
    if (total + len > kMaxTotalBytes) len = 0;
    total += len;
    frames.push_back(frame_bytes(i, len, pool, pool_size));
  }

  Pairs& p = pairs();
  zmq::socket_t& out = router ? p.dealer : p.pair_out;
  zmq::socket_t& in = router ? p.router : p.pair_in;
  for (std::size_t i = 0; i < n; ++i) {
    zmq::message_t m(frames[i].data(), frames[i].size());
    const auto sent = out.send(m, i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none);
    FUZZ_CHECK(sent.has_value());
  }

  // As the server: the first frame, then the rest, bounded.
  zmq::message_t first;
  FUZZ_CHECK(in.recv(first, zmq::recv_flags::none).has_value());
  std::string routing_id;
  std::size_t rest_from = 0;  // frames[rest_from..] are "the rest"
  if (router) {
    routing_id = first.to_string();
    FUZZ_CHECK(!routing_id.empty());
  } else {
    FUZZ_CHECK(same(first, frames[0]));
    rest_from = 1;
  }
  FUZZ_CHECK(first.more() == (n > rest_from));
  std::vector<zmq::message_t> parts;
  parts.emplace_back();  // recv_rest_bounded clears what was there
  const std::size_t dropped = recv_rest_bounded(in, first, &parts, limit);
  const std::size_t rest = n - rest_from;
  const std::size_t kept = std::min(rest, limit);
  if (parts.size() != kept || dropped != rest - kept) {
    std::fprintf(stderr, "%zu frames after the first, limit %zu: kept %zu, dropped %zu\n", rest, limit, parts.size(),
                 dropped);
  }
  FUZZ_CHECK(parts.size() == kept);
  FUZZ_CHECK(dropped == rest - kept);
  for (std::size_t i = 0; i < kept; ++i) {
    FUZZ_CHECK(same(parts[i], frames[rest_from + i]));
    FUZZ_CHECK(parts[i].more() == (rest_from + i + 1 < n));
  }

  // The next message starts at the next frame received.
  const std::string marker_a = "frame-limit-next";
  const std::string marker_b(1, static_cast<char>(n & 0xff));
  FUZZ_CHECK(out.send(zmq::buffer(marker_a), zmq::send_flags::sndmore).has_value());
  FUZZ_CHECK(out.send(zmq::buffer(marker_b), zmq::send_flags::none).has_value());
  std::vector<std::string> want;
  if (router) want.push_back(routing_id);
  want.push_back(marker_a);
  want.push_back(marker_b);
  for (std::size_t i = 0; i < want.size(); ++i) {
    zmq::message_t m;
    FUZZ_CHECK(in.recv(m, zmq::recv_flags::none).has_value());
    FUZZ_CHECK(same(m, want[i]));
    FUZZ_CHECK(m.more() == (i + 1 < want.size()));
  }
  zmq::message_t leftover;
  FUZZ_CHECK(!in.recv(leftover, zmq::recv_flags::dontwait).has_value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  return 0;
}
