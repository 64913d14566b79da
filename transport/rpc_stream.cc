#include "transport/rpc_stream.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/host_blocks.h"

namespace tessera::internal {

// Note [Streamed frames]
// ~~~~~~~~~~~~~~~~~~~~~~
// ZeroMQ delivers a multipart message whole: the receiving application sees none of it until libzmq
// has read every part, each into a buffer of its own that libzmq mallocs. For a tensor of 64 MiB
// that is a fresh mmap of 64 MiB whose 16,384 pages fault one by one as the kernel copies the
// socket's data in, then a wait for the last byte before anything else can happen. Measured on 2
// vCPUs (benchmarks/README.md, "Transport"), that held one-frame transfers of 16 and 64 MiB to
// 1.2-2.0 GiB/s, while 1 MiB messages, whose buffers glibc reuses, moved at 3.3-4 GiB/s.
//
// So a frame of kStreamMinBytes or more leaves its message and follows it as separate messages of
// kStreamChunkBytes (more when a frame would need over kStreamMaxChunks of them):
//   head:  [envelope "TRS1" + call id][descriptor][frame 0]...[frame n-1]  (streamed frames empty)
//   chunk: [envelope "TRC1" + call id][bytes]                              (one per chunk, in order)
// The descriptor lists the streamed frames: for each, its index among frames 0..n-1 (ascending)
// and its size, as little-endian u32 and u64. The chunks of one message follow its head on the same
// connection in order (ZeroMQ keeps a connection's messages in order), frame after frame; other
// messages may come between them. The receiver (Assembly) allocates each streamed frame once the
// head arrives, from the large host block cache (core/host_blocks.h: already-mapped pages, 2 MiB
// aligned, so the frame becomes a tensor without a copy), and copies every chunk into place as it
// comes: libzmq's 1 MiB chunk buffers are recycled while still in cache, and the copy overlaps the
// transfer of the rest. When the last chunk is in, the message is handed on as if it had come
// whole. Sending copies nothing: each chunk references the frame's memory, which is released with
// the last chunk libzmq lets go of.
//
// Limits and failures: the head is checked before anything is allocated (a descriptor that does
// not match the frames is InvalidArgument, a total over the receiver's limit ResourceExhausted;
// what a head allocates is mapped, not touched, so memory is used only as chunks arrive),
// and a chunk that does not fit what its frame still lacks ends the assembly. Chunks of a message
// the receiver is not assembling (refused, timed out, never seen) are dropped. An assembly whose
// sender went away mid-stream is dropped by the receiver: the channel when its call ends, the
// server when no chunk came for a while (rpc_server.cc).

#if defined(TESSERA_TSAN)
// ThreadSanitizer's dynamic annotations (its runtime defines them).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace {

constexpr std::size_t kEntryBytes = 12;  // u32 index, u64 size

// Copies a received chunk. A chunk's buffer is libzmq's: its I/O thread allocated and filled it and
// handed it over through pipes ThreadSanitizer cannot see (tests suppress "race:libzmq.so" for
// that reason), and the destination's memory may last have been freed on libzmq's thread too (a
// sent frame). Suppressed or not, every such race in a 1 MiB copy costs TSan a search of the range
// for the racy address: streamed transfers took minutes under TSan and timed out. So under TSan
// this copy is not checked; the assembly is the receiving thread's alone until it is handed on
// under the channel's or the server's own synchronization, which TSan does check.
void copy_chunk(void* dst, const void* src, std::size_t n) {
#if defined(TESSERA_TSAN)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  std::memcpy(dst, src, n);
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#else
  std::memcpy(dst, src, n);
#endif
}
constexpr std::size_t kChunkStep = std::size_t{64} << 10;

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// A streamed frame shared by its chunks; the last chunk libzmq releases deletes it.
struct SharedFrame {
  zmq::message_t frame;
  std::atomic<std::size_t> refs{0};
};

void release_chunk(void* /*data*/, void* hint) {
  auto* shared = static_cast<SharedFrame*>(hint);
  if (shared->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete shared;
}

// The frame whose bytes the chunks send. Under ThreadSanitizer, a copy that TSan holds no access
// history for: libzmq's I/O thread reads the chunks in send(2), an intercepted call, and nothing TSan
// can see orders that read after the writes that filled the frame (libzmq's pipes are lock-free and
// not instrumented), so each 8-byte word of a chunk was a race, suppressed ("race:libzmq.so") but
// handled one by one: seconds per 1 MiB chunk on a loaded machine, during which that I/O thread
// sent nothing else and missed heartbeats (RpcTest.OversizedRequestIsRefusedAndServerServesTheNextCall
// timed out that way). A block allocated and filled while the thread ignores accesses has an empty
// history. Frames over 256 MiB, which no test sends, are not copied. Elsewhere the frame itself, no
// copy.
zmq::message_t frame_to_send(zmq::message_t frame) {
#if defined(TESSERA_TSAN)
  if (frame.size() > (std::size_t{256} << 20)) return frame;
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  zmq::message_t copy(frame.size());
  std::memcpy(copy.data(), frame.data(), frame.size());
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  return copy;
#else
  return frame;
#endif
}

void free_block_frame(void* data, void* hint) { free_host_block(data, reinterpret_cast<std::size_t>(hint)); }

std::size_t chunk_bytes(std::size_t size) {
  if (size <= kStreamChunkBytes * kStreamMaxChunks) return kStreamChunkBytes;
  const std::size_t c = (size + kStreamMaxChunks - 1) / kStreamMaxChunks;
  return (c + kChunkStep - 1) / kChunkStep * kChunkStep;
}

}  // namespace

std::optional<ChunkedFrames> split_for_streaming(std::vector<zmq::message_t>* frames) {
  std::vector<uint32_t> indices;
  for (std::size_t i = 0; i < frames->size(); ++i) {
    if ((*frames)[i].size() >= kStreamMinBytes) indices.push_back(static_cast<uint32_t>(i));
  }
  if (indices.empty()) return std::nullopt;
  ChunkedFrames s;
  s.descriptor = zmq::message_t(indices.size() * kEntryBytes);
  auto* d = static_cast<unsigned char*>(s.descriptor.data());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    zmq::message_t& frame = (*frames)[indices[k]];
    const std::size_t size = frame.size();
    put_le(d + k * kEntryBytes, indices[k], 4);
    put_le(d + k * kEntryBytes + 4, size, 8);
    auto* shared = new SharedFrame();
    shared->frame = frame_to_send(std::move(frame));
    frame = zmq::message_t();
    const std::size_t step = chunk_bytes(size);
    const std::size_t n = (size + step - 1) / step;
    // Published before any chunk exists: libzmq hands chunks to its own threads through atomics a
    // thread sanitizer cannot see, and the release here pairs with the chunks' acq_rel decrements.
    shared->refs.store(n, std::memory_order_release);
    auto* base = static_cast<char*>(shared->frame.data());
    for (std::size_t off = 0; off < size; off += step) {
      s.chunks.emplace_back(base + off, std::min(step, size - off), &release_chunk, shared);
    }
  }
  return s;
}

