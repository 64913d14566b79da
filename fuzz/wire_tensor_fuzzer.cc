// Fuzz target: a tensor as a peer sends it, metadata in a message and bytes in a raw frame. The
// input (layout: tensor_input in fuzz_util.h) is flags, a length-prefixed TensorMeta and the frame.
// The receiver's path runs on it: validate_tensor_meta, decode_tensor (validate + copy), and
// frame_to_tensor (transport/rpc.h: the zero-copy receiver, called as documented once the metadata
// passed validation), with the alignment the flags pick. Properties: what validates decodes, to a
// tensor of the claimed dtype and shape holding exactly the frame's bytes; frame_to_tensor gives
// the same tensor; the tensor's metadata encodes back to the input's; an inline TensorProto of it
// round-trips; and the tensor's own frame (tensor_frame) converts back to an equal tensor.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/string_tensor.h"
#include "fuzz/fuzz_util.h"
#include "transport/rpc.h"
#include "distributed/wire.h"

namespace {

using namespace tessera;
namespace wire = tessera::internal::wire;

// Whether `t` travels as these bytes: its elements' bytes, or a String tensor's encoding.
bool same_bytes(const Tensor& t, const void* data, std::size_t size) {
  if (t.dtype() == DType::String) return internal::encode_strings(t) == std::string_view(static_cast<const char*>(data), size);
  return t.bytes() == size && (size == 0 || std::memcmp(t.raw_data(), data, size) == 0);
}

void check(const uint8_t* data, size_t size) {
  if (size < 3) return;
  const uint8_t flags = data[0];
  const std::size_t meta_len = std::min<std::size_t>(data[1] | (std::size_t{data[2]} << 8), size - 3);
  const uint8_t* meta_bytes = data + 3;
  const uint8_t* frame_bytes = meta_bytes + meta_len;
  const std::size_t frame_len = size - 3 - meta_len;
  const uint64_t max_bytes = (flags & fuzz::kSmallCap) ? fuzz::kSmallCapBytes : wire::kMaxTensorBytes;
  const std::size_t alignment = std::size_t{1} << ((flags >> 2) & 7);

  wire::TensorMeta meta;
  if (!meta.ParseFromArray(meta_bytes, static_cast<int>(meta_len))) return;

  // The frame: the input's bytes, or (kFill) as long as the metadata claims, cycling through them.
  std::vector<uint8_t> frame(frame_bytes, frame_bytes + frame_len);
  if ((flags & fuzz::kFill) && meta.byte_size() <= fuzz::kMaxFill) {
    frame.resize(static_cast<std::size_t>(meta.byte_size()));
    for (std::size_t i = 0; i < frame.size(); ++i) frame[i] = frame_len == 0 ? 0 : frame_bytes[i % frame_len];
  }

  const Status valid = wire::validate_tensor_meta(meta, frame.size(), max_bytes);
  auto decoded = wire::decode_tensor(meta, frame.data(), frame.size(), max_bytes);
  // decode_tensor = validate_tensor_meta + validate_tensor_content + copy (strings: + decoding,
  // which checks their encoding, as frame_to_tensor's does below).
  FUZZ_CHECK(!decoded.ok() || valid.ok());
  if (valid.ok() && static_cast<DType>(meta.dtype()) != DType::String) {
    const Status content = wire::validate_tensor_content(static_cast<DType>(meta.dtype()), frame.data(), frame.size());
    FUZZ_CHECK(decoded.ok() == content.ok());
  }
  if (!valid.ok()) return;
  FUZZ_CHECK(frame.size() <= max_bytes);

  // The zero-copy receiver: the metadata validated, so its dtype and shape describe the frame.
  const DType dtype = static_cast<DType>(meta.dtype());
  const Shape shape(std::vector<int64_t>(meta.dims().begin(), meta.dims().end()));
  auto received = internal::frame_to_tensor(zmq::message_t(frame.data(), frame.size()), dtype, shape, alignment);
  if (dtype == DType::String) {
    FUZZ_CHECK(received.ok() == decoded.ok());
    if (!received.ok()) return;
  }
  FUZZ_CHECK(received.ok());
  FUZZ_CHECK(received.value().dtype() == dtype && received.value().shape() == shape);
  if (dtype != DType::Bool || decoded.ok()) FUZZ_CHECK(same_bytes(received.value(), frame.data(), frame.size()));

  if (!decoded.ok()) return;
  const Tensor& t = decoded.value();
  FUZZ_CHECK(t.dtype() == dtype && t.shape() == shape);
  FUZZ_CHECK(same_bytes(t, frame.data(), frame.size()));

  // Metadata round trip.
  const wire::TensorMeta again = wire::encode_tensor_meta(t, meta.frame());
  FUZZ_CHECK(again.dtype() == meta.dtype());
  FUZZ_CHECK(again.byte_size() == meta.byte_size());
  FUZZ_CHECK(again.frame() == meta.frame());
  FUZZ_CHECK(again.dims_size() == meta.dims_size());
  for (int i = 0; i < meta.dims_size(); ++i) FUZZ_CHECK(again.dims(i) == meta.dims(i));

  // Inline (attr) round trip.
  auto proto = wire::encode_tensor_proto(t);
  FUZZ_CHECK(proto.ok());
  auto inline_back = wire::decode_tensor_proto(proto.value(), max_bytes);
  FUZZ_CHECK(inline_back.ok());
  FUZZ_CHECK(same_bytes(inline_back.value(), frame.data(), frame.size()));

  // Sending it: its own frame converts back to the same bytes.
  auto sent = internal::tensor_frame(t);
  FUZZ_CHECK(sent.ok());
  auto back = internal::frame_to_tensor(std::move(sent).value(), dtype, shape, alignment);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(same_bytes(back.value(), frame.data(), frame.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::quiet_protobuf();
  try {
    check(data, size);
  } catch (const tessera::Error&) {
    // A typed error is an acceptable answer to bad input.
  }
  return 0;
}
