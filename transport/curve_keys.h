// CURVE keys as the RPC server and channel hand them to libzmq: Z85 text (40 characters) to the
// 32 raw bytes and back, and a key set on a socket. Key files and the cluster keys file are
// security.h's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <zmq.hpp>

namespace tessera::internal {

// A Z85-encoded CURVE key (40 characters) decoded to its 32 bytes; nullopt when it is not one.
std::optional<std::string> decode_z85_key(const std::string& z85);
// A 32-byte key as Z85 text; "(malformed key)" when it is not 32 bytes.
std::string encode_z85_key(std::string_view key);
// Sets a CURVE key option from its Z85 text (already validated). Throws zmq::error_t.
void set_curve_key(zmq::socket_t& socket, int option, const std::string& z85);

}  // namespace tessera::internal
