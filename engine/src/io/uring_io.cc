// The io_uring backend: staging buffers registered as fixed buffers, the
// file registered as a fixed file.
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckfmt/log.h"
#include "io/block_io.h"

#if defined(__SANITIZE_THREAD__)
#define CKFMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CKFMT_TSAN 1
#endif
#endif
#if defined(CKFMT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace ckfmt {
namespace {

// liburing maps and unmaps its rings with raw system calls, which
// ThreadSanitizer does not see: a ring mapped where another operation's
// ring was a moment before looked to it like one memory written by two
// threads without synchronization. The kernel orders a ring's unmap before
// a later map of its addresses; these tell ThreadSanitizer so (the release
// comes before the unmap, so that it precedes any such map).
#if defined(CKFMT_TSAN)
char ring_lifetimes;  // the synchronization object: its address only
void RingUnmapping() { __tsan_release(&ring_lifetimes); }
void RingMapped() { __tsan_acquire(&ring_lifetimes); }
#else
void RingUnmapping() {}
void RingMapped() {}
#endif

class UringIo final : public BlockIo {
 public:
  UringIo(const File& file, const std::vector<AlignedBuffer>& slots, size_t depth)
      : file_(file), slots_(slots), reqs_(std::max(depth, slots.size())) {}
  ~UringIo() override {
    if (!initialized_) return;
    while (in_flight_ > 0) (void)Wait();
    // The kernel tears a ring down later, on a worker, and a file
    // registered with it stays open until then: the unlinked temporary of a
    // save that ran out of space kept that space for ~20 ms after Save
    // returned, and a retry at once found the disk still full. Unregistering
    // lets go of the file now, and unpins the buffers (locked memory that
    // the next operation's registration is counted against).
    if (fixed_file_) (void)io_uring_unregister_files(&ring_);
    if (fixed_buffers_) (void)io_uring_unregister_buffers(&ring_);
    RingUnmapping();
    io_uring_queue_exit(&ring_);
  }

  // Returns an empty string on success, else why io_uring is unusable.
  std::string Init() {
    int rc = io_uring_queue_init(static_cast<unsigned>(std::max<size_t>(reqs_.size(), 2)), &ring_, 0);
    if (rc < 0) return std::string("io_uring_queue_init: ") + std::strerror(-rc);
    initialized_ = true;
    RingMapped();
    std::vector<iovec> iov;
    for (const auto& s : slots_) iov.push_back({s.data(), s.size()});
    fixed_buffers_ = io_uring_register_buffers(&ring_, iov.data(), iov.size()) == 0;
    int fd = file_.fd();
    fixed_file_ = io_uring_register_files(&ring_, &fd, 1) == 0;
    return "";
  }

  Status SubmitWrite(int slot, uint64_t offset, size_t len) override {
    reqs_[slot] = {true, slots_[slot].data(), slot, offset, len, 0};
    return Queue(slot);
  }
  Status SubmitRead(int slot, uint64_t offset, size_t len) override {
    reqs_[slot] = {false, slots_[slot].data(), slot, offset, len, 0};
    return Queue(slot);
  }
  Status SubmitReadTo(int tag, uint8_t* dst, uint64_t offset, size_t len) override {
    if (tag < 0 || static_cast<size_t>(tag) >= reqs_.size()) {
      return Status::Internal("read tag " + std::to_string(tag) + " out of range");
    }
    reqs_[tag] = {false, dst, BufferOf(dst, len), offset, len, 0};
    return Queue(tag);
  }

