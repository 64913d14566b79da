#include "transport/rpc.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/host_blocks.h"
#include "core/logging.h"
#include "core/tensor_buffer.h"
#include "transport/rpc_stream.h"

namespace tessera::internal {

// Note [RPC]
// ~~~~~~~~~~
// Wire. A request is [call-id][header][payload...] from a DEALER; the server's ROUTER sees the
// peer's routing id in front. A reply is [call-id][status][frame...]: the call-id echoed, then an
// empty status frame for OK or 4 bytes of little-endian ErrorCode and the message, then the reply's
// frames. The call-id frame is 12 bytes, "TRP1" and a little-endian 64-bit id, so stray traffic is
// recognized and dropped (counted as malformed) instead of being handed to a handler. A message with
// frames of kStreamMinBytes (2 MiB) or more goes out as a head ("TRS1") followed by chunk messages
// ("TRC1"), either way: Note [Streamed frames] in rpc_stream.cc.
//
// Threads. Server sockets are used by exactly one thread, the server's I/O thread; other threads
// talk to it through a mutex-protected queue plus an eventfd in its poll set, written only when
// the queue goes from empty to non-empty (one syscall per burst, not per message).
//   Server: one I/O thread owns the ROUTER. It reads a batch of requests, checks each envelope and
//   hands (request, Responder) to `handler_threads` handler threads (or runs the handler inline
//   when that is 0). A Responder may be called from any thread, at any time, once: the reply joins
//   the I/O thread's outbox. The server has its own zmq context, so stop() can terminate it: when
//   stop() returns the listening socket is closed and the port can be bound again at once.
//   Channel: one I/O thread per channel (channels are one per remote task, so a process has a
//   handful; a shared thread would add a hop of routing for no gain at that count). Channels share
//   one process-wide zmq context, leaked on purpose so that channels in static objects never race
//   its destruction. The channel's DEALER is the exception to "one thread per socket": it is used
//   under the channel's mutex by whichever thread needs it, because a hand-off to the I/O thread
//   costs a thread wake-up each way, which on a small request is most of the round trip.
//   * A synchronous call (call_sync, call_until_lost_sync) is sent by the calling thread itself
//     (unless calls queued before it, or no connection yet, make it wait in the outbox), which
//     then sleeps in poll(2) on the socket's ZMQ_FD and a per-thread eventfd and receives its
//     reply itself: raw libzmq's REQ/REP path, one wake-up. Replies to other calls it finds on the
//     way are completed too.
//   * An asynchronous call joins the outbox; the I/O thread sends what the outbox holds (an
//     eventfd write wakes it when the outbox goes from empty to non-empty: one per burst), and
//     `done` always runs on the I/O thread, which watches ZMQ_FD while such calls are pending (or
//     the outbox is not empty), enforces deadlines and reads the monitor. Measured both ways,
//     callers sending asynchronous calls themselves cost a third of the small-tensor throughput:
//     they contend with the I/O thread for the socket, and replies they pick up must be handed
//     to it with a wake-up of its own.
//   The rules that make this safe (libzmq's ZMQ_FD is edge-like: any use of the socket may consume
//   its signal): whoever uses the socket then receives every reply there is and sends what the
//   outbox holds if libzmq takes it (serve_socket_locked), and a thread that completes an
//   asynchronous call, or registers one while the I/O thread is not watching the socket, wakes the
//   I/O thread through its eventfd. Nothing creates a thread per call.
//
// Failure. The deadline is the guarantee: a call completes by then, with the reply or with
// Unavailable ("no reply from <endpoint> within N ms: the task is down or unreachable"), whatever
// happened to the peer; a reply arriving later is dropped. ZMQ_IMMEDIATE keeps requests out of
// libzmq's queues while no peer is connected (they wait in the channel's outbox, and go out if the
// peer appears before their deadline). libzmq reconnects on its own (every reconnect_interval,
// backing off to reconnect_interval_max), so a server restarted on the same port is reached again
// by existing channels; ZMTP heartbeats drop a connection whose peer went silent (kill -9 of a
// remote host, a partition) so that reconnection starts. A request in flight when the connection
// died is not resent (the handler may have run): its caller meets its deadline. Destroying a
// channel completes its pending calls with Cancelled.
//   On the server, stop() stops reading, drops queued requests and kills every Responder (their
//   replies are counted and dropped; callers meet their deadlines), closes the socket and joins the
//   I/O thread. It then waits at most stop_grace for handler invocations still running and leaves
//   any that did not finish behind (detached; they keep the server's internals alive and find
//   their Responders dead). Handlers are meant to return quickly and reply later if work is long.
//   A Responder dropped unreplied fails its call with Internal at once; a handler that throws
//   fails it with the exception's status.
//
// Long calls. Some calls may rightly wait a long time for their reply: a step blocked on a queue,
// a tensor its producer has not computed yet. call_until_lost() bounds only the wait for a
// connection (ZMQ_IMMEDIATE keeps the request in the outbox until there is one); once libzmq has
// taken the request, the call waits for its reply until the connection it went out on is lost.
// The channel learns that from a socket monitor (ZMQ_EVENT_DISCONNECTED on an inproc PAIR socket
// in the I/O thread's poll set): a peer killed with -9 resets the TCP connection at once, a peer
// that is stopped (SIGSTOP) or cut off misses ZMTP heartbeats and is dropped after
// heartbeat_timeout; either way the sent long calls fail Unavailable ("lost the connection").
// Ordinary calls keep their deadline whatever the connection does.
//
// Limits. max_message_bytes sets ZMQ_MAXMSGSIZE, which libzmq checks per frame before allocating:
// an oversized frame closes that connection (the client reconnects; its pending calls meet their
// deadlines). A request whose frames add up to more than the limit is refused with
// ResourceExhausted.
//
// Security. With RpcServerOptions::curve the ROUTER is a CURVE server (ZMQ_CURVE_SERVER): every
// connection is encrypted and authenticated. libzmq asks a ZAP handler (RFC 27) about each client
// key: a REP socket bound to "inproc://zeromq.zap.01" in the server's own zmq context (so servers
// in one process never share it), polled by the server's I/O thread, which answers 200 for the
// allowed keys and 400 for the others, counting and logging each refusal (a line per peer address
// and key at most every 10 s, saying how many more there were, so a misconfigured or hostile
// client cannot flood the log). ZMQ_ZAP_ENFORCE_DOMAIN makes libzmq refuse clients rather than
// admit them should the handler be missing (during stop()). A socket monitor (CURVE servers only)
// also reports, counts and logs peers that fail before ZAP: a client without CURVE (mechanism
// mismatch) or one that encrypted for another server key.
//   With RpcChannelOptions::curve the DEALER is a CURVE client holding the server's public key.
// The channel's monitor reports handshakes: HANDSHAKE_FAILED_AUTH (ZAP refused the client's key)
// and HANDSHAKE_FAILED_PROTOCOL (e.g. one side without CURVE) at once; libzmq does not retry after
// those (it closes the session for good), so the channel reconnects by itself, backing off from
// reconnect_interval to reconnect_interval_max. A client that has the wrong server key, or talks
// CURVE to a plain server, sees only the server closing the connection during the handshake
// (HANDSHAKE_FAILED_NO_DETAIL with EPIPE or ECONNRESET, after which libzmq retries): twice in a row
// without a successful handshake counts as a failure (once could be a server going down). A failure fails every pending call (in the outbox or sent) with
// Unavailable "authentication with ENDPOINT failed: ...", and new calls at once, until
// HANDSHAKE_SUCCEEDED. Channels without CURVE watch the same events (a plain client meeting a
// CURVE server fails the same way); the only cost per call is a test of a flag on the I/O thread.
//
// Zero copy. tensor_frame() hands libzmq the tensor's own bytes with a free callback that drops a
// Tensor reference, run by whichever thread releases the message last (often libzmq's I/O thread).
// On receipt, frame_to_tensor() can wrap the zmq message in a TensorBuffer whose release closes
// the message. libzmq 4.3 stores a received frame of more than 33 bytes 40 bytes after the start
// of a malloc'ed block, i.e. at 8 mod 16 and never at Tensor::kAlignment (64): with the default
// alignment requirement a received tensor is always copied. Tessera's kernels need only natural
// alignment, so a caller may accept dtype_size(dtype) and skip the copy; the tensor is then an
// exception to Tensor's 64-byte promise that the caller has to know about.

namespace {

// The envelope's magic: a whole message, the head of a streamed one, a chunk of a streamed one
// (Note [Streamed frames] in rpc_stream.cc).
constexpr char kMagic[4] = {'T', 'R', 'P', '1'};
constexpr char kHeadMagic[4] = {'T', 'R', 'S', '1'};
constexpr char kChunkMagic[4] = {'T', 'R', 'C', '1'};
constexpr std::size_t kCallIdBytes = 12;
constexpr int kRecvBatch = 256;

enum class Envelope { kWhole, kHead, kChunk };

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

// The frames of `parts` from index `first` on, moved out (the envelope and descriptor stay behind).
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

// The status a reply carries; nullopt when the frame is not a status frame.
std::optional<Status> parse_status(const zmq::message_t& m) {
  if (m.size() == 0) return Status();
  if (m.size() < 4) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(m.data());
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i) code |= uint32_t{p[i]} << (8 * i);
  if (code == 0 || code > static_cast<uint32_t>(ErrorCode::kUnauthenticated)) return std::nullopt;
  return Status(static_cast<ErrorCode>(code), std::string(reinterpret_cast<const char*>(p + 4), m.size() - 4));
}

// A context for a server's or a channel's sockets; the first one made applies Note [Malloc settings
// for transport] (core/host_blocks.cc).
zmq::context_t make_context() {
  tune_malloc_for_transport();
  return zmq::context_t(1);
}

// ---- eventfd wake-up ----

int make_wake_fd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  TESSERA_CHECK(fd >= 0);
  return fd;
}

