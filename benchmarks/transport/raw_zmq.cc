// Workload transport, impl raw_zmq: the same transfers as tessera.cc in plain cppzmq between the same
// two processes, as the baseline (what libzmq itself costs on this machine).
//
// Peer: one thread owning a ROUTER socket, serving
//   [call-id][ 'P', size index ]           -> [call-id][the size's bytes]
//   [call-id][ 'E', size index ][payload]  -> [call-id][payload]   (the echo of the rtt benchmarks)
// A pulled payload is sent as tessera sends a tensor frame: from kZeroCopyMinBytes (16 KiB) up
// without a copy (zmq::message_t over the peer's own buffer), below that copied into the message.
// The echo sends the received message back as it is (no copy, no parsing: the physical limit).
//   [call-id][ 'S', size index ]           -> [call-id][chunk] per kStreamChunk bytes, each its own
//                                              message (impl raw_zmq_streamed, 16 MiB and up)
// Client: the benchmark thread owns a DEALER socket and keeps kWindow requests in flight (transfer)
// or sends one echo at a time (rtt), its payload again from 16 KiB up without a copy. Every
// call-id is checked on receipt. Every wait is bounded (ZMQ_RCVTIMEO / ZMQ_SNDTIMEO = kDeadline).
// raw_zmq_streamed is the same transfer as tessera's streamed frames do it (Note [Streamed frames]
// in transport/rpc_stream.cc), in plain cppzmq: each tensor as 1 MiB messages that the client
// copies into one of kWindow destination buffers faulted in beforehand (what tessera's host block
// cache gives it), so that the physical-limit row uses the best way libzmq offers, not only the
// plainest.
// Before timing, each benchmark checks every byte of kWindow received payloads against the pattern.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/bench_common.h"
#include "transport/transfer_bench.h"

