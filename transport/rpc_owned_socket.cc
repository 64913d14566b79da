// Synchronous calls on sockets their threads own (RpcChannelOptions::owned_sockets): Note [Owned
// sockets]. Members of RpcChannelCore (rpc_channel_core.h), as the completion queue's are.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/logging.h"
#include "transport/rpc.h"
#include "transport/rpc_channel_core.h"
#include "transport/rpc_envelope.h"
#include "transport/rpc_stream.h"
#include "transport/socket_io.h"

namespace tessera::internal {

// Note [Owned sockets]
// ~~~~~~~~~~~~~~~~~~~~
// The channel's socket is shared (Note [RPC channel] in rpc_channel.cc), and sharing costs: a
// thread that did not wait inside libzmq must look for replies a use of the socket left
// unsignalled (each look a poll(2) and a getpid), then sleep in poll(2) on ZMQ_FD and an eventfd.
// Raw ZeroMQ's caller sleeps inside recv(), where one poll(2) is both the look and the sleep
// (benchmarks/README.md, "Figures behind the transport's notes"). So a synchronous call takes an
// idle DEALER of the channel's own (or makes one: its own connection and CURVE handshake), sends
// on it, waits inside recv(), and gives it back for the next call. A process has as many sockets to
// a peer as its threads ever called it at once. What the shared socket's loop does, the call does:
// * Deadlines: ZMQ_SNDTIMEO while no connection takes the request (ZMQ_IMMEDIATE), ZMQ_RCVTIMEO
//   for the reply, in slices (kLookFirst doubling to kLookMax) between which the call reads the
//   socket's monitor and whether the channel stops (then Cancelled; the destructor waits for it).
// * Lost connections: a DISCONNECTED read after the request went out fails the call (Note [Lost
//   connections]) and spends the socket: closed, never reused, so no later request goes into the
//   lost connection's pipe (no hold is needed). The monitor's older events are read first when the
//   socket lay idle long enough for libzmq to have reconnected (reconnect_interval).
// * Replies: a socket's calls come one at a time; a reply to an earlier call that ended without
//   it is late, dropped by its call id. Streamed replies are assembled here; a request with frames
//   to stream goes on the shared socket. A failed handshake fails the call as on the shared one.
// * The goodbye (Note [Goodbye] in rpc_server_peers.cc). A call that reads one answers it. An idle
//   socket has no thread to read it, and a stopping server would wait its whole `flush`; so the
//   shared socket says hello (an answer to no goodbye, which a server only notes) on each new
//   connection, which makes it a caller the server says goodbye to, and whoever reads that goodbye
//   answers for the idle sockets (every reply their calls waited for was read) and closes them
//   (retire_owned_sockets). A loss of the shared socket's connection closes them too.

namespace {

// Note [Owned sockets]: the slices a call waits in between its looks at the monitor and the
// channel's state; most calls end inside the first.
constexpr std::chrono::milliseconds kLookFirst{10};
constexpr std::chrono::milliseconds kLookMax{100};
// Idle sockets kept at most (more are closed as they are given back).
constexpr std::size_t kMaxIdleOwned = 64;
// How long a closed socket may still send an answer to a goodbye (libzmq's linger).
constexpr int kGoodbyeLingerMs = 200;

void set_timeout(zmq::socket_t& socket, int* current, int value, bool receive) {
  if (*current == value) return;
  if (receive) {
    socket.set(zmq::sockopt::rcvtimeo, value);
  } else {
    socket.set(zmq::sockopt::sndtimeo, value);
  }
  *current = value;
}

// Sends the answer to a goodbye (Note [Goodbye]); when it cannot go at once, the server stops at
// its bound.
void answer_goodbye(zmq::socket_t& socket) {
  try {
    (void)socket.send(envelope_frame(kGoodbyeAckMagic, 0), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
}

}  // namespace

OwnedSocket::~OwnedSocket() {
  if (socket.handle() != nullptr && monitor.handle() != nullptr) zmq_socket_monitor(socket.handle(), nullptr, 0);
  monitor.close();
  socket.close();
}

std::unique_ptr<OwnedSocket> RpcChannelCore::make_owned_socket() {
  auto s = std::make_unique<OwnedSocket>();
  try {
    s->socket = zmq::socket_t(channel_context(), zmq::socket_type::dealer);
    configure_channel_socket(s->socket, options_, true);
    s->monitor = attach_monitor(s->socket);
    s->socket.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    TESSERA_LOG(kWarning, "no socket of its own for a call to {} ({}): it goes on the channel's shared socket",
                endpoint_, e.what());
    return nullptr;
  }
  s->idle_since = Clock::now();
  return s;
}

std::unique_ptr<OwnedSocket> RpcChannelCore::lease_owned() {
  std::unique_ptr<OwnedSocket> s;
  {
    std::lock_guard<std::mutex> l(owned_mu_);
    if (owned_stop_.load(std::memory_order_acquire)) return nullptr;
    ++owned_callers_;
    if (!idle_owned_.empty()) {
      s = std::move(idle_owned_.back());
      idle_owned_.pop_back();
    }
  }
  if (s == nullptr) {
    s = make_owned_socket();
    if (s == nullptr) {
      give_back_owned(nullptr);
      return nullptr;
    }
  }
  s->epoch = owned_epoch_.load(std::memory_order_acquire);
  return s;
}

void RpcChannelCore::give_back_owned(std::unique_ptr<OwnedSocket> s) {
  std::unique_ptr<OwnedSocket> closing;  // closed outside the lock
  {
    std::lock_guard<std::mutex> l(owned_mu_);
    if (s != nullptr) {
      // Retired while leased: its server said goodbye (answered here if the call did not read it)
      // or its connection went with the shared socket's.
      const bool retired = s->epoch != owned_epoch_.load(std::memory_order_acquire);
      if (retired && !s->spent) {
        answer_goodbye(s->socket);
        s->socket.set(zmq::sockopt::linger, kGoodbyeLingerMs);
      }
      if (s->spent || retired || owned_stop_.load(std::memory_order_acquire) || idle_owned_.size() >= kMaxIdleOwned) {
        closing = std::move(s);
      } else {
        s->idle_since = Clock::now();
        idle_owned_.push_back(std::move(s));
      }
    }
    if (--owned_callers_ == 0) owned_callers_gone_.notify_all();
  }
}

void RpcChannelCore::retire_owned_sockets(bool goodbye) {
  std::vector<std::unique_ptr<OwnedSocket>> closing;
  {
    std::lock_guard<std::mutex> l(owned_mu_);
    owned_epoch_.fetch_add(1, std::memory_order_acq_rel);
    closing.swap(idle_owned_);
  }
  for (auto& s : closing) {
    if (!goodbye) continue;
    answer_goodbye(s->socket);
    s->socket.set(zmq::sockopt::linger, kGoodbyeLingerMs);
  }
}

void RpcChannelCore::close_owned_sockets() {
  std::vector<std::unique_ptr<OwnedSocket>> closing;
  {
    std::unique_lock<std::mutex> l(owned_mu_);
    owned_stop_.store(true, std::memory_order_release);
    owned_callers_gone_.wait(l, [&] { return owned_callers_ == 0; });
    closing.swap(idle_owned_);
  }
}

std::optional<StatusOr<RpcMessage>> RpcChannelCore::call_owned(RpcMessage& request, std::chrono::milliseconds deadline,
                                                               bool until_lost) {
  if (!options_.owned_sockets || has_streamed_size(request.frames)) return std::nullopt;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status st = admit(request); !st.ok()) return StatusOr<RpcMessage>(st);
    if (!owned_used_) {
      // The first owned socket: the shared one says hello from now on (Note [Owned sockets]).
      owned_used_ = true;
      hello_due_ = true;
      signal_wake_fd(wake_fd_);
    }
  }
  std::unique_ptr<OwnedSocket> s = lease_owned();
  if (s == nullptr) {
    if (owned_stop_.load(std::memory_order_acquire)) {
      return StatusOr<RpcMessage>(errors::cancelled("call to {} cancelled: the channel was destroyed", endpoint_));
    }
    return std::nullopt;
  }
  StatusOr<RpcMessage> result = call_on(*s, std::move(request), deadline, until_lost);
  // Idle, the socket relies on the shared socket's hello for its goodbye: without one sent (no
  // shared connection yet), it is closed rather than kept.
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (hello_due_ && !held_since_ && socket_fd_ >= 0) {
      try {
        if (socket_.send(envelope_frame(kGoodbyeAckMagic, 0), zmq::send_flags::dontwait)) hello_due_ = false;
      } catch (const zmq::error_t&) {
      }
      // The send may have spent ZMQ_FD's signal of replies waiting (Note [RPC channel]).
      if (!hello_due_ && (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN)) {
        if (io_polling_) {
          wake = true;
        } else {
          io_look_again_ = true;
        }
      }
    }
    if (hello_due_) s->spent = true;
  }
  if (wake) signal_wake_fd(wake_fd_);
  give_back_owned(std::move(s));
  return result;
}