void signal_wake_fd(int fd) {
  const uint64_t one = 1;
  // EAGAIN only when the counter would overflow, i.e. a wake-up is pending anyway.
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void drain_wake_fd(int fd) {
  uint64_t value;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

// poll(2) of plain descriptors for a waiting loop; false on an error other than EINTR (an
// interrupted wait returns true with no events, and the loop recomputes its timeout). On any
// failure no revents are left set.
bool poll_io(pollfd* fds, int n, long timeout_ms) {
  const int timeout = timeout_ms > INT_MAX ? INT_MAX : static_cast<int>(timeout_ms);
  if (::poll(fds, static_cast<nfds_t>(n), timeout) >= 0) return true;
  for (int i = 0; i < n; ++i) fds[i].revents = 0;
  return errno == EINTR;
}

// Reads the rest of a multipart message whose first frame is `first` (parts of one message arrive
// together, so this never waits).
void recv_rest(zmq::socket_t& socket, const zmq::message_t& first, std::vector<zmq::message_t>* parts) {
  parts->clear();
  bool more = first.more();
  while (more) {
    zmq::message_t m;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    parts->push_back(std::move(m));
  }
}

// Names a libzmq error for a bind or connect failure.
Status zmq_address_error(const char* what, const std::string& address, const zmq::error_t& e) {
  switch (e.num()) {
    case EADDRINUSE:
    case EADDRNOTAVAIL:
    case EACCES:
      return errors::unavailable("cannot {} {}: {}", what, address, e.what());
    default:
      return errors::invalid_argument("cannot {} '{}': {}", what, address, e.what());
  }
}

// A Z85-encoded CURVE key (40 characters) decoded to its 32 bytes; nullopt when it is not one.
std::optional<std::string> decode_z85_key(const std::string& z85) {
  if (z85.size() != 40) return std::nullopt;
  std::string key(32, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()), z85.c_str()) == nullptr) return std::nullopt;
  return key;
}

std::string encode_z85_key(std::string_view key) {
  char z85[41] = {};
  if (key.size() != 32 || zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32) == nullptr) {
    return "(malformed key)";
  }
  return z85;
}

// Sets a CURVE key option from its Z85 text (already validated).
void set_curve_key(zmq::socket_t& socket, int option, const std::string& z85) {
  if (zmq_setsockopt(socket.handle(), option, z85.data(), z85.size()) != 0) throw zmq::error_t();
}

// A monitor event's id and value (the first frame; the second, the endpoint, is read and
// returned in `endpoint` when given).
struct MonitorEvent {
  uint16_t id = 0;
  uint32_t value = 0;
  std::string endpoint;
};

// Reads the next event from a monitor socket without waiting.
std::optional<MonitorEvent> next_event(zmq::socket_t& monitor) {
  zmq::message_t first;
  if (!monitor.recv(first, zmq::recv_flags::dontwait)) return std::nullopt;
  std::vector<zmq::message_t> rest;
  recv_rest(monitor, first, &rest);  // the endpoint frame
  MonitorEvent e;
  if (first.size() >= 6) {
    std::memcpy(&e.id, first.data(), sizeof e.id);
    std::memcpy(&e.value, static_cast<const char*>(first.data()) + 2, sizeof e.value);
  }
  if (!rest.empty()) e.endpoint = rest[0].to_string();
  return e;
}

// ---- Tensor frames ----

struct SentTensor {
  Tensor tensor;
  // Publishes the construction to the thread that runs the free callback, visibly to TSan (libzmq,
  // uninstrumented, hands the message over with atomics TSan cannot see).
  std::atomic<bool> published{false};
};

void free_sent_tensor(void* /*data*/, void* hint) {
  auto* sent = static_cast<SentTensor*>(hint);
  (void)sent->published.load(std::memory_order_acquire);
  delete sent;
}

// A TensorBuffer over a received zmq message: the buffer's data is the message's.
struct FrameBuffer : TensorBuffer {
  zmq::message_t frame;
};

void release_frame_buffer(TensorBuffer* b) { delete static_cast<FrameBuffer*>(b); }

}  // namespace

