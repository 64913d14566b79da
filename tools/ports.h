// A free TCP port on the loopback interface, for tests, benchmarks and the demo that start servers
// on ports chosen in advance (a ClusterSpec lists every task's address before any task starts).
// The port was free a moment ago: another process may take it before the caller binds it, so
// callers retry on a new port when binding fails. Header-only; returns 0 when no port could be
// found (no loopback interface).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tessera::tools {

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// "127.0.0.1:PORT" with a port free_loopback_port() found.
inline std::string free_loopback_address() { return "127.0.0.1:" + std::to_string(free_loopback_port()); }

}  // namespace tessera::tools
