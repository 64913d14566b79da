// The RPC server (rpc.h, "Server"): a ROUTER served by one I/O thread, handler threads, Responders,
// streamed requests, and the ZAP handler that admits CURVE clients. The class is in
// rpc_server_core.h; its callers' connections and the goodbye are in rpc_server_peers.cc.
#include "transport/rpc_server_core.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/logging.h"
#include "transport/curve_keys.h"
#include "transport/rpc.h"
#include "transport/rpc_envelope.h"
#include "transport/rpc_stream.h"
#include "transport/socket_io.h"

namespace tessera::internal {

// Note [RPC server]
// ~~~~~~~~~~~~~~~~~
// Threads. Server sockets are used by the server's I/O thread, and the ROUTER also, while that
// thread sleeps, by a thread that sends its reply itself (Note [Replies sent by their thread]);
// other threads talk to it through a mutex-protected queue plus an eventfd in its poll set,
// written only when the queue goes from empty to non-empty (one syscall per burst, not per
// message). The I/O thread owns the ROUTER. It reads a batch of requests, checks each envelope
// (Note [RPC envelope]) and hands (request, Responder) to `handler_threads` handler threads (or
// runs the handler inline when that is 0). A Responder may be called from any thread, at any
// time, once: the reply joins the I/O thread's outbox (or, given on the I/O thread, leaves at
// once: Note [Inline replies]; given while the I/O thread sleeps, its thread sends it).
// The server has its own zmq context, so stop() can terminate it: when stop() returns the
// listening socket is closed and the port can be bound again at once.
//
// Stopping. stop() stops reading, drops queued requests and kills every Responder (their replies
// are counted and dropped; callers fail as their connection closes, Note [Lost connections] in
// rpc_channel.cc),
// closes the socket and joins the I/O thread. It then waits at most stop_grace for handler
// invocations still running and leaves any that did not finish behind (detached; they keep the
// server's internals alive and find their Responders dead). Handlers are meant to return quickly
// and reply later if work is long. A Responder dropped unreplied fails its call with Internal at
// once; a handler that throws fails it with the exception's status.
//
// Limits. max_message_bytes sets ZMQ_MAXMSGSIZE, which libzmq checks per frame before allocating:
// an oversized frame closes that connection (the client reconnects; its pending calls meet their
// deadlines). A request whose frames add up to more than the limit is refused with
// ResourceExhausted.

// Note [Inline replies]
// ~~~~~~~~~~~~~~~~~~~~~
// A reply given on the I/O thread itself (by a handler run inline, or by a callback that runs
// there, such as a lost caller's on_lost) is sent at once, not queued for the turn's next look at
// the outbox: a handler's remaining work (destroying its messages and tensors, the request's
// frames) then follows the reply instead of delaying it. The socket is between messages wherever
// that thread runs handlers and callbacks. Replies queued by other threads may then leave after
// it; replies to different calls were never ordered. sent_inline_ tells run_io that a send may
// have spent the ROUTER's signal (the rules in run_io).

// Note [RPC security]
// ~~~~~~~~~~~~~~~~~~~
// With RpcServerOptions::curve the ROUTER is a CURVE server (ZMQ_CURVE_SERVER): every
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
// The channel's monitor reports handshakes (RpcChannelCore::read_monitor in rpc_channel.cc):
// HANDSHAKE_FAILED_AUTH (ZAP refused the client's key) and HANDSHAKE_FAILED_PROTOCOL (e.g. one
// side without CURVE) at once; libzmq does not retry after those (it closes the session for good),
// so the channel reconnects by itself, backing off from reconnect_interval to
// reconnect_interval_max. A client that has the wrong server key, or talks CURVE to a plain
// server, sees only the server closing the connection during the handshake
// (HANDSHAKE_FAILED_NO_DETAIL with EPIPE or ECONNRESET, after which libzmq retries): twice in a row
// without a successful handshake counts as a failure (once could be a server going down). A
// failure fails every pending call (in the outbox or sent) with Unavailable "authentication with
// ENDPOINT failed: ...", and new calls at once, until HANDSHAKE_SUCCEEDED. Channels without CURVE
// watch the same events (a plain client meeting a CURVE server fails the same way); the only cost
// per call is a test of a flag on the I/O thread.

namespace {
thread_local const void* tls_server_io_owner = nullptr;  // the core whose I/O thread this is
// Replies the I/O thread's batch keeps room for between turns (more is a burst's, let go).
constexpr std::size_t kKeptReplies = 128;
}  // namespace

ReplySlot::~ReplySlot() {
  if (!replied.load(std::memory_order_acquire)) {
    core->reply(*this, errors::internal("the server's handler dropped its Responder without replying"), {});
  }
  if (watched.load(std::memory_order_acquire)) core->unwatch(*this);
}

void Responder::on_lost(std::function<void()> fn) const {
  TESSERA_CHECK(slot_ != nullptr);
  slot_->core->watch(*slot_, std::move(fn));
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
    }
    // Connections accepted and closed (Note [Lost callers]); CURVE: handshake failures too.
    const int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                       (options_.curve ? ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL : 0);
    if (zmq_socket_monitor(socket_.handle(), "inproc://tessera-server-monitor", events) != 0) throw zmq::error_t();
    monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.set(zmq::sockopt::rcvhwm, 100000);  // room for a burst of connections between reads
    monitor_.connect("inproc://tessera-server-monitor");
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

// Note [Replies sent by their thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A reply given on another thread (a handler thread; a RunStep or RunGraph answered when its step
// ends on a pool or channel thread; a tensor sent when it is produced) is sent by that thread when
// the I/O thread is not using the ROUTER, instead of waking the I/O thread to send it. socket_mu_
// is held by the I/O thread for its whole turn and let go only while it sleeps in poll(2); the
// replier takes it with try_lock and never waits: inside a turn its reply joins the outbox as
// before, and the turn sends it. That saves a wake-up of the I/O thread (the eventfd write, and on
// a busy machine the wait for a core) per such reply; on the cluster training benchmarks 3-7%
// (benchmarks/README.md, "Replies sent by their thread"). A send may process the commands that
// announced a request, which then signal nothing on ZMQ_FD (the rules in run_io): the replier
// asks ZMQ_EVENTS after it, and when a request waits it sets direct_look_ and writes the eventfd,
// and the I/O thread reads the ROUTER in its next turn whatever poll(2) said. Streamed replies
// (their chunks would hold the ROUTER for long) and replies given while the outbox holds others
// still go through the outbox. From stop() on no reply is sent (stopping_, under out_mu_, is
// checked before the try_lock), and the closed ROUTER is never used (socket_closed_).

// Note [Busy polling]
// ~~~~~~~~~~~~~~~~~~~
// A server that sleeps in poll(2) as soon as it has answered pays a wake-up for each request that
// follows: the kernel's wake, and on a busy machine the wait for a core. With busy_poll set, the
// I/O thread that received requests in a turn looks again without sleeping (zero-timeout polls,
// yielding its core between them) for that long before it sleeps, so a caller that sends its next
// small request within it finds the thread awake (what SO_BUSY_POLL does for a socket in the
// kernel). It costs up to busy_poll of CPU after each burst of requests, and beside more processes
// than cores it takes time from them: off by default (figures: benchmarks/README.md, "Busy
// polling").
// The channel's side (RpcChannelOptions::busy_poll, set from the same ServerOptions::busy_poll for
// a task's channels and from SessionOptions::busy_poll for a client's): a thread waiting for its
// synchronous call's reply (or in a completion queue's next()) looks that long before it sleeps,
// and the I/O thread, after a turn that completed asynchronous calls while others still wait for
// their replies, looks that long before it sleeps. An idle channel, or one whose calls all wait for
// a long step, sleeps at once as before.
void RpcServerCore::run_io() {
  tls_server_io_owner = this;
  // Plain file descriptors, polled with poll(2) itself, as the channel's I/O thread does (and for
  // the same reason: zmq_poll adds a zero-timeout poll and a ZMQ_EVENTS check around each sleep).
  // A socket's ZMQ_FD signals pending commands, not messages, and any use of the socket may
  // process them and so spend the signal. The rules here: each socket is read until EAGAIN (a
  // recv that finds nothing processes the pending commands, after which the fd signals the next
  // ones) or looked at again without sleeping; after sending on the ROUTER, a recv that finds
  // nothing, or else ZMQ_EVENTS, says whether a request came in meanwhile (replies given inline
  // go out between the reads, so the read that ends the batch serves: one poll(2) of the mailbox
  // less per turn); every socket is read once before the first sleep (a new pipe starts out
  // active, so its first messages signal nothing). The ZAP socket's replies are sent between its
  // reads, and the monitor is only read.
  const bool curve = options_.curve.has_value();
  pollfd items[4] = {{socket_.get(zmq::sockopt::fd), POLLIN, 0},
                     {wake_fd_, POLLIN, 0},
                     {curve ? zap_.get(zmq::sockopt::fd) : -1, POLLIN, 0},  // poll(2) skips a negative fd
                     {monitor_.get(zmq::sockopt::fd), POLLIN, 0}};
  const int num_items = 4;
  read_monitor();
  bool look_socket = true;  // requests may be left unread: look again without sleeping
  bool look_zap = curve;    // the same for ZAP requests
  bool received = false;    // the last turn received a request (Note [Busy polling])
  std::vector<zmq::message_t> parts;
  std::vector<Outgoing> batch;
  // Let go only in poll(2) (Note [Replies sent by their thread]).
  std::unique_lock<std::mutex> socket_lock(socket_mu_);
  // Sends the replies given so far (inline, or by handler threads); false once stopping.
  // `sent`: some went out.
  auto send_replies = [&](bool* sent) {
    {
      std::lock_guard<std::mutex> l(out_mu_);
      if (stopping_) return false;
      batch.swap(outbox_);
    }
    for (auto& out : batch) send(out);
    *sent = *sent || !batch.empty() || std::exchange(sent_inline_, false);
    batch.clear();
    // A burst (the calls of a lost caller ending at once: tens of thousands) grows the batch,
    // and the swap hands its capacity on to the outbox: let a burst's arrays go.
    if (batch.capacity() > kKeptReplies) std::vector<Outgoing>().swap(batch);
    return true;
  };
  for (;;) {
    // While streamed requests are being received, wake up now and then to drop stalled ones.
    const long stall_check_ms = std::clamp<long>(options_.stalled_stream_timeout.count() / 4, 10, 1000);
    const bool look_turn = look_socket || look_zap;  // no sleep and no poll(2) this turn
    if (look_turn) {
      for (pollfd& item : items) item.revents = 0;
    } else {
      socket_lock.unlock();
      const bool ok = poll_io(items, num_items, assembling_.empty() ? -1 : stall_check_ms,
                              received ? options_.busy_poll : std::chrono::microseconds{0});
      socket_lock.lock();
      if (!ok) break;
    }
    const bool direct_look = std::exchange(direct_look_, false);
    if (!assembling_.empty()) drop_stalled_streams();
    if (items[1].revents & POLLIN) drain_wake_fd(wake_fd_);
    if (curve && (look_zap || (items[2].revents & POLLIN))) look_zap = serve_zap();
    // The monitor's fd, like the others, signals commands, and only this thread uses the monitor:
    // read until EAGAIN when it signals (or in a turn that did not poll, or where Note [Lost
    // callers] needs it first), its next event signals again. A read that finds nothing costs a
    // poll(2) of the monitor's mailbox, which an idle turn need not pay.
    if (look_turn || (items[3].revents & POLLIN)) read_monitor();
    bool more = false;
    bool stop = false;
    // A send since the socket's last recv that found nothing: it may have processed the commands
    // that announced a request, which then signal nothing.
    bool sent_since_empty_recv = false;
    received = false;
    if (look_socket || direct_look || (items[0].revents & POLLIN)) {
      more = true;  // unless a recv finds nothing within the batch
      for (int i = 0; i < kRecvBatch; ++i) {
        zmq::message_t routing_id;
        if (!socket_.recv(routing_id, zmq::recv_flags::dontwait)) {
          more = false;
          sent_since_empty_recv = false;  // that recv processed every pending command
          break;
        }
        // +2: the envelope and (streamed) the descriptor are not the request's frames.
        const std::size_t dropped = recv_rest_bounded(socket_, routing_id, &parts, max_parts());
        if (dropped > 0) {
          too_many_frames(std::move(routing_id), parts, parts.size() + dropped);
          continue;
        }
        track_peer(routing_id);
        receive_one(std::move(routing_id), &parts);
        received = true;
        // A reply given inline (handler_threads == 0, run_inline) went out in the handler (Note
        // [Inline replies]), before the next recv, which, finding nothing, then also stands for
        // the ZMQ_EVENTS check below.
        if (!send_replies(&sent_since_empty_recv)) {
          stop = true;
          break;
        }
      }
    }
    // Replies given meanwhile on other threads go out in this same turn.
    if (stop || !send_replies(&sent_since_empty_recv)) break;
    // After the replies given before stop() asked for it, on each connection (Note [Goodbye]).
    const bool goodbye = !goodbye_said_ && goodbye_asked_.load(std::memory_order_acquire);
    if (goodbye) say_goodbye();
    // A send may have processed the commands that announced a request: ZMQ_EVENTS processes
    // what is left and tells whether one is waiting.
    if ((sent_since_empty_recv || goodbye) && !more) more = (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
    look_socket = more;
  }
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
  monitor_.close();
  socket_.set(zmq::sockopt::linger, close_linger_ms_.load());
  socket_.close();
  socket_closed_ = true;
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
    refused(fmt::format("refused a connection from {}: its key {} is not in the cluster's keys", peer, key));
  }
  return true;
}

void RpcServerCore::read_monitor() {
  while (std::optional<MonitorEvent> e = next_event(monitor_)) {
    if (e->id == ZMQ_EVENT_ACCEPTED || e->id == ZMQ_EVENT_DISCONNECTED) {
      // Either way the descriptor's previous connection is closed (an ACCEPTED after a
      // DISCONNECTED the monitor dropped: it was full).
      auto it = connections_.find(static_cast<int>(e->value));
      if (it != connections_.end()) {
        std::optional<std::string> peer = std::move(it->second);
        connections_.erase(it);
        if (peer) peer_lost(*peer);
      }
      if (e->id == ZMQ_EVENT_ACCEPTED) connections_.emplace(static_cast<int>(e->value), std::nullopt);
      continue;
    }
    if (e->id != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) continue;
    if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
      refused(fmt::format("refused a connection on {}: the peer does not use CURVE keys "
                          "(a client or task started without them)",
                          endpoint_));
    } else if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
      refused(fmt::format("refused a connection on {}: the peer does not have this server's public key "
                          "(its cluster keys list another key for this address)",
                          endpoint_));
    }
  }
}

