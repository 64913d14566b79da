// What both impls of the transport workload share: the sizes, the byte pattern every transfer
// carries, the in-flight window, and the peer process (main.cc) whose two servers they talk to.
//
//   BM_transfer_<size>/<impl>   throughput: the client pulls `transfers` tensors per iteration
//                               with kWindow calls in flight (bytes_per_second, items_per_second)
//   BM_rtt_<size>/<impl>        latency: one echo at a time, the size travelling both ways (time
//                               per iteration = one round trip)
//
// impls: "tessera" (tessera.cc: RpcChannel -> RpcServer, wire headers, tensor frames; transfers
// also as "tessera_queue", through an RpcCompletionQueue) and "raw_zmq" (raw_zmq.cc: a DEALER ->
// ROUTER pair, the physical limit of libzmq on this machine).
// The peer runs both servers, so every benchmark crosses the same two processes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <benchmark/benchmark.h>

namespace transport_bench {

struct Size {
  const char* name;       // "64B", ..., also the rendezvous key the tessera peer serves it under
  std::size_t bytes;      // a multiple of 4: the tensors are int32 vectors
  int transfers;          // tensors pulled per throughput iteration
};

inline constexpr Size kSizes[] = {
    {"64B", 64, 1000},
    {"4KiB", 4096, 1000},
    {"1MiB", std::size_t{1} << 20, 64},
    {"16MiB", std::size_t{16} << 20, 8},
    {"64MiB", std::size_t{64} << 20, 4},
};

// Calls in flight while pulling (a worker fetching a step's inputs from one peer).
inline constexpr int kWindow = 4;
// Every call and every receive gives up after this: a stuck peer fails the benchmark, never hangs it.
inline constexpr std::chrono::milliseconds kDeadline{10000};

// The pattern of a `bytes`-long transfer: word i of every size differs from its neighbours and from
// the same word of the other sizes, so a misplaced, stale or truncated frame fails the check.
inline uint32_t pattern_word(std::size_t i, std::size_t bytes) {
  return static_cast<uint32_t>((i + 1) * 2654435761u) ^ static_cast<uint32_t>(bytes * 0x9e3779b9u);
}

inline void fill_pattern(void* data, std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < bytes / 4; ++i) {
    const uint32_t w = pattern_word(i, bytes);
    std::memcpy(p + 4 * i, &w, 4);
  }
}

// True when the `size` bytes at `data` are exactly the pattern of a `bytes`-long transfer.
inline bool has_pattern(const void* data, std::size_t size, std::size_t bytes) {
  if (size != bytes || (bytes != 0 && data == nullptr)) return false;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes / 4; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    if (w != pattern_word(i, bytes)) return false;
  }
  return true;
}

// ---- The peer process (main.cc) ----

struct PeerEndpoints {
  std::string tessera;  // the RpcServer, "tcp://127.0.0.1:PORT"
  std::string tessera_busy_poll;  // another, with RpcServerOptions::busy_poll = kBusyPoll
  std::string raw;      // the plain ROUTER socket
};

// The peer's endpoints; the first call starts it (re-executing this binary with --transport-peer)
// and waits, bounded, for its handshake. nullptr when it could not be started: peer_error() says why.
const PeerEndpoints* peer();
const std::string& peer_error();
// Ends the peer: closes its stdin (it exits on EOF), waits a bounded time, then SIGKILLs and reaps
// it. Idempotent; also registered with atexit once the peer runs.
void stop_peer();

// Run in the peer: start each server and return its endpoint ("" after printing why to stderr).
// The servers live until the process exits. They bind peer_host(): 127.0.0.1, or
// $TRANSPORT_BENCH_PEER_HOST (netns_transfer puts the peer in a network namespace of its own).
std::string peer_host();
// `busy_poll`: the server polls without sleeping for kBusyPoll after each turn that received
// requests (train::ServerOptions::busy_poll).
inline constexpr std::chrono::microseconds kBusyPoll{100};
std::string start_tessera_peer(bool busy_poll);
std::string start_raw_peer();

// ---- The benchmarks (registered in main.cc, impls alternating) ----

void tessera_transfer(benchmark::State& state, const Size& size);
// The same pulls through an RpcCompletionQueue (impl tessera_queue).
void tessera_queue_transfer(benchmark::State& state, const Size& size);
// Pulls on a socket the pulling thread owns (impl tessera_owned): the ceiling of such a channel.
void tessera_owned_transfer(benchmark::State& state, const Size& size);
// The same pulls with the runtime's hand-off: each completion goes to the session's thread pool,
// which sends the next call (impl tessera_pool).
void tessera_pool_transfer(benchmark::State& state, const Size& size);
// The same with no hand-off: each completion sends the next call itself, on the channel's I/O
// thread (impl tessera_io_thread, a ceiling).
void tessera_io_thread_transfer(benchmark::State& state, const Size& size);
void tessera_rtt(benchmark::State& state, const Size& size);
// The same with both ends busy-polling (impl tessera_busy_poll).
void tessera_busy_poll_transfer(benchmark::State& state, const Size& size);
void tessera_busy_poll_rtt(benchmark::State& state, const Size& size);
// The runtime's path (tessera_pool) with both ends busy-polling (impl tessera_pool_busy_poll).
void tessera_pool_busy_poll_transfer(benchmark::State& state, const Size& size);
void raw_transfer(benchmark::State& state, const Size& size);
// Sizes of kStreamedMinBytes and more: as raw_transfer, each tensor as 1 MiB messages (raw_zmq.cc).
void raw_streamed_transfer(benchmark::State& state, const Size& size);
inline constexpr std::size_t kStreamedMinBytes = std::size_t{16} << 20;
void raw_rtt(benchmark::State& state, const Size& size);

}  // namespace transport_bench
