// The RPC server's core (rpc.h's RpcServer and Responder are handles on it): the class and the
// reply slot a Responder shares. Private to the transport; the code is in rpc_server.cc (Note [RPC
// server]) and, the tracking of callers' connections and the goodbye, rpc_server_peers.cc (Note
// [Lost callers], Note [Goodbye]).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "core/logging.h"
#include "core/recent_memo.h"
#include "transport/rpc.h"
#include "transport/rpc_stream.h"
#include "transport/socket_io.h"

namespace tessera::internal {

struct ReplySlot {
  std::shared_ptr<RpcServerCore> core;
  zmq::message_t routing_id;
  uint64_t id;  // the call's
  bool joined;  // the request came with a joined envelope: so may the reply (Note [Joined envelopes])
  std::atomic<bool> replied{false};
  // Responder::on_lost: the caller's routing id, and what to run when its connection closes.
  std::string peer;
  std::atomic<bool> watched{false};  // in core->watched_ (written under core->watch_mu_)
  std::function<void()> on_lost;     // guarded by core->watch_mu_

  ReplySlot(std::shared_ptr<RpcServerCore> c, zmq::message_t r, uint64_t call_id, bool joined_request)
      : core(std::move(c)),
        routing_id(std::move(r)),
        id(call_id),
        joined(joined_request),
        peer(routing_id.to_string()) {}
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
  // Responder::on_lost, and its undoing once the call is over.
  void watch(ReplySlot& slot, std::function<void()> fn);
  void unwatch(ReplySlot& slot);
  const std::string& endpoint() const { return endpoint_; }
  RpcServerStats stats() const;

 private:
  struct Outgoing {
    zmq::message_t routing_id;
    uint64_t id;  // the call's
    Status status;
    std::vector<zmq::message_t> frames;
    bool joined = false;  // an OK reply's frame 0 may join its envelope (Note [Joined envelopes])
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
  // Note [Lost callers]: learns the connection of a routing id seen for the first time, and runs
  // the on_lost functions of the calls of a connection that closed.
  void track_peer(zmq::message_t& routing_id);
  void peer_lost(const std::string& peer);
  bool was_lost(const std::string& peer);  // among the last lost_ remembers
  // Counts a refused connection and logs `line` (a few per 10 s: refusal_log_).
  void refused(const std::string& line);
  void receive_one(zmq::message_t routing_id, std::vector<zmq::message_t>* parts);
  // The most parts a message may have (options_.max_frames and the envelope's).
  std::size_t max_parts() const;
  // A message of `total` parts, past max_parts(): refused (when it is a call) with
  // ResourceExhausted; `parts` holds its first parts.
  void too_many_frames(zmq::message_t routing_id, const std::vector<zmq::message_t>& parts, std::size_t total);
  // The head and the chunks of a streamed request (Note [Streamed frames] in rpc_stream.cc).
  void receive_head(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t>* parts);
  void receive_chunk(const zmq::message_t& routing_id, uint64_t id, const zmq::message_t& chunk);
  // Drops the streamed requests whose sender sent nothing for stalled_stream_timeout (it is gone,
  // or its stream is broken).
  void drop_stalled_streams();
  // Hands a whole request to the handler.
  void dispatch(zmq::message_t routing_id, uint64_t id, std::vector<zmq::message_t> frames, bool joined);
  // Replies `status` (an error) to call `id` of `routing_id` at once, from the I/O thread.
  void refuse(zmq::message_t routing_id, uint64_t id, const Status& status);
  void send(Outgoing& out);
  void drain_outbox(std::vector<Outgoing>* batch);
  // Note [Goodbye]: sends the goodbye to every connected caller (I/O thread), and notes the
  // answers and the losses that end the wait for it.
  void say_goodbye();
  void goodbye_answered(const std::string& peer);
  void invoke(RpcMessage request, Responder respond);
  void run_worker();

  const RpcServer::Handler handler_;
  const RpcServerOptions options_;
  std::string endpoint_;
  zmq::context_t context_;
  zmq::socket_t socket_;  // once io_thread_ runs, used under socket_mu_ (by that thread, or a replier)
  zmq::socket_t monitor_;  // CURVE: PAIR receiving socket_'s handshake failures; I/O thread only
  zmq::socket_t zap_;      // CURVE: the ZAP handler's REP socket; I/O thread only
  std::set<std::string> allowed_keys_;  // CURVE: the allowed client keys, 32 bytes each
  LogRateLimit refusal_log_;  // refusals logged: a few per 10 s, the rest counted
  // Streamed requests being received, by routing id and call id (I/O thread only).
  struct Assembling {
    zmq::message_t routing_id;
    Assembly assembly;
  };
  std::map<std::string, Assembling> assembling_;
  // Note [Lost callers] (I/O thread only): per file descriptor, its connection (accepted, and its
  // routing id once a message named it); and the routing ids so attributed.
  std::unordered_map<int, std::optional<std::string>> connections_;
  std::unordered_set<std::string> known_peers_;
  // Calls with an on_lost function, by routing id; routing ids lately lost (the last 4096), so an
  // on_lost registered after the loss runs at once.
  std::mutex watch_mu_;
  std::unordered_map<std::string, std::unordered_set<ReplySlot*>> watched_;  // guarded by watch_mu_
  RecentMemo<std::string, bool> lost_{4096};                                  // guarded by watch_mu_
  std::atomic<uint64_t> lost_peers_{0};
  std::atomic<uint64_t> calls_of_lost_peers_{0};
  const int wake_fd_;
  std::thread io_thread_;
  std::vector<std::thread> workers_;

  std::mutex stop_mu_;
  bool stop_called_ = false;  // guarded by stop_mu_
  std::atomic<int> close_linger_ms_{0};  // ZMQ_LINGER when the I/O thread closes the socket
  // Note [Goodbye]: asked by stop(); the callers not yet answered (I/O thread only); done when
  // every one answered or was lost.
  std::atomic<bool> goodbye_asked_{false};
  bool goodbye_said_ = false;
  std::unordered_set<std::string> goodbye_unanswered_;
  std::mutex goodbye_mu_;
  std::condition_variable goodbye_cv_;
  bool goodbye_done_ = false;  // guarded by goodbye_mu_
  std::chrono::steady_clock::time_point last_reply_;  // guarded by out_mu_: the latest reply given

  std::mutex out_mu_;
  // Note [Replies sent by their thread] in rpc_server.cc: held by the I/O thread except while it
  // sleeps in poll(2), taken with try_lock by a thread that sends its reply itself.
  std::mutex socket_mu_;
  bool socket_closed_ = false;  // guarded by socket_mu_
  bool direct_look_ = false;    // guarded by socket_mu_: a reply sent by its thread found a request waiting
  std::vector<Outgoing> outbox_;  // guarded by out_mu_
  bool sent_inline_ = false;      // I/O thread only: reply() sent a reply since run_io last looked
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

}  // namespace tessera::internal
