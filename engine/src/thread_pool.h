// A fixed pool of worker threads for checksums and codecs.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckfmt {

class ThreadPool {
 public:
  // `threads` == 0: one per hardware thread. ParallelFor also runs work on
  // the calling thread, so the pool starts threads - 1 workers.
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, n) across the pool and the calling thread;
  // returns when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);
  // Queues fn to run on a worker and returns at once, for work the caller
  // overlaps with its own. REQUIRES: size() > 1, and whatever fn uses
  // outlives its run (the pool drops tasks still queued at destruction).
  void Submit(std::function<void()> fn);

 private:
  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> tasks_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t next_ = 0, total_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace ckfmt
