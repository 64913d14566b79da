// Request/response over ZeroMQ: the layer tessera's cluster services (master, worker) are built on.
// Messages are lists of frames; frame 0 is the caller's header (opaque here), further frames are
// payloads such as raw tensor bytes, sent and received without copying when they are large.
//
//   auto server = RpcServer::start("tcp://127.0.0.1:0", [](RpcMessage req, Responder respond) {
//     respond(std::move(req));                            // echo; may also be called later, elsewhere
//   }).value();
//   RpcChannel channel(server->endpoint());
//   RpcMessage req;
//   req.frames.push_back(string_frame("header"));
//   req.frames.push_back(tensor_frame(t).value());        // references t's buffer, no copy
//   StatusOr<RpcMessage> reply = channel.call_sync(std::move(req), std::chrono::seconds(2));
//   // !reply.ok(): Unavailable "no reply from tcp://127.0.0.1:PORT within 2000 ms: ..."
//
// Threads, deadlines, and what happens when either end goes away: see Note [RPC].
//
// Note [RPC]
// ~~~~~~~~~~
// The layer's design, part by part, each where it is implemented:
//   Wire (the envelopes, a reply's status): Note [RPC envelope] in rpc_envelope.cc; frames of 2 MiB
//     and more: Note [Streamed frames] in rpc_stream.cc.
//   Server (its threads, stopping, limits): Note [RPC server] in rpc_server.cc.
//   Channel (its threads, synchronous and asynchronous calls): Note [RPC channel] in
//     rpc_channel.cc.
//   Failure, deadlines and long calls: Note [RPC deadlines] in rpc_channel.cc; calls on a lost
//     connection, and the next ones: Note [Lost connections] there.
//   Security (CURVE, the ZAP handler, failed handshakes): Note [RPC security] in rpc_server.cc.
//   Zero copy: Note [Zero-copy tensor frames] in tensor_frames.cc.
// What the server and the channel share besides: socket_io.h (wake-ups, poll, monitor events)
// and curve_keys.h (Z85 keys).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// One request or reply: frame 0 is the caller's header, the others payloads. Move-only (frames are).
struct RpcMessage {
  std::vector<zmq::message_t> frames;
};

// ---- Frames ----

// Tensor payloads at least this large travel without copies (smaller ones are cheaper to copy than
// to reference-count).
inline constexpr std::size_t kZeroCopyMinBytes = 16 * 1024;

// A frame holding a copy of `s`.
zmq::message_t string_frame(std::string_view s);

// A frame holding `t`'s bytes (the host tensor's data, row-major). At kZeroCopyMinBytes and above
// the frame references the tensor's buffer, which it keeps alive until libzmq is done with it (a
// copy-on-write writer sees the buffer as shared). A String tensor's frame is its length-prefixed
// encoding (encode_strings, core/string_tensor.h), a copy: its elements are std::string objects.
// FailedPrecondition for a null tensor or one whose data lives on a device.
StatusOr<zmq::message_t> tensor_frame(const Tensor& t);

// A tensor of `dtype` and fully defined `shape` over a received frame's bytes. InvalidArgument when
// the frame's size is not num_elements * dtype_size. A frame of at least kZeroCopyMinBytes whose
// data is aligned to `required_alignment` (a power of two) is wrapped without copying: the tensor
// owns the zmq message and frees it with its buffer. Otherwise the bytes are copied into a fresh
// (64-byte aligned) tensor; Bool frames are always copied, normalizing each byte to 0 or 1. A
// String frame is decoded (decode_strings: InvalidArgument for an encoding that does not hold
// exactly num_elements strings).
//
// The default keeps Tensor's 64-byte alignment promise, which libzmq 4.3 never meets for received
// frames (its message data sits 40 bytes after a malloc'ed header: 8 mod 16). A caller that needs
// only natural alignment passes dtype_size(dtype) and gets the zero-copy path; see
// Note [Zero-copy tensor frames] in tensor_frames.cc.
StatusOr<Tensor> frame_to_tensor(zmq::message_t frame, DType dtype, const Shape& shape,
                                 std::size_t required_alignment = Tensor::kAlignment);

// ---- Server ----

class RpcServerCore;
struct ReplySlot;

// Sends the reply to one request. Copyable (copies share one slot); the first call wins and later
// ones, or any after the server stopped, are dropped and return false. If the last copy goes away
// without a reply, the caller gets Internal ("dropped its Responder") at once instead of waiting for
// its deadline. Thread-safe: any thread may reply, at any time.
class Responder {
 public:
  Responder() = default;
  // Replies with `reply` (which may have no frames: the caller then receives an empty message).
  bool operator()(RpcMessage reply) const;
  // Replies with an error: the caller's StatusOr carries `status` (code and message).
  bool fail(const Status& status) const;
  // Runs `fn` once, on the server's I/O thread, if the caller's connection is lost before the reply
  // is given (the caller was killed, or silent past heartbeat_timeout): a long call (a pull, a
  // blocked step) then ends and frees what it holds. At once when the connection is known lost
  // already; never after the reply. One `fn` per call (a second replaces the first).
  void on_lost(std::function<void()> fn) const;