  Completion Wait() override {
    while (true) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // The ring itself failed; nothing more will complete.
        in_flight_ = 0;
        return {-1, Status::FromErrno(-rc, "io_uring_wait_cqe on " + file_.path())};
      }
      int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
      Req& r = reqs_[slot];
      const char* what = r.write ? "write to " : "read of ";
      // This engine cancels nothing, and a file read or write interrupted
      // before it moved a byte reports -EINTR: both mean the kernel dropped
      // the request, which is safe to queue again. io_uring cancels work
      // when it cannot start a worker thread for it, which a storm of
      // signals makes fail (its retries of the thread's creation give up).
      if ((res == -ECANCELED || res == -EINTR) && r.retries < kMaxRetries) {
        ++r.retries;
        if (Status s = Queue(slot); !s.ok()) return {slot, s};
        continue;
      }
      if (res < 0) {
        return {slot, Status::FromErrno(-res, what + file_.path() + " at offset " +
                                                  std::to_string(r.offset + r.done))};
      }
      if (res == 0) {
        return {slot, r.write ? Status::IOError("write to " + file_.path() + " made no progress")
                              : file_.UnexpectedEnd(r.offset + r.done)};
      }
      r.done += static_cast<size_t>(res);
      if (r.done == r.len) return {slot, Status::OK()};
      // Short transfer: queue the rest of the same request.
      if (Status s = Queue(slot); !s.ok()) return {slot, s};
    }
  }

  bool Ready() override { return io_uring_cq_ready(&ring_) > 0; }
  size_t in_flight() const override { return in_flight_; }
  bool transfers_at_submit() const override { return false; }
  std::string name() const override {
    std::string n = "io_uring";
    if (fixed_buffers_) n += "+fixed-buffers";
    if (file_.direct()) n += "+O_DIRECT";
    return n;
  }

 private:
  struct Req {
    bool write = false;
    uint8_t* buf = nullptr;
    int buf_index = -1;  // the registered buffer holding [buf, buf + len)
    uint64_t offset = 0;
    size_t len = 0;
    size_t done = 0;
    int retries = 0;  // of a request the kernel dropped (-ECANCELED, -EINTR)
  };
  static constexpr int kMaxRetries = 1000;

  int BufferOf(const uint8_t* p, size_t len) const {
    for (size_t i = 0; i < slots_.size(); ++i) {
      const uint8_t* b = slots_[i].data();
      if (p >= b && len <= slots_[i].size() && size_t(p - b) <= slots_[i].size() - len) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  Status Queue(int slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return Status::Internal("io_uring submission queue full");
    const Req& r = reqs_[slot];
    uint8_t* buf = r.buf + r.done;
    unsigned len = static_cast<unsigned>(r.len - r.done);
    uint64_t off = r.offset + r.done;
    int fd = fixed_file_ ? 0 : file_.fd();
    // Fixed-buffer ops need the whole transfer inside the registered buffer,
    // which holds for every (re)submission of a request.
    const bool fixed = fixed_buffers_ && r.buf_index >= 0;
    if (r.write) {
      if (fixed) io_uring_prep_write_fixed(sqe, fd, buf, len, off, r.buf_index);
      else io_uring_prep_write(sqe, fd, buf, len, off);
    } else {
      if (fixed) io_uring_prep_read_fixed(sqe, fd, buf, len, off, r.buf_index);
      else io_uring_prep_read(sqe, fd, buf, len, off);
    }
    if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    int rc = io_uring_submit(&ring_);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_submit on " + file_.path());
    ++in_flight_;
    return Status::OK();
  }

  const File& file_;
  const std::vector<AlignedBuffer>& slots_;
  std::vector<Req> reqs_;
  io_uring ring_{};
  bool initialized_ = false;
  bool fixed_buffers_ = false;
  bool fixed_file_ = false;
  size_t in_flight_ = 0;
};

}  // namespace

std::unique_ptr<BlockIo> MakeUringIo(const File& file, const std::vector<AlignedBuffer>& buffers,
                                     size_t depth) {
  auto io = std::make_unique<UringIo>(file, buffers, depth);
  if (std::string why = io->Init(); !why.empty()) {
    Log(LogLevel::kWarning, file.path() + ": io_uring unavailable (" + why + "); using pread/pwrite");
    return nullptr;
  }
  return io;
}

}  // namespace ckfmt
