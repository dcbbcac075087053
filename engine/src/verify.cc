// VerifyFile: one sequential pass over the whole file. Every byte is either
// structure (header, footer: checked field by field), index (checksum),
// chunk data (checksum, and must decode to its raw size) or padding (must
// be zero).
#include "ckfmt/verify.h"

#include <zstd.h>

#include <algorithm>
#include <deque>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"
#include "io/block_io.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ckfmt {
namespace {

struct Extent {
  const EntryRecord* entry;
  const ChunkRecord* chunk;
};

// Streaming checks of one chunk's stored bytes.
class ChunkCheck {
 public:
  ChunkCheck() : xxh_(XXH3_createState()), dctx_(ZSTD_createDCtx()), sink_(128 << 10) {}
  ~ChunkCheck() {
    XXH3_freeState(xxh_);
    ZSTD_freeDCtx(dctx_);
  }
  void Begin(const ChunkRecord& c) {
    chunk_ = &c;
    XXH3_64bits_reset(xxh_);
    ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
    decoded_ = 0;
    frame_done_ = false;
    decode_error_.clear();
    whole_.clear();
  }
  void Update(const uint8_t* p, size_t n) {
    XXH3_64bits_update(xxh_, p, n);
    // Byte planes decode only as a whole chunk (at most kMaxChunkRawSize).
    if (chunk_->codec == uint8_t(Codec::kBytePlaneZstd)) whole_.insert(whole_.end(), p, p + n);
    if (chunk_->codec != uint8_t(Codec::kZstd) || !decode_error_.empty()) return;
    ZSTD_inBuffer in{p, n, 0};
    while (in.pos < in.size) {
      if (frame_done_) {
        decode_error_ = "bytes follow the end of the zstd frame";
        return;
      }
      ZSTD_outBuffer out{sink_.data(), sink_.size(), 0};
      size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
      if (ZSTD_isError(rc)) {
        decode_error_ = std::string("zstd: ") + ZSTD_getErrorName(rc);
        return;
      }
      decoded_ += out.pos;
      if (rc == 0) frame_done_ = true;
      if (decoded_ > chunk_->raw_size) {
        decode_error_ = "decodes to more than its raw size";
        return;
      }
    }
  }
  // Problems of the finished chunk, or "".
  std::string Finish() {
    uint64_t sum = XXH3_64bits_digest(xxh_);
    if (sum != chunk_->checksum) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "checksum mismatch (expected %016llx, computed %016llx)",
                    (unsigned long long)chunk_->checksum, (unsigned long long)sum);
      return buf;
    }
    if (!IsKnownCodec(chunk_->codec)) return "unknown codec id " + std::to_string(chunk_->codec);
    if (chunk_->codec == uint8_t(Codec::kBytePlaneZstd)) {
      raw_.resize(chunk_->raw_size);
      Status s = DecodeChunk(chunk_->codec, whole_.data(), whole_.size(), raw_.data(), raw_.size());
      return s.ok() ? "" : s.message();
    }
    if (chunk_->codec == uint8_t(Codec::kZstd)) {
      if (!decode_error_.empty()) return decode_error_;
      if (!frame_done_ || decoded_ != chunk_->raw_size) {
        return "zstd frame decodes to " + std::to_string(decoded_) + " bytes, expected " +
               std::to_string(chunk_->raw_size);
      }
    }
    return "";
  }

 private:
  XXH3_state_t* xxh_;
  ZSTD_DCtx* dctx_;
  std::vector<uint8_t> sink_;
  std::vector<uint8_t> whole_, raw_;  // byte-plane chunks: stored and decoded
  const ChunkRecord* chunk_ = nullptr;
  uint64_t decoded_ = 0;
  bool frame_done_ = false;
  std::string decode_error_;
};

class Verifier {
 public:
  Verifier(const File& file, const VerifyOptions& options, VerifyReport& report)
      : file_(file), opts_(options), report_(report) {}

  Status Run();

