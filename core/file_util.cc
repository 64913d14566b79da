#include "core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tessera::internal {

Status file_error(int err, std::string_view what, const std::string& path) {
  const std::string message = fmt::format("cannot {} {}: {}", what, quoted_prefix(path), std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return errors::not_found("{}", message);
    case EACCES:
    case EPERM:
    case EROFS:
      return Status(ErrorCode::kPermissionDenied, message);
    case EEXIST:
      return errors::already_exists("{}", message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return errors::resource_exhausted("{}", message);
    default:
      return errors::internal("{}", message);
  }
}

StatusOr<std::string> read_small_file(const std::string& path, std::string_view kind, std::size_t limit,
                                      struct stat* st) {
  struct stat local {};
  if (st == nullptr) st = &local;
  const std::string shown = quoted_prefix(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return errors::not_found("{} {} does not exist", kind, shown);
    return file_error(err, fmt::format("read the {}", kind), path);
  }
  std::string text;
  Status status;
  if (::fstat(fd, st) != 0) {
    status = file_error(errno, fmt::format("read the {}", kind), path);
  } else if (S_ISDIR(st->st_mode)) {
    status = errors::invalid_argument("{} {} is a directory, not a file", kind, shown);
  } else if (!S_ISREG(st->st_mode)) {
    status = errors::invalid_argument("{} {} is not a regular file", kind, shown);
  } else if (static_cast<std::size_t>(st->st_size) > limit) {
    status = errors::invalid_argument("{} {} is too large ({} bytes; at most {})", kind, shown, st->st_size, limit);
  } else {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        status = file_error(errno, fmt::format("read the {}", kind), path);
        break;
      }
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > limit) {
        status = errors::invalid_argument("{} {} is too large (more than {} bytes)", kind, shown, limit);
        break;
      }
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

namespace {
struct TooDeep {};
}  // namespace

StatusOr<nlohmann::json> parse_json_bounded(std::string_view text, std::string_view what, int max_depth) {
  nlohmann::json::parser_callback_t bound = [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth) throw TooDeep{};
    return true;
  };
  try {
    nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
    if (j.is_discarded()) return errors::invalid_argument("{} is not valid JSON", what);
    return j;
  } catch (const TooDeep&) {
    return errors::invalid_argument("{} nests deeper than {} levels", what, max_depth);
  }
}

std::string quoted_prefix(std::string_view s, std::size_t max) {
  if (s.size() <= max) return fmt::format("'{}'", s);
  return fmt::format("'{}...' ({} characters)", s.substr(0, max), s.size());
}

}  // namespace tessera::internal
