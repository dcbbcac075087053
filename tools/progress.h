// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ckfmt::tools {

bool StderrIsTerminal();

class ProgressBar {
 public:
  // Draws nothing unless `enabled`.
  ProgressBar(std::string label, bool enabled);
  ~ProgressBar();  // clears the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Thread-safe; redraws at most ~10 times a second.
  void Update(uint64_t done, uint64_t total);
  // Erases the bar (idempotent).
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace ckfmt::tools
