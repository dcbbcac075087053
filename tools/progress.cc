#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace ckfmt::tools {

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  if (frac > 1) frac = 1;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  double secs = std::chrono::duration<double>(now - start_).count();
  double mib = static_cast<double>(done) / (1 << 20);
  std::fprintf(stderr, "\r\033[K%s [%s] %5.1f%%  %.0f/%.0f MiB  %.0f MiB/s", label_.c_str(),
               bar.c_str(), frac * 100, mib, static_cast<double>(total) / (1 << 20),
               secs > 0 ? mib / secs : 0.0);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace ckfmt::tools
