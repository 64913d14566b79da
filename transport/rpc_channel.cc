// The RPC channel (rpc.h, "Client"): a DEALER to one endpoint used by the calling threads and one
// I/O thread, deadlines, long calls, streamed requests and replies, failed CURVE handshakes.
#include "transport/rpc.h"
#include "transport/rpc_channel_core.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/logging.h"
#include "transport/curve_keys.h"
#include "transport/rpc_envelope.h"
#include "transport/rpc_stream.h"
#include "transport/socket_io.h"

namespace tessera::internal {

// Note [RPC channel]
// ~~~~~~~~~~~~~~~~~~
// One I/O thread per channel (a channel per remote task: a handful per process). Channels share
// one process-wide zmq context, leaked on purpose so that channels in static objects never race
// its destruction. The channel's DEALER is the exception to "one thread per socket" (Note [RPC
// server]): whichever thread needs it uses it under the channel's mutex, because a hand-off to the
// I/O thread costs a wake-up each way, most of a small request's round trip.
// * A synchronous call (call_sync, call_until_lost_sync) is sent by its caller (unless calls
//   queued before it, or no connection yet, keep it in the outbox), which then sleeps in poll(2)
//   on the socket's ZMQ_FD and a per-thread eventfd and receives its reply itself: raw libzmq's
//   REQ/REP path, one wake-up. Replies to other calls it finds are completed too.
// * An asynchronous call is sent by its caller too (unless the outbox holds calls, there is no
//   connection or a hold after a lost one, or the caller is the I/O thread), but its reply and
//   `done` are the I/O thread's, which also enforces deadlines, reads the monitor, and answers a
//   stopping server's goodbye even on an idle channel (Note [Goodbye] in rpc_server_peers.cc).
//   The send may have spent ZMQ_FD's signal, so the caller then looks at ZMQ_EVENTS: replies
//   waiting wake the I/O thread if it sleeps (an eventfd write), or make it look again before it
//   sleeps.
// * A completion queue's call (RpcCompletionQueue) is sent and received as a synchronous one,
//   by the thread waiting in next(); between its waits the I/O thread reads and keeps its replies.
// * While synchronous callers (and queues) wait on ZMQ_FD the I/O thread leaves the socket to them
//   (watching too, it woke with them and often took the mutex first). It looks again after
//   kUnwatchedLook, longer while no new wait began (a call blocked for minutes). The last to leave
//   wakes it if asynchronous calls wait for a reply or calls for a connection, or if it sleeps
//   longer than kUnwatchedLook; otherwise it takes the socket back when it next looks, which
//   bounds how late an idle channel reads a goodbye or a queue's reply. (No wake-up per call.)
// The rules that make this safe (ZMQ_FD is edge-like: any use of the socket may consume its
// signal): whoever uses the socket then receives every reply there is and sends what the outbox
// holds if libzmq takes it (serve_socket_locked), or, an asynchronous caller, hands the replies it
// sees waiting to the I/O thread as above; a thread that completes an asynchronous call, or
// registers one while the I/O thread does not watch the socket, wakes it through its eventfd.
// (The forms measured: benchmarks/README.md, "Figures behind the transport's notes".)

// Note [RPC deadlines]
// ~~~~~~~~~~~~~~~~~~~~
// Failure. The deadline is the guarantee: a call completes by then, with the reply or with
// Unavailable ("no reply from <endpoint> within N ms: the task is down or unreachable"), whatever
// happened to the peer; a reply arriving later is dropped. ZMQ_IMMEDIATE keeps requests out of
// libzmq's queues while no peer is connected (they wait in the channel's outbox, and go out if the
// peer appears before their deadline). libzmq reconnects on its own (every reconnect_interval,
// backing off to reconnect_interval_max), so a server restarted on the same port is reached again
// by existing channels; ZMTP heartbeats drop a connection whose peer went silent (kill -9 of a
// remote host, a partition) so that reconnection starts. A request in flight when the connection
// died is not resent (the handler may have run): it fails as soon as the channel sees the loss
// ("Lost connections" below), or at its deadline if that comes first. Destroying a channel
// completes its pending calls with Cancelled. (What a stopping server does: Note [RPC server] in
// rpc_server.cc.)
//
// Long calls. Some calls may rightly wait a long time for their reply: a step blocked on a queue,
// a tensor its producer has not computed yet. call_until_lost() bounds only the wait for a
// connection (ZMQ_IMMEDIATE keeps the request in the outbox until there is one); once libzmq has
// taken the request, the call waits for its reply until the connection it went out on is lost.
// The channel learns that from a socket monitor (ZMQ_EVENT_DISCONNECTED on an inproc PAIR socket
// in the I/O thread's poll set): a peer killed with -9 resets the TCP connection at once, a peer
// that is stopped (SIGSTOP) or cut off misses ZMTP heartbeats and is dropped after
// heartbeat_timeout; either way the sent long calls fail Unavailable ("lost the connection").

// Note [Lost connections]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Every call sent on a connection that is lost fails then, ordinary calls too: the server's ROUTER
// addresses a reply to the connection its request came in on, so none can come any more, and a
// dead peer is Unavailable within the heartbeat bound for CreateSession, RegisterGraph and the
// other short calls, not at their deadline. (Replies that arrived before the loss are read first.)
// The hole that once made this unsafe (the change was reverted for it): the caller, failed early,
// sends its next request at once, and libzmq may still hold the lost connection's pipe (its
// termination reaches the socket as a command, after the monitor's DISCONNECTED, and send()
// processes commands at most once a millisecond); a message written to that pipe is dropped
// silently, and the call waited for its deadline. So after a DISCONNECTED the channel sends
// nothing (requests wait in the outbox) until the old pipe is surely gone: the monitor reports
// the next connection (CONNECTED, which libzmq makes a reconnect interval after the loss, long
// after it sent the termination), or ZMQ_EVENTS (which processes every pending command) shows no
// writable pipe, or a second has passed (the monitor dropped events); the I/O thread checks every
// few milliseconds while requests wait. ZMQ_IMMEDIATE keeps them waiting for the new connection.
// What remains: a call sent on a new connection before the I/O thread read the old one's loss (a
// thread descheduled longer than the reconnect interval) fails Unavailable with the others.
// "Replies that arrived before the loss are read first" only holds for those read before libzmq
// took the loss in: it drops the rest, so a stopping server says goodbye first (Note [Goodbye]
// in rpc_server.cc), and the channel holds its new requests from the goodbye on, as after a loss.

// Note [Older replies]
// ~~~~~~~~~~~~~~~~~~~~
// Builds before the reply envelope (Note [RPC envelope] in rpc_envelope.cc) answered
// [call-id][status][frame...], the call id with the request's magic "TRP1". A server never sends
// that magic now, so a reply under it comes from an older build: its call fails at once,
// Unimplemented, naming the endpoint, instead of waiting for its deadline or, a long call, for
// ever on a connection that stays up. (An older channel meeting a newer server counts the replies
// as malformed and its calls meet their deadlines: it cannot be changed.)

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

thread_local const void* tls_channel_io_owner = nullptr;  // the core whose I/O thread this is

// Note [Lost connections]: how often the I/O thread looks whether held requests may go, and how
// long they are held at most.
constexpr std::chrono::milliseconds kHoldCheck{5};
constexpr std::chrono::milliseconds kMaxHold{1000};
// Note [RPC channel]: how long the I/O thread leaves the socket to synchronous callers before it
// looks whether they are still there; longer while the same calls wait (a step blocked for
// minutes costs a wake-up every kUnwatchedLookMax, not every kUnwatchedLook).
constexpr std::chrono::milliseconds kUnwatchedLook{2};
constexpr std::chrono::milliseconds kUnwatchedLookMax{512};

// The waiter this thread waits as (in call_sync or RpcCompletionQueue::next), if any.
thread_local const void* tls_sync_waiter = nullptr;

}  // namespace


