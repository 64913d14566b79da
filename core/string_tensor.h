// The byte form of a string tensor, for the places that move tensors as bytes (the wire, checkpoint
// files): its elements in row-major order, each a little-endian uint64 length and that many bytes.
// (Numbers travel as their raw bytes; a string tensor's raw bytes are std::string objects, which
// mean nothing outside this process.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

// Bytes of encode_strings(t), without making them.
uint64_t encoded_strings_size(const Tensor& t);
std::string encode_strings(const Tensor& t);
// A string tensor of `shape` (fully defined) from `bytes`: InvalidArgumentError (naming the
// element) when a length runs past the end or bytes are left over; never reads outside `bytes`.
StatusOr<Tensor> decode_strings(std::string_view bytes, const Shape& shape);

}  // namespace tessera::internal
