// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum of checkpoint
// files (Note [Checkpoint format] in host/saver.cc). The same function as TensorFlow's
// tsl::crc32c::Value, iSCSI and ext4, so a checkpoint's sums can be checked with common tools.
//
//   uint32_t sum = crc32c::value(data, size);
//   sum = crc32c::extend(sum, more, more_size);   // == value(data ++ more)
//
// Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::internal::crc32c {

// The CRC-32C of data[0, n) continued from `crc`, the CRC-32C of what came before.
uint32_t extend(uint32_t crc, const void* data, std::size_t n);
inline uint32_t value(const void* data, std::size_t n) { return extend(0, data, n); }

}  // namespace tessera::internal::crc32c