RpcChannelCore::RpcChannelCore(std::string endpoint, const RpcChannelOptions& options)
    : endpoint_(std::move(endpoint)),
      options_(options),
      wake_fd_(make_wake_fd()),
      unwatched_look_(kUnwatchedLook),
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
    constexpr int kEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                            ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
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
  TESSERA_CHECK(!io_thread_.joinable());  // stopped first (shutdown, destroy_from_io_thread)
  ::close(wake_fd_);
}

void RpcChannelCore::shutdown() {
  TESSERA_CHECK(!on_io_thread());
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  signal_wake_fd(wake_fd_);
  io_thread_.join();
}

void RpcChannelCore::destroy_from_io_thread() {
  TESSERA_CHECK(on_io_thread());
  io_thread_.detach();
  self_ = shared_from_this();
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
  Outgoing& out = outbox_.emplace_back(Outgoing{id, zmq::message_t(), std::move(request), std::nullopt, false, 0, 0});
  out.stream = split_for_streaming(&out.request.frames);
  if (!out.stream) {
    if (joins(out.request.frames[0])) {  // Note [Joined envelopes]
      out.call_id = joined_frame(kJoinedMagic, id, out.request.frames[0]);
      out.first_frame = 1;
    } else {
      out.call_id = call_id_frame(id);
    }
  }
  if (async) {
    // Behind calls still queued it waits its turn (the I/O thread was woken when the outbox
    // filled), as one made on the I/O thread (a completion's) or while sends are held does.
    if (queued_before || held_since_ || socket_fd_ < 0 || on_io_thread()) return wake || !queued_before;
    // Otherwise the caller sends it, and leaves the replies to the I/O thread (Note [RPC channel]),
    // which must watch the socket for them: it may have left it to synchronous callers that are gone.
    if (!io_watches_socket_ && sync_waiters_ == 0) wake = true;
    flush_outbox();
    if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) {
      if (io_polling_) {
        wake = true;
      } else {
        io_look_again_ = true;
      }
    }
    // What libzmq did not take (no connection yet, a full queue) the I/O thread sends.
    return wake || !outbox_.empty();
  }
  // A synchronous one behind calls still queued waits its turn; otherwise the socket is tried at
  // once, and serve_socket_locked() receives whatever the use of the socket made visible.
  if (!queued_before && serve_socket_locked()) wake = true;
  if (!outbox_.empty() && !io_watches_socket_) wake = true;  // no connection: the I/O thread watches for one
  return wake || !ready_.empty();
}

