#include "ckfmt/status.h"

#include <cstring>

namespace ckfmt {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kMismatch: return "Mismatch";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kMissingKeys: return "MissingKeys";
    case StatusCode::kUnexpectedKeys: return "UnexpectedKeys";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, const std::string& what) {
  return IOError(what + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace ckfmt
