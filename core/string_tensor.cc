#include "core/string_tensor.h"

#include <bit>

namespace tessera::internal {

namespace {
static_assert(std::endian::native == std::endian::little, "string lengths are written little-endian");
constexpr std::size_t kLengthBytes = sizeof(uint64_t);
}  // namespace

uint64_t encoded_strings_size(const Tensor& t) {
  uint64_t n = 0;
  const std::string* s = t.data<std::string>();
  for (int64_t i = 0; i < t.num_elements(); ++i) n += kLengthBytes + s[i].size();
  return n;
}

std::string encode_strings(const Tensor& t) {
  std::string out;
  out.reserve(encoded_strings_size(t));
  const std::string* s = t.data<std::string>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const uint64_t len = s[i].size();
    out.append(reinterpret_cast<const char*>(&len), kLengthBytes);
    out += s[i];
  }
  return out;
}

StatusOr<Tensor> decode_strings(std::string_view bytes, const Shape& shape) {
  const int64_t n = shape.num_elements();
  if (n < 0) return errors::invalid_argument("string tensor: shape {} is not fully defined", shape.to_string());
  // Every element takes at least its length: a shape that could not fit is refused before the
  // tensor (n std::string objects) is allocated.
  if (static_cast<uint64_t>(n) > bytes.size() / kLengthBytes) {
    return errors::invalid_argument("string tensor: {} bytes cannot hold the {} elements of shape {}",
                                    bytes.size(), n, shape.to_string());
  }
  Tensor t(DType::String, shape);
  std::string* out = t.mutable_data<std::string>();
  std::size_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (bytes.size() - pos < kLengthBytes) {
      return errors::invalid_argument("string tensor: element {} of {}: the bytes end inside its length", i, n);
    }
    uint64_t len = 0;
    std::memcpy(&len, bytes.data() + pos, kLengthBytes);
    pos += kLengthBytes;
    if (len > bytes.size() - pos) {
      return errors::invalid_argument("string tensor: element {} of {} has length {}, only {} bytes are left", i, n,
                                      len, bytes.size() - pos);
    }
    out[i].assign(bytes.data() + pos, static_cast<std::size_t>(len));
    pos += static_cast<std::size_t>(len);
  }
  if (pos != bytes.size()) {
    return errors::invalid_argument("string tensor: {} bytes left over after its {} elements", bytes.size() - pos, n);
  }
  return t;
}

}  // namespace tessera::internal
