// What the RPC server's and channel's I/O threads share (rpc_server.cc, rpc_channel.cc): zmq
// contexts, eventfd wake-ups, poll(2) of plain descriptors, reading the rest of a multipart
// message, socket monitor events, and the errors of a failed bind or connect.
//
//   const int wake = make_wake_fd();            // another thread: signal_wake_fd(wake)
//   pollfd fds[2] = {{wake, POLLIN, 0}, {socket.get(zmq::sockopt::fd), POLLIN, 0}};
//   if (!poll_io(fds, 2, timeout_ms)) ...;      // then drain_wake_fd(wake), read the socket to EAGAIN
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"

namespace tessera::internal {

// Messages an I/O thread reads from one socket in a turn before it looks at the others.
inline constexpr int kRecvBatch = 256;

// A context for a server's or a channel's sockets; the first one made applies Note [Malloc settings
// for transport] (core/host_blocks.cc).
zmq::context_t make_context();

// An eventfd (non-blocking, close-on-exec) for waking a thread that sleeps in poll_io.
int make_wake_fd();
void signal_wake_fd(int fd);
void drain_wake_fd(int fd);

// poll(2) of plain descriptors for a waiting loop; false on an error other than EINTR (an
// interrupted wait returns true with no events, and the loop recomputes its timeout). On any
// failure no revents are left set.
bool poll_io(pollfd* fds, int n, long timeout_ms);
// The same, looking without sleeping (zero-timeout polls, yielding the core between them) for up to
// `spin` first: for a thread that expects another message soon (Note [Busy polling] in
// rpc_server.cc).
bool poll_io(pollfd* fds, int n, long timeout_ms, std::chrono::microseconds spin);

// Reads the rest of a multipart message whose first frame is `first` (parts of one message arrive
// together, so this never waits).
void recv_rest(zmq::socket_t& socket, const zmq::message_t& first, std::vector<zmq::message_t>* parts);
// As recv_rest, keeping at most `max_parts` parts: the rest of the message is received and
// dropped one part at a time (memory stays that of the parts kept). Returns how many were dropped.
std::size_t recv_rest_bounded(zmq::socket_t& socket, const zmq::message_t& first, std::vector<zmq::message_t>* parts,
                              std::size_t max_parts);

// Names a libzmq error for a bind or connect failure.
Status zmq_address_error(const char* what, const std::string& address, const zmq::error_t& e);

// A monitor event's id and value (the first frame; the second, the endpoint, is read and
// returned in `endpoint` when given).
struct MonitorEvent {
  uint16_t id = 0;
  uint32_t value = 0;
  std::string endpoint;
};

// Reads the next event from a monitor socket without waiting.
std::optional<MonitorEvent> next_event(zmq::socket_t& monitor);

}  // namespace tessera::internal