namespace transport_bench {
namespace {

// tessera's threshold (transport/rpc.h kZeroCopyMinBytes), repeated so this file needs no tessera.
constexpr std::size_t kZeroCopyMinBytes = 16 * 1024;
constexpr char kPull = 'P';
constexpr char kEcho = 'E';
constexpr char kStreamedPull = 'S';
// tessera's chunk size (transport/rpc_stream.h kStreamChunkBytes).
constexpr std::size_t kStreamChunk = std::size_t{1} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// A 64-byte aligned buffer (as a tessera Tensor's) holding the pattern of `bytes`.
Buffer pattern_buffer(std::size_t bytes) {
  Buffer b(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  fill_pattern(b.get(), bytes);
  return b;
}

// A frame over `bytes` at `data`: referenced from kZeroCopyMinBytes up (the buffer outlives every
// send: the peer's live until it exits, the client's until the benchmark has its last reply),
// copied below.
zmq::message_t payload_frame(const void* data, std::size_t bytes) {
  if (bytes >= kZeroCopyMinBytes) return zmq::message_t(const_cast<void*>(data), bytes, nullptr, nullptr);
  return zmq::message_t(data, bytes);
}

zmq::message_t id_frame(uint64_t id) { return zmq::message_t(&id, sizeof id); }

int size_index(const Size& size) {
  for (int i = 0; i < static_cast<int>(std::size(kSizes)); ++i) {
    if (kSizes[i].bytes == size.bytes) return i;
  }
  return -1;
}

// ---- Peer ----

void serve_raw(zmq::socket_t* socket, std::vector<Buffer>* buffers) {
  for (;;) {
    std::vector<zmq::message_t> parts;
    try {
      zmq::message_t m;
      if (!socket->recv(m)) continue;
      bool more = m.more();
      parts.push_back(std::move(m));
      while (more) {
        zmq::message_t next;
        if (!socket->recv(next)) break;
        more = next.more();
        parts.push_back(std::move(next));
      }
      // [routing-id][call-id][op, size index][payload?]
      if (parts.size() < 3 || parts[2].size() != 2) continue;
      const auto* op = static_cast<const unsigned char*>(parts[2].data());
      if (op[1] >= std::size(kSizes)) continue;
      zmq::message_t payload;
      if (op[0] == kStreamedPull && parts.size() == 3) {
        const std::size_t bytes = kSizes[op[1]].bytes;
        const unsigned char* data = (*buffers)[op[1]].get();
        const std::string routing = parts[0].to_string(), call = parts[1].to_string();
        for (std::size_t off = 0; off < bytes; off += kStreamChunk) {
          socket->send(zmq::buffer(routing), zmq::send_flags::sndmore);
          socket->send(zmq::buffer(call), zmq::send_flags::sndmore);
          socket->send(payload_frame(data + off, std::min(kStreamChunk, bytes - off)), zmq::send_flags::none);
        }
        continue;
      }
      if (op[0] == kPull && parts.size() == 3) {
        payload = payload_frame((*buffers)[op[1]].get(), kSizes[op[1]].bytes);
      } else if (op[0] == kEcho && parts.size() == 4) {
        payload = std::move(parts[3]);
      } else {
        continue;
      }
      socket->send(parts[0], zmq::send_flags::sndmore);
      socket->send(parts[1], zmq::send_flags::sndmore);
      socket->send(payload, zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      std::fprintf(stderr, "bench_transport peer (raw): %s\n", e.what());
    }
  }
}

// ---- Client ----

// The DEALER connected to the peer's ROUTER, shared by every raw benchmark. reset() drops it after a
// failure (stale replies must not reach the next benchmark).
class RawClient {
 public:
  zmq::socket_t* get(benchmark::State& state) {
    const PeerEndpoints* p = peer();
    if (p == nullptr) {
      state.SkipWithError(("no peer process: " + peer_error()).c_str());
      return nullptr;
    }
    if (!socket_) {
      socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      socket_->set(zmq::sockopt::linger, 0);
      socket_->set(zmq::sockopt::rcvtimeo, static_cast<int>(kDeadline.count()));
      socket_->set(zmq::sockopt::sndtimeo, static_cast<int>(kDeadline.count()));
      socket_->connect(p->raw);
    }
    return socket_.get();
  }
  void reset() { socket_.reset(); }

 private:
  zmq::context_t context_{1};
  std::unique_ptr<zmq::socket_t> socket_;
};

RawClient& client() {
  static RawClient* const c = new RawClient();  // leaked: no teardown at static exit
  return *c;
}

// Receives one reply [call-id][payload]; "" when it answers `id`, else what is wrong.
std::string receive(zmq::socket_t& socket, uint64_t id, zmq::message_t* payload) {
  zmq::message_t got_id;
  if (!socket.recv(got_id)) return "no reply within " + std::to_string(kDeadline.count()) + " ms";
  if (!got_id.more()) return "a reply without payload";
  if (!socket.recv(*payload)) return "a truncated reply";
  if (payload->more()) return "a reply with extra frames";
  uint64_t got = 0;
  if (got_id.size() == sizeof got) std::memcpy(&got, got_id.data(), sizeof got);
  if (got != id) return "reply " + std::to_string(got) + " received for request " + std::to_string(id);
  return "";
}

// Sends [call-id][op, size index][payload?]; "" when libzmq took it.
std::string send_request(zmq::socket_t& socket, uint64_t id, char op, int index, zmq::message_t* payload) {
  const char request[2] = {op, static_cast<char>(index)};
  zmq::message_t header(request, sizeof request);
  zmq::message_t id_msg = id_frame(id);
  if (!socket.send(id_msg, zmq::send_flags::sndmore)) return "send timed out";
  if (!socket.send(header, payload ? zmq::send_flags::sndmore : zmq::send_flags::none)) return "send timed out";
  if (payload && !socket.send(*payload, zmq::send_flags::none)) return "send timed out";
  return "";
}

// fn()'s "" or what went wrong, a libzmq exception included.
template <class Fn>
std::string or_zmq_error(Fn&& fn) {
  try {
    return fn();
  } catch (const zmq::error_t& e) {
    return e.what();
  }
}

// The frame of the raw benchmarks: check() untimed, its failure failing the correctness check
// `what`, then timed(), the timing loop. What goes wrong in either skips the benchmark and resets
// the client; true when nothing did.
template <class Check, class Timed>
bool checked_then_timed(benchmark::State& state, const std::string& what, Check&& check, Timed&& timed) {
  std::string wrong = or_zmq_error(check);
  if (!tessera_bench::check(state, wrong.empty(), what + ": " + wrong)) {
    client().reset();
    return false;
  }
  wrong = or_zmq_error(timed);
  if (!wrong.empty()) {
    client().reset();
    state.SkipWithError(wrong.c_str());
    return false;
  }
  return true;
}

// A transfer benchmark of impl `impl`: each iteration pulls size.transfers tensors with `op`
// requests, kWindow in flight; take(socket, id, check) receives the reply to call `id` (in order),
// checking every byte when asked, and says what went wrong ("" when nothing). The warm-up and its
// check are untimed.
template <class Take>
void time_transfers(benchmark::State& state, const Size& size, const char* impl, char op, Take&& take) {
  tessera_bench::set_impl(state, impl);
  zmq::socket_t* socket = client().get(state);
  if (socket == nullptr) return;
  const int index = size_index(size);
  uint64_t next_id = 1;
  auto pull = [&](int n, bool check) -> std::string {
    const uint64_t first = next_id;
    int sent = 0, received = 0;
    while (received < n) {
      while (sent < n && sent - received < kWindow) {
        if (auto e = send_request(*socket, next_id++, op, index, nullptr); !e.empty()) return e;
        ++sent;
      }
      if (auto e = take(*socket, first + received, check); !e.empty()) return e;
      ++received;
    }
    return "";
  };
  const bool ok = checked_then_timed(
      state, std::string("transfer_") + size.name,
      [&] { return pull(kWindow, true); },  // warm-up and check
      [&] {
        std::string wrong = pull(size.transfers, false);  // warm
        for (auto _ : state) {
          if (!wrong.empty()) break;
          wrong = pull(size.transfers, false);
        }
        return wrong;
      });
  if (!ok) return;
  state.SetBytesProcessed(state.iterations() * size.transfers * static_cast<int64_t>(size.bytes));
  state.SetItemsProcessed(state.iterations() * size.transfers);
}

}  // namespace

void raw_transfer(benchmark::State& state, const Size& size) {
  time_transfers(state, size, "raw_zmq", kPull, [&](zmq::socket_t& socket, uint64_t id, bool check) -> std::string {
    zmq::message_t payload;
    if (auto e = receive(socket, id, &payload); !e.empty()) return e;
    if (check && !has_pattern(payload.data(), payload.size(), size.bytes)) return "the bytes differ from what was sent";
    return "";
  });
}

void raw_streamed_transfer(benchmark::State& state, const Size& size) {
  // One destination per call in flight, faulted in before timing.
  std::vector<Buffer> destinations;
  for (int i = 0; i < kWindow; ++i) {
    destinations.emplace_back(static_cast<unsigned char*>(std::aligned_alloc(64, (size.bytes + 63) / 64 * 64)));
    std::memset(destinations.back().get(), 0, size.bytes);
  }
  // Each tensor's chunks gathered into its destination.
  time_transfers(state, size, "raw_zmq_streamed", kStreamedPull,
                 [&](zmq::socket_t& socket, uint64_t id, bool check) -> std::string {
                   unsigned char* dst = destinations[id % kWindow].get();
                   for (std::size_t off = 0; off < size.bytes;) {
                     zmq::message_t chunk;
                     if (auto e = receive(socket, id, &chunk); !e.empty()) return e;
                     if (chunk.size() > size.bytes - off) return "a chunk past the end of the tensor";
                     std::memcpy(dst + off, chunk.data(), chunk.size());
                     off += chunk.size();
                   }
                   if (check && !has_pattern(dst, size.bytes, size.bytes)) return "the bytes differ from what was sent";
                   return "";
                 });
}

void raw_rtt(benchmark::State& state, const Size& size) {
  tessera_bench::set_impl(state, "raw_zmq");
  zmq::socket_t* socket = client().get(state);
  if (socket == nullptr) return;
  const int index = size_index(size);
  const Buffer data = pattern_buffer(size.bytes);
  uint64_t id = 0;

  // One echo; "" or what went wrong. `check` verifies every byte.
  auto echo = [&](bool check) -> std::string {
    ++id;
    zmq::message_t out = payload_frame(data.get(), size.bytes);
    if (auto e = send_request(*socket, id, kEcho, index, &out); !e.empty()) return e;
    zmq::message_t back;
    if (auto e = receive(*socket, id, &back); !e.empty()) return e;
    if (check && !has_pattern(back.data(), back.size(), size.bytes)) return "the bytes differ from what was sent";
    return "";
  };

  checked_then_timed(
      state, std::string("rtt_") + size.name,
      [&] {  // warm-up and check
        std::string wrong;
        for (int i = 0; i < kWindow && wrong.empty(); ++i) wrong = echo(true);
        return wrong;
      },
      [&] {
        for (auto _ : state) {
          if (std::string wrong = echo(false); !wrong.empty()) return wrong;
        }
        return std::string();
      });
}

std::string start_raw_peer() {
  try {
    static zmq::context_t* const context = new zmq::context_t(1);  // until the peer exits
    auto* socket = new zmq::socket_t(*context, zmq::socket_type::router);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, 100000);  // room for every chunk of the streamed pulls
    socket->bind("tcp://" + peer_host() + ":0");
    std::string endpoint = socket->get(zmq::sockopt::last_endpoint);
    auto* buffers = new std::vector<Buffer>();
    for (const Size& s : kSizes) buffers->push_back(pattern_buffer(s.bytes));
    std::thread(serve_raw, socket, buffers).detach();
    return endpoint;
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "bench_transport peer (raw): %s\n", e.what());
    return "";
  }
}

}  // namespace transport_bench