void RpcServerCore::refused(const std::string& line) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  // One limit for every refusal: a peer that makes fresh keys or addresses is one kind of event.
  log_limited(refusal_log_, LogLevel::kWarning, "{}", line);
}

namespace {
std::string assembly_key(const zmq::message_t& routing_id, uint64_t id) {
  std::string key(static_cast<const char*>(routing_id.data()), routing_id.size());
  key.append(reinterpret_cast<const char*>(&id), sizeof id);
  return key;
}
}  // namespace

std::size_t RpcServerCore::max_parts() const {
  return options_.max_frames < 0 ? std::numeric_limits<std::size_t>::max()
                                 : static_cast<std::size_t>(options_.max_frames) + 2;
}

void RpcServerCore::too_many_frames(zmq::message_t routing_id, const std::vector<zmq::message_t>& parts,
                                    std::size_t total) {
  oversized_.fetch_add(1, std::memory_order_relaxed);
  const auto envelope = parts.empty() ? std::nullopt : parse_envelope(parts[0]);
  if (!envelope || envelope->first == Envelope::kChunk) return;  // no call to answer
  refuse(std::move(routing_id), envelope->second,
         errors::resource_exhausted("request of {} frames exceeds the server's limit of {} frames "
                                    "(RpcServerOptions::max_frames)",
                                    total, options_.max_frames));
}

