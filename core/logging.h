// The library's diagnostics: one facility with levels, each message one or more lines on stderr
// that start with "tessera: ", written whole. See Note [Logging] in logging.cc.
//
//   TESSERA_LOG(kWarning, "allocator {} destroyed with {} allocations still in use", name, n);
//   TESSERA_LOG(kInfo, "soft placement: {}", line);
//
// The threshold comes from TESSERA_LOG_LEVEL, read once, when the first message is considered:
//   debug | info | warning (or warn) | error | off   any case; info is the default
//   0 | 1 | 2 | 3                                      TF_CPP_MIN_LOG_LEVEL's meaning: 0 shows info
//                                                      and up, 1 warning and up, 2 errors only, 3
//                                                      nothing (debug has a name, no number)
// An empty value is the default; any other value is reported once (at warning) and the default
// used. A message below the threshold costs one relaxed atomic load: TESSERA_LOG neither formats
// it nor evaluates its arguments.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace tessera::internal {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

// "debug", "info", "warning", "error", "off".
const char* log_level_name(LogLevel level);

// A TESSERA_LOG_LEVEL value (see above); nullopt when it is none of them (including empty).
std::optional<LogLevel> parse_log_level(std::string_view text);

// The threshold now: messages of a lower level are dropped.
LogLevel log_level();
// Replaces the threshold (a program or test that knows better than the environment). Thread-safe.
void set_log_level(LogLevel level);
// Reads TESSERA_LOG_LEVEL again and sets the threshold from it, reporting a malformed value (at
// warning) as the first read does; returns the new threshold. For tests.
LogLevel reset_log_level_from_env();

namespace log_detail {
// The threshold as an int; -1 until TESSERA_LOG_LEVEL has been read.
extern std::atomic<int> threshold;
int read_threshold_once();
}  // namespace log_detail

inline bool log_enabled(LogLevel level) {
  int t = log_detail::threshold.load(std::memory_order_relaxed);
  if (t < 0) [[unlikely]] t = log_detail::read_threshold_once();
  return static_cast<int>(level) >= t;
}

// Writes `message` at `level` unless the threshold drops it: each of its lines (a trailing newline
// is dropped) prefixed "tessera: ", all of them with one write, so messages from threads never
// interleave. Thread-safe; safe in static destructors.
void log_message(LogLevel level, std::string_view message);

template <class... Args>
void log_format(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  log_message(level, fmt::format(f, std::forward<Args>(args)...));
}

// Where written messages go instead of stderr: called with the level and the text exactly as it
// would be written (prefixes and final newline included), one message at a time, under the
// facility's lock (so it must not log). nullptr restores stderr. Returns the previous sink. For
// tests.
using LogSink = std::function<void(LogLevel level, std::string_view text)>;
LogSink set_log_sink(LogSink sink);

// A bound on how often one kind of event is logged (refused connections, soft placements): at
// most `burst` messages per `window`; the others are counted, and the next message written says
// how many were skipped. Events that anyone can cause by the thousand (a peer with fresh keys,
// sessions that each place around a missing device) then cost a few lines. Thread-safe.
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogRateLimit(Clock::duration window = std::chrono::seconds(10), int burst = 5)
      : window_(window), burst_(burst) {}
  // Whether a message may be written at `now`; when it may, *skipped receives (and the limit
  // forgets) the count of messages dropped since the last one written.
  bool admit(Clock::time_point now, uint64_t* skipped);
  bool admit(uint64_t* skipped) { return admit(Clock::now(), skipped); }

 private:
  const Clock::duration window_;
  const int burst_;
  std::mutex mu_;
  Clock::time_point window_start_{};  // guarded by mu_
  int written_ = 0;                   // guarded by mu_: in the current window
  uint64_t skipped_ = 0;              // guarded by mu_: since the last message written
};

// log_format through `limit`: the message, with " (N more like it skipped)" when some were.
template <class... Args>
void log_limited(LogRateLimit& limit, LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (!log_enabled(level)) return;
  uint64_t skipped = 0;
  if (!limit.admit(&skipped)) return;
  std::string message = fmt::format(f, std::forward<Args>(args)...);
  if (skipped > 0) message += fmt::format(" ({} more like it skipped)", skipped);
  log_message(level, message);
}

}  // namespace tessera::internal

// TESSERA_LOG(kInfo | kWarning | kError | kDebug, fmt format string, args...).
#define TESSERA_LOG(level, ...)                                                                  \
  do {                                                                                           \
    if (::tessera::internal::log_enabled(::tessera::internal::LogLevel::level)) {                \
      ::tessera::internal::log_format(::tessera::internal::LogLevel::level, __VA_ARGS__);       \
    }                                                                                            \
  } while (0)