StatusOr<Assembly> Assembly::start(const zmq::message_t& descriptor, std::vector<zmq::message_t> frames,
                                   int64_t max_total_bytes) {
  const std::size_t n = descriptor.size() / kEntryBytes;
  if (descriptor.size() == 0 || descriptor.size() % kEntryBytes != 0 || n > frames.size()) {
    return errors::invalid_argument("a streamed message's descriptor of {} bytes does not describe its {} frames",
                                    descriptor.size(), frames.size());
  }
  const auto* d = static_cast<const unsigned char*>(descriptor.data());
  Assembly a;
  uint64_t total = 0;
  for (const zmq::message_t& f : frames) total += f.size();
  std::vector<std::pair<std::size_t, uint64_t>> entries;
  for (std::size_t k = 0; k < n; ++k) {
    const uint64_t index = get_le(d + k * kEntryBytes, 4);
    const uint64_t size = get_le(d + k * kEntryBytes + 4, 8);
    if (index >= frames.size() || (!entries.empty() && index <= entries.back().first)) {
      return errors::invalid_argument("a streamed message names frame {} of {} out of order", index, frames.size());
    }
    if (frames[index].size() != 0 || size == 0) {
      return errors::invalid_argument("a streamed message's frame {} is not an empty placeholder for {} bytes", index,
                                      size);
    }
    if (size > (uint64_t{1} << 62) - total) {
      return errors::invalid_argument("a streamed message declares frames of more than 2^62 bytes");
    }
    total += size;
    entries.emplace_back(static_cast<std::size_t>(index), size);
  }
  if (max_total_bytes >= 0 && total > static_cast<uint64_t>(max_total_bytes)) {
    return errors::resource_exhausted("message of {} bytes exceeds the limit of {} bytes", total, max_total_bytes);
  }
  for (const auto& [index, size] : entries) {
    void* block = allocate_host_block(size);
    if (block == nullptr) return errors::resource_exhausted("could not allocate {} bytes for a received frame", size);
    frames[index] = zmq::message_t(block, size, &free_block_frame, reinterpret_cast<void*>(size));
    a.streamed_.push_back(index);
    a.missing_ += size;
  }
  a.frames_ = std::move(frames);
  a.last_progress_ = Clock::now();
  return a;
}

Status Assembly::add(const zmq::message_t& chunk) {
  if (complete()) return errors::invalid_argument("a chunk of {} bytes after the streamed message was complete", chunk.size());
  zmq::message_t& frame = frames_[streamed_[current_]];
  const std::size_t left = frame.size() - filled_;
  if (chunk.size() == 0 || chunk.size() > left) {
    return errors::invalid_argument("a chunk of {} bytes where frame {} lacks {}", chunk.size(), streamed_[current_],
                                    left);
  }
  copy_chunk(static_cast<char*>(frame.data()) + filled_, chunk.data(), chunk.size());
  filled_ += chunk.size();
  missing_ -= chunk.size();
  if (filled_ == frame.size()) {
    ++current_;
    filled_ = 0;
  }
  last_progress_ = Clock::now();
  return Status();
}

}  // namespace tessera::internal