zmq::message_t string_frame(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

StatusOr<zmq::message_t> tensor_frame(const Tensor& t) {
  if (t.is_null()) return errors::failed_precondition("cannot send a null tensor");
  if (t.device() != kHostDeviceName) {
    return errors::failed_precondition("cannot send a tensor held by {}: copy it to host memory first",
                                       t.device());
  }
  const std::size_t bytes = t.bytes();
  if (bytes < kZeroCopyMinBytes) return zmq::message_t(t.raw_data(), bytes);
  auto* sent = new SentTensor{t};
  sent->published.store(true, std::memory_order_release);
  // libzmq never writes through the pointer it is given.
  return zmq::message_t(const_cast<void*>(t.raw_data()), bytes, &free_sent_tensor, sent);
}

StatusOr<Tensor> frame_to_tensor(zmq::message_t frame, DType dtype, const Shape& shape,
                                 std::size_t required_alignment) {
  TESSERA_CHECK(required_alignment > 0 && (required_alignment & (required_alignment - 1)) == 0);
  if (!shape.fully_defined()) {
    return errors::invalid_argument("a received tensor needs a fully defined shape, got {}", shape.to_string());
  }
  const std::size_t expected = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  if (frame.size() != expected) {
    return errors::invalid_argument("tensor frame holds {} bytes; a {} {} tensor needs {}", frame.size(),
                                    dtype_name(dtype), shape.to_string(), expected);
  }
  const auto address = reinterpret_cast<std::uintptr_t>(frame.data());
  if (dtype != DType::Bool && expected >= kZeroCopyMinBytes && address % required_alignment == 0) {
    auto* buf = new FrameBuffer();
    buf->frame = std::move(frame);
    buf->data = buf->frame.data();
    buf->bytes = buf->frame.size();
    buf->release = &release_frame_buffer;
    return adopt_buffer(buf, dtype, shape);
  }
  Tensor t(dtype, shape);
  if (dtype == DType::Bool) {
    // Any byte other than 0 or 1 would be an invalid bool.
    const auto* src = static_cast<const unsigned char*>(frame.data());
    bool* dst = t.mutable_data<bool>();
    for (std::size_t i = 0; i < expected; ++i) dst[i] = src[i] != 0;
  } else if (expected > 0) {
    std::memcpy(t.raw_mutable_data(), frame.data(), expected);
  }
  return t;
}

// ---- Server ----

struct ReplySlot {
  std::shared_ptr<RpcServerCore> core;
  zmq::message_t routing_id;
  zmq::message_t call_id;
  std::atomic<bool> replied{false};

  ReplySlot(std::shared_ptr<RpcServerCore> c, zmq::message_t r, zmq::message_t id)
      : core(std::move(c)), routing_id(std::move(r)), call_id(std::move(id)) {}
  ~ReplySlot();
};

class RpcServerCore : public std::enable_shared_from_this<RpcServerCore> {
 public:
  RpcServerCore(RpcServer::Handler handler, RpcServerOptions options)
      : handler_(std::move(handler)), options_(options), context_(make_context()), wake_fd_(make_wake_fd()) {}
  ~RpcServerCore() { ::close(wake_fd_); }

  Status bind(const std::string& address);
  void start_threads();
  void stop(std::chrono::milliseconds flush);
  bool reply(ReplySlot& slot, const Status& status, std::vector<zmq::message_t> frames);
  const std::string& endpoint() const { return endpoint_; }
  RpcServerStats stats() const;

 private:
  struct Outgoing {
    zmq::message_t routing_id;
    zmq::message_t call_id;
    zmq::message_t status;
    std::vector<zmq::message_t> frames;
  };
  struct Work {
    RpcMessage request;
    Responder respond;
  };

  void run_io();
  // CURVE: answers the ZAP requests waiting on zap_ (true when it stopped with some perhaps left),
  // and reads monitor_'s handshake failures.
  bool serve_zap();
  void read_monitor();
  // Counts a refused connection and logs `line` (rate-limited per `source`).
  void refused(const std::string& source, std::string line);
  void receive_one(zmq::message_t routing_id, std::vector<zmq::message_t>* parts);
  // The head and the chunks of a streamed request (Note [Streamed frames] in rpc_stream.cc).
  void receive_head(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t>* parts);
  void receive_chunk(const zmq::message_t& routing_id, uint64_t id, const zmq::message_t& chunk);
  // Drops the streamed requests whose sender sent nothing for stalled_stream_timeout (it is gone,
  // or its stream is broken).
  void drop_stalled_streams();
  // Hands a whole request to the handler.
  void dispatch(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t> frames);
  // Replies `status` (an error) to call `id` of `routing_id` at once, from the I/O thread.
  void refuse(zmq::message_t routing_id, uint64_t id, const Status& status);
  void send(Outgoing& out);
  void drain_outbox(std::vector<Outgoing>* batch);
  void invoke(RpcMessage request, Responder respond);
  void run_worker();

  const RpcServer::Handler handler_;
  const RpcServerOptions options_;
  std::string endpoint_;
  zmq::context_t context_;
  zmq::socket_t socket_;  // used only by io_thread_ once it runs
  zmq::socket_t monitor_;  // CURVE: PAIR receiving socket_'s handshake failures; I/O thread only
  zmq::socket_t zap_;      // CURVE: the ZAP handler's REP socket; I/O thread only
  std::set<std::string> allowed_keys_;  // CURVE: the allowed client keys, 32 bytes each
  struct Logged {
    std::chrono::steady_clock::time_point at;
    uint64_t suppressed = 0;
  };
  std::map<std::string, Logged> refusal_log_;  // I/O thread only: when each source was last logged
  // Streamed requests being received, by routing id and call id (I/O thread only).
  struct Assembling {
    zmq::message_t routing_id;
    Assembly assembly;
  };
  std::map<std::string, Assembling> assembling_;
  const int wake_fd_;
  std::thread io_thread_;
  std::vector<std::thread> workers_;

  std::mutex stop_mu_;
  bool stop_called_ = false;  // guarded by stop_mu_
  std::atomic<int> close_linger_ms_{0};  // ZMQ_LINGER when the I/O thread closes the socket
  std::chrono::steady_clock::time_point last_reply_;  // guarded by out_mu_: the latest reply given

  std::mutex out_mu_;
  std::vector<Outgoing> outbox_;  // guarded by out_mu_
  bool stopping_ = false;         // guarded by out_mu_: Responders are dead, the I/O thread exits

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::condition_variable workers_done_cv_;
  std::deque<Work> work_;      // guarded by work_mu_
  bool work_stopping_ = false;  // guarded by work_mu_
  int live_workers_ = 0;        // guarded by work_mu_

  std::atomic<uint64_t> requests_{0}, malformed_{0}, oversized_{0}, replies_{0}, dropped_replies_{0},
      abandoned_{0}, refused_{0}, streamed_requests_{0}, streamed_replies_{0}, dropped_chunks_{0},
      stalled_streams_{0};
};

namespace {
thread_local const void* tls_io_owner = nullptr;  // the core whose I/O thread this is
}  // namespace

ReplySlot::~ReplySlot() {
  if (!replied.load(std::memory_order_acquire)) {
    core->reply(*this, errors::internal("the server's handler dropped its Responder without replying"), {});
  }
}

bool Responder::operator()(RpcMessage reply) const {
  TESSERA_CHECK(slot_ != nullptr);
  return slot_->core->reply(*slot_, Status(), std::move(reply.frames));
}

bool Responder::fail(const Status& status) const {
  TESSERA_CHECK(slot_ != nullptr);
  Status s = status.ok() ? errors::internal("a handler failed a call with an OK status") : status;
  return slot_->core->reply(*slot_, s, {});
}

Status RpcServerCore::bind(const std::string& address) {
  if (options_.curve) {
    if (!decode_z85_key(options_.curve->public_key) || !decode_z85_key(options_.curve->secret_key)) {
      return errors::invalid_argument("the server's CURVE key pair is not two 40-character Z85 keys");
    }
    for (const std::string& key : options_.curve->allowed_clients) {
      std::optional<std::string> raw = decode_z85_key(key);
      if (!raw) return errors::invalid_argument("allowed client key '{}' is not a 40-character Z85 key", key);
      allowed_keys_.insert(std::move(*raw));
    }
  }
  try {
    if (options_.curve) {
      // The ZAP handler listens before any client can connect.
      zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
      zap_.set(zmq::sockopt::linger, 0);
      zap_.bind("inproc://zeromq.zap.01");
    }
    socket_ = zmq::socket_t(context_, zmq::socket_type::router);
    socket_.set(zmq::sockopt::linger, 0);
    // Undeliverable replies (peer gone, its queue full) fail the send so they can be counted; a
    // reply never blocks the I/O thread.
    socket_.set(zmq::sockopt::router_mandatory, 1);
    socket_.set(zmq::sockopt::sndhwm, 100000);
    socket_.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
    socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
    socket_.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(options_.heartbeat_timeout.count()));
    socket_.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(options_.heartbeat_timeout.count()));
    if (options_.curve) {
      socket_.set(zmq::sockopt::curve_server, 1);
      set_curve_key(socket_, ZMQ_CURVE_SECRETKEY, options_.curve->secret_key);
      socket_.set(zmq::sockopt::zap_domain, "tessera");
      // ZMQ_ZAP_ENFORCE_DOMAIN (93) is a draft option of libzmq 4.3: its header declares it only for
      // draft builds. Where the library lacks it (EINVAL), closing the ROUTER before the ZAP socket
      // (run_io) is what keeps clients from being admitted unchecked.
      const int enforce = 1;
      zmq_setsockopt(socket_.handle(), 93, &enforce, sizeof enforce);
      if (zmq_socket_monitor(socket_.handle(), "inproc://tessera-server-monitor",
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
        throw zmq::error_t();
      }
      monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
      monitor_.set(zmq::sockopt::linger, 0);
      monitor_.connect("inproc://tessera-server-monitor");
    }
    socket_.bind(address);
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_address_error("bind", address, e);
  }
  return Status();
}

void RpcServerCore::start_threads() {
  io_thread_ = std::thread([this] { run_io(); });
  const int n = std::max(0, options_.handler_threads);
  live_workers_ = n;
  for (int i = 0; i < n; ++i) {
    // Each worker keeps the core alive: stop() may leave a stuck one behind.
    workers_.emplace_back([self = shared_from_this()] { self->run_worker(); });
  }
}