 private:
  Status Check();
  void Problem(StatusCode code, const std::string& where, const std::string& message) {
    report_.problems.push_back({code, where, message});
  }
  void Problem(const Status& s, const std::string& where) { Problem(s.code(), where, s.message()); }
  // Checks [begin, end) is zero; reports the first nonzero byte.
  void CheckZero(const uint8_t* p, uint64_t file_offset, size_t n);
  void Scan(const uint8_t* p, uint64_t offset, size_t n);
  Status ScanDataRegion(uint64_t end);

  const File& file_;
  const VerifyOptions& opts_;
  VerifyReport& report_;
  IndexRecord index_;
  std::vector<Extent> extents_;
  size_t next_ = 0;       // next extent to meet
  bool in_chunk_ = false;
  uint64_t data_end_ = 0;
  uint64_t bad_gap_ = UINT64_MAX;  // start of the gap last reported
  ChunkCheck check_;
};

void Verifier::CheckZero(const uint8_t* p, uint64_t file_offset, size_t n) {
  const uint8_t* nz = std::find_if(p, p + n, [](uint8_t b) { return b != 0; });
  if (nz == p + n) return;
  uint64_t at = file_offset + uint64_t(nz - p);
  Problem(StatusCode::kCorruption, "padding @ " + std::to_string(at),
          "padding byte at offset " + std::to_string(at) + " is " + std::to_string(*nz) +
              ", expected 0");
}

// Consumes the data-region bytes [offset, offset + n) held at p.
void Verifier::Scan(const uint8_t* p, uint64_t offset, size_t n) {
  const uint64_t end = offset + n;
  while (offset < end) {
    if (in_chunk_) {
      const ChunkRecord& c = *extents_[next_].chunk;
      uint64_t stop = std::min(end, c.offset + c.stored_size);
      check_.Update(p, stop - offset);
      p += stop - offset;
      offset = stop;
      if (offset == c.offset + c.stored_size) {
        if (std::string m = check_.Finish(); !m.empty()) {
          const EntryRecord& e = *extents_[next_].entry;
          Problem(IsKnownCodec(c.codec) ? StatusCode::kCorruption : StatusCode::kUnsupported,
                  "chunk @ " + std::to_string(c.offset) + " (" + FormatKeyPath(e.path) + ")", m);
        }
        in_chunk_ = false;
        ++next_;
      }
      continue;
    }
    uint64_t gap_end = next_ < extents_.size() ? extents_[next_].chunk->offset : data_end_;
    uint64_t stop = std::min(end, gap_end);
    size_t before = report_.problems.size();
    // One problem per gap is enough.
    if (bad_gap_ != gap_end) CheckZero(p, offset, stop - offset);
    if (report_.problems.size() != before) bad_gap_ = gap_end;
    p += stop - offset;
    offset = stop;
    if (offset == gap_end && next_ < extents_.size()) {
      check_.Begin(*extents_[next_].chunk);
      in_chunk_ = true;
    }
  }
}

// Reads [kHeaderSize, end) in order through the staging slots.
Status Verifier::ScanDataRegion(uint64_t end) {
  // No more staging than the data region could fill: small files stay cheap.
  const uint64_t span = end - kHeaderSize;
  const uint64_t block =
      AlignUp(std::clamp<uint64_t>(opts_.io.block_size, kAlignment, std::max(span, kAlignment)));
  size_t nslots =
      std::clamp<size_t>(opts_.io.staging_bytes / block, 2, std::max<uint64_t>(2, span / block + 1));
  std::vector<AlignedBuffer> slots;
  for (size_t i = 0; i < nslots; ++i) slots.emplace_back(block);
  auto io = BlockIo::Create(file_, opts_.io, slots);
  struct Window {
    int slot;
    uint64_t offset, len;
  };
  std::deque<Window> queue;
  std::vector<bool> done(nslots, false);
  uint64_t next_offset = kHeaderSize;
  auto submit = [&](int slot) -> Status {
    if (next_offset >= end) return Status::OK();
    uint64_t len = std::min(block, end - next_offset);
    done[slot] = false;
    queue.push_back({slot, next_offset, len});
    next_offset += len;
    return io->SubmitRead(slot, queue.back().offset, len);
  };
  Status status;
  for (size_t i = 0; i < nslots && status.ok(); ++i) status = submit(static_cast<int>(i));
  while (status.ok() && !queue.empty()) {
    Window w = queue.front();
    while (status.ok() && !done[w.slot]) {
      BlockIo::Completion c = io->Wait();
      status = c.status;
      if (c.slot >= 0) done[c.slot] = true;
    }
    if (!status.ok()) break;
    queue.pop_front();
    Scan(slots[w.slot].data(), w.offset, w.len);
    report_.bytes_checked += w.len;
    if (opts_.progress) opts_.progress(w.offset + w.len, report_.file_size);
    status = submit(w.slot);
  }
  while (io->in_flight() > 0) (void)io->Wait();
  return status;
}