bool RpcChannelCore::serve_socket_locked() {
  if (socket_fd_ < 0) return false;
  if (held_since_) maybe_end_hold();
  if (!outbox_.empty() && !held_since_) flush_outbox();
  bool more = receive_replies();
  // libzmq's send() skips the socket's pending commands when it processed some less than a
  // millisecond ago, while recv() and ZMQ_EVENTS always process them: a connection the receive
  // just attached can take the outbox, and its signal on the fd is spent.
  while (!outbox_.empty() && !held_since_ && (socket_.get(zmq::sockopt::events) & ZMQ_POLLOUT)) {
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
    // A completion's call (the next pull of a chain): the I/O thread looks again before it sleeps,
    // without writing to its own eventfd.
    if (wake && on_io_thread()) {
      io_look_again_ = true;
      wake = false;
    }
  }
  if (wake) signal_wake_fd(wake_fd_);
}

StatusOr<RpcMessage> RpcChannelCore::call_sync(RpcMessage request, std::chrono::milliseconds deadline,
                                               bool until_lost) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  RpcWaiter waiter;
  std::unique_lock<std::mutex> l(mu_);
  if (Status st = admit(request); !st.ok()) return st;
  const bool wake = start_locked(std::move(request), Clock::now() + deadline,
                                 Pending{nullptr, &waiter, deadline, until_lost, false});
  // Until the reply, received on this thread, or whoever completes the call otherwise (the I/O
  // thread: deadline, lost connection, destruction).
  wait_locked(l, &waiter, wake, Clock::time_point::max());
  return std::move(*waiter.result);
}