void RpcServerCore::run_io() {
  tls_io_owner = this;
  // Plain file descriptors, polled with poll(2) itself, as the channel's I/O thread does (and for
  // the same reason: zmq_poll adds a zero-timeout poll and a ZMQ_EVENTS check around each sleep).
  // A socket's ZMQ_FD signals pending commands, not messages, and any use of the socket may
  // process them and so spend the signal. The rules here: each socket is read until EAGAIN (a
  // recv that finds nothing processes the pending commands, after which the fd signals the next
  // ones) or looked at again without sleeping; after sending on the ROUTER, ZMQ_EVENTS says
  // whether a request came in meanwhile; every socket is read once before the first sleep (a new
  // pipe starts out active, so its first messages signal nothing). The ZAP socket's replies are
  // sent between its reads, and the monitor is only read.
  const bool curve = options_.curve.has_value();
  pollfd items[4] = {{socket_.get(zmq::sockopt::fd), POLLIN, 0},
                     {wake_fd_, POLLIN, 0},
                     {curve ? zap_.get(zmq::sockopt::fd) : -1, POLLIN, 0},
                     {curve ? monitor_.get(zmq::sockopt::fd) : -1, POLLIN, 0}};
  // Without CURVE there is no ZAP handler and no monitor: two items.
  const int num_items = curve ? 4 : 2;
  if (curve) read_monitor();
  bool look_socket = true;  // requests may be left unread: look again without sleeping
  bool look_zap = curve;    // the same for ZAP requests
  std::vector<zmq::message_t> parts;
  std::vector<Outgoing> batch;
  for (;;) {
    // While streamed requests are being received, wake up now and then to drop stalled ones.
    const long stall_check_ms = std::clamp<long>(options_.stalled_stream_timeout.count() / 4, 10, 1000);
    if (look_socket || look_zap) {
      for (pollfd& item : items) item.revents = 0;
    } else if (!poll_io(items, num_items, assembling_.empty() ? -1 : stall_check_ms)) {
      break;
    }
    if (!assembling_.empty()) drop_stalled_streams();
    if (items[1].revents & POLLIN) drain_wake_fd(wake_fd_);
    if (curve) {
      if (look_zap || (items[2].revents & POLLIN)) look_zap = serve_zap();
      if (items[3].revents & POLLIN) read_monitor();
    }
    bool more = false;
    if (look_socket || (items[0].revents & POLLIN)) {
      more = true;  // unless a recv finds nothing within the batch
      for (int i = 0; i < kRecvBatch; ++i) {
        zmq::message_t routing_id;
        if (!socket_.recv(routing_id, zmq::recv_flags::dontwait)) {
          more = false;
          break;
        }
        recv_rest(socket_, routing_id, &parts);
        receive_one(std::move(routing_id), &parts);
      }
    }
    // After receiving: replies given inline (handler_threads == 0) go out in this same turn.
    {
      std::lock_guard<std::mutex> l(out_mu_);
      if (stopping_) break;
      batch.swap(outbox_);
    }
    for (auto& out : batch) send(out);
    // A send may have processed the commands that announced a request: ZMQ_EVENTS processes
    // what is left and tells whether one is waiting.
    if (!batch.empty() && !more) more = (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
    batch.clear();
    look_socket = more;
  }
  if (options_.curve) {
    zmq_socket_monitor(socket_.handle(), nullptr, 0);
    monitor_.close();
  }
  socket_.set(zmq::sockopt::linger, close_linger_ms_.load());
  socket_.close();
  // After the ROUTER: no handshake can start once it is closed (and ZMQ_ZAP_ENFORCE_DOMAIN refuses
  // any that would find no handler).
  if (options_.curve) zap_.close();
}

bool RpcServerCore::serve_zap() {
  for (int n = 0; n < kRecvBatch; ++n) {
    zmq::message_t version;
    if (!zap_.recv(version, zmq::recv_flags::dontwait)) return false;
    std::vector<zmq::message_t> rest;
    recv_rest(zap_, version, &rest);
    // RFC 27: [version][request id][domain][address][identity][mechanism][credentials...]
    const bool well_formed = version.to_string_view() == "1.0" && rest.size() >= 6 &&
                             rest[4].to_string_view() == "CURVE" && rest[5].size() == 32;
    const bool allowed = well_formed && allowed_keys_.count(rest[5].to_string()) > 0;
    const std::string request_id = rest.empty() ? std::string() : rest[0].to_string();
    // A REP socket answers each request before reading the next; over inproc this never blocks.
    zap_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(std::string_view(allowed ? "200" : "400")), zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(std::string_view(allowed ? "OK" : "client key not allowed")), zmq::send_flags::sndmore);
    zap_.send(zmq::message_t(), zmq::send_flags::sndmore);  // user id
    zap_.send(zmq::message_t(), zmq::send_flags::none);     // metadata
    if (allowed) continue;
    const std::string peer = rest.size() >= 3 ? rest[2].to_string() : std::string("an unknown address");
    const std::string key = well_formed ? encode_z85_key(rest[5].to_string_view()) : std::string("(none)");
    if (options_.on_refused) {
      try {
        options_.on_refused(peer, key);
      } catch (...) {
        // A callback's failure does not stop the server.
      }
    }
    refused(peer + " " + key, fmt::format("refused a connection from {}: its key {} is not in the "
                                          "cluster's keys",
                                          peer, key));
  }
  return true;
}

void RpcServerCore::read_monitor() {
  while (std::optional<MonitorEvent> e = next_event(monitor_)) {
    if (e->id != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) continue;
    if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
      refused("mismatch", fmt::format("refused a connection on {}: the peer does not use CURVE keys "
                                      "(a client or task started without them)",
                                      endpoint_));
    } else if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
      refused("cryptographic", fmt::format("refused a connection on {}: the peer does not have this "
                                           "server's public key (its cluster keys list another key for this "
                                           "address)",
                                           endpoint_));
    }
  }
}

void RpcServerCore::refused(const std::string& source, std::string line) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (refusal_log_.size() > 4096) refusal_log_.clear();  // bounded, whatever a peer does
  auto [it, fresh] = refusal_log_.try_emplace(source);
  Logged& logged = it->second;
  if (!fresh && now - logged.at < std::chrono::seconds(10)) {
    ++logged.suppressed;
    return;
  }
  if (logged.suppressed > 0) line += fmt::format(" ({} more like it since the last such line)", logged.suppressed);
  TESSERA_LOG(kWarning, "{}", line);
  logged = Logged{now, 0};
}

namespace {
std::string assembly_key(const zmq::message_t& routing_id, uint64_t id) {
  std::string key(static_cast<const char*>(routing_id.data()), routing_id.size());
  key.append(reinterpret_cast<const char*>(&id), sizeof id);
  return key;
}
}  // namespace

void RpcServerCore::receive_one(zmq::message_t routing_id, std::vector<zmq::message_t>* parts) {
  // parts: [call-id][header][payload...], [head envelope][descriptor][header][payload...] or
  // [chunk envelope][bytes]
  const auto envelope = parts->empty() ? std::nullopt : parse_envelope((*parts)[0]);
  if (parts->size() < 2 || !envelope) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto [kind, id] = *envelope;
  if (kind == Envelope::kChunk) {
    if (parts->size() != 2) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    receive_chunk(routing_id, id, (*parts)[1]);
    return;
  }
  if (kind == Envelope::kHead) {
    receive_head(std::move(routing_id), id, parts);
    return;
  }
  if (options_.max_message_bytes >= 0) {
    uint64_t total = 0;
    for (std::size_t i = 1; i < parts->size(); ++i) total += (*parts)[i].size();
    if (total > static_cast<uint64_t>(options_.max_message_bytes)) {
      oversized_.fetch_add(1, std::memory_order_relaxed);
      refuse(std::move(routing_id), id,
             errors::resource_exhausted("request of {} bytes exceeds the server's limit of {} bytes", total,
                                        options_.max_message_bytes));
      return;
    }
  }
  dispatch(std::move(routing_id), id, frames_from(*parts, 1));
}

void RpcServerCore::receive_head(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t>* parts) {
  if (parts->size() < 3) {  // [envelope][descriptor][header]...
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  StatusOr<Assembly> assembly = Assembly::start((*parts)[1], frames_from(*parts, 2), options_.max_message_bytes);
  if (!assembly.ok()) {
    (assembly.status().code() == ErrorCode::kResourceExhausted ? oversized_ : malformed_)
        .fetch_add(1, std::memory_order_relaxed);
    refuse(std::move(routing_id), id, assembly.status());
    return;
  }
  std::string key = assembly_key(routing_id, id);
  // A head reusing the key of an unfinished stream replaces it (that sender started over).
  assembling_.insert_or_assign(std::move(key), Assembling{std::move(routing_id), std::move(assembly).value()});
}

void RpcServerCore::receive_chunk(const zmq::message_t& routing_id, uint64_t id, const zmq::message_t& chunk) {
  auto it = assembling_.find(assembly_key(routing_id, id));
  if (it == assembling_.end()) {  // its head was refused, or it stalled and was dropped
    dropped_chunks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Assembly& a = it->second.assembly;
  if (Status st = a.add(chunk); !st.ok()) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    zmq::message_t rid = std::move(it->second.routing_id);
    assembling_.erase(it);
    refuse(std::move(rid), id, st);
    return;
  }
  if (!a.complete()) return;
  std::vector<zmq::message_t> frames = a.take();
  zmq::message_t rid = std::move(it->second.routing_id);
  assembling_.erase(it);
  streamed_requests_.fetch_add(1, std::memory_order_relaxed);
  dispatch(std::move(rid), id, std::move(frames));
}

void RpcServerCore::drop_stalled_streams() {
  const auto now = Assembly::Clock::now();
  for (auto it = assembling_.begin(); it != assembling_.end();) {
    if (now - it->second.assembly.last_progress() > options_.stalled_stream_timeout) {
      stalled_streams_.fetch_add(1, std::memory_order_relaxed);
      it = assembling_.erase(it);
    } else {
      ++it;
    }
  }
}

void RpcServerCore::refuse(zmq::message_t routing_id, uint64_t id, const Status& status) {
  Outgoing out{std::move(routing_id), call_id_frame(id), status_frame(status), {}};
  send(out);
}

void RpcServerCore::dispatch(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t> frames) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  RpcMessage request;
  request.frames = std::move(frames);
  Responder respond(std::make_shared<ReplySlot>(shared_from_this(), std::move(routing_id), call_id_frame(id)));
  if (options_.handler_threads <= 0 || (options_.run_inline && options_.run_inline(request))) {
    invoke(std::move(request), std::move(respond));
    return;
  }
  {
    std::lock_guard<std::mutex> l(work_mu_);
    work_.push_back(Work{std::move(request), std::move(respond)});
  }
  work_cv_.notify_one();
}

void RpcServerCore::invoke(RpcMessage request, Responder respond) {
  Responder keep = respond;  // to fail the call if the handler throws
  try {
    handler_(std::move(request), std::move(respond));
  } catch (...) {
    keep.fail(status_from_current_exception());
  }
}

void RpcServerCore::run_worker() {
  for (;;) {
    Work w;
    {
      std::unique_lock<std::mutex> l(work_mu_);
      work_cv_.wait(l, [&] { return work_stopping_ || !work_.empty(); });
      if (work_stopping_) break;
      w = std::move(work_.front());
      work_.pop_front();
    }
    invoke(std::move(w.request), std::move(w.respond));
  }
  {
    std::lock_guard<std::mutex> l(work_mu_);
    --live_workers_;
  }
  workers_done_cv_.notify_all();
}