Status RpcChannelCore::read_owned_monitor(OwnedSocket& s, bool sent) {
  Status handshake;
  for (;;) {
    std::optional<MonitorEvent> e = next_event(s.monitor);
    if (!e) break;
    switch (e->id) {
      case ZMQ_EVENT_DISCONNECTED:
        // Before the request went out, a connection it never used (ZMQ_IMMEDIATE held it back).
        if (sent) {
          s.spent = true;
          return errors::unavailable("lost the connection to {} while waiting for a reply: the task died, "
                                     "restarted or stopped answering heartbeats",
                                     endpoint_);
        }
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        s.closed_in_handshake = 0;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        handshake = handshake_error(e->id, e->value);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // As on the shared socket (read_monitor): twice in a row is a server that will not talk.
        if ((e->value == EPIPE || e->value == ECONNRESET) && ++s.closed_in_handshake >= 2) {
          handshake = handshake_error(e->id, e->value);
        }
        break;
      default:
        break;
    }
    if (!handshake.ok()) {
      failed_handshakes_.fetch_add(1, std::memory_order_relaxed);
      s.spent = true;
      return handshake;
    }
  }
  return Status();
}

StatusOr<RpcMessage> RpcChannelCore::call_on(OwnedSocket& s, RpcMessage request, std::chrono::milliseconds budget,
                                             bool until_lost) {
  using Kind = IncomingReply::Kind;
  const auto start = Clock::now();
  const auto deadline = start + budget;
  const auto cancelled = [&] {
    s.spent = true;  // its reply may still come, to a call that left: not worth keeping
    return errors::cancelled("call to {} cancelled: the channel was destroyed", endpoint_);
  };
  const auto expired = [&] {
    timed_out_.fetch_add(1, std::memory_order_relaxed);
    return errors::unavailable("{} {} within {} ms: the task is down or unreachable",
                               until_lost ? "could not reach" : "no reply from", endpoint_, budget.count());
  };
  // Idle long enough for libzmq to have lost and made a connection on its own: what the monitor
  // says happened before this call is not about it.
  if (start - s.idle_since >= options_.reconnect_interval) {
    if (Status st = read_owned_monitor(s, false); !st.ok()) return st;
  }
  std::chrono::milliseconds look = kLookFirst;
  const auto slice = [&](bool bounded) {
    long ms = look.count();
    if (bounded) {
      ms = std::min<long>(ms, std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count());
    }
    look = std::min(2 * look, kLookMax);
    return static_cast<int>(std::max<long>(ms, 0));
  };

  // Send: the first part waits while no connection takes it (ZMQ_IMMEDIATE), the others never.
  const uint64_t id = s.next_id++;
  std::vector<zmq::message_t>& frames = request.frames;
  std::size_t first_frame = 0;
  zmq::message_t envelope;
  if (joins(frames[0])) {  // Note [Joined envelopes]
    envelope = joined_frame(kJoinedMagic, id, frames[0]);
    first_frame = 1;
  } else {
    envelope = call_id_frame(id);
  }
  const bool more = first_frame < frames.size();
  const auto flags = more ? zmq::send_flags::sndmore : zmq::send_flags::none;
  for (;;) {
    if (owned_stop_.load(std::memory_order_acquire)) return cancelled();
    if (Clock::now() >= deadline) return expired();
    set_timeout(s.socket, &s.sndtimeo, slice(true), false);
    if (s.socket.send(envelope, flags)) break;
    if (Status st = read_owned_monitor(s, false); !st.ok()) return st;
  }
  for (std::size_t i = first_frame; i < frames.size(); ++i) {
    s.socket.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  // Receive, until this call's reply.
  look = kLookFirst;
  std::optional<Assembly> assembly;
  std::vector<zmq::message_t> parts;
  for (;;) {
    zmq::message_t first;
    bool got = false;
    if (options_.busy_poll.count() > 0) {  // Note [Busy polling] in rpc_server.cc
      const auto spin_until = Clock::now() + options_.busy_poll;
      while (!(got = s.socket.recv(first, zmq::recv_flags::dontwait).has_value()) && Clock::now() < spin_until) {
        sched_yield();
      }
    }
    if (!got) {
      set_timeout(s.socket, &s.rcvtimeo, slice(!until_lost), true);
      got = s.socket.recv(first).has_value();
    }
    if (!got) {  // a slice passed
      if (owned_stop_.load(std::memory_order_acquire)) return cancelled();
      if (Status st = read_owned_monitor(s, true); !st.ok()) return st;
      if (!until_lost && Clock::now() >= deadline) {
        s.spent = assembly.has_value();  // its chunks would be late
        return expired();
      }
      continue;
    }
    recv_rest(s.socket, first, &parts);
    IncomingReply in = classify_reply(first, &parts);
    parts.clear();
    if (in.kind == Kind::kGoodbye) {
      // The server stops: answered, and the connection goes (the reply, if still to come, may
      // not; the monitor will say).
      answer_goodbye(s.socket);
      s.spent = true;
      continue;
    }
    if (in.kind == Kind::kMalformed) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const bool ours = in.id == id;
    switch (in.kind) {
      case Kind::kReply:
        if (!ours) break;
        if (!in.status.ok()) return in.status;
        return RpcMessage{std::move(in.frames)};
      case Kind::kOlder:
        malformed_.fetch_add(1, std::memory_order_relaxed);
        if (ours) return older_reply_error();
        continue;
      case Kind::kHead: {
        if (!ours || assembly) break;
        StatusOr<Assembly> a = start_assembly(in.frames);
        if (!a.ok()) {
          s.spent = true;  // its chunks follow
          return a.status();
        }
        assembly.emplace(std::move(a).value());
        continue;
      }
      case Kind::kChunk: {
        if (!ours || !assembly || in.frames.size() != 1) {  // an earlier call's, or a refused head's
          dropped_chunks_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        Status st = assembly->add(in.frames[0]);
        if (st.ok() && !assembly->complete()) continue;
        std::optional<StatusOr<RpcMessage>> reply;
        if (st.ok()) reply = assembled_reply(assembly->take());
        if (!reply) {
          malformed_.fetch_add(1, std::memory_order_relaxed);
          s.spent = true;  // the rest of a broken stream may follow
          return errors::internal("malformed streamed reply from {}: {}", endpoint_,
                                  st.ok() ? "no status frame" : st.message());
        }
        streamed_replies_.fetch_add(1, std::memory_order_relaxed);
        return std::move(*reply);
      }
      default:
        break;
    }
    late_replies_.fetch_add(1, std::memory_order_relaxed);  // an earlier call's, ended without it
  }
}

}  // namespace tessera::internal
