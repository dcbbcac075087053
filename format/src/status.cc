#include "ckfmt/status.h"

#include <cstring>

namespace ckfmt {

std::string_view CitedSpecRule(std::string_view message) {
  if (!message.ends_with(']')) return {};
  const size_t at = message.rfind(kSpecRuleOpen);
  if (at == std::string_view::npos) return {};
  const size_t begin = at + kSpecRuleOpen.size();
  const std::string_view rule = message.substr(begin, message.size() - 1 - begin);
  return rule.find_first_of(" []") == std::string_view::npos ? rule : std::string_view{};
}

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
