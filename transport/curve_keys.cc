#include "transport/curve_keys.h"

#include <cstdint>

namespace tessera::internal {

std::optional<std::string> decode_z85_key(const std::string& z85) {
  if (z85.size() != 40) return std::nullopt;
  std::string key(32, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()), z85.c_str()) == nullptr) return std::nullopt;
  return key;
}

std::string encode_z85_key(std::string_view key) {
  char z85[41] = {};
  if (key.size() != 32 || zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32) == nullptr) {
    return "(malformed key)";
  }
  return z85;
}

void set_curve_key(zmq::socket_t& socket, int option, const std::string& z85) {
  if (zmq_setsockopt(socket.handle(), option, z85.data(), z85.size()) != 0) throw zmq::error_t();
}

}  // namespace tessera::internal
