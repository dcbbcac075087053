#include "ckfmt/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ckfmt {
namespace {

std::mutex g_mu;
LogSink g_sink;

void DefaultSink(LogLevel level, const std::string& message) {
  static const bool info = [] {
    const char* e = std::getenv("CKFMT_LOG");
    return e && std::strcmp(e, "info") == 0;
  }();
  if (level == LogLevel::kInfo && !info) return;
  const char* tag = level == LogLevel::kInfo ? "info" : level == LogLevel::kWarning ? "warning" : "error";
  std::fprintf(stderr, "ckfmt %s: %s\n", tag, message.c_str());
}

}  // namespace

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = std::move(sink);
}

void Log(LogLevel level, const std::string& message) {
  LogSink sink;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    sink = g_sink;
  }
  if (sink) {
    sink(level, message);
  } else {
    DefaultSink(level, message);
  }
}

}  // namespace ckfmt
