#include "thread_pool.h"

namespace ckfmt {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen || !tasks_.empty(); });
    if (stop_) return;
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      continue;  // a ParallelFor meanwhile is not stuck: its caller runs items too
    }
    seen = generation_;
    while (job_ && next_ < total_) {
      size_t i = next_++;
      const auto* job = job_;
      lock.unlock();
      (*job)(i);
      lock.lock();
      if (++finished_ == total_) done_cv_.notify_all();
    }
  }
}

void ThreadPool::Submit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || workers_.empty()) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  next_ = 0;
  total_ = n;
  finished_ = 0;
  ++generation_;
  cv_.notify_all();
  while (next_ < total_) {
    size_t i = next_++;
    lock.unlock();
    fn(i);
    lock.lock();
    ++finished_;
  }
  done_cv_.wait(lock, [&] { return finished_ == total_; });
  job_ = nullptr;
}

}  // namespace ckfmt
