#include "core/logging.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace tessera::internal {

// Note [Logging]
// ~~~~~~~~~~~~~~
// Every diagnostic the library prints goes through TESSERA_LOG (TESSERA_CHECK's abort message
// excepted: core/status.h says why). What it promises:
//
// * Levels debug < info < warning < error, and off. The threshold is TESSERA_LOG_LEVEL, by name
//   or by TF_CPP_MIN_LOG_LEVEL's numbers (0 info, 1 warning, 2 error, 3 off), so a TensorFlow
//   user's habit carries over; debug, which TensorFlow has no number for (VLOG), has only its
//   name. Default info: the lines tessera prints today (soft placement, a CUDA build without a
//   GPU, refused connections) are ones a user wants to see.
// * Filtered messages cost nothing worth measuring: the macro tests the level (one relaxed load)
//   before its arguments are evaluated or anything is formatted.
// * A message is written with one write(2) of all its lines, under a mutex, so lines of threads
//   never interleave (and a pipe reader sees whole lines: write(2) on a pipe is atomic up to
//   PIPE_BUF). write(2), not stdio: no buffer to flush before an abort, and gtest's
//   CaptureStderr (which redirects fd 2) sees it.
// * The text is "tessera: " + the message, each line of it; the level is not printed, so the
//   lines read as they did before this facility (tests and users match them). A message says
//   "warning: " itself where the word matters to the reader.
// * The mutex and the sink are never destroyed: allocators log from static destructors at exit.
namespace log_detail {
std::atomic<int> threshold{-1};
}  // namespace log_detail

namespace {

constexpr LogLevel kDefaultLevel = LogLevel::kInfo;

struct LogState {
  std::mutex mu;
  LogSink sink;  // guarded by mu; empty: stderr
};

LogState& state() {
  static LogState* s = new LogState();  // never destroyed (Note [Logging])
  return *s;
}

void write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report it
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  const std::string s = lower(text);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warning" || s == "warn") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  // TF_CPP_MIN_LOG_LEVEL's numbers: how many levels above info to drop.
  if (s == "0") return LogLevel::kInfo;
  if (s == "1") return LogLevel::kWarning;
  if (s == "2") return LogLevel::kError;
  if (s == "3") return LogLevel::kOff;
  return std::nullopt;
}

LogLevel log_level() {
  int t = log_detail::threshold.load(std::memory_order_relaxed);
  if (t < 0) t = log_detail::read_threshold_once();
  return static_cast<LogLevel>(t);
}

void set_log_level(LogLevel level) {
  log_detail::threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel reset_log_level_from_env() {
  const char* value = std::getenv("TESSERA_LOG_LEVEL");
  const std::string_view text = value == nullptr ? std::string_view() : std::string_view(value);
  const std::optional<LogLevel> parsed = parse_log_level(text);
  const LogLevel level = parsed.value_or(kDefaultLevel);
  // Stored before the report below, which asks log_enabled: no second read, no recursion.
  set_log_level(level);
  if (!parsed && !text.empty()) {
    TESSERA_LOG(kWarning,
                "ignoring TESSERA_LOG_LEVEL='{}': expected debug, info, warning, error, off or 0..3 "
                "(TF_CPP_MIN_LOG_LEVEL's numbers); using {}",
                text, log_level_name(level));
  }
  return level;
}

int log_detail::read_threshold_once() {
  static std::once_flag once;
  std::call_once(once, [] { reset_log_level_from_env(); });
  return threshold.load(std::memory_order_relaxed);
}

void log_message(LogLevel level, std::string_view message) {
  if (level == LogLevel::kOff || !log_enabled(level)) return;
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  constexpr std::string_view kPrefix = "tessera: ";
  std::string text;
  text.reserve(message.size() + kPrefix.size() + 1);
  for (;;) {
    const std::size_t end = message.find('\n');
    text += kPrefix;
    text += message.substr(0, end);
    text += '\n';
    if (end == std::string_view::npos) break;
    message.remove_prefix(end + 1);
  }
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sink) {
    s.sink(level, text);
  } else {
    write_all(STDERR_FILENO, text.data(), text.size());
  }
}

LogSink set_log_sink(LogSink sink) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, sink);
  return sink;
}

bool LogRateLimit::admit(Clock::time_point now, uint64_t* skipped) {
  std::lock_guard<std::mutex> lock(mu_);
  if (written_ == 0 || now - window_start_ >= window_) {
    window_start_ = now;
    written_ = 0;
  }
  if (written_ >= burst_) {
    ++skipped_;
    return false;
  }
  ++written_;
  *skipped = skipped_;
  skipped_ = 0;
  return true;
}

}  // namespace tessera::internal