bool RpcServerCore::reply(ReplySlot& slot, const Status& status, std::vector<zmq::message_t> frames) {
  if (slot.replied.exchange(true, std::memory_order_acq_rel)) return false;  // not the first
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    if (stopping_) {
      dropped_replies_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // Only the winner of `replied` gets here, so it alone moves the envelope out of the slot.
    wake = outbox_.empty() && tls_io_owner != this;
    outbox_.push_back(Outgoing{std::move(slot.routing_id), std::move(slot.call_id), status_frame(status),
                               std::move(frames)});
    last_reply_ = std::chrono::steady_clock::now();
  }
  if (wake) signal_wake_fd(wake_fd_);
  return true;
}

void RpcServerCore::send(Outgoing& out) {
  try {
    // With ZMQ_ROUTER_MANDATORY the routing frame fails (EAGAIN or EHOSTUNREACH) when the reply
    // cannot be delivered; the frames after it then cannot block.
    std::optional<ChunkedFrames> stream;
    uint64_t id = 0;
    if (has_streamed_size(out.frames)) {
      // Every reply slot holds a whole-message call id (dispatch() made it).
      id = parse_call_id(out.call_id).value_or(0);
      // The status frame counts as frame 0 of the descriptor's numbering.
      out.frames.insert(out.frames.begin(), std::move(out.status));
      stream = split_for_streaming(&out.frames);
    }
    zmq::message_t routing_id;  // sending moves the frame out: each chunk sends a copy of this
    if (stream) routing_id.copy(out.routing_id);
    if (!socket_.send(out.routing_id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      dropped_replies_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (stream) {
      socket_.send(envelope_frame(kHeadMagic, id), zmq::send_flags::sndmore);
      socket_.send(stream->descriptor, zmq::send_flags::sndmore);
    } else {
      socket_.send(out.call_id, zmq::send_flags::sndmore);
      socket_.send(out.status, out.frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
    for (std::size_t i = 0; i < out.frames.size(); ++i) {
      socket_.send(out.frames[i], i + 1 < out.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    if (stream) {
      // The chunks follow at once, in order (Note [Streamed frames]).
      for (zmq::message_t& chunk : stream->chunks) {
        zmq::message_t rid;
        rid.copy(routing_id);
        if (!socket_.send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          dropped_replies_.fetch_add(1, std::memory_order_relaxed);  // the caller meets its deadline
          return;
        }
        socket_.send(envelope_frame(kChunkMagic, id), zmq::send_flags::sndmore);
        socket_.send(chunk, zmq::send_flags::none);
      }
      streamed_replies_.fetch_add(1, std::memory_order_relaxed);
    }
    replies_.fetch_add(1, std::memory_order_relaxed);
  } catch (const zmq::error_t&) {
    dropped_replies_.fetch_add(1, std::memory_order_relaxed);  // EHOSTUNREACH: the caller went away
  }
}

void RpcServerCore::stop(std::chrono::milliseconds flush) {
  TESSERA_CHECK(tls_io_owner != this);  // not from a handler run inline on the I/O thread
  // Held throughout: a second stop() returns when the first has finished.
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  if (stop_called_) return;
  stop_called_ = true;
  if (flush.count() > 0) {
    // Replies already given go out first: wait (bounded) for the I/O thread to hand them to
    // libzmq, and let the socket linger that long on close so libzmq transmits them.
    // Only when replies were given lately: lingering otherwise would just keep the connections
    // open a while longer, for requests that would be lost in them.
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + flush;
    bool recent = false;
    for (;;) {
      {
        std::lock_guard<std::mutex> l(out_mu_);
        recent = recent || start - last_reply_ < flush;
        if (outbox_.empty()) break;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (recent) close_linger_ms_.store(static_cast<int>(flush.count()));
  }
  std::vector<Outgoing> unsent;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    stopping_ = true;
    unsent.swap(outbox_);
  }
  dropped_replies_.fetch_add(unsent.size(), std::memory_order_relaxed);
  unsent.clear();
  signal_wake_fd(wake_fd_);
  if (io_thread_.joinable()) io_thread_.join();
  context_.close();  // the socket is closed: this releases the port before stop() returns

  std::deque<Work> queued;
  {
    std::lock_guard<std::mutex> l(work_mu_);
    work_stopping_ = true;
    queued.swap(work_);
  }
  work_cv_.notify_all();
  queued.clear();  // their Responders die unreplied: counted as dropped
  int left;
  {
    std::unique_lock<std::mutex> l(work_mu_);
    workers_done_cv_.wait_for(l, options_.stop_grace, [&] { return live_workers_ == 0; });
    left = live_workers_;
  }
  abandoned_.fetch_add(static_cast<uint64_t>(left), std::memory_order_relaxed);
  for (auto& t : workers_) {
    if (!t.joinable()) continue;
    // A worker that stop() itself runs on (a handler called stop()) cannot join itself.
    if (left == 0 && t.get_id() != std::this_thread::get_id()) {
      t.join();
    } else {
      t.detach();
    }
  }
}

RpcServerStats RpcServerCore::stats() const {
  RpcServerStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.malformed = malformed_.load(std::memory_order_relaxed);
  s.oversized = oversized_.load(std::memory_order_relaxed);
  s.replies = replies_.load(std::memory_order_relaxed);
  s.dropped_replies = dropped_replies_.load(std::memory_order_relaxed);
  s.abandoned_handlers = abandoned_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.streamed_requests = streamed_requests_.load(std::memory_order_relaxed);
  s.streamed_replies = streamed_replies_.load(std::memory_order_relaxed);
  s.dropped_chunks = dropped_chunks_.load(std::memory_order_relaxed);
  s.stalled_streams = stalled_streams_.load(std::memory_order_relaxed);
  return s;
}

StatusOr<std::unique_ptr<RpcServer>> RpcServer::start(std::string bind_address, Handler handler,
                                                      RpcServerOptions options) {
  if (!handler) return errors::invalid_argument("an RPC server needs a handler");
  auto core = std::make_shared<RpcServerCore>(std::move(handler), options);
  TESSERA_RETURN_IF_ERROR(core->bind(bind_address));
  core->start_threads();
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(core)));
}

RpcServer::~RpcServer() { stop(); }
void RpcServer::stop(std::chrono::milliseconds flush) { core_->stop(flush); }
const std::string& RpcServer::endpoint() const { return core_->endpoint(); }
RpcServerStats RpcServer::stats() const { return core_->stats(); }

// ---- Channel ----

namespace {

zmq::context_t& channel_context() {
  // Leaked on purpose: a channel destroyed during static destruction must still find it.
  static zmq::context_t* context = new zmq::context_t(make_context());
  return *context;
}

// The eventfd a thread waiting in a synchronous call sleeps on (with the channel socket's ZMQ_FD):
// one per thread, made on its first synchronous call and closed when the thread exits.
class ThreadWakeFd {
 public:
  ThreadWakeFd() : fd_(make_wake_fd()) {}
  ~ThreadWakeFd() { ::close(fd_); }
  ThreadWakeFd(const ThreadWakeFd&) = delete;
  ThreadWakeFd& operator=(const ThreadWakeFd&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

int thread_wake_fd() {
  thread_local ThreadWakeFd wake;
  return wake.fd();
}

// The SyncWaiter (RpcChannelCore's) of the call this thread waits for, if any.
thread_local const void* tls_sync_waiter = nullptr;

}  // namespace

class RpcChannelCore {
 public:
  using Clock = std::chrono::steady_clock;

  RpcChannelCore(std::string endpoint, const RpcChannelOptions& options);
  ~RpcChannelCore();

  // until_lost: `deadline` bounds only the wait for a connection; once sent, the call waits for
  // its reply until the connection is lost (Note [RPC], "Long calls").
  void call(RpcMessage request, std::chrono::milliseconds deadline, RpcChannel::Done done, bool until_lost);
  // The same, waiting on the calling thread, which receives its own reply (Note [RPC], "Channel").
  StatusOr<RpcMessage> call_sync(RpcMessage request, std::chrono::milliseconds deadline, bool until_lost);
  // For a channel destroyed from one of its own `done` callbacks: the I/O thread stops after the
  // callback and deletes the core itself.
  void destroy_from_io_thread();
  bool on_io_thread() const { return tls_io_owner == this; }
  RpcChannelStats stats() const;

 private:
  // A thread waiting in call_sync(); its call's result lands here (guarded by mu_), and whoever
  // completes the call from another thread writes `wake_fd`.
  struct SyncWaiter {
    std::optional<StatusOr<RpcMessage>> result;
    int wake_fd = -1;
  };
  struct Pending {
    RpcChannel::Done done;         // an asynchronous call: run on the I/O thread
    SyncWaiter* waiter = nullptr;  // a synchronous one
    std::chrono::milliseconds budget;
    bool until_lost = false;
    bool sent = false;  // handed to libzmq
  };
  struct Outgoing {
    uint64_t id;
    zmq::message_t call_id;
    RpcMessage request;
    std::optional<ChunkedFrames> stream;  // its large frames, sent as chunks after the head
    bool head_sent = false;
    std::size_t next_chunk = 0;    // of stream->chunks
  };
  using Completion = std::pair<RpcChannel::Done, StatusOr<RpcMessage>>;

  void run_io();
  // The checks every new call passes; OK or the error to complete it with. Needs mu_.
  Status admit(const RpcMessage& request) const;
  // Registers a call (needs mu_). An asynchronous call joins the outbox for the I/O thread; a
  // synchronous one is sent now if libzmq takes it (else it joins the outbox), and the socket is
  // served. True when the I/O thread must be woken: it has calls to send or completions to run,
  // must watch the socket for a connection, or the call's deadline comes before its next wake-up.
  bool start_locked(RpcMessage request, Clock::time_point deadline, Pending pending);
  // After any use of the socket, which may have consumed the ZMQ_FD signal: sends what the outbox
  // holds if libzmq takes it, receives every reply there is (kRecvBatch at most) and completes their
  // calls. True when replies were left for later. Needs mu_.
  bool serve_socket_locked();
  void flush_outbox();
  bool receive_replies();
  void expire(Clock::time_point now);
  // Completes the pending call `it` with `result` and forgets it. Needs mu_: a synchronous caller
  // gets its result (and a wake-up unless it is this thread); an asynchronous one joins ready_.
  void finish(std::unordered_map<uint64_t, Pending>::iterator it, StatusOr<RpcMessage> result);
  void fail_all(const Status& status);
  // Reads the socket monitor's events; a lost connection fails the until_lost calls sent on it, a
  // failed handshake every pending call (Note [RPC], "Security").
  void read_monitor();
  // The error of a failed handshake (`event` a HANDSHAKE_FAILED_* monitor event).
  Status handshake_error(uint16_t event, uint32_t value) const;
  // Connects the socket again after a handshake failure libzmq does not retry.
  void reconnect();
  void run_completions(std::vector<Completion>* completions);

  const std::string endpoint_;
  const RpcChannelOptions options_;
  Status broken_;  // a malformed endpoint: every call fails with it
  zmq::socket_t socket_;   // guarded by mu_ (used by callers, waiters and the I/O thread in turn)
  int socket_fd_ = -1;     // socket_'s ZMQ_FD: readable when the socket has something to look at
  zmq::socket_t monitor_;  // PAIR receiving socket_'s events; I/O thread only
  const int wake_fd_;
  std::thread io_thread_;

  mutable std::mutex mu_;
  std::condition_variable waiters_gone_;  // signalled when sync_waiters_ drops to 0 while stopping
  bool stopping_ = false;                 // guarded by mu_
  bool self_delete_ = false;              // I/O thread only: set by destroy_from_io_thread()

  // Guarded by mu_.
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  int async_pending_ = 0;  // entries of pending_ with a `done`
  int sync_waiters_ = 0;   // threads inside call_sync()
  // Deadlines of pending calls, earliest first; entries of completed calls are skipped when they
  // surface (and purged when they outnumber the live ones).
  std::priority_queue<std::pair<Clock::time_point, uint64_t>, std::vector<std::pair<Clock::time_point, uint64_t>>,
                      std::greater<>>
      deadlines_;
  std::deque<Outgoing> outbox_;  // accepted, not yet taken by libzmq (no peer connected yet)
  std::unordered_map<uint64_t, Assembly> assembling_;  // streamed replies being received, by call id
  std::vector<Completion> rejected_;  // calls refused at once, completed by the I/O thread
  std::vector<Completion> ready_;     // completed asynchronous calls, for the I/O thread to run
  // When the I/O thread wakes up by itself next, and whether it watches the socket meanwhile.
  Clock::time_point io_wake_at_ = Clock::time_point::min();
  bool io_watches_socket_ = false;
  // The last handshake failed: new calls fail with this at once (until a handshake succeeds).
  Status handshake_failed_;
  int closed_in_handshake_ = 0;  // HANDSHAKE_FAILED_NO_DETAIL events since the last success
  std::optional<Clock::time_point> reconnect_at_;  // when to connect again (libzmq gave up)
  std::chrono::milliseconds reconnect_backoff_;

  std::atomic<uint64_t> calls_{0}, timed_out_{0}, late_replies_{0}, malformed_{0}, failed_handshakes_{0},
      streamed_requests_{0}, streamed_replies_{0}, dropped_chunks_{0};
};

RpcChannelCore::RpcChannelCore(std::string endpoint, const RpcChannelOptions& options)
    : endpoint_(std::move(endpoint)),
      options_(options),
      wake_fd_(make_wake_fd()),
      reconnect_backoff_(options.reconnect_interval) {
  const bool bad_keys = options_.curve && (!decode_z85_key(options_.curve->public_key) ||
                                           !decode_z85_key(options_.curve->secret_key) ||
                                           !decode_z85_key(options_.curve->server_key));
  if (bad_keys) {
    broken_ = errors::invalid_argument("channel to {}: its CURVE keys are not 40-character Z85 keys", endpoint_);
  }
  try {
    socket_ = zmq::socket_t(channel_context(), zmq::socket_type::dealer);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::immediate, 1);
    // A streamed request is a message per chunk (zero-copy references): room for many.
    socket_.set(zmq::sockopt::sndhwm, 100000);
    socket_.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options_.reconnect_interval.count()));
    socket_.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(options_.reconnect_interval_max.count()));
    socket_.set(zmq::sockopt::connect_timeout, static_cast<int>(options_.connect_timeout.count()));
    socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
    socket_.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(options_.heartbeat_timeout.count()));
    socket_.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(options_.heartbeat_timeout.count()));
    socket_.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
    if (options_.curve && !bad_keys) {
      set_curve_key(socket_, ZMQ_CURVE_SERVERKEY, options_.curve->server_key);
      set_curve_key(socket_, ZMQ_CURVE_PUBLICKEY, options_.curve->public_key);
      set_curve_key(socket_, ZMQ_CURVE_SECRETKEY, options_.curve->secret_key);
    }
    socket_fd_ = socket_.get(zmq::sockopt::fd);
    // Unique per channel ever made: libzmq may release an inproc name a little after its socket.
    static std::atomic<uint64_t> monitors{0};
    const std::string monitor_address = fmt::format("inproc://tessera-channel-monitor-{}", monitors.fetch_add(1));
    constexpr int kEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(socket_.handle(), monitor_address.c_str(), kEvents) != 0) {
      throw zmq::error_t();
    }
    monitor_ = zmq::socket_t(channel_context(), zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(monitor_address);
    if (!bad_keys) socket_.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    broken_ = zmq_address_error("connect to", endpoint_, e);
  }
  io_thread_ = std::thread([this] { run_io(); });
}

RpcChannelCore::~RpcChannelCore() {
  if (self_delete_) {  // deleted by its own I/O thread, which has finished with everything
    ::close(wake_fd_);
    return;
  }
  TESSERA_CHECK(!on_io_thread());
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  signal_wake_fd(wake_fd_);
  io_thread_.join();
  ::close(wake_fd_);
}

void RpcChannelCore::destroy_from_io_thread() {
  TESSERA_CHECK(on_io_thread());
  io_thread_.detach();
  self_delete_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;  // the loop ends after the callback that destroyed the channel returns
  }
  signal_wake_fd(wake_fd_);
}