 private:
  friend class RpcServerCore;
  explicit Responder(std::shared_ptr<ReplySlot> slot) : slot_(std::move(slot)) {}
  std::shared_ptr<ReplySlot> slot_;
};

struct RpcServerOptions {
  // Threads that run the handler. 0 runs it on the I/O thread itself: lowest latency, for handlers
  // that never block (they should hand real work elsewhere and reply through the Responder).
  int handler_threads = 4;
  // Requests for which this returns true run on the I/O thread itself even when there are handler
  // threads: for the methods whose handlers never block (they answer at once, or hand the work to
  // threads of their own), saving two thread hand-offs per call. Runs on the I/O thread; must not
  // block. Empty: none.
  std::function<bool(const RpcMessage& request)> run_inline;
  // Largest request in bytes: a larger frame makes libzmq drop the connection before allocating it
  // (ZMQ_MAXMSGSIZE, per frame: the caller's call fails Unavailable and its channel reconnects); a
  // request whose frames add up to more is refused with ResourceExhausted. -1: no limit.
  int64_t max_message_bytes = -1;
  // Most frames one request may have (a RunStep carries a frame per tensor): past it the rest of
  // the request is received and dropped as it arrives, so a request of millions of empty frames
  // costs no more memory than this many, and the call is refused with ResourceExhausted naming the
  // limit. Streamed requests count their frames the same way.
  int64_t max_frames = 65536;
  // ZMTP heartbeats: a client silent this long after a ping is dropped (kill -9, cable pulled).
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{3000};
  // How long stop() waits for handler invocations still running before it leaves them behind.
  std::chrono::milliseconds stop_grace{300};
  // A streamed request (Note [Streamed frames] in rpc_stream.cc) whose sender sends no chunk for
  // this long is dropped, with the memory it holds.
  std::chrono::milliseconds stalled_stream_timeout{30000};
  // After a turn that received requests, how long the I/O thread keeps looking for more without
  // sleeping (zero-timeout polls, yielding its core between them) before it sleeps in poll(2):
  // train::ServerOptions::busy_poll (Note [Busy polling] in rpc_server.cc). 0: sleep at once.
  std::chrono::microseconds busy_poll{0};

  // CURVE (Note [RPC security]): the server's key pair and the client keys it admits, Z85
  // encoded (40 characters each). Unset: plain TCP, anyone may connect.
  struct Curve {
    std::string public_key;
    std::string secret_key;
    std::set<std::string> allowed_clients;
  };
  std::optional<Curve> curve;
  // Called (on the server's I/O thread; keep it short) for each connection refused because its
  // client key is not allowed, with the peer's IP address and the key (Z85). Every refusal is
  // also counted (RpcServerStats::refused) and logged on stderr.
  std::function<void(const std::string& peer_address, const std::string& client_key)> on_refused;
};

struct RpcServerStats {
  uint64_t requests = 0;         // well-formed requests handed to the handler
  uint64_t malformed = 0;        // dropped: envelope not ours (missing or bad call-id, no header)
  uint64_t oversized = 0;        // refused: frames add up to more than max_message_bytes
  uint64_t replies = 0;          // replies handed to libzmq
  uint64_t dropped_replies = 0;  // replies given after stop()
  uint64_t abandoned_handlers = 0;  // handler threads stop() left running after stop_grace
  uint64_t refused = 0;  // CURVE: connections refused (client key not allowed, or no CURVE at all)
  // Streamed frames (Note [Streamed frames] in rpc_stream.cc):
  uint64_t streamed_requests = 0;  // requests that arrived as a head and chunks, handed to the handler
  uint64_t streamed_replies = 0;   // replies sent as a head and chunks (counted as the head goes)
  uint64_t dropped_chunks = 0;     // chunks of no stream being received (refused, or dropped as stalled)
  uint64_t stalled_streams = 0;    // streamed requests dropped after stalled_stream_timeout without a chunk
  uint64_t lost_peers = 0;         // connections that closed (Responder::on_lost)
  uint64_t calls_of_lost_peers = 0;  // calls ended by their connection's loss (their on_lost ran)
};

// A bound ROUTER socket serving requests with `handler`. Thread-safe: stop(), endpoint() and stats()
// may be called from any thread (stop() not from a handler thread).
class RpcServer {
 public:
  using Handler = std::function<void(RpcMessage request, Responder respond)>;

