// Tensors as RPC frames (rpc.h, "Frames"): sent by reference, received without a copy where the
// alignment allows.
#include "transport/rpc.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/string_tensor.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {

// Note [Zero-copy tensor frames]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// tensor_frame() hands libzmq the tensor's own bytes with a free callback that drops a
// Tensor reference, run by whichever thread releases the message last (often libzmq's I/O thread).
// On receipt, frame_to_tensor() can wrap the zmq message in a TensorBuffer whose release closes
// the message. libzmq 4.3 stores a received frame of more than 33 bytes 40 bytes after the start
// of a malloc'ed block, i.e. at 8 mod 16 and never at Tensor::kAlignment (64): with the default
// alignment requirement a received tensor is always copied. Tessera's kernels need only natural
// alignment, so a caller may accept dtype_size(dtype) and skip the copy; the tensor is then an
// exception to Tensor's 64-byte promise that the caller has to know about.

namespace {

struct SentTensor {
  Tensor tensor;
  // Publishes the construction to the thread that runs the free callback, visibly to TSan (libzmq,
  // uninstrumented, hands the message over with atomics TSan cannot see).
  std::atomic<bool> published{false};
};

void free_sent_tensor(void* /*data*/, void* hint) {
  auto* sent = static_cast<SentTensor*>(hint);
  (void)sent->published.load(std::memory_order_acquire);
  delete sent;
}

// A TensorBuffer over a received zmq message: the buffer's data is the message's.
struct FrameBuffer : TensorBuffer {
  zmq::message_t frame;
};

void release_frame_buffer(TensorBuffer* b) { delete static_cast<FrameBuffer*>(b); }

}  // namespace

zmq::message_t string_frame(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

StatusOr<zmq::message_t> tensor_frame(const Tensor& t) {
  if (t.is_null()) return errors::failed_precondition("cannot send a null tensor");
  if (!is_host_tensor(t)) {
    return errors::failed_precondition("cannot send a tensor held by {}: copy it to host memory first",
                                       t.device());
  }
  if (t.dtype() == DType::String) return string_frame(encode_strings(t));
  const std::size_t bytes = t.bytes();
  if (bytes < kZeroCopyMinBytes) return zmq::message_t(t.raw_data(), bytes);
  auto* sent = new SentTensor{t};
  sent->published.store(true, std::memory_order_release);
  // libzmq never writes through the pointer it is given.
  return zmq::message_t(const_cast<void*>(t.raw_data()), bytes, &free_sent_tensor, sent);
}

StatusOr<Tensor> frame_to_tensor(zmq::message_t frame, DType dtype, const Shape& shape,
                                 std::size_t required_alignment) {
  TESSERA_CHECK(required_alignment > 0 && (required_alignment & (required_alignment - 1)) == 0);
  if (!shape.fully_defined()) {
    return errors::invalid_argument("a received tensor needs a fully defined shape, got {}", shape.to_string());
  }
  if (dtype == DType::String) {
    return decode_strings(std::string_view(static_cast<const char*>(frame.data()), frame.size()), shape);
  }
  const std::size_t expected = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  if (frame.size() != expected) {
    return errors::invalid_argument("tensor frame holds {} bytes; a {} {} tensor needs {}", frame.size(),
                                    dtype_name(dtype), shape.to_string(), expected);
  }
  const auto address = reinterpret_cast<std::uintptr_t>(frame.data());
  if (dtype != DType::Bool && expected >= kZeroCopyMinBytes && address % required_alignment == 0) {
    auto* buf = new FrameBuffer();
    buf->frame = std::move(frame);
    buf->data = buf->frame.data();
    buf->bytes = buf->frame.size();
    buf->release = &release_frame_buffer;
    return adopt_buffer(buf, dtype, shape);
  }
  Tensor t(dtype, shape);
  if (dtype == DType::Bool) {
    // Any byte other than 0 or 1 would be an invalid bool.
    const auto* src = static_cast<const unsigned char*>(frame.data());
    bool* dst = t.mutable_data<bool>();
    for (std::size_t i = 0; i < expected; ++i) dst[i] = src[i] != 0;
  } else if (expected > 0) {
    std::memcpy(t.raw_mutable_data(), frame.data(), expected);
  }
  return t;
}

}  // namespace tessera::internal
