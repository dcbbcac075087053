#include "io/staged_output.h"

#include <algorithm>
#include <cstring>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"

namespace ckfmt {

Result<std::unique_ptr<StagedOutput>> StagedOutput::Create(const File& file,
                                                           const IoOptions& options,
                                                           size_t block_size, size_t slots,
                                                           uint64_t base) {
  if (!IsAligned(block_size) || !IsAligned(base) || slots < 3) {
    return Status::InvalidArgument("staging needs >= 3 slots of a 4096-multiple size");
  }
  std::unique_ptr<StagedOutput> out(new StagedOutput(file, block_size));
  out->slot_offset_ = base;
  out->allocated_end_ = base;
  for (size_t i = 0; i < slots; ++i) {
    out->slots_.emplace_back(block_size);
    out->free_.push_back(static_cast<int>(slots - 1 - i));
  }
  out->ready_len_.assign(slots, 0);
  out->io_ = BlockIo::Create(file, options, out->slots_);
  CKFMT_RETURN_IF_ERROR(out->TakeSlot());
  return out;
}

StagedOutput::~StagedOutput() {
  // Abandoned (an error or abort): let queued writes finish before the
  // slots they point into are freed.
  while (io_ && io_->in_flight() > 0) (void)io_->Wait();
}

Status StagedOutput::Reap() {
  BlockIo::Completion c = io_->Wait();
  if (c.slot >= 0) free_.push_back(c.slot);
  CKFMT_RETURN_IF_ERROR(c.status);
  if (on_written_ && c.slot >= 0) on_written_(ready_len_[c.slot]);
  return Pump();
}

Status StagedOutput::Pump() {
  while (released_ > 0 && (max_writes_ == 0 || io_->in_flight() < max_writes_)) {
    auto [slot, offset] = ready_.front();
    ready_.pop_front();
    --released_;
    AllocateFor(offset + ready_len_[slot]);
    CKFMT_RETURN_IF_ERROR(io_->SubmitWrite(slot, offset, ready_len_[slot]));
  }
  return Status::OK();
}

void StagedOutput::AllocateFor(uint64_t end) {
  if (allocate_step_ == 0 || end <= allocated_end_) return;
  // At least a step, and at once all that ExpectMore() announced.
  const uint64_t to = std::max({end, allocated_end_ + allocate_step_, expected_end_});
  allocation_tried_ = true;
  if (!file_.Allocate(allocated_end_, to - allocated_end_).ok()) {
    allocate_step_ = 0;  // a write that finds no room will say so itself
    return;
  }
  allocated_end_ = to;
  allocate_step_ = std::min(2 * allocate_step_, kMaxAllocateStep);
}

Status StagedOutput::TakeSlot() {
  while (free_.empty()) {
    CKFMT_RETURN_IF_ERROR(Pump());
    if (io_->in_flight() == 0) return Status::Internal("staging slots exhausted");
    CKFMT_RETURN_IF_ERROR(Reap());
  }
  current_ = free_.back();
  free_.pop_back();
  fill_ = 0;
  return Status::OK();
}

void StagedOutput::RetireCurrent() {
  ready_.emplace_back(current_, slot_offset_);
  ready_len_[current_] = fill_;
  slot_offset_ += fill_;
  current_ = -1;
}

Result<StagedOutput::Space> StagedOutput::Reserve(size_t n) {
  if (n > block_size_) return Status::Internal("reservation larger than a staging slot");
  if (block_size_ - fill_ < n) {
    RetireCurrent();
    CKFMT_RETURN_IF_ERROR(TakeSlot());
  }
  reserved_ = n;
  return Space{slots_[current_].data() + fill_, slot_offset_ + fill_};
}

void StagedOutput::Commit(size_t used) {
  size_t padded = AlignUp(used);
  std::memset(slots_[current_].data() + fill_ + used, 0, padded - used);
  fill_ += padded;
  reserved_ = 0;
}

Status StagedOutput::Poll() {
  while (io_->in_flight() > 0 && io_->Ready()) CKFMT_RETURN_IF_ERROR(Reap());
  return Pump();
}

Status StagedOutput::SubmitReady() {
  if (fill_ == block_size_) RetireCurrent();  // full: no reason to hold it back
  released_ = ready_.size();
  // Under a write limit, finished writes make room for released ones: the
  // caller comes by often, so the disk need not wait for a blocking Reap().
  while (max_writes_ > 0 && released_ > 0 && io_->Ready()) CKFMT_RETURN_IF_ERROR(Reap());
  CKFMT_RETURN_IF_ERROR(Pump());
  return current_ < 0 ? TakeSlot() : Status::OK();
}

Status StagedOutput::Append(const void* data, size_t n, ChecksumStream* sum) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t take = std::min(n, block_size_ - fill_);
    // Next read by the disk: stored around the cache.
    uint8_t* dst = slots_[current_].data() + fill_;
    if (sum) {
      sum->CopyAndUpdate(dst, p, take);
    } else {
      CopyUncached(dst, p, take);
    }
    fill_ += take;
    p += take;
    n -= take;
    CKFMT_RETURN_IF_ERROR(SubmitReady());
  }
  return Status::OK();
}

Result<uint64_t> StagedOutput::Put(const void* data, size_t n, ChecksumStream* sum) {
  const uint64_t at = position();
  CKFMT_RETURN_IF_ERROR(Append(data, n, sum));
  // Slots are 4096-multiples, so the padding never crosses into the next.
  size_t padded = AlignUp(fill_);
  std::memset(slots_[current_].data() + fill_, 0, padded - fill_);
  fill_ = padded;
  CKFMT_RETURN_IF_ERROR(SubmitReady());
  return at;
}

Status StagedOutput::Finish() {
  if (!IsAligned(fill_)) return Status::Internal("output ends unaligned");
  CKFMT_RETURN_IF_ERROR(SubmitReady());
  if (fill_ > 0) {
    RetireCurrent();
    fill_ = 0;
    released_ = ready_.size();
  }
  Status first = Pump();
  while (io_->in_flight() > 0) {
    Status s = Reap();
    if (first.ok()) first = s;
  }
  // The footer must end the file: drop what was allocated beyond it (a
  // failed allocation, too, may have grown the file part of the way).
  if (first.ok() && allocation_tried_) first = file_.Truncate(position());
  return first;
}

}  // namespace ckfmt