  // Binds `bind_address` ("tcp://127.0.0.1:0" picks a free port, "tcp://*:2222" every interface) and
  // starts serving. InvalidArgument for a malformed address or CURVE key, Unavailable when it
  // cannot be bound.
  static StatusOr<std::unique_ptr<RpcServer>> start(std::string bind_address, Handler handler,
                                                    RpcServerOptions options = {});
  ~RpcServer();  // stop()
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Stops accepting, drops queued requests, kills every Responder, closes the socket (the port is
  // free when this returns) and joins the threads; returns within stop_grace plus a few ms even if
  // handlers are still running. Idempotent. With `flush` > 0, replies already given are first sent
  // (waiting at most `flush` for them), and, when some were given within `flush`, the server waits
  // (at most `flush` again) until its callers have read them (Note [Goodbye] in
  // rpc_server_peers.cc), so callers get the answers they were promised.
  void stop(std::chrono::milliseconds flush = std::chrono::milliseconds(0));
  // The bound address with the actual port: "tcp://127.0.0.1:40123" ("tcp://0.0.0.0:2222" for *).
  const std::string& endpoint() const;
  RpcServerStats stats() const;

 private:
  explicit RpcServer(std::shared_ptr<RpcServerCore> core) : core_(std::move(core)) {}
  std::shared_ptr<RpcServerCore> core_;  // shared with Responders and handler threads
};

// ---- Client ----

struct RpcChannelOptions {
  // Reconnection to a peer that went away (a restarted server on the same port is found again).
  std::chrono::milliseconds reconnect_interval{100};
  std::chrono::milliseconds reconnect_interval_max{1000};
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{3000};
  // A TCP connect to a host that does not answer is given up after this and retried (the OS
  // default is minutes, during which a host that came back would go unnoticed).
  std::chrono::milliseconds connect_timeout{2000};
  // Largest reply frame accepted (ZMQ_MAXMSGSIZE), and largest streamed reply in total (refused with
  // ResourceExhausted before its chunks are received); -1: no limit.
  int64_t max_message_bytes = -1;
  // CURVE (Note [RPC security]): this client's key pair and the key the server must present,
  // Z85 encoded (40 characters each). Unset: plain TCP. A handshake that fails (the server
  // refused this client's key, the server has another key, or only one side uses CURVE) fails the
  // channel's pending calls with Unavailable ("authentication with ENDPOINT failed: ...") and its
  // new calls at once, until a handshake succeeds (the channel retries every
  // reconnect_interval_max at most).
  struct Curve {
    std::string public_key;
    std::string secret_key;
    std::string server_key;
  };
  std::optional<Curve> curve;
  // Busy polling, the client's side of RpcServerOptions::busy_poll (Note [Busy polling] in
  // rpc_server.cc): after a turn that completed calls, while calls still wait for replies, the
  // I/O thread keeps looking for more this long before it sleeps; a thread waiting in a
  // synchronous call (or a completion queue's next()) looks this long before it sleeps. 0: off.
  std::chrono::microseconds busy_poll{0};
};

// The busy polling a task or client may ask for (ServerOptions::busy_poll,
// SessionOptions::busy_poll): OK within [0, 10 ms], else InvalidArgument naming `field`
// ("ServerOptions.busy_poll").
Status check_busy_poll(std::chrono::microseconds busy_poll, std::string_view field);

struct RpcChannelStats {
  uint64_t calls = 0;
  uint64_t timed_out = 0;
  uint64_t late_replies = 0;  // replies to calls already completed (timed out): dropped
  uint64_t malformed = 0;     // replies not in our envelope: dropped
  uint64_t failed_handshakes = 0;  // handshakes that failed authentication (see RpcChannelOptions::curve)
  uint64_t streamed_requests = 0;  // requests sent as a head and chunks (Note [Streamed frames])
  uint64_t streamed_replies = 0;   // replies received that way
  uint64_t dropped_chunks = 0;     // chunks of no reply being received (its call ended, or was refused)
};

class RpcChannelCore;
struct RpcWaiter;
class RpcCompletionQueue;

// The client side of one remote endpoint: a DEALER socket connected to it, used under a mutex by
// the calling threads (which send their requests, and in the synchronous calls receive their
// replies, themselves) and by the channel's I/O thread (asynchronous replies, deadlines,
// connection loss): Note [RPC channel]. Thread-safe: call() and call_sync() from any number of
// threads concurrently.
class RpcChannel {
 public:
  using Done = std::function<void(StatusOr<RpcMessage>)>;

