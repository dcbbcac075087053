// VerifyFile: one pass over the whole file, in file order. Every byte is
// either structure (header, footer: checked field by field), index
// (checksum), chunk data (checksum, and must decode to its raw size unless
// the options say not to decode) or padding (must be zero). The data
// region's checks run on a thread pool.
#include "ckfmt/verify.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"
#include "thread_pool.h"
#include "verify_chunk.h"
#include "verify_scan.h"

namespace ckfmt {
namespace {

struct Extent {
  const EntryRecord* entry;
  const ChunkRecord* chunk;
};

// The first nonzero byte of [p, p + n), which lies at file_offset, if any;
// `rule` is Z3 (gaps in the data region) or Z4 (the tail gap).
std::optional<VerifyProblem> NonzeroPadding(const uint8_t* p, uint64_t file_offset, size_t n,
                                            const char* rule) {
  const uint8_t* nz = std::find_if(p, p + n, [](uint8_t b) { return b != 0; });
  if (nz == p + n) return std::nullopt;
  uint64_t at = file_offset + uint64_t(nz - p);
  return VerifyProblem{StatusCode::kCorruption, "padding @ " + std::to_string(at),
                       "padding byte at offset " + std::to_string(at) + " is " +
                           std::to_string(*nz) + ", expected 0" + SpecRule(rule)};
}

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
  Status ScanDataRegion(uint64_t end);

  const File& file_;
  const VerifyOptions& opts_;
  VerifyReport& report_;
  IndexRecord index_;
  std::vector<Extent> extents_;  // in file order
};

// Checks the chunks and the gaps between them on the pool, then reports
// their problems in file order, one per bad gap.
Status Verifier::ScanDataRegion(uint64_t end) {
  std::vector<const ChunkRecord*> chunks;
  for (const Extent& e : extents_) chunks.push_back(e.chunk);
  const ScanPlan plan = PlanScan(chunks, kHeaderSize, end, opts_.io);
  ThreadPool pool(opts_.io.threads);
  std::vector<std::unique_ptr<ChunkChecker>> checkers(pool.size());
  for (auto& c : checkers) c = std::make_unique<ChunkChecker>();
  std::vector<std::optional<VerifyProblem>> found(plan.items.size());
  ScanJob job;
  job.on_item = [&](size_t k, const uint8_t* p, unsigned worker) {
    const ScanItem& it = plan.items[k];
    if (!it.is_chunk) {
      found[k] = NonzeroPadding(p, it.begin, it.end - it.begin, "Z3");
      return Status::OK();
    }
    const Extent& x = extents_[it.chunk];
    std::string m = checkers[worker]->Check(*x.chunk, p, opts_.decode);
    if (!m.empty()) {
      found[k] = VerifyProblem{
          IsKnownCodec(x.chunk->codec) ? StatusCode::kCorruption : StatusCode::kUnsupported,
          "chunk @ " + std::to_string(x.chunk->offset) + " (" + FormatKeyPath(x.entry->path) + ")",
          std::move(m)};
    }
    return Status::OK();
  };
  if (opts_.progress) {
    job.on_progress = [&](uint64_t done) { opts_.progress(done, report_.file_size); };
  }
  job.requests = plan.requests;
  job.item_begin = ItemBegins(plan);
  CKFMT_ASSIGN_OR_RETURN(auto staging, ScanStaging::Create(file_, opts_.io, plan.span, plan.span,
                                                           plan.largest_request));
  CKFMT_RETURN_IF_ERROR(RunScan(file_, *staging, job, pool));
  report_.bytes_checked += end - kHeaderSize;
  size_t bad_gap = SIZE_MAX;  // the gap last reported, by the chunk after it
  for (size_t k = 0; k < plan.items.size(); ++k) {
    const ScanItem& it = plan.items[k];
    if (!found[k] || (!it.is_chunk && it.chunk == bad_gap)) continue;
    if (!it.is_chunk) bad_gap = it.chunk;
    report_.problems.push_back(std::move(*found[k]));
  }
  return Status::OK();
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
  if (Status s = CheckFileSize(size, path); !s.ok()) {
    Problem(s, "file");
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
  if (Status s = CheckIndexChecksum(tail.data(), *footer, path); !s.ok()) {
    Problem(s, "index");
    return Status::OK();
  }
  if (auto p = NonzeroPadding(tail.data() + footer->index_length, index_end,
                              size - kFooterSize - index_end, "Z4")) {
    report_.problems.push_back(std::move(*p));
  }
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
  return ScanDataRegion(footer->index_offset);
}

}  // namespace

Result<VerifyReport> VerifyFile(const std::string& path, const VerifyOptions& options) {
  VerifyReport report;
  report.file = path;
  report.decoded = options.decode;
  CKFMT_ASSIGN_OR_RETURN(File file, File::OpenRead(path, options.io.direct_io));
  CKFMT_ASSIGN_OR_RETURN(report.file_size, file.Size());
  Verifier v(file, options, report);
  CKFMT_RETURN_IF_ERROR(v.Run());
  return report;
}

}  // namespace ckfmt
