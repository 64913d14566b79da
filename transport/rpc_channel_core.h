// The RPC channel's core (rpc.h's RpcChannel and RpcCompletionQueue are handles on it): the class
// and the waiter of a thread that receives its own replies. Private to the transport; the code is
// in rpc_channel.cc (Note [RPC channel]) and, the completion queue's, rpc_completion_queue.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/rpc.h"
#include "transport/rpc_stream.h"

namespace tessera::internal {

// A completion queue's completions, first in first out. Allocates nothing until the first push (a
// std::deque allocates when it is made, and call_sync makes a waiter per call).
class CompletionFifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  std::size_t size() const { return items_.size() - head_; }
  void push_back(RpcCompletion c) { items_.push_back(std::move(c)); }
  // Needs !empty().
  RpcCompletion pop_front() {
    RpcCompletion c = std::move(items_[head_++]);
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= kCompactAt && 2 * head_ >= items_.size()) {  // a queue never drained
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    return c;
  }

 private:
  static constexpr std::size_t kCompactAt = 64;
  std::vector<RpcCompletion> items_;
  std::size_t head_ = 0;  // items_ before it are taken
};

// A thread waiting in call_sync(), or a completion queue (waited on in next()). Its calls' results
// land here, guarded by the channel's mu_; whoever completes one on another thread while a thread
// waits writes `wake_fd`.
struct RpcWaiter {
  bool queue = false;                          // a completion queue: results go to `completions`
  std::optional<StatusOr<RpcMessage>> result;  // call_sync's one call
  CompletionFifo completions;                  // a queue's, in completion order
  int calls = 0;                               // a queue's calls not completed yet
  int wake_fd = -1;  // the waiting thread's eventfd; -1 while none waits (a queue between next()s)
  // Another thread completed a call and wrote wake_fd: the write must be read before the thread's
  // next wait, or that wait's first sleep would end at once. One write per wait at most.
  bool signaled = false;
  bool has_result() const { return queue ? !completions.empty() : result.has_value(); }
};

// Owned by its RpcChannel and by the completion queues made on it, which may outlive it: the
// channel's destructor stops the core (shutdown, or destroy_from_io_thread), and a stopped core
// refuses new calls with Cancelled.
class RpcChannelCore : public std::enable_shared_from_this<RpcChannelCore> {
 public:
  using Clock = std::chrono::steady_clock;

  RpcChannelCore(std::string endpoint, const RpcChannelOptions& options);
  ~RpcChannelCore();
  // Fails the pending calls with Cancelled and joins the I/O thread (RpcChannel's destructor).
  void shutdown();

  // until_lost: `deadline` bounds only the wait for a connection; once sent, the call waits for
  // its reply until the connection is lost (Note [RPC deadlines], "Long calls").
  void call(RpcMessage request, std::chrono::milliseconds deadline, RpcChannel::Done done, bool until_lost);
  // The same, waiting on the calling thread, which receives its own reply (Note [RPC channel]).
  StatusOr<RpcMessage> call_sync(RpcMessage request, std::chrono::milliseconds deadline, bool until_lost);
  // For a channel destroyed from one of its own `done` callbacks: the I/O thread stops after the
  // callback and lets go of the core itself.
  void destroy_from_io_thread();
  bool on_io_thread() const;
  RpcChannelStats stats() const;

  // RpcCompletionQueue's: a call whose completion goes to `queue` with `tag`; the next completion
  // (waiting on this thread for at most `timeout`); forgetting the queue's pending calls; how many
  // calls it has that next() has not returned.
  void queue_call(RpcWaiter* queue, RpcMessage request, std::chrono::milliseconds deadline, uint64_t tag);
  StatusOr<RpcCompletion> queue_next(RpcWaiter* queue, std::chrono::milliseconds timeout);
  void queue_forget(RpcWaiter* queue);
  int queue_pending(const RpcWaiter* queue) const;

 private:
  struct Pending {
    RpcChannel::Done done;       // an asynchronous call: run on the I/O thread
    RpcWaiter* waiter = nullptr;  // a synchronous one, or a completion queue's
    std::chrono::milliseconds budget;
    bool until_lost = false;
    bool sent = false;  // handed to libzmq
    uint64_t tag = 0;   // a completion queue's
  };
  struct Outgoing {
    uint64_t id;
    zmq::message_t call_id;  // the envelope; a joined one holds frame 0 (Note [Joined envelopes])
    RpcMessage request;
    std::optional<ChunkedFrames> stream;  // its large frames, sent as chunks after the head
    bool head_sent = false;
    std::size_t next_chunk = 0;    // of stream->chunks
    std::size_t first_frame = 0;   // of request.frames, the first sent after the envelope
  };
  using Completion = std::pair<RpcChannel::Done, StatusOr<RpcMessage>>;

