// The fallback backend: each request runs synchronously at submission.
#include <deque>

#include "io/block_io.h"

namespace ckfmt {
namespace {

class PreadIo final : public BlockIo {
 public:
  PreadIo(const File& file, const std::vector<AlignedBuffer>& slots) : file_(file), slots_(slots) {}

  Status SubmitWrite(int slot, uint64_t offset, size_t len) override {
    done_.push_back({slot, file_.WriteAt(offset, slots_[slot].data(), len)});
    return Status::OK();
  }
  Status SubmitRead(int slot, uint64_t offset, size_t len) override {
    return SubmitReadTo(slot, slots_[slot].data(), offset, len);
  }
  Status SubmitReadTo(int tag, uint8_t* dst, uint64_t offset, size_t len) override {
    done_.push_back({tag, file_.ReadAt(offset, dst, len)});
    return Status::OK();
  }
  Completion Wait() override {
    Completion c = std::move(done_.front());
    done_.pop_front();
    return c;
  }
  bool Ready() override { return !done_.empty(); }
  size_t in_flight() const override { return done_.size(); }
  bool transfers_at_submit() const override { return true; }
  std::string name() const override { return file_.direct() ? "pread+O_DIRECT" : "pread"; }

 private:
  const File& file_;
  const std::vector<AlignedBuffer>& slots_;
  std::deque<Completion> done_;
};

}  // namespace

std::unique_ptr<BlockIo> MakePreadIo(const File& file, const std::vector<AlignedBuffer>& slots) {
  return std::make_unique<PreadIo>(file, slots);
}

}  // namespace ckfmt