void RpcServerCore::receive_one(zmq::message_t routing_id, std::vector<zmq::message_t>* parts) {
  // parts: [call-id and header][payload...], [call-id][header][payload...], [head
  // envelope][descriptor][header][payload...] or [chunk envelope][bytes]
  const auto envelope = parts->empty() ? std::nullopt : parse_envelope((*parts)[0]);
  if (envelope && envelope->first == Envelope::kGoodbyeAck && parts->size() == 1) {
    goodbye_answered(routing_id.to_string());
    return;
  }
  const bool joined = envelope && envelope->first == Envelope::kJoined;
  if ((parts->size() < 2 && !joined) || !envelope) {
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
  if (kind != Envelope::kWhole && !joined) {  // a reply's envelope, or a goodbye's, in front of frames
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // The request's frames from `first` on; a joined envelope's frame 0 taken out of it.
  const std::size_t first = joined ? 0 : 1;
  if (joined) (*parts)[0] = joined_first((*parts)[0]);
  if (options_.max_message_bytes >= 0) {
    uint64_t total = 0;
    for (std::size_t i = first; i < parts->size(); ++i) total += (*parts)[i].size();
    if (total > static_cast<uint64_t>(options_.max_message_bytes)) {
      oversized_.fetch_add(1, std::memory_order_relaxed);
      refuse(std::move(routing_id), id,
             errors::resource_exhausted("request of {} bytes exceeds the server's limit of {} bytes", total,
                                        options_.max_message_bytes));
      return;
    }
  }
  dispatch(std::move(routing_id), id, frames_from(*parts, first), joined);
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
  dispatch(std::move(rid), id, std::move(frames), false);
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
  Outgoing out{std::move(routing_id), id, status, {}};
  send(out);
}

void RpcServerCore::dispatch(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t> frames,
                             bool joined) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  RpcMessage request;
  request.frames = std::move(frames);
  Responder respond(std::make_shared<ReplySlot>(shared_from_this(), std::move(routing_id), id, joined));
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
  if (slot.watched.load(std::memory_order_acquire)) unwatch(slot);
  // Only the winner of `replied` gets here, so it alone moves the routing id out of the slot.
  Outgoing out{std::move(slot.routing_id), slot.id, status, std::move(frames), slot.joined};
  // On the I/O thread the reply is sent at once (Note [Inline replies]); on another, at once
  // while the I/O thread sleeps (Note [Replies sent by their thread]), else queued for it.
  const bool on_io_thread = tls_server_io_owner == this;
  bool wake = false;
  std::unique_lock<std::mutex> direct;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    if (stopping_) {
      dropped_replies_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // Note [Replies sent by their thread].
    if (!on_io_thread && outbox_.empty() && !has_streamed_size(out.frames)) {
      direct = std::unique_lock<std::mutex>(socket_mu_, std::try_to_lock);
      if (direct.owns_lock() && socket_closed_) direct.unlock();
    }
    if (!on_io_thread && !direct.owns_lock()) {
      wake = outbox_.empty();
      outbox_.push_back(std::move(out));
    }
    last_reply_ = std::chrono::steady_clock::now();
  }
  if (on_io_thread) {
    send(out);
    sent_inline_ = true;
  } else if (direct.owns_lock()) {
    send(out);
    // The send may have processed the commands that announced a request: look, and hand it on.
    if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) {
      direct_look_ = true;
      wake = true;
    }
    direct.unlock();
  }
  if (wake) signal_wake_fd(wake_fd_);
  return true;
}