  void run_io();
  // Waits on this thread (`l` holds mu_) until `waiter` has a result or `until` passes, receiving
  // replies from the socket itself (Note [RPC channel]); wakes the I/O thread first if `wake`.
  void wait_locked(std::unique_lock<std::mutex>& l, RpcWaiter* waiter, bool wake, Clock::time_point until);
  // The checks every new call passes; OK or the error to complete it with. Needs mu_.
  Status admit(const RpcMessage& request) const;
  // Registers a call (needs mu_) and sends it now if libzmq takes it (else it stays in the outbox);
  // for a synchronous call the socket is served too, for an asynchronous one the I/O thread is
  // told of replies waiting. True when the I/O thread must be woken: it has calls to send,
  // completions to run or replies to read, must watch the socket for a connection, or the call's
  // deadline comes before its next wake-up.
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
  // Reads the socket monitor's events; a lost connection fails the calls sent on it and holds the
  // outbox (Note [Lost connections]), a failed handshake every pending call (Note [RPC security]
  // in rpc_server.cc). True when the outbox may be sent again: the socket needs serving.
  bool read_monitor();
  // Ends the hold on sends once the lost connection's pipe is surely gone (Note [Lost
  // connections]). Needs mu_.
  void maybe_end_hold();
  // The server is stopping (Note [Goodbye] in rpc_server_peers.cc): answers it and holds new
  // requests for the next connection. Needs mu_.
  void server_said_goodbye();
  // The error of a failed handshake (`event` a HANDSHAKE_FAILED_* monitor event).
  Status handshake_error(uint16_t event, uint32_t value) const;
  // Connects the socket again after a handshake failure libzmq does not retry.
  void reconnect();
  void run_completions(std::vector<Completion>* completions);
  // A call of `waiter` completed on this thread: wakes the thread waiting on it, if one waits and
  // it is not this one (once per wait). Needs mu_.
  void wake_waiter_locked(RpcWaiter* waiter);

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
  // The I/O thread's reference, set by destroy_from_io_thread() (I/O thread only).
  std::shared_ptr<RpcChannelCore> self_;

  // Guarded by mu_.
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  int async_pending_ = 0;  // entries of pending_ with a `done`
  int sync_waiters_ = 0;   // threads waiting on the socket (call_sync, RpcCompletionQueue::next)
  uint64_t sync_calls_ = 0;  // such waits ever begun
  // Note [RPC channel]: how long the I/O thread, leaving the socket to synchronous callers, sleeps
  // before it looks again; doubled (up to kUnwatchedLookMax) while no new synchronous call came.
  std::chrono::milliseconds unwatched_look_;
  uint64_t sync_calls_seen_ = 0;  // sync_calls_ at the I/O thread's last look
  // Deadlines of pending calls, earliest first; entries of completed calls are skipped when they
  // surface (and purged when they outnumber the live ones).
  std::priority_queue<std::pair<Clock::time_point, uint64_t>, std::vector<std::pair<Clock::time_point, uint64_t>>,
                      std::greater<>>
      deadlines_;
  std::deque<Outgoing> outbox_;  // accepted, not yet taken by libzmq (no peer connected yet)
  std::unordered_map<uint64_t, Assembly> assembling_;  // streamed replies being received, by call id
  std::vector<Completion> rejected_;  // calls refused at once, completed by the I/O thread
  std::vector<Completion> ready_;     // completed asynchronous calls, for the I/O thread to run
  // When the I/O thread wakes up by itself next, and whether it watches the socket meanwhile
  // (always once its loop runs, unless the channel is broken).
  Clock::time_point io_wake_at_ = Clock::time_point::min();
  bool io_watches_socket_ = false;
  // The I/O thread sleeps in poll(2) (set with its last look at the socket's replies), and a
  // caller sent on the socket since that look and found replies waiting (Note [RPC channel]).
  bool io_polling_ = false;
  bool io_look_again_ = false;
  // The last handshake failed: new calls fail with this at once (until a handshake succeeds).
  Status handshake_failed_;
  int closed_in_handshake_ = 0;  // HANDSHAKE_FAILED_NO_DETAIL events since the last success
  std::optional<Clock::time_point> reconnect_at_;  // when to connect again (libzmq gave up)
  // Since when sends wait for the lost connection's pipe to go (Note [Lost connections]).
  std::optional<Clock::time_point> held_since_;
  std::chrono::milliseconds reconnect_backoff_;

  std::atomic<uint64_t> calls_{0}, timed_out_{0}, late_replies_{0}, malformed_{0}, failed_handshakes_{0},
      streamed_requests_{0}, streamed_replies_{0}, dropped_chunks_{0};
};

}  // namespace tessera::internal
