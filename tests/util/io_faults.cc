#include "util/io_faults.h"

#include <cerrno>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "io/block_io.h"

namespace ckfmt_test {
namespace {

using namespace ckfmt;

// A transfer doomed at its start completes with EIO (its bytes may have
// moved: a disk reports errors late too).
class FaultyIo final : public BlockIo {
 public:
  FaultyIo(IoFaults* faults, std::string path, std::unique_ptr<BlockIo> io)
      : faults_(faults), path_(std::move(path)), io_(std::move(io)) {}
  Status SubmitWrite(int slot, uint64_t offset, size_t len) override {
    Doom(slot);
    return io_->SubmitWrite(slot, offset, len);
  }
  Status SubmitRead(int slot, uint64_t offset, size_t len) override {
    Doom(slot);
    return io_->SubmitRead(slot, offset, len);
  }
  Status SubmitReadTo(int tag, uint8_t* dst, uint64_t offset, size_t len) override {
    Doom(tag);
    return io_->SubmitReadTo(tag, dst, offset, len);
  }
  Completion Wait() override {
    Completion c = io_->Wait();
    std::lock_guard<std::mutex> l(mu_);
    if (doomed_.erase(c.slot) && c.status.ok()) {
      // As the backends word a failed transfer: it names the file.
      c.status = Status::FromErrno(EIO, "injected transfer failure on " + path_);
    }
    return c;
  }
  bool Ready() override { return io_->Ready(); }
  size_t in_flight() const override { return io_->in_flight(); }
  bool transfers_at_submit() const override { return io_->transfers_at_submit(); }
  std::string name() const override { return io_->name(); }

 private:
  void Doom(int slot) {
    if (!faults_->Next()) return;
    std::lock_guard<std::mutex> l(mu_);
    doomed_.insert(slot);
  }
  IoFaults* faults_;
  std::string path_;
  std::unique_ptr<BlockIo> io_;
  std::mutex mu_;
  std::set<int> doomed_;  // slots and tags whose transfer in flight fails
};

}  // namespace

IoFaults::IoFaults() {
  SetBlockIoWrapper([this](const File& file, std::unique_ptr<BlockIo> io) {
    return std::unique_ptr<BlockIo>(new FaultyIo(this, file.path(), std::move(io)));
  });
}

IoFaults::~IoFaults() { SetBlockIoWrapper(nullptr); }

}  // namespace ckfmt_test
