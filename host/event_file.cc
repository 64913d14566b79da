// TFRecord framing (host/event_file.h).
#include "host/event_file.h"

#include <fmt/format.h>

#include "core/crc32c.h"
#include "core/file_util.h"
#include "host/little_endian.h"

namespace tessera::internal {

namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;
// Event files of long runs grow to hundreds of MB; a reader holds the whole file, so bound it.
constexpr std::size_t kMaxRecordFileBytes = std::size_t{1} << 30;

}  // namespace

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask_crc(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

void append_tfrecord(std::string& out, std::string_view data) {
  out.reserve(out.size() + data.size() + kTfRecordOverhead);
  const std::size_t header = out.size();
  put_u64(out, data.size());
  put_u32(out, mask_crc(crc32c::value(out.data() + header, 8)));
  out.append(data);
  put_u32(out, mask_crc(crc32c::value(data.data(), data.size())));
}

std::string tfrecord(std::string_view data) {
  std::string out;
  append_tfrecord(out, data);
  return out;
}

StatusOr<std::vector<std::string>> parse_tfrecords(std::string_view bytes, std::string_view what) {
  std::vector<std::string> records;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t left = bytes.size() - pos;
    if (left < 12) {
      return errorf(ErrorCode::kDataLoss, "{}: truncated record header at offset {} ({} of 12 bytes)", what, pos,
                    left);
    }
    const char* p = bytes.data() + pos;
    if (unmask_crc(get_u32(p + 8)) != crc32c::value(p, 8)) {
      return errorf(ErrorCode::kDataLoss, "{}: corrupted record length at offset {} (checksum mismatch)", what,
                    pos);
    }
    const uint64_t length = get_u64(p);
    if (length > left - 12 || left - 12 - length < 4) {
      return errorf(ErrorCode::kDataLoss, "{}: truncated record at offset {} ({} data bytes; {} bytes left)", what,
                    pos, length, left - 12);
    }
    const char* data = p + 12;
    if (unmask_crc(get_u32(data + length)) != crc32c::value(data, length)) {
      return errorf(ErrorCode::kDataLoss, "{}: corrupted record at offset {} (data checksum mismatch)", what, pos);
    }
    records.emplace_back(data, length);
    pos += 12 + length + 4;
  }
  return records;
}

StatusOr<std::vector<std::string>> read_tfrecords(const std::string& path) {
  auto bytes = read_small_file(path, "record file", kMaxRecordFileBytes);
  if (!bytes.ok()) return bytes.status();
  return parse_tfrecords(bytes.value(), fmt::format("record file '{}'", path));
}

}  // namespace tessera::internal
