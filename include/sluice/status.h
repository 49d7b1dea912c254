#pragma once
// Public API. Status and Result<T>: how sluice reports expected failures (a malformed config, a
// missing or truncated file, EIO, ENOSPC, a bad checksum, an exception from a user's model)
// everywhere, the public calls of include/sluice/ included: they return a Status or Result and
// never throw. Bugs are checks (sluice/check.h), which abort.
//
// Thread safety: values; a Status or Result may be copied and read from any thread.

#include <string>
#include <utility>
#include <variant>

#include "sluice/check.h"

namespace sluice {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (bad config value, bad id)
  kNotFound,         // a file, key or field that must exist does not
  kCorruption,       // on-disk data contradicts its manifest (size, checksum, offsets)
  kIoError,          // the OS failed an io (EIO, ENOSPC, ...)
  kUnavailable,      // a facility is missing here (io_uring, O_DIRECT)
  kOutOfRange,       // an id or offset past the end
  kFailedPrecondition,
  kAborted,          // shut down on request (Ctrl-C, a queue aborted)
};

const char* StatusCodeName(StatusCode code);

// A value type: Ok, or a code with a one-line message saying what, where and why.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
    SLUICE_CHECK(code != StatusCode::kOk || message_.empty(), "an Ok status carries no message");
    SLUICE_CHECK(code == StatusCode::kOk || !message_.empty(), "an error needs a message");
  }
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "IoError: read /x/y offset 4096 length 512: Input/output error"
  std::string ToString() const;
  // Returns a copy with "context: " prepended to the message; Ok stays Ok.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

// Builds the Status for a failed syscall: "<what>: <strerror(errnum)>", IoError unless errnum
// is ENOENT (NotFound).
Status ErrnoStatus(const std::string& what, int errnum);

// A T or an error Status. Accessing the value of an error is a bug (checked).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    SLUICE_CHECK(!std::get<Status>(v_).ok(), "a Result holds a value or an error, not Ok");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & {
    SLUICE_CHECK(ok(), "value() of an error Result: %s", std::get<Status>(v_).ToString().c_str());
    return std::get<T>(v_);
  }
  T&& value() && {
    SLUICE_CHECK(ok(), "value() of an error Result: %s", std::get<Status>(v_).ToString().c_str());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER(a, b) a##b
#define SLUICE_CONCAT(a, b) SLUICE_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not ok.
#define SLUICE_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::sluice::Status _sluice_s = (expr);        \
    if (!_sluice_s.ok()) return _sluice_s;      \
  } while (0)

// `SLUICE_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL(SLUICE_CONCAT(_sluice_r, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