  // Connects (lazily: nothing needs to listen yet). A malformed endpoint or CURVE key fails every
  // call with InvalidArgument.
  explicit RpcChannel(std::string endpoint, RpcChannelOptions options = {});
  // Fails pending calls with Cancelled (a synchronous call waiting on another thread returns
  // Cancelled, and the destructor waits until it has) and joins the I/O thread. A call those
  // completions make is refused and completed the same way, before the join (so a completion that
  // calls again on every Cancelled keeps the destructor waiting). From inside one of
  // its own `done` callbacks (the last owner let go there), the I/O thread finishes after that
  // callback instead.
  ~RpcChannel();
  RpcChannel(const RpcChannel&) = delete;
  RpcChannel& operator=(const RpcChannel&) = delete;

  // Sends `request` and calls `done` exactly once, on the channel's I/O thread (keep it short; do
  // not destroy the channel from it): with the reply, the error the server's handler replied, or
  // Unavailable when no reply came within `deadline` of this call, when the connection the request
  // went out on was lost first (no reply can come on another: Note [Lost connections] in
  // rpc_channel.cc), or when the handshake with the server failed.
  void call(RpcMessage request, std::chrono::milliseconds deadline, Done done);
  // A call whose reply may rightly take long (a step waiting on a queue): `connect_deadline`
  // bounds only the wait for a connection to the peer (Unavailable "could not reach"); once sent,
  // the call waits until the reply comes or the connection it was sent on is lost (Unavailable
  // "lost the connection": the peer died, restarted, was stopped or cut off, noticed within
  // heartbeat_timeout), or the channel is destroyed (Cancelled). `done` as for call().
  void call_until_lost(RpcMessage request, std::chrono::milliseconds connect_deadline, Done done);
  // call_until_lost() and wait for it. FailedPrecondition when called from a `done` callback.
  StatusOr<RpcMessage> call_until_lost_sync(RpcMessage request, std::chrono::milliseconds connect_deadline);
  // call() and wait for it. FailedPrecondition when called from a `done` callback of this channel.
  StatusOr<RpcMessage> call_sync(RpcMessage request, std::chrono::milliseconds deadline);

  const std::string& endpoint() const { return endpoint_; }
  RpcChannelStats stats() const;

 private:
  friend class RpcCompletionQueue;
  StatusOr<RpcMessage> wait_for(RpcMessage request, std::chrono::milliseconds deadline, bool until_lost);
  std::string endpoint_;
  std::shared_ptr<RpcChannelCore> core_;  // shared with the completion queues made on it
};

// One completed call of an RpcCompletionQueue: the tag it was made with and its result.
struct RpcCompletion {
  uint64_t tag = 0;
  StatusOr<RpcMessage> result;
};

// Asynchronous calls on one channel whose results the caller collects itself, as with gRPC's
// CompletionQueue: a thread waiting in next() receives the replies on the socket as a synchronous
// caller does, with no hand-off to the channel's I/O thread and back (RpcChannel::call's `done`
// costs two wake-ups per reply). For a thread that keeps a window of calls in flight (a pull of
// many tensors). Replies that come while no thread waits are read by the I/O thread and kept;
// deadlines, lost connections and the channel's destruction complete the calls as for call().
//
//   RpcCompletionQueue queue(channel);
//   for (uint64_t i = 0; i < 4; ++i) queue.call(request(i), 2s, /*tag=*/i);
//   while (queue.pending() > 0) {
//     StatusOr<RpcCompletion> c = queue.next(2s);  // DeadlineExceeded: none completed within 2 s
//     ... c->tag, c->result ...
//   }
//
// call() from any thread; next() from one thread at a time. Destroying the queue forgets the calls
// still pending (their replies are dropped as late). Destroying the channel completes them with
// Cancelled (a thread waiting in next() gets them); a queue that outlives its channel then
// returns what completed, and completes new calls at once with Cancelled.
class RpcCompletionQueue {
 public:
  explicit RpcCompletionQueue(RpcChannel& channel);
  ~RpcCompletionQueue();
  RpcCompletionQueue(const RpcCompletionQueue&) = delete;
  RpcCompletionQueue& operator=(const RpcCompletionQueue&) = delete;

  // Sends `request` (as RpcChannel::call does); its completion, with `tag`, is returned by next().
  void call(RpcMessage request, std::chrono::milliseconds deadline, uint64_t tag);
  // The next completed call, in completion order, waiting at most `timeout` for one. OutOfRange
  // when no call is pending or completed (nothing to wait for), DeadlineExceeded when none
  // completed within `timeout`, FailedPrecondition while another thread waits in next() or when
  // called from a `done` callback of the channel.
  StatusOr<RpcCompletion> next(std::chrono::milliseconds timeout);
  // Calls made and not yet returned by next().
  int pending() const;

 private:
  std::shared_ptr<RpcChannelCore> core_;
  std::unique_ptr<RpcWaiter> waiter_;
};

}  // namespace tessera::internal
