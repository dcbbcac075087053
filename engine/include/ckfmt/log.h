// Logging hook. By default warnings go to stderr and info is dropped unless
// the environment sets CKFMT_LOG=info. A trainer installs its own sink.
#pragma once

#include <functional>
#include <string>

namespace ckfmt {

enum class LogLevel { kInfo, kWarning, kError };
using LogSink = std::function<void(LogLevel, const std::string&)>;

// Replaces the process-wide sink; an empty function restores the default.
void SetLogSink(LogSink sink);
void Log(LogLevel level, const std::string& message);

}  // namespace ckfmt
