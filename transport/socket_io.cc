#include "transport/socket_io.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "core/host_blocks.h"

namespace tessera::internal {

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

bool poll_io(pollfd* fds, int n, long timeout_ms) {
  const int timeout = timeout_ms > INT_MAX ? INT_MAX : static_cast<int>(timeout_ms);
  if (::poll(fds, static_cast<nfds_t>(n), timeout) >= 0) return true;
  for (int i = 0; i < n; ++i) fds[i].revents = 0;
  return errno == EINTR;
}

bool poll_io(pollfd* fds, int n, long timeout_ms, std::chrono::microseconds spin) {
  if (timeout_ms == 0 || spin.count() <= 0) return poll_io(fds, n, timeout_ms);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (!poll_io(fds, n, 0)) return false;
    if (std::any_of(fds, fds + n, [](const pollfd& p) { return p.revents != 0; })) return true;
    if (std::chrono::steady_clock::now() - start >= spin) break;
    std::this_thread::yield();
  }
  if (timeout_ms < 0) return poll_io(fds, n, -1);
  const long spun = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  return poll_io(fds, n, std::max<long>(0, timeout_ms - spun));
}

void recv_rest(zmq::socket_t& socket, const zmq::message_t& first, std::vector<zmq::message_t>* parts) {
  parts->clear();
  if (first.more()) parts->reserve(4);  // a reply's frames, grown once (no-op once it holds 4)
  bool more = first.more();
  while (more) {
    zmq::message_t m;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    parts->push_back(std::move(m));
  }
}

std::size_t recv_rest_bounded(zmq::socket_t& socket, const zmq::message_t& first, std::vector<zmq::message_t>* parts,
                              std::size_t max_parts) {
  parts->clear();
  std::size_t dropped = 0;
  bool more = first.more();
  zmq::message_t scratch;
  while (more) {
    zmq::message_t& m = parts->size() < max_parts ? parts->emplace_back() : scratch;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) {
      if (&m != &scratch) parts->pop_back();
      break;
    }
    more = m.more();
    if (&m == &scratch) ++dropped;
  }
  return dropped;
}

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

}  // namespace tessera::internal