Status RpcChannelCore::admit(const RpcMessage& request) const {
  if (!broken_.ok()) return broken_;
  if (request.frames.empty()) return errors::invalid_argument("an RPC request needs at least a header frame");
  if (stopping_) return errors::cancelled("call to {} cancelled: the channel was destroyed", endpoint_);
  return handshake_failed_;
}

bool RpcChannelCore::start_locked(RpcMessage request, Clock::time_point deadline, Pending pending) {
  const uint64_t id = next_id_++;
  const bool async = pending.waiter == nullptr;
  pending_.emplace(id, std::move(pending));
  if (async) ++async_pending_;
  deadlines_.emplace(deadline, id);
  if (deadlines_.size() > 2 * pending_.size() + 1024) {
    decltype(deadlines_) live;
    while (!deadlines_.empty()) {
      if (pending_.count(deadlines_.top().second)) live.push(deadlines_.top());
      deadlines_.pop();
    }
    deadlines_.swap(live);
  }
  bool wake = deadline < io_wake_at_;
  const bool queued_before = !outbox_.empty();
  outbox_.push_back(Outgoing{id, call_id_frame(id), std::move(request), std::nullopt, false, 0});
  outbox_.back().stream = split_for_streaming(&outbox_.back().request.frames);
  // An asynchronous call is sent by the I/O thread, which receives its reply anyway: a burst of
  // calls costs one wake-up, and the callers never contend with it for the socket.
  if (async) return wake || !queued_before;
  // A synchronous one behind calls still queued waits its turn; otherwise the socket is tried at
  // once, and serve_socket_locked() receives whatever the use of the socket made visible.
  if (!queued_before && serve_socket_locked()) wake = true;
  if (!outbox_.empty() && !io_watches_socket_) wake = true;  // no connection: the I/O thread watches for one
  return wake || !ready_.empty();
}