void RpcChannelCore::wait_locked(std::unique_lock<std::mutex>& l, RpcWaiter* waiter, bool wake,
                                 Clock::time_point until) {
  waiter->wake_fd = thread_wake_fd();
  waiter->signaled = false;
  tls_sync_waiter = waiter;
  ++sync_waiters_;
  ++sync_calls_;
  // Sleep on the socket's ZMQ_FD and this thread's eventfd.
  bool drained = false;
  while (!waiter->has_result()) {
    int timeout = -1;
    if (until != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) break;
      timeout = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    l.unlock();
    if (wake) signal_wake_fd(wake_fd_);
    wake = false;
    pollfd fds[2] = {{waiter->wake_fd, POLLIN, 0}, {socket_fd_, POLLIN, 0}};
    // Looking options_.busy_poll long first (Note [Busy polling] in rpc_server.cc); an interruption
    // or error just loops again.
    poll_io(fds, socket_fd_ >= 0 ? 2 : 1, timeout, options_.busy_poll);
    if (fds[0].revents & POLLIN) {
      drain_wake_fd(waiter->wake_fd);
      drained = true;
    }
    l.lock();
    if (waiter->has_result()) break;
    wake = serve_socket_locked() || !ready_.empty();
  }
  const bool last = --sync_waiters_ == 0;
  if (last && stopping_) waiters_gone_.notify_all();
  // Asynchronous calls this thread completed, or replies its last look left unread (more than
  // kRecvBatch: their signal on ZMQ_FD is spent); and the socket, which the I/O thread leaves to
  // waiting threads (Note [RPC channel]), is its again at once when asynchronous calls still wait
  // for a reply or calls for a connection, or when it sleeps longer than kUnwatchedLook (otherwise
  // it takes the socket back by itself within that; a completion queue's calls wait that long at
  // most for a reply no thread waits for).
  const bool wake_io = wake || !ready_.empty() ||
                       (last && !io_watches_socket_ &&
                        (async_pending_ > 0 || !outbox_.empty() || unwatched_look_ > kUnwatchedLook));
  // Another thread completed a call (one write) after this one's last look at its eventfd.
  if (waiter->signaled && !drained) drain_wake_fd(waiter->wake_fd);
  waiter->wake_fd = -1;
  tls_sync_waiter = nullptr;
  // Under mu_: once this thread is no longer counted and mu_ is free, a destructor waiting for the
  // waiting threads may close wake_fd_ and free the channel (ThreadSanitizer caught a write to
  // wake_fd_ after the unlock racing the channel's destruction).
  if (wake_io) signal_wake_fd(wake_fd_);
}

