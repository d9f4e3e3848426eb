// Status and StatusOr<T>: every fallible call in the SDK returns one (leveldb style).
// No exception crosses a public header.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace shoal {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad flag, bad spec string, malformed input
  kNotFound = 2,         // missing file, unknown dataset
  kIoError = 3,          // read/write/socket failure
  kCorruption = 4,       // checksum or format mismatch in stored data
  kProtocol = 5,         // a peer violated the wire protocol
  kUnavailable = 6,      // peer unreachable, timed out
  kCancelled = 7,        // stopped on request
  kFailedPrecondition = 8,
  kInternal = 9,
  kPermissionDenied = 10,  // authentication or authorization refused (e.g. a key not on the allow-list)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status Protocol(std::string m) { return {StatusCode::kProtocol, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy with "context: " prepended to the message.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT
  StatusOr(T value) : v_(std::move(value)) {}                                                // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace shoal

#define SHOAL_STATUS_CONCAT_INNER(a, b) a##b
#define SHOAL_STATUS_CONCAT(a, b) SHOAL_STATUS_CONCAT_INNER(a, b)

#define SHOAL_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::shoal::Status _shoal_st = (expr);        \
    if (!_shoal_st.ok()) return _shoal_st;     \
  } while (0)

#define SHOAL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// SHOAL_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr());
#define SHOAL_ASSIGN_OR_RETURN(lhs, expr) \
  SHOAL_ASSIGN_OR_RETURN_IMPL(SHOAL_STATUS_CONCAT(_shoal_or_, __LINE__), lhs, expr)