bool RpcChannelCore::serve_socket_locked() {
  if (socket_fd_ < 0) return false;
  if (!outbox_.empty()) flush_outbox();
  bool more = receive_replies();
  // libzmq's send() skips the socket's pending commands when it processed some less than a
  // millisecond ago, while recv() and ZMQ_EVENTS always process them: a connection the receive
  // just attached can take the outbox, and its signal on the fd is spent.
  while (!outbox_.empty() && (socket_.get(zmq::sockopt::events) & ZMQ_POLLOUT)) {
    const std::size_t before = outbox_.size();
    flush_outbox();
    more = receive_replies() || more;
    if (outbox_.size() == before) break;
  }
  return more;
}

void RpcChannelCore::call(RpcMessage request, std::chrono::milliseconds deadline, RpcChannel::Done done,
                          bool until_lost) {
  TESSERA_CHECK(done != nullptr);
  calls_.fetch_add(1, std::memory_order_relaxed);
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status st = admit(request); !st.ok()) {
      // Completed on the I/O thread all the same: `done` always runs there.
      rejected_.emplace_back(std::move(done), st);
      wake = true;
    } else {
      wake = start_locked(std::move(request), Clock::now() + deadline,
                          Pending{std::move(done), nullptr, deadline, until_lost, false});
    }
  }
  if (wake) signal_wake_fd(wake_fd_);
}

StatusOr<RpcMessage> RpcChannelCore::call_sync(RpcMessage request, std::chrono::milliseconds deadline,
                                               bool until_lost) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  SyncWaiter waiter;
  waiter.wake_fd = thread_wake_fd();
  std::unique_lock<std::mutex> l(mu_);
  if (Status st = admit(request); !st.ok()) return st;
  tls_sync_waiter = &waiter;
  ++sync_waiters_;
  bool wake = start_locked(std::move(request), Clock::now() + deadline,
                           Pending{nullptr, &waiter, deadline, until_lost, false});
  // Wait for the reply on the socket's ZMQ_FD, receiving it on this thread, or for whoever
  // completes the call otherwise (the I/O thread: deadline, lost connection, destruction).
  while (!waiter.result) {
    l.unlock();
    if (wake) signal_wake_fd(wake_fd_);
    pollfd fds[2] = {{waiter.wake_fd, POLLIN, 0}, {socket_fd_, POLLIN, 0}};
    poll_io(fds, socket_fd_ >= 0 ? 2 : 1, -1);  // an interruption or error just loops again
    if (fds[0].revents & POLLIN) drain_wake_fd(waiter.wake_fd);
    l.lock();
    if (waiter.result) break;
    wake = serve_socket_locked() || !ready_.empty();
  }
  const bool wake_io = !ready_.empty();  // asynchronous calls this thread completed
  if (--sync_waiters_ == 0 && stopping_) waiters_gone_.notify_all();
  StatusOr<RpcMessage> result = std::move(*waiter.result);
  l.unlock();
  tls_sync_waiter = nullptr;
  if (wake_io) signal_wake_fd(wake_fd_);
  return result;
}

void RpcChannelCore::run_io() {
  tls_io_owner = this;
  // A broken channel may have no monitor socket (nor socket): it polls its wake-up fd only.
  const bool broken = monitor_.handle() == nullptr || socket_fd_ < 0;
  // Plain file descriptors, polled with poll(2) itself. A socket's ZMQ_FD signals that commands
  // are pending, not that messages are, and a pipe signals only once its reader found it empty:
  // whoever is woken reads until EAGAIN (serve_socket_locked, read_monitor; the monitor is read
  // once before the first sleep), and nothing else touches the monitor socket. zmq_poll with a
  // socket among its items costs a zero-timeout poll(2) and a ZMQ_EVENTS check (another poll(2)
  // of the mailbox) around each sleep.
  const int monitor_fd = broken ? -1 : monitor_.get(zmq::sockopt::fd);
  pollfd items[3] = {{wake_fd_, POLLIN, 0}, {monitor_fd, POLLIN, 0}, {socket_fd_, POLLIN, 0}};
  if (!broken) {
    std::lock_guard<std::mutex> l(mu_);
    read_monitor();
  }
  std::vector<Completion> completions;
  bool again = false;  // replies left unread: look again without sleeping
  for (;;) {
    long timeout = -1;
    int num_items = 1;
    {
      std::lock_guard<std::mutex> l(mu_);
      io_wake_at_ = Clock::time_point::max();
      if (!deadlines_.empty()) io_wake_at_ = deadlines_.top().first;
      if (reconnect_at_) io_wake_at_ = std::min(io_wake_at_, *reconnect_at_);
      if (again) io_wake_at_ = Clock::now();
      if (io_wake_at_ != Clock::time_point::max()) {
        // Rounded up: waking before the deadline would only spin.
        const auto left = io_wake_at_ - Clock::now();
        timeout = std::max<long>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count());
      }
      // The socket needs watching for replies to asynchronous calls (synchronous callers watch for
      // their own) and for the connection the outbox waits for.
      io_watches_socket_ = !broken && (async_pending_ > 0 || !outbox_.empty());
      if (!broken) num_items = io_watches_socket_ ? 3 : 2;
    }
    if (!poll_io(items, num_items, timeout)) break;
    if (items[0].revents & POLLIN) drain_wake_fd(wake_fd_);
    bool stopping;
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping = stopping_;
      completions.swap(rejected_);
      if (!stopping && !broken) {
        again = serve_socket_locked();
        // After the replies: a reply that arrived before its connection dropped still counts.
        if (num_items >= 2 && (items[1].revents & POLLIN)) read_monitor();
        const auto now = Clock::now();
        if (reconnect_at_ && now >= *reconnect_at_) reconnect();
        expire(now);
      }
      for (auto& c : ready_) completions.push_back(std::move(c));
      ready_.clear();
    }
    run_completions(&completions);
    if (stopping) break;
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    stopping_ = true;  // also when poll failed: later calls are refused at once
    fail_all(errors::cancelled("call to {} cancelled: the channel was destroyed", endpoint_));
    completions.swap(rejected_);
    for (auto& c : ready_) completions.push_back(std::move(c));
    ready_.clear();
    // Synchronous callers still inside poll on the socket's fd: it must stay open until they left.
    waiters_gone_.wait(l, [&] { return sync_waiters_ == 0; });
  }
  run_completions(&completions);
  if (monitor_.handle() != nullptr) {
    zmq_socket_monitor(socket_.handle(), nullptr, 0);
    monitor_.close();
  }
  socket_.close();
  if (self_delete_) delete this;
}

void RpcChannelCore::run_completions(std::vector<Completion>* completions) {
  for (auto& [done, result] : *completions) {
    try {
      done(std::move(result));
    } catch (const std::exception& e) {
      TESSERA_LOG(kError, "an RPC completion for {} threw (ignored): {}", endpoint_, e.what());
    } catch (...) {
      TESSERA_LOG(kError, "an RPC completion for {} threw (ignored)", endpoint_);
    }
  }
  completions->clear();
}

void RpcChannelCore::finish(std::unordered_map<uint64_t, Pending>::iterator it, StatusOr<RpcMessage> result) {
  if (!assembling_.empty()) assembling_.erase(it->first);  // its later chunks are dropped
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.waiter != nullptr) {
    p.waiter->result.emplace(std::move(result));
    // A thread finishing its own call is awake already.
    if (p.waiter != tls_sync_waiter) signal_wake_fd(p.waiter->wake_fd);
    return;
  }
  --async_pending_;
  ready_.emplace_back(std::move(p.done), std::move(result));
}

void RpcChannelCore::read_monitor() {
  bool lost = false;
  Status handshake;  // a handshake failure seen in this batch
  for (;;) {
    std::optional<MonitorEvent> e = next_event(monitor_);
    if (!e) break;
    switch (e->id) {
      case ZMQ_EVENT_DISCONNECTED:
        lost = true;
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        handshake_failed_ = Status();
        handshake = Status();
        closed_in_handshake_ = 0;
        reconnect_backoff_ = options_.reconnect_interval;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        // libzmq closes this connection for good: the channel connects again itself, later.
        handshake = handshake_error(e->id, e->value);
        reconnect_at_ = Clock::now() + reconnect_backoff_;
        reconnect_backoff_ = std::min(2 * reconnect_backoff_, std::max(options_.reconnect_interval_max,
                                                                       options_.reconnect_interval));
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // The server closed the connection during the handshake (libzmq retries): once may be a
        // server going down, twice in a row is a server that will not talk to this client. (Other
        // errors, such as a handshake timing out against a stopped process, are not about keys.)
        if (e->value != EPIPE && e->value != ECONNRESET) break;
        if (++closed_in_handshake_ >= 2) handshake = handshake_error(e->id, e->value);
        break;
      default:
        break;
    }
  }
  if (!handshake.ok()) {
    failed_handshakes_.fetch_add(1, std::memory_order_relaxed);
    handshake_failed_ = handshake;
    // Every pending call: those waiting for a connection and those sent on an earlier one.
    outbox_.clear();
    while (!pending_.empty()) finish(pending_.begin(), handshake);
  }
  if (!lost) return;
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (it->second.until_lost && it->second.sent) {
      finish(it, errors::unavailable("lost the connection to {} while waiting for a reply: the task died, "
                                     "restarted or stopped answering heartbeats",
                                     endpoint_));
    }
    it = next;
  }
}

