#include "io/sync_behind.h"

#include <unistd.h>

#include <cerrno>

namespace ckfmt {

SyncBehind::SyncBehind(const File& file, uint64_t step)
    : file_(file), step_(step), thread_([this] { Run(); }) {}

void SyncBehind::Written(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  unsynced_ += bytes;
  if (unsynced_ >= step_) cv_.notify_one();
}

void SyncBehind::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || unsynced_ >= step_; });
    if (stop_) return;
    unsynced_ = 0;
    lock.unlock();
    const int rc = ::fdatasync(file_.fd());
    const int err = errno;
    lock.lock();
    ++syncs_;
    if (rc != 0 && error_.ok()) {
      error_ = Status::FromErrno(err, "fdatasync of " + file_.path() + " during the save");
    }
  }
}

Status SyncBehind::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

uint64_t SyncBehind::syncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_;
}

}  // namespace ckfmt
