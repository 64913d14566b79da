// Status and StatusOr: the error currency inside tessera (kernels, executor, services). The public
// edge converts a failed Status into the matching typed tessera::Error with raise().
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/logging.h"  // code that reports errors can log them (as TensorFlow's status.h does)
#include "tessera/errors.h"

namespace tessera {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message);
  static Status ok_status() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  ErrorCode code() const { return state_ ? state_->code : ErrorCode::kOk; }
  const std::string& message() const;
  std::string to_string() const;  // "OK" or "InvalidArgument: ..."
  // Throws the matching tessera::Error; does nothing when OK.
  void raise() const;
  // A copy whose message is `prefix` + message.
  Status with_prefix(const std::string& prefix) const;
  void ignore() const {}

 private:
  struct State {
    ErrorCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null = OK; shared so copies are cheap across threads
};

// Builds a status from the exception in flight (a tessera::Error keeps its code; anything else is
// kInternal). Call only inside a catch block.
Status status_from_current_exception();

template <class... Args>
Status errorf(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#define TESSERA_ERROR_HELPER(fn, code)                                        \
  template <class... Args>                                                   \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {                 \
    return Status(code, fmt::format(f, std::forward<Args>(args)...));        \
  }
namespace errors {
TESSERA_ERROR_HELPER(invalid_argument, ErrorCode::kInvalidArgument)
TESSERA_ERROR_HELPER(not_found, ErrorCode::kNotFound)
TESSERA_ERROR_HELPER(failed_precondition, ErrorCode::kFailedPrecondition)
TESSERA_ERROR_HELPER(out_of_range, ErrorCode::kOutOfRange)
TESSERA_ERROR_HELPER(cancelled, ErrorCode::kCancelled)
TESSERA_ERROR_HELPER(internal, ErrorCode::kInternal)
TESSERA_ERROR_HELPER(unimplemented, ErrorCode::kUnimplemented)
TESSERA_ERROR_HELPER(deadline_exceeded, ErrorCode::kDeadlineExceeded)
TESSERA_ERROR_HELPER(resource_exhausted, ErrorCode::kResourceExhausted)
TESSERA_ERROR_HELPER(unavailable, ErrorCode::kUnavailable)
TESSERA_ERROR_HELPER(already_exists, ErrorCode::kAlreadyExists)
TESSERA_ERROR_HELPER(aborted, ErrorCode::kAborted)
}  // namespace errors
#undef TESSERA_ERROR_HELPER

template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status(ErrorCode::kInternal, "StatusOr built from an OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& value() const& { return *value_; }
  // The value, or throws the typed error.
  T value_or_raise() && {
    status_.raise();
    return std::move(*value_);
  }

 private:
  Status status_;
  std::optional<T> value_;
};

#define TESSERA_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::tessera::Status _st = (expr);              \
    if (!_st.ok()) return _st;                   \
  } while (0)

// Internal invariant: aborts with file, line and message when violated (a bug, not bad input).
// A raw write, not TESSERA_LOG (Note [Logging]): the reason for an abort must show at any
// TESSERA_LOG_LEVEL, and must not wait for the facility's lock, which a failing check inside a
// log sink would hold.
#define TESSERA_CHECK(cond)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: TESSERA_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

}  // namespace tessera