Status Verifier::Run() {
  Status s = Check();
  if (s.ok() && opts_.progress) opts_.progress(report_.file_size, report_.file_size);
  return s;
}

Status Verifier::Check() {
  const std::string& path = file_.path();
  const uint64_t size = report_.file_size;
  AlignedBuffer block(kAlignment);
  Result<FileHeader> header = Status::Corruption(path + ": no header");
  if (size >= kHeaderSize) {
    CKFMT_RETURN_IF_ERROR(file_.ReadAt(0, block.data(), kAlignment));
    header = DecodeHeader(block.data(), path);
    if (!header.ok()) Problem(header.status(), "header");
  }
  if (size < kHeaderSize + kAlignment || !IsAligned(size)) {
    Problem(StatusCode::kCorruption, "file", path + ": file size " + std::to_string(size) +
                                                 " is not a multiple of 4096 of at least 8192 "
                                                 "(truncated?)");
    return Status::OK();
  }
  CKFMT_RETURN_IF_ERROR(file_.ReadAt(size - kAlignment, block.data(), kAlignment));
  auto footer = DecodeFooter(block.data() + kAlignment - kFooterSize, size, path);
  if (!footer.ok()) {
    Problem(footer.status(), "footer");
    return Status::OK();
  }
  if (header.ok()) {
    if (Status s = CheckVersionsAgree(*header, *footer, path); !s.ok()) Problem(s, "header");
  }
  // The index, and the zeros between it and the footer.
  uint64_t index_end = footer->index_offset + footer->index_length;
  AlignedBuffer tail(size - footer->index_offset);
  CKFMT_RETURN_IF_ERROR(file_.ReadAt(footer->index_offset, tail.data(), tail.size()));
  report_.bytes_checked += tail.size() + kHeaderSize;
  uint64_t sum = Checksum(tail.data(), footer->index_length);
  if (sum != footer->index_checksum) {
    Problem(StatusCode::kCorruption, "index",
            path + ": index checksum mismatch (footer records " +
                std::to_string(footer->index_checksum) + ", index hashes to " +
                std::to_string(sum) + ")");
    return Status::OK();
  }
  CheckZero(tail.data() + footer->index_length, index_end, size - kFooterSize - index_end);
  auto index = ParseIndex(tail.data(), footer->index_length, kHeaderSize, footer->index_offset, path);
  if (!index.ok()) {
    Problem(index.status(), "index");
    return Status::OK();
  }
  index_ = std::move(*index);
  report_.entries = index_.entries.size();
  for (const auto& e : index_.entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) extents_.push_back({&e, &c});
    }
  }
  std::sort(extents_.begin(), extents_.end(),
            [](const Extent& a, const Extent& b) { return a.chunk->offset < b.chunk->offset; });
  report_.chunks = extents_.size();
  data_end_ = footer->index_offset;
  return ScanDataRegion(data_end_);
}

}  // namespace

Result<VerifyReport> VerifyFile(const std::string& path, const VerifyOptions& options) {
  VerifyReport report;
  report.file = path;
  CKFMT_ASSIGN_OR_RETURN(File file, File::OpenRead(path, options.io.direct_io));
  CKFMT_ASSIGN_OR_RETURN(report.file_size, file.Size());
  Verifier v(file, options, report);
  CKFMT_RETURN_IF_ERROR(v.Run());
  return report;
}

}  // namespace ckfmt