Status RpcChannelCore::handshake_error(uint16_t event, uint32_t value) const {
  const bool curve = options_.curve.has_value();
  std::string why;
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 400) {
    why = "the server refused this client's key (it is not in the server's cluster keys)";
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    why = fmt::format("the server's authentication failed (ZAP status {})", value);
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    why = curve ? "this client uses CURVE keys and the server does not"
                : "the server requires CURVE keys and this client has none (SecurityOptions key_file and "
                  "cluster_keys_file)";
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    why = fmt::format("the handshake broke the protocol (libzmq error 0x{:x})", value);
  } else if (curve) {
    why = "the server closed the connection during the handshake, twice: the client has the wrong key for the "
          "server, or the server does not use CURVE keys";
  } else {
    why = "the server closed the connection during the handshake, twice: it probably requires CURVE keys, and this "
          "client has none (SecurityOptions key_file and cluster_keys_file)";
  }
  return errors::unavailable("authentication with {} failed: {}", endpoint_, why);
}

void RpcChannelCore::reconnect() {
  reconnect_at_.reset();
  try {
    // The old session is closed already; disconnect() forgets it (it may fail if libzmq did).
    zmq_disconnect(socket_.handle(), endpoint_.c_str());
    socket_.connect(endpoint_);
  } catch (const zmq::error_t&) {
    // The endpoint connected before, so this does not happen; the next call meets the old error.
  }
}

void RpcChannelCore::flush_outbox() {
  while (!outbox_.empty()) {
    Outgoing& out = outbox_.front();
    auto pending = pending_.find(out.id);
    if (pending == pending_.end()) {  // timed out before a peer could take it (or all of it)
      outbox_.pop_front();
      continue;
    }
    // EAGAIN while no peer is connected (ZMQ_IMMEDIATE) or its queue is full: retried when the
    // socket's fd signals, from the first frame or chunk libzmq did not take.
    if (!out.head_sent) {
      const bool streamed = out.stream.has_value();
      zmq::message_t envelope = streamed ? envelope_frame(kHeadMagic, out.id) : std::move(out.call_id);
      if (!socket_.send(envelope, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        if (!streamed) out.call_id = std::move(envelope);  // EAGAIN left it intact
        return;
      }
      if (streamed) socket_.send(out.stream->descriptor, zmq::send_flags::sndmore);
      auto& frames = out.request.frames;
      for (std::size_t i = 0; i < frames.size(); ++i) {
        // Later parts of a message whose first part was taken never block.
        socket_.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
      out.head_sent = true;
      pending->second.sent = true;
    }
    if (out.stream) {
      auto& chunks = out.stream->chunks;
      for (; out.next_chunk < chunks.size(); ++out.next_chunk) {
        if (!socket_.send(envelope_frame(kChunkMagic, out.id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          return;
        }
        socket_.send(chunks[out.next_chunk], zmq::send_flags::none);
      }
      streamed_requests_.fetch_add(1, std::memory_order_relaxed);
    }
    outbox_.pop_front();
  }
}

bool RpcChannelCore::receive_replies() {
  std::vector<zmq::message_t> parts;
  for (int n = 0; n < kRecvBatch; ++n) {
    zmq::message_t first;
    if (!socket_.recv(first, zmq::recv_flags::dontwait)) return false;
    recv_rest(socket_, first, &parts);
    // [call-id][status][frame...], [head envelope][descriptor][status][frame...] or
    // [chunk envelope][bytes]
    const auto envelope = parse_envelope(first);
    if (!envelope || parts.empty()) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const auto [kind, id] = *envelope;
    if (kind == Envelope::kChunk) {
      auto a = assembling_.find(id);
      if (a == assembling_.end() || parts.size() != 1) {  // its call ended, or its head was refused
        dropped_chunks_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      Status st = a->second.add(parts[0]);
      if (st.ok() && !a->second.complete()) continue;
      std::vector<zmq::message_t> frames;
      if (st.ok()) frames = a->second.take();
      assembling_.erase(a);
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;  // not reached: finish() forgets the assembly of its call
      if (!st.ok()) {
        malformed_.fetch_add(1, std::memory_order_relaxed);
        finish(it, errors::internal("malformed streamed reply from {}: {}", endpoint_, st.message()));
        continue;
      }
      streamed_replies_.fetch_add(1, std::memory_order_relaxed);
      parts = std::move(frames);  // [status][frame...], as a whole reply's
    } else if (kind == Envelope::kHead) {
      auto it = pending_.find(id);
      if (it == pending_.end()) {
        late_replies_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      StatusOr<Assembly> a = Assembly::start(parts[0], frames_from(parts, 1), options_.max_message_bytes);
      if (!a.ok()) {
        if (a.status().code() != ErrorCode::kResourceExhausted) malformed_.fetch_add(1, std::memory_order_relaxed);
        finish(it, Status(a.status().code(), fmt::format("reply from {}: {}", endpoint_, a.status().message())));
        continue;
      }
      assembling_.insert_or_assign(id, std::move(a).value());
      continue;
    }
    std::optional<Status> status = parts.empty() ? std::nullopt : parse_status(parts[0]);
    if (!status) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      late_replies_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!status->ok()) {
      finish(it, *status);
      continue;
    }
    finish(it, RpcMessage{frames_from(parts, 1)});
  }
  return true;  // the batch is full: there may be more
}

void RpcChannelCore::expire(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.top().first <= now) {
    const uint64_t id = deadlines_.top().second;
    deadlines_.pop();
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // already answered
    if (it->second.until_lost && it->second.sent) continue;  // now waits until its connection is lost
    const auto budget = it->second.budget;
    timed_out_.fetch_add(1, std::memory_order_relaxed);
    if (it->second.until_lost) {
      finish(it, errors::unavailable("could not reach {} within {} ms: the task is down or unreachable", endpoint_,
                                     budget.count()));
    } else {
      finish(it, errors::unavailable("no reply from {} within {} ms: the task is down or unreachable", endpoint_,
                                     budget.count()));
    }
  }
}

void RpcChannelCore::fail_all(const Status& status) {
  outbox_.clear();
  while (!pending_.empty()) finish(pending_.begin(), status);
}

RpcChannelStats RpcChannelCore::stats() const {
  RpcChannelStats s;
  s.calls = calls_.load(std::memory_order_relaxed);
  s.timed_out = timed_out_.load(std::memory_order_relaxed);
  s.late_replies = late_replies_.load(std::memory_order_relaxed);
  s.malformed = malformed_.load(std::memory_order_relaxed);
  s.failed_handshakes = failed_handshakes_.load(std::memory_order_relaxed);
  s.streamed_requests = streamed_requests_.load(std::memory_order_relaxed);
  s.streamed_replies = streamed_replies_.load(std::memory_order_relaxed);
  s.dropped_chunks = dropped_chunks_.load(std::memory_order_relaxed);
  return s;
}

RpcChannel::RpcChannel(std::string endpoint, RpcChannelOptions options)
    : endpoint_(endpoint), core_(std::make_unique<RpcChannelCore>(std::move(endpoint), options)) {}

RpcChannel::~RpcChannel() {
  if (core_ && core_->on_io_thread()) core_.release()->destroy_from_io_thread();
}

void RpcChannel::call(RpcMessage request, std::chrono::milliseconds deadline, Done done) {
  core_->call(std::move(request), deadline, std::move(done), /*until_lost=*/false);
}

void RpcChannel::call_until_lost(RpcMessage request, std::chrono::milliseconds connect_deadline, Done done) {
  core_->call(std::move(request), connect_deadline, std::move(done), /*until_lost=*/true);
}

StatusOr<RpcMessage> RpcChannel::call_sync(RpcMessage request, std::chrono::milliseconds deadline) {
  return wait_for(std::move(request), deadline, /*until_lost=*/false);
}

StatusOr<RpcMessage> RpcChannel::call_until_lost_sync(RpcMessage request, std::chrono::milliseconds connect_deadline) {
  return wait_for(std::move(request), connect_deadline, /*until_lost=*/true);
}

StatusOr<RpcMessage> RpcChannel::wait_for(RpcMessage request, std::chrono::milliseconds deadline, bool until_lost) {
  if (core_->on_io_thread()) {
    return errors::failed_precondition("a blocking call to {} from the channel's own completion callback would "
                                       "deadlock",
                                       endpoint_);
  }
  return core_->call_sync(std::move(request), deadline, until_lost);
}

RpcChannelStats RpcChannel::stats() const { return core_->stats(); }

}  // namespace tessera::internal
