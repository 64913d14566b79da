// A hand probe, not part of `benchmarks/run`: how fast libzmq moves a large tensor over loopback TCP
// when it travels as one frame (what raw_zmq does, and tessera did before 2026-12-01), as one
// multipart message of CHUNK-byte frames that the receiver copies into one reused buffer
// ("chunked"), or as one message per CHUNK bytes copied the same way ("streamed": what tessera's
// streamed frames do, Note [Streamed frames] in transport/rpc_stream.cc). Same shape as the
// transfer workload: DEALER -> ROUTER, 4 requests in flight, two processes. Prints throughput and
// the receiver's minor page faults per transfer.
//
//   g++ -O2 -std=c++20 benchmarks/transport/chunk_probe.cc -o /tmp/chunk_probe -lzmq
//   /tmp/chunk_probe single 67108864 0;  /tmp/chunk_probe streamed 67108864 1048576
//
// Findings of 2026-11-30 and 2026-12-01 are in benchmarks/README.md ("Transport").
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <zmq.hpp>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s single|chunked|streamed BYTES CHUNK\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 0);
  const std::size_t chunk = std::strtoull(argv[3], nullptr, 0);
  const bool streamed = mode == "streamed";
  if ((mode != "single" && mode != "chunked" && !streamed) || bytes == 0 || (mode != "single" && chunk == 0)) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  constexpr int kTransfers = 40, kWindow = 4;
  int ep_pipe[2];
  if (pipe(ep_pipe) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {  // the server: answers every request with the tensor, until a 1-byte request
    alarm(120);    // never outlive a stuck client
    zmq::context_t ctx;
    zmq::socket_t r(ctx, zmq::socket_type::router);
    r.set(zmq::sockopt::sndhwm, 100000);  // as tessera's server: room for every chunk
    r.set(zmq::sockopt::router_mandatory, 1);
    r.bind("tcp://127.0.0.1:*");
    const std::string ep = r.get(zmq::sockopt::last_endpoint);
    if (write(ep_pipe[1], ep.c_str(), ep.size() + 1) < 0) _exit(1);
    char* src = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    std::memset(src, 7, bytes);
    auto no_free = [](void*, void*) {};
    for (;;) {
      zmq::message_t id, req;
      if (!r.recv(id) || !r.recv(req) || req.size() == 1) break;
      const std::string routing = id.to_string();
      const std::size_t step = mode == "single" ? bytes : chunk;
      for (std::size_t off = 0; off < bytes; off += step) {
        const std::size_t n = std::min(step, bytes - off);
        if (off == 0 || streamed) r.send(zmq::buffer(routing), zmq::send_flags::sndmore);
        r.send(zmq::message_t(src + off, n, no_free, nullptr),
               off + n < bytes && !streamed ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
    _exit(0);
  }
  char ep[256] = {};
  if (read(ep_pipe[0], ep, sizeof ep - 1) <= 0) return 1;
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::rcvtimeo, 10000);
  d.connect(ep);
  char* dst = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  std::memset(dst, 0, bytes);
  auto pull = [&](int n) {
    for (int sent = 0, got = 0; got < n; ++got) {
      for (; sent < n && sent - got < kWindow; ++sent) d.send(zmq::str_buffer("go"));
      std::size_t off = 0;
      for (;;) {
        zmq::message_t m;
        if (!d.recv(m)) return false;
        // single: the message is the tensor (no copy); chunked, streamed: gather into the reused buffer
        if (mode != "single") std::memcpy(dst + off, m.data(), m.size());
        off += m.size();
        if (streamed ? off >= bytes : !m.more()) break;
      }
      if (off != bytes) return false;
    }
    return true;
  };
  bool ok = pull(8);  // warm-up
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = std::chrono::steady_clock::now();
  ok = ok && pull(kTransfers);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &after);
  d.send(zmq::str_buffer("q"));
  waitpid(pid, nullptr, 0);
  if (!ok) {
    std::fprintf(stderr, "a transfer timed out or came back short\n");
    return 1;
  }
  std::printf("%s bytes=%zu chunk=%zu: %.0f MiB/s, %.0f minor faults per transfer\n", mode.c_str(), bytes,
              chunk, kTransfers * bytes / s / 1048576.0,
              static_cast<double>(after.ru_minflt - before.ru_minflt) / kTransfers);
  return 0;
}
