// Typed errors of the public API.
//
//   try {
//     session.run(dequeued);
//   } catch (const tessera::OutOfRangeError& e) {   // the queue is closed and drained
//     ...
//   } catch (const tessera::Error& e) {
//     std::cerr << e.code() << ": " << e.what();
//   }
//
// Every error a public call raises derives from tessera::Error and carries one of TensorFlow's status
// codes; the message names the op (node) involved. Error objects are immutable and safe to share.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessera {

// TensorFlow's status codes, with the same numeric values (they cross the wire as integers).
enum class ErrorCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "InvalidArgument", "OutOfRange", ...
std::string_view error_code_name(ErrorCode code);
std::ostream& operator<<(std::ostream& os, ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message);
  ErrorCode code() const noexcept { return code_; }
  // The message without the code prefix (what() is the same text).
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

#define TESSERA_DECLARE_ERROR(Name, Code)                                 \
  class Name : public Error {                                             \
   public:                                                                \
    explicit Name(const std::string& message) : Error(Code, message) {}   \
  };

TESSERA_DECLARE_ERROR(CancelledError, ErrorCode::kCancelled)
TESSERA_DECLARE_ERROR(UnknownError, ErrorCode::kUnknown)
TESSERA_DECLARE_ERROR(InvalidArgumentError, ErrorCode::kInvalidArgument)
TESSERA_DECLARE_ERROR(DeadlineExceededError, ErrorCode::kDeadlineExceeded)
TESSERA_DECLARE_ERROR(NotFoundError, ErrorCode::kNotFound)
TESSERA_DECLARE_ERROR(AlreadyExistsError, ErrorCode::kAlreadyExists)
TESSERA_DECLARE_ERROR(PermissionDeniedError, ErrorCode::kPermissionDenied)
TESSERA_DECLARE_ERROR(ResourceExhaustedError, ErrorCode::kResourceExhausted)
TESSERA_DECLARE_ERROR(FailedPreconditionError, ErrorCode::kFailedPrecondition)
TESSERA_DECLARE_ERROR(AbortedError, ErrorCode::kAborted)
TESSERA_DECLARE_ERROR(OutOfRangeError, ErrorCode::kOutOfRange)
TESSERA_DECLARE_ERROR(UnimplementedError, ErrorCode::kUnimplemented)
TESSERA_DECLARE_ERROR(InternalError, ErrorCode::kInternal)
TESSERA_DECLARE_ERROR(UnavailableError, ErrorCode::kUnavailable)
TESSERA_DECLARE_ERROR(DataLossError, ErrorCode::kDataLoss)
TESSERA_DECLARE_ERROR(UnauthenticatedError, ErrorCode::kUnauthenticated)

#undef TESSERA_DECLARE_ERROR

// Throws the subclass of Error that matches `code` (Error itself for kUnknown-like codes without
// a subclass). `code` must not be kOk.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace tessera
