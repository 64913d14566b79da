// Reading small files that arrive as input (key files, cluster JSON, checkpoint indexes, caches):
// bounded in size, never blocking on a FIFO or a device, and JSON bounded in nesting depth.
//
//   auto text = read_small_file(path, "cluster file", 4 << 20);    // StatusOr<std::string>
//   auto json = parse_json_bounded(text.value(), "cluster file");  // StatusOr<nlohmann::json>
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tessera::internal {

// The error for a failed open/read/write of `path`, by errno: NotFound (ENOENT, ENOTDIR),
// PermissionDenied (EACCES, EPERM, EROFS), AlreadyExists, ResourceExhausted (ENOSPC, EDQUOT,
// EFBIG), else Internal. The message names `what` was done, the path and strerror.
Status file_error(int err, std::string_view what, const std::string& path);

// The whole of `path`, a regular file of at most `limit` bytes. It is opened without blocking
// (a FIFO or a device is refused, not waited on) and checked before anything is read:
// InvalidArgument for something that is not a regular file or is larger than `limit` (also when
// it grows past it while being read), file_error's errors otherwise. `kind` names the file in
// messages ("key file"). `st`, when given, receives the file's stat.
StatusOr<std::string> read_small_file(const std::string& path, std::string_view kind, std::size_t limit,
                                      struct stat* st = nullptr);

// JSON `text` parsed with at most `max_depth` levels of nesting (a file of a million '[' costs
// gigabytes as a document): InvalidArgument naming `what` otherwise, or when it is not JSON.
inline constexpr int kMaxJsonDepth = 64;
StatusOr<nlohmann::json> parse_json_bounded(std::string_view text, std::string_view what,
                                            int max_depth = kMaxJsonDepth);

// At most `max` characters of `s`, quoted, with its length when cut: for messages about input that
// may be huge.
std::string quoted_prefix(std::string_view s, std::size_t max = 200);

}  // namespace tessera::internal