void RpcChannelCore::run_io() {
  tls_channel_io_owner = this;
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
    (void)read_monitor();
  }
  std::vector<Completion> completions;
  bool again = false;  // replies left unread: look again without sleeping
  bool completed = false;  // the last turn completed asynchronous calls (Note [Busy polling])
  for (;;) {
    long timeout = -1;
    int num_items = 1;
    bool spin = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      io_wake_at_ = Clock::time_point::max();
      if (!deadlines_.empty()) io_wake_at_ = deadlines_.top().first;
      if (reconnect_at_) io_wake_at_ = std::min(io_wake_at_, *reconnect_at_);
      // Requests held after a lost connection: look again soon (Note [Lost connections]).
      if (held_since_ && !outbox_.empty()) io_wake_at_ = std::min(io_wake_at_, Clock::now() + kHoldCheck);
      if (io_look_again_) {
        io_look_again_ = false;
        again = true;
      }
      if (again) io_wake_at_ = Clock::now();
      if (io_wake_at_ != Clock::time_point::max()) {
        // Rounded up: waking before the deadline would only spin.
        const auto left = io_wake_at_ - Clock::now();
        timeout = std::max<long>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count());
      }
      // The socket needs watching for replies to asynchronous calls, for the connection the
      // outbox waits for, and, idle or not, for a stopping server's goodbye (Note [Goodbye] in
      // rpc_server_peers.cc). While synchronous callers wait on it they watch it, and read
      // whatever comes: the I/O thread then leaves it to them, and looks again after
      // unwatched_look_ (Note [RPC channel]).
      io_watches_socket_ = !broken && sync_waiters_ == 0;
      io_polling_ = true;
      if (!broken) num_items = io_watches_socket_ ? 3 : 2;
      if (io_watches_socket_ || sync_calls_ != sync_calls_seen_) {
        unwatched_look_ = kUnwatchedLook;  // calls come and go: look again soon
      } else {
        unwatched_look_ = std::min(2 * unwatched_look_, kUnwatchedLookMax);  // the same calls wait
      }
      sync_calls_seen_ = sync_calls_;
      if (!broken && !io_watches_socket_ && (timeout < 0 || timeout > unwatched_look_.count())) {
        timeout = unwatched_look_.count();
      }
      // RpcChannelOptions::busy_poll (Note [Busy polling] in rpc_server.cc): after completing calls,
      // while others still wait for their replies.
      spin = completed && io_watches_socket_ && async_pending_ > 0;
    }
    if (!poll_io(items, num_items, timeout, spin ? options_.busy_poll : std::chrono::microseconds{0})) break;
    if (items[0].revents & POLLIN) drain_wake_fd(wake_fd_);
    bool stopping;
    {
      std::lock_guard<std::mutex> l(mu_);
      io_polling_ = false;
      stopping = stopping_;
      completions.swap(rejected_);
      if (!stopping && !broken) {
        again = serve_socket_locked();
        // After the replies: a reply that arrived before its connection dropped still counts.
        if (num_items >= 2 && (items[1].revents & POLLIN) && read_monitor()) again = true;
        const auto now = Clock::now();
        if (reconnect_at_ && now >= *reconnect_at_) reconnect();
        expire(now);
      }
      completed = !ready_.empty();
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
  // The calls these completions make (a chain's next call) are refused: theirs run here too,
  // until none is left, or they would never complete.
  for (;;) {
    run_completions(&completions);
    std::lock_guard<std::mutex> l(mu_);
    if (rejected_.empty()) break;
    completions.swap(rejected_);
  }
  if (monitor_.handle() != nullptr) {
    zmq_socket_monitor(socket_.handle(), nullptr, 0);
    monitor_.close();
  }
  socket_.close();
  // Set by destroy_from_io_thread(): the last reference but a completion queue's, maybe, and the
  // core goes with it as this returns.
  std::shared_ptr<RpcChannelCore> last = std::move(self_);
}

bool RpcChannelCore::on_io_thread() const { return tls_channel_io_owner == this; }

void RpcChannelCore::wake_waiter_locked(RpcWaiter* waiter) {
  // A thread finishing its own call is awake already.
  if (waiter->wake_fd >= 0 && !waiter->signaled && waiter != tls_sync_waiter) {
    waiter->signaled = true;
    signal_wake_fd(waiter->wake_fd);
  }
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
    RpcWaiter* w = p.waiter;
    if (w->queue) {
      --w->calls;
      w->completions.push_back(RpcCompletion{p.tag, std::move(result)});
    } else {
      w->result.emplace(std::move(result));
    }
    wake_waiter_locked(w);
    return;
  }
  --async_pending_;
  ready_.emplace_back(std::move(p.done), std::move(result));
}

