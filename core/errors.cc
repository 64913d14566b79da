#include "tessera/errors.h"

#include <fmt/format.h>

#include "core/status.h"

namespace tessera {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kCancelled: return "Cancelled";
    case ErrorCode::kUnknown: return "Unknown";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kDeadlineExceeded: return "DeadlineExceeded";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kAlreadyExists: return "AlreadyExists";
    case ErrorCode::kPermissionDenied: return "PermissionDenied";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kUnimplemented: return "Unimplemented";
    case ErrorCode::kInternal: return "Internal";
    case ErrorCode::kUnavailable: return "Unavailable";
    case ErrorCode::kDataLoss: return "DataLoss";
    case ErrorCode::kUnauthenticated: return "Unauthenticated";
  }
  return "Unknown";
}

std::ostream& operator<<(std::ostream& os, ErrorCode code) { return os << error_code_name(code); }

Error::Error(ErrorCode code, std::string message)
    : std::runtime_error(message), code_(code), message_(std::move(message)) {}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kCancelled: throw CancelledError(message);
    case ErrorCode::kInvalidArgument: throw InvalidArgumentError(message);
    case ErrorCode::kDeadlineExceeded: throw DeadlineExceededError(message);
    case ErrorCode::kNotFound: throw NotFoundError(message);
    case ErrorCode::kAlreadyExists: throw AlreadyExistsError(message);
    case ErrorCode::kPermissionDenied: throw PermissionDeniedError(message);
    case ErrorCode::kResourceExhausted: throw ResourceExhaustedError(message);
    case ErrorCode::kFailedPrecondition: throw FailedPreconditionError(message);
    case ErrorCode::kAborted: throw AbortedError(message);
    case ErrorCode::kOutOfRange: throw OutOfRangeError(message);
    case ErrorCode::kUnimplemented: throw UnimplementedError(message);
    case ErrorCode::kInternal: throw InternalError(message);
    case ErrorCode::kUnavailable: throw UnavailableError(message);
    case ErrorCode::kDataLoss: throw DataLossError(message);
    case ErrorCode::kUnauthenticated: throw UnauthenticatedError(message);
    case ErrorCode::kUnknown: throw UnknownError(message);
    case ErrorCode::kOk: break;
  }
  throw InternalError("throw_error called with code OK: " + message);
}

// ---- Status ----

Status::Status(ErrorCode code, std::string message) {
  if (code != ErrorCode::kOk) state_ = std::make_shared<const State>(State{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", error_code_name(code()), message());
}

void Status::raise() const {
  if (!ok()) throw_error(code(), message());
}

Status Status::with_prefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code(), prefix + message());
}

Status status_from_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return Status(e.code(), e.message());
  } catch (const std::bad_alloc& e) {
    return Status(ErrorCode::kResourceExhausted, std::string("out of memory: ") + e.what());
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, e.what());
  } catch (...) {
    return Status(ErrorCode::kUnknown, "unknown exception");
  }
}

}  // namespace tessera
