// The RPC server's callers (rpc_server_core.h): their connections, tracked so that the calls of a
// caller that is gone end (Note [Lost callers]), and the goodbye a stopping server says to them
// (Note [Goodbye]).
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "core/memory_release.h"
#include "transport/rpc_envelope.h"
#include "transport/rpc_server_core.h"

namespace tessera::internal {

// Note [Lost callers]
// ~~~~~~~~~~~~~~~~~~~
// A call that may wait long (a pull of a step that never comes, a step blocked on a queue) must
// end when its caller is gone, or the server keeps its memory forever. A ROUTER names callers by
// routing id and says nothing when one's connection closes (ZMQ_ROUTER_NOTIFY is a draft option
// that Debian's libzmq lacks), so the server pairs two things it can see: the socket monitor
// reports each connection accepted and closed with its file descriptor, in order, and every
// message carries the descriptor it was read from (ZMQ_SRCFD). A descriptor holds one connection
// at a time. The first message of a routing id names its descriptor's connection, after the
// monitor was read (the connection's ACCEPTED was emitted before its first message, so it is
// there by then); the descriptor's next ACCEPTED or DISCONNECTED means that connection closed, and
// the on_lost function of each of its calls still unanswered runs (Responder::on_lost). Events
// the monitor drops (it holds 1000) make a loss seen late, never a live caller seen lost: a name
// replaced, or closed, is always of a connection that is gone. Heartbeats close a silent
// connection after heartbeat_timeout. The last 4096 lost routing ids are kept, so a call
// registered after its caller left ends at once (libzmq never reuses a routing id it made).
// A closed connection's descriptor is reused at once by the next one, and the ROUTER still hands
// out what the closed one had queued, in any order with the new one's messages: a client's RunStep
// was taken for lost when a closed connection's late message, read after the client's first, named
// the descriptor again. So of two routing ids libzmq made (callers set none) the older one, by
// its counter, is the closed connection's (generated_order).
namespace {

// The order libzmq gives the routing ids it makes (a 0 byte, then a 32-bit counter, big-endian:
// router.cpp); nullopt for one a caller set, which cannot begin with 0. The counter wraps after
// 2^32 connections to one socket, which this ignores.
std::optional<uint32_t> generated_order(const std::string& id) {
  if (id.size() != 5 || id[0] != '\0') return std::nullopt;
  uint32_t n = 0;
  for (int i = 1; i < 5; ++i) n = (n << 8) | static_cast<unsigned char>(id[i]);
  return n;
}

}  // namespace

void RpcServerCore::track_peer(zmq::message_t& routing_id) {
  if (routing_id.size() == 0) return;
  std::string peer = routing_id.to_string();
  if (known_peers_.count(peer) != 0) return;
  // -1 (EINVAL) for a message libzmq made itself (a ZMTP 1.0 peer's, garbage): not tracked.
  const int fd = zmq_msg_get(routing_id.handle(), ZMQ_SRCFD);
  if (fd < 0) return;
  read_monitor();
  std::optional<std::string>& named = connections_[fd];
  if (named) {
    const std::optional<uint32_t> mine = generated_order(peer);
    const std::optional<uint32_t> theirs = generated_order(*named);
    if (mine && theirs && *mine < *theirs) {
      // A late message of a connection that closed before the descriptor's present one opened.
      if (!was_lost(peer)) peer_lost(peer);
      return;
    }
    peer_lost(*named);  // a connection gone whose close the monitor dropped
  }
  named = peer;
  known_peers_.insert(std::move(peer));
}

bool RpcServerCore::was_lost(const std::string& peer) {
  std::lock_guard<std::mutex> l(watch_mu_);
  return lost_.find(peer) != nullptr;
}

void RpcServerCore::peer_lost(const std::string& peer) {
  known_peers_.erase(peer);
  goodbye_answered(peer);
  lost_peers_.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    lost_.remember(peer, true);
    auto it = watched_.find(peer);
    if (it == watched_.end()) return;
    for (ReplySlot* slot : it->second) {
      fns.push_back(std::move(slot->on_lost));
      slot->watched.store(false, std::memory_order_release);
    }
    watched_.erase(it);
  }
  calls_of_lost_peers_.fetch_add(fns.size(), std::memory_order_relaxed);
  for (auto& fn : fns) {
    if (fn) fn();
  }
  request_memory_release();  // what the calls held (thousands, for a flood) goes back to the system
}

void RpcServerCore::watch(ReplySlot& slot, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    if (slot.replied.load(std::memory_order_acquire)) return;
    if (lost_.find(slot.peer) == nullptr) {
      slot.on_lost = std::move(fn);
      watched_[slot.peer].insert(&slot);
      slot.watched.store(true, std::memory_order_release);
      return;
    }
  }
  calls_of_lost_peers_.fetch_add(1, std::memory_order_relaxed);
  if (fn) fn();  // its caller is gone already
}

void RpcServerCore::unwatch(ReplySlot& slot) {
  std::function<void()> dropped;  // destroyed outside the lock
  std::lock_guard<std::mutex> l(watch_mu_);
  if (!slot.watched.load(std::memory_order_acquire)) return;
  slot.watched.store(false, std::memory_order_release);
  dropped = std::move(slot.on_lost);
  auto it = watched_.find(slot.peer);
  if (it == watched_.end()) return;
  it->second.erase(&slot);
  if (it->second.empty()) watched_.erase(it);
}

// Note [Goodbye]
// ~~~~~~~~~~~~~~
// A server that stops right after replying (a ps whose "done" queue just filled) closes the
// connections its last replies travel on. The caller's DEALER uses ZMQ_IMMEDIATE (Note [Lost
// connections] in rpc_channel.cc), and libzmq then drops whatever that connection delivered and
// the application had not read yet when the loss reaches the socket: in a loop of reply-then-stop,
// a few replies in a hundred were lost, and their callers failed Unavailable. So stop(flush), when
// it gave replies lately, first says goodbye, as HTTP/2's GOAWAY does: the I/O thread sends a
// goodbye envelope to every connected caller, behind the replies already sent to it, and the
// caller's channel answers it when it reads it, by which time it has read every reply before it.
// stop() closes the socket once all answered or were lost, or after `flush`. A caller's channel
// also holds its new requests then, until the next connection. Replies given after the goodbye
// may still be lost, as may those to a caller too busy to answer within `flush`, or one of an
// older version that does not know the goodbye (it counts it malformed).
void RpcServerCore::say_goodbye() {
  goodbye_said_ = true;
  for (const std::string& peer : known_peers_) {
    zmq::message_t routing_id(peer.data(), peer.size());
    try {
      // ZMQ_ROUTER_MANDATORY: a caller whose queue is full fails here (EAGAIN), as does one whose
      // connection is gone and the monitor has not said so yet (EHOSTUNREACH, thrown).
      if (!socket_.send(routing_id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) continue;
      socket_.send(envelope_frame(kGoodbyeMagic, 0), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      continue;
    }
    goodbye_unanswered_.insert(peer);
  }
  goodbye_answered("");  // no caller to wait for: done at once
}

void RpcServerCore::goodbye_answered(const std::string& peer) {
  if (!goodbye_said_) return;
  goodbye_unanswered_.erase(peer);
  if (!goodbye_unanswered_.empty()) return;
  {
    std::lock_guard<std::mutex> l(goodbye_mu_);
    goodbye_done_ = true;
  }
  goodbye_cv_.notify_all();
}

}  // namespace tessera::internal