bool RpcChannelCore::read_monitor() {
  bool lost = false;
  const bool was_held = held_since_.has_value();
  Status handshake;  // a handshake failure seen in this batch
  for (;;) {
    std::optional<MonitorEvent> e = next_event(monitor_);
    if (!e) break;
    switch (e->id) {
      case ZMQ_EVENT_DISCONNECTED:
        lost = true;
        held_since_ = Clock::now();
        break;
      case ZMQ_EVENT_CONNECTED:
        held_since_.reset();  // a reconnect interval after the loss: the old pipe's end was sent
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        held_since_.reset();
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
  const bool released = (was_held || lost) && !held_since_;
  if (released) {
    // A new connection: ZMQ_EVENTS makes the socket process the old pipe's termination now.
    (void)socket_.get(zmq::sockopt::events);
  }
  if (!lost) return released;
  // Replies that came in before the connection dropped still count.
  while (receive_replies()) {
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (it->second.sent) {
      finish(it, errors::unavailable("lost the connection to {} while waiting for a reply: the task died, "
                                     "restarted or stopped answering heartbeats",
                                     endpoint_));
    }
    it = next;
  }
  return released;
}

void RpcChannelCore::server_said_goodbye() {
  // Every reply the server sent before its goodbye has been read: it may close now. If the answer
  // cannot go (EAGAIN), the server closes at its bound.
  try {
    (void)socket_.send(envelope_frame(kGoodbyeAckMagic, 0), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
  // New requests wait for the next connection (Note [Lost connections]).
  held_since_ = Clock::now();
}

void RpcChannelCore::maybe_end_hold() {
  // ZMQ_EVENTS processes the socket's pending commands: no writable pipe means the old one is gone.
  const bool writable = socket_.get(zmq::sockopt::events) & ZMQ_POLLOUT;
  if (!writable || Clock::now() - *held_since_ >= kMaxHold) held_since_.reset();
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
      auto& frames = out.request.frames;
      const bool more = streamed || out.first_frame < frames.size();
      const auto flags = (more ? zmq::send_flags::sndmore : zmq::send_flags::none) | zmq::send_flags::dontwait;
      if (!socket_.send(envelope, flags)) {
        if (!streamed) out.call_id = std::move(envelope);  // EAGAIN left it intact
        return;
      }
      if (streamed) socket_.send(out.stream->descriptor, zmq::send_flags::sndmore);
      for (std::size_t i = out.first_frame; i < frames.size(); ++i) {
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
    // [joined envelope and frame 0][frame...], [reply envelope][frame...], [head
    // envelope][descriptor][status][frame...] or [chunk envelope][bytes] (Note [RPC envelope] in
    // rpc_envelope.cc)
    const auto envelope = parse_envelope(first);
    if (envelope && envelope->first == Envelope::kJoinedReply) {
      auto it = pending_.find(envelope->second);
      if (it == pending_.end()) {
        late_replies_.fetch_add(1, std::memory_order_relaxed);
      } else {
        parts.insert(parts.begin(), joined_first(first));
        finish(it, RpcMessage{std::move(parts)});
      }
      parts.clear();  // moved from, or a late reply's: empty again for the next recv_rest
      continue;
    }
    if (auto reply = parse_reply_envelope(first)) {
      const auto& [id, status] = *reply;
      auto it = pending_.find(id);
      if (it == pending_.end()) {
        late_replies_.fetch_add(1, std::memory_order_relaxed);
      } else if (!status.ok()) {
        finish(it, status);
      } else {
        finish(it, RpcMessage{std::move(parts)});
        parts.clear();  // moved from: empty again for the next recv_rest
      }
      continue;
    }
    if (envelope && envelope->first == Envelope::kGoodbye && parts.empty()) {
      server_said_goodbye();
      continue;
    }
    if (!envelope || parts.empty()) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const auto [kind, id] = *envelope;
    if (kind == Envelope::kWhole) {
      // Note [Older replies]: a reply as builds before "TRR1" sent it, [call-id][status][frame...].
      malformed_.fetch_add(1, std::memory_order_relaxed);
      auto it = pending_.find(id);
      if (it != pending_.end()) {
        finish(it, errors::unimplemented("reply from {} in an older tessera build's envelope: every task of a "
                                         "cluster must run the same build",
                                         endpoint_));
      }
      continue;
    }
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
      parts = std::move(frames);  // [status][frame...]
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
    } else {  // a goodbye or its answer in front of frames, or a request's head
      malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // A streamed reply, whole again.
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

Status check_busy_poll(std::chrono::microseconds busy_poll, std::string_view field) {
  if (busy_poll.count() < 0 || busy_poll > std::chrono::milliseconds(10)) {
    return errors::invalid_argument("{} must be in [0, 10000] us, got {} us", field, busy_poll.count());
  }
  return Status();
}

RpcChannel::RpcChannel(std::string endpoint, RpcChannelOptions options)
    : endpoint_(endpoint), core_(std::make_shared<RpcChannelCore>(std::move(endpoint), options)) {}

RpcChannel::~RpcChannel() {
  if (core_->on_io_thread()) {
    core_->destroy_from_io_thread();
  } else {
    core_->shutdown();
  }
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
