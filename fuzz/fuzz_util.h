// Shared by the fuzz targets (fuzz/*_fuzzer.cc) and the seed generator (fuzz/gen_corpus.cc): the
// property check, protobuf's log silenced, the graph that graph_decode extends, and the input
// layout of wire_tensor.
//
// A target's contract: on any input it returns normally. Errors the library is documented to give
// for bad input (an error Status, a tessera::Error exception) are caught in the target; anything
// else (another exception, an abort, a sanitizer report, a FUZZ_CHECK) is a crash: a bug to fix in
// the library, whose input then joins fuzz/corpus/<target>/ and a unit test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "core/status.h"
#include "tessera/tessera.h"

// A property of the library that must hold whatever the input (round trips, documented
// postconditions). TESSERA_CHECK's abort, which libFuzzer reports as a crash with its input.
#define FUZZ_CHECK(cond) TESSERA_CHECK(cond)

namespace tessera::fuzz {

// protobuf logs every string field that is not UTF-8 (and more) at ERROR: silenced for the process.
inline void quiet_protobuf() {
  static auto* silencer = new google::protobuf::LogSilencer;  // never destroyed: stays silent
  (void)silencer;
}

// The graph a GraphDef may extend (ExtendSession): graph_decode decodes a def whose references
// leave it ("dangling input") again into a graph holding these nodes, which the seeds refer to.
inline constexpr const char* kBaseConst = "base/c";     // float32 [2]
inline constexpr const char* kBaseVariable = "base/v";  // float32 [2,2] variable
inline constexpr const char* kBaseQueue = "base/q";     // FIFOQueue of (int32 [2], float32 [])
struct BaseGraph {
  Output c;
  Variable v;
  FIFOQueue q;
};
inline BaseGraph build_base_graph(Graph& g) {
  return BaseGraph{ops::constant(g, Tensor::vector<float>({1, 2}), kBaseConst),
                   Variable(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), kBaseVariable),
                   FIFOQueue(g, 4, {DType::Int32, DType::Float32}, {Shape{2}, Shape{}}, "", kBaseQueue)};
}

// wire_tensor's input:
//   byte 0      flags: kSmallCap, kFill, and bits 2-4 an alignment exponent (frame_to_tensor's
//               required_alignment is 1 << those bits: 1..128)
//   bytes 1-2   n, little endian: the length of the TensorMeta (cut to what is left)
//   n bytes     a serialized TensorMeta
//   the rest    the frame's bytes
inline constexpr uint8_t kSmallCap = 1;  // max_bytes = kSmallCapBytes instead of the default
inline constexpr uint8_t kFill = 2;      // the frame is meta.byte_size long (at most kMaxFill),
                                         // the rest repeated; how tensors past the zero-copy
                                         // threshold are reached with short inputs
inline constexpr uint64_t kSmallCapBytes = 4096;
inline constexpr uint64_t kMaxFill = uint64_t{1} << 20;
inline std::string tensor_input(uint8_t flags, const std::string& meta, std::string_view frame) {
  std::string out;
  out.push_back(static_cast<char>(flags));
  out.push_back(static_cast<char>(meta.size() & 0xff));
  out.push_back(static_cast<char>((meta.size() >> 8) & 0xff));
  out += meta;
  out += frame;
  return out;
}

}  // namespace tessera::fuzz
