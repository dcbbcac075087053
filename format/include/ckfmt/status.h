// Status and Result<T>: the one error type used across ckfmt.
//
// A Status is either OK or carries a code and a message. Messages name the
// file, the key and what was expected versus found; callers add context with
// WithContext() as an error travels up.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckfmt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something unusable
  kIOError,          // the operating system refused (open, read, write, ...)
  kCorruption,       // the file violates the format or fails a checksum
  kUnsupported,      // a valid file using a feature this build lacks
  kMismatch,         // file and caller's state dict disagree (shape, dtype, kind)
  kNotFound,         // a requested key or file does not exist
  kMissingKeys,      // caller's entries that the file lacks (load policy: error)
  kUnexpectedKeys,   // file's entries that the caller lacks (load policy: error)
  kAborted,          // cancelled, or a previous failure poisoned the operation
  kInternal,         // a bug in ckfmt
};

const char* StatusCodeName(StatusCode code);

// " [FORMAT.md R]": ends the message of an error caused by a file that
// breaks rule R of spec/FORMAT.md, so whoever wrote the file can look it up.
inline constexpr std::string_view kSpecRuleOpen = " [FORMAT.md ";
inline std::string SpecRule(const char* rule) {
  return std::string(kSpecRuleOpen) + rule + "]";
}

// The rule a message ending in SpecRule() cites ("C3"), or "" if none.
std::string_view CitedSpecRule(std::string_view message);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status Mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  // An IOError whose message ends with strerror(err).
  static Status FromErrno(int err, const std::string& what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prefixes the message ("context: message"); OK stays OK.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ckfmt

#define CKFMT_CONCAT_INNER(a, b) a##b
#define CKFMT_CONCAT(a, b) CKFMT_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if it is not OK.
#define CKFMT_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::ckfmt::Status _st = (expr);              \
    if (!_st.ok()) return _st;                 \
  } while (0)

#define CKFMT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// lhs = value of a Result expression, or return its Status.
#define CKFMT_ASSIGN_OR_RETURN(lhs, expr) \
  CKFMT_ASSIGN_OR_RETURN_IMPL(CKFMT_CONCAT(_res_, __LINE__), lhs, expr)