void RpcServerCore::send(Outgoing& out) {
  try {
    // With ZMQ_ROUTER_MANDATORY the routing frame fails (EAGAIN or EHOSTUNREACH) when the reply
    // cannot be delivered; the frames after it then cannot block.
    std::optional<ChunkedFrames> stream;
    if (has_streamed_size(out.frames)) {
      // The status frame counts as frame 0 of the descriptor's numbering.
      out.frames.insert(out.frames.begin(), status_frame(out.status));
      stream = split_for_streaming(&out.frames);
    }
    zmq::message_t routing_id;  // sending moves the frame out: each chunk sends a copy of this
    if (stream) routing_id.copy(out.routing_id);
    std::size_t first = 0;  // the first frame sent after the envelope's
    if (!socket_.send(out.routing_id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      dropped_replies_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (stream) {
      socket_.send(envelope_frame(kHeadMagic, out.id), zmq::send_flags::sndmore);
      socket_.send(stream->descriptor, zmq::send_flags::sndmore);
    } else if (out.joined && out.status.ok() && !out.frames.empty() && joins(out.frames[0])) {
      // Frame 0 inside the envelope's frame (Note [Joined envelopes]).
      socket_.send(joined_frame(kJoinedReplyMagic, out.id, out.frames[0]),
                   out.frames.size() == 1 ? zmq::send_flags::none : zmq::send_flags::sndmore);
      first = 1;
    } else {
      // The call id and the status in one frame (Note [RPC envelope]).
      socket_.send(reply_envelope_frame(out.id, out.status),
                   out.frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
    for (std::size_t i = first; i < out.frames.size(); ++i) {
      socket_.send(out.frames[i], i + 1 < out.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    if (stream) {
      // Counted before the chunks go: the caller may hold the whole reply (and read these stats)
      // as soon as the last chunk leaves. A reply cut short below counts as dropped too.
      streamed_replies_.fetch_add(1, std::memory_order_relaxed);
      // The chunks follow at once, in order (Note [Streamed frames]).
      for (zmq::message_t& chunk : stream->chunks) {
        zmq::message_t rid;
        rid.copy(routing_id);
        if (!socket_.send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          dropped_replies_.fetch_add(1, std::memory_order_relaxed);  // the caller meets its deadline
          return;
        }
        socket_.send(envelope_frame(kChunkMagic, out.id), zmq::send_flags::sndmore);
        socket_.send(chunk, zmq::send_flags::none);
      }
    }
    replies_.fetch_add(1, std::memory_order_relaxed);
  } catch (const zmq::error_t&) {
    dropped_replies_.fetch_add(1, std::memory_order_relaxed);  // EHOSTUNREACH: the caller went away
  }
}

void RpcServerCore::stop(std::chrono::milliseconds flush) {
  TESSERA_CHECK(tls_server_io_owner != this);  // not from a handler run inline on the I/O thread
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
    if (recent) {
      close_linger_ms_.store(static_cast<int>(flush.count()));
      // Note [Goodbye]: the callers read those replies before the connections close.
      goodbye_asked_.store(true, std::memory_order_release);
      signal_wake_fd(wake_fd_);
      std::unique_lock<std::mutex> l(goodbye_mu_);
      goodbye_cv_.wait_until(l, std::chrono::steady_clock::now() + flush, [&] { return goodbye_done_; });
    }
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
  s.lost_peers = lost_peers_.load(std::memory_order_relaxed);
  s.calls_of_lost_peers = calls_of_lost_peers_.load(std::memory_order_relaxed);
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

}  // namespace tessera::internal
