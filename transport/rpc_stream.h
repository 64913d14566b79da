// Large frames of an RPC message travel as a stream of chunk messages after the message itself, so
// that the receiver copies each chunk into place while the next ones are still on the wire, into
// memory that is already mapped. Used by rpc_server.cc and rpc_channel.cc, for requests and
// replies alike; see Note [Streamed frames] in rpc_stream.cc.
//
//   Sender:   std::optional<ChunkedFrames> s = split_for_streaming(&frames);  // placeholders left
//             send [head envelope][s->descriptor][frames...], then [chunk envelope][chunk] for each
//             of s->chunks, in order
//   Receiver: StatusOr<Assembly> a = Assembly::start(descriptor, std::move(frames), limit);
//             for each chunk: TESSERA_RETURN_IF_ERROR(a.value().add(chunk)); once complete(): take()
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"

namespace tessera::internal {

// Frames at least this large are streamed.
inline constexpr std::size_t kStreamMinBytes = std::size_t{2} << 20;
// Chunk size; a frame of more than kStreamMaxChunks chunks gets larger ones (a multiple of 64 KiB),
// so that no frame puts more than kStreamMaxChunks messages in a socket's queue.
inline constexpr std::size_t kStreamChunkBytes = std::size_t{1} << 20;
inline constexpr std::size_t kStreamMaxChunks = 1024;

// What a sender streams: the descriptor frame (which frames, how long) and the chunk messages that
// carry their bytes, in order. The chunks reference the original frames' memory (no copy), which
// stays alive until libzmq has sent the last of them. (Not named Stream: core/device.h has a
// Stream in this namespace, and two classes of one name are one type to the linker.)
struct ChunkedFrames {
  zmq::message_t descriptor;
  std::vector<zmq::message_t> chunks;
};

// Moves the frames of at least kStreamMinBytes out of *frames, leaving an empty frame in each place,
// and returns how to send them; nullopt (and *frames untouched) when none is that large.
std::optional<ChunkedFrames> split_for_streaming(std::vector<zmq::message_t>* frames);

// A streamed message being received: its frames, with buffers (from allocate_host_block) that the
// chunks fill in order.
class Assembly {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks `descriptor` against `frames` (the message's frames after the descriptor, placeholders
  // empty) and allocates the streamed frames. InvalidArgument for a descriptor that does not
  // describe them, ResourceExhausted when the frames would add up to more than `max_total_bytes`
  // (-1: no limit) or the memory cannot be had.
  static StatusOr<Assembly> start(const zmq::message_t& descriptor, std::vector<zmq::message_t> frames,
                                  int64_t max_total_bytes);

  // Copies the next chunk into place. InvalidArgument when it is empty or longer than what its frame
  // still lacks (the assembly is then useless).
  Status add(const zmq::message_t& chunk);
  bool complete() const { return current_ == streamed_.size(); }
  // The message's frames, once complete().
  std::vector<zmq::message_t> take() { return std::move(frames_); }
  // Bytes still to come, over all streamed frames.
  std::size_t missing_bytes() const { return missing_; }
  Clock::time_point last_progress() const { return last_progress_; }

 private:
  Assembly() = default;
  std::vector<zmq::message_t> frames_;
  std::vector<std::size_t> streamed_;  // indices into frames_, ascending
  std::size_t current_ = 0;            // the frame the next chunk belongs to (an index into streamed_)
  std::size_t filled_ = 0;             // bytes of that frame received so far
  std::size_t missing_ = 0;
  Clock::time_point last_progress_;
};

}  // namespace tessera::internal
