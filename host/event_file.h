// TFRecord framing, the container of TensorFlow's event files (Note [Event files] in
// host/summary_writer.cc): each record is its length, a checksum of the length, the bytes and a
// checksum of the bytes, so a reader can tell a torn or corrupted record from a good one.
//
//   std::string file;
//   append_tfrecord(file, event.SerializeAsString());
//   auto records = read_tfrecords(path);   // StatusOr<std::vector<std::string>>: DataLoss if torn
//
// Pure functions (read_tfrecords reads a file): thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::internal {

// TFRecord's masked CRC-32C: ((c >> 15) | (c << 17)) + 0xa282ead8, in uint32 arithmetic. The mask
// keeps a CRC stored inside data that is itself checksummed from being the CRC of that data.
uint32_t mask_crc(uint32_t crc);
uint32_t unmask_crc(uint32_t masked);

// The bytes of one record holding `data`:
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data |
//   uint32 masked CRC-32C of data            (all integers little-endian)
inline constexpr std::size_t kTfRecordOverhead = 8 + 4 + 4;
void append_tfrecord(std::string& out, std::string_view data);
std::string tfrecord(std::string_view data);

// The records of `bytes`, every checksum and length checked: a record whose length checksum or data
// checksum does not match, or that the bytes end inside of, is DataLossError naming `what` and the
// record's offset.
StatusOr<std::vector<std::string>> parse_tfrecords(std::string_view bytes, std::string_view what);
// parse_tfrecords of the file at `path` (a regular file of at most 1 GiB; else the errors of
// core/file_util.h's read_small_file).
StatusOr<std::vector<std::string>> read_tfrecords(const std::string& path);

}  // namespace tessera::internal
