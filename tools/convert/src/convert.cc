// The `ckfmt convert` driver: detect the source, read it into a tree, write
// the tree in the destination format, report what happened.
#include "ckfmt/convert/convert.h"

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "ckfmt/file_layout.h"
#include "ckfmt/utf8.h"
#include "dcp_reader.h"
#include "file_io.h"
#include "safetensors_reader.h"
#include "sink.h"
#include "torch_save_reader.h"
#include "zip_reader.h"

namespace ckfmt::convert {

const char* FormatName(Format f) {
  switch (f) {
    case Format::kAuto: return "auto";
    case Format::kCkfmt: return "ckfmt";
    case Format::kSafetensors: return "safetensors";
    case Format::kSafetensorsSharded: return "safetensors-sharded";
    case Format::kTorchZip: return "torch";
    case Format::kTorchLegacy: return "torch-legacy";
    case Format::kDcp: return "dcp";
  }
  return "?";
}

Result<Format> ParseFormat(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "auto" || n.empty()) return Format::kAuto;
  if (n == "ckfmt") return Format::kCkfmt;
  if (n == "safetensors" || n == "st") return Format::kSafetensors;
  if (n == "safetensors-sharded") return Format::kSafetensorsSharded;
  if (n == "torch" || n == "pt" || n == "pth" || n == "bin" || n == "torch-zip") {
    return Format::kTorchZip;
  }
  if (n == "torch-legacy") return Format::kTorchLegacy;
  if (n == "dcp") return Format::kDcp;
  return Status::InvalidArgument("unknown format \"" + name +
                                 "\" (expected ckfmt, safetensors, torch or dcp)");
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<Format> FormatFromExtension(const std::string& dst) {
  std::string lower;
  for (char c : dst) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (EndsWith(lower, ".ckfmt") || EndsWith(lower, ".ckpt")) return Format::kCkfmt;
  if (EndsWith(lower, ".safetensors")) return Format::kSafetensors;
  if (EndsWith(lower, ".pt") || EndsWith(lower, ".pth") || EndsWith(lower, ".bin")) {
    return Format::kTorchZip;
  }
  return Status::InvalidArgument(dst + ": cannot tell the output format from the extension "
                                 "(.ckfmt, .safetensors, .pt/.pth/.bin); pass --to (a DCP "
                                 "directory: --to dcp)");
}

void Count(const Node& n, ConvertReport* r, bool root) {
  switch (n.kind) {
    case Node::Kind::kDict:
    case Node::Kind::kList:
      if (!root) ++r->containers;
      for (const auto& [k, v] : n.children) Count(v, r, false);
      return;
    case Node::Kind::kTensor: return;  // counted by the writer
    case Node::Kind::kBytes: ++r->blobs; return;
    default: ++r->scalars; return;
  }
}

// The same path, or another name of the same file or directory (./x, a
// link to it): its conversion would replace the source, and a link at the
// destination would no longer name it.
bool SameFile(const std::string& a, const std::string& b) {
  if (a == b) return true;
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

Result<Format> DetectFormat(const std::string& path) {
  if (IsDirectory(path)) {
    if (IsDcpDirectory(path)) return Format::kDcp;
    if (!ShardedIndexPath(path).empty()) return Format::kSafetensorsSharded;
    return Status::InvalidArgument(path + ": a directory that is neither a DCP checkpoint "
                                   "(no .metadata) nor a sharded safetensors repo (no "
                                   "model.safetensors.index.json)");
  }
  if (!ShardedIndexPath(path).empty()) return Format::kSafetensorsSharded;
  CKFMT_ASSIGN_OR_RETURN(auto f, InputFile::Open(path));
  uint8_t head[64] = {};
  size_t n = std::min<uint64_t>(sizeof head, f->size());
  CKFMT_RETURN_IF_ERROR(f->ReadAt(0, head, n, "file header"));
  if (n >= 8 && std::memcmp(head, kHeaderMagic.data(), 8) == 0) return Format::kCkfmt;
  if (LooksLikeZip(head, n)) return Format::kTorchZip;
  if (LooksLikeTorchLegacy(head, n)) return Format::kTorchLegacy;
  if (LooksLikeSafetensors(head, n, f->size())) return Format::kSafetensors;
  if (n >= 1 && head[0] == 0x80) {
    return Status::Unsupported(path + ": a bare pickle, not a torch.save file (no zip "
                               "container, no legacy magic number)");
  }
  return Status::InvalidArgument(path + ": unrecognized format (not ckfmt, a torch.save zip or "
                                 "legacy file, safetensors, or a DCP directory)");
}

Result<ConvertReport> Run(const ConvertOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  ConvertReport report;
  report.src = options.src;
  report.dst = options.dst;
  if (options.src.empty() || options.dst.empty()) {
    return Status::InvalidArgument("convert needs a source and a destination");
  }
  if (SameFile(options.src, options.dst)) {
    return Status::InvalidArgument(options.dst + ": destination is the source");
  }
  Format from = options.from;
  if (from == Format::kAuto) {
    CKFMT_ASSIGN_OR_RETURN(from, DetectFormat(options.src));
  }
  Format to = options.to;
  if (to == Format::kAuto) {
    CKFMT_ASSIGN_OR_RETURN(to, FormatFromExtension(options.dst));
  }
  if (to != Format::kCkfmt && to != Format::kSafetensors && to != Format::kTorchZip &&
      to != Format::kDcp) {
    return Status::InvalidArgument(std::string("cannot write ") + FormatName(to) +
                                   "; outputs are ckfmt, safetensors, torch and dcp");
  }
  report.from = from;
  report.to = to;

  ConvertLog log;
  SinkOptions so;
  // Two pieces are in flight (one read ahead), each with its read span.
  so.budget = std::max<uint64_t>(std::min<uint64_t>(options.memory_budget / 4, 64ull << 20), 1);
  so.staging = options.io_staging_bytes;
  so.fsync = options.fsync;
  so.progress = options.progress;
  Node root;
  switch (from) {
    case Format::kCkfmt: {
      CKFMT_ASSIGN_OR_RETURN(root, ReadCkfmt(options.src, &log, &so.metadata, &so.world_size));
      if (so.world_size > 1) so.save_mode = "flattened";
      break;
    }
    case Format::kTorchZip: {
      CKFMT_ASSIGN_OR_RETURN(auto file, InputFile::Open(options.src));
      CKFMT_ASSIGN_OR_RETURN(std::shared_ptr<ZipArchive> zip, ZipArchive::Open(file));
      TorchReadOptions to_opts{options.allow_opaque_pickle, options.verify_zip_crc};
      CKFMT_ASSIGN_OR_RETURN(root, ReadTorchZip(zip, to_opts, &log));
      break;
    }
    case Format::kTorchLegacy: {
      CKFMT_ASSIGN_OR_RETURN(auto file, InputFile::Open(options.src));
      TorchReadOptions to_opts{options.allow_opaque_pickle, options.verify_zip_crc};
      CKFMT_ASSIGN_OR_RETURN(root, ReadTorchLegacy(file, to_opts, &log));
      break;
    }
    case Format::kDcp: {
      DcpReadOptions d{options.allow_opaque_pickle, options.verify_zip_crc,
                       options.keep_sharding_metadata, options.split_dotted_keys};
      DcpInfo info;
      CKFMT_ASSIGN_OR_RETURN(root, ReadDcp(options.src, d, &log, &info));
      so.world_size = info.world_size;
      so.save_mode = "flattened";
      if (!info.version.empty()) so.metadata.emplace_back("convert.dcp.version", info.version);
      break;
    }
    case Format::kSafetensors: {
      CKFMT_ASSIGN_OR_RETURN(root, ReadSafetensors(options.src, {options.split_dotted_keys}, &log,
                                                   &so.metadata));
      break;
    }
    case Format::kSafetensorsSharded: {
      CKFMT_ASSIGN_OR_RETURN(root, ReadSafetensorsSharded(options.src, {options.split_dotted_keys},
                                                          &log, &so.metadata));
      break;
    }
    case Format::kAuto: return Status::Internal("unresolved source format");
  }
  CKFMT_RETURN_IF_ERROR(CheckTree(root, options.src));
  if (root.kind != Node::Kind::kDict) {
    Node wrapped = Node::Dict();
    wrapped.children.emplace_back("value", std::move(root));
    root = std::move(wrapped);
    log.Note("the saved object is not a dict; it is stored under the key \"value\"");
  }
  bool has_source = false;
  for (const auto& kv : so.metadata) has_source |= kv.first == kSourceFormatMeta;
  if (!has_source) so.metadata.emplace_back(kSourceFormatMeta, FormatName(from));
  so.total_bytes = TreeBytes(root);

  Result<SinkStats> stats = Status::Internal("no sink");
  switch (to) {
    case Format::kCkfmt: stats = WriteCkfmt(root, options.dst, so, &log); break;
    case Format::kSafetensors: stats = WriteSafetensors(root, options.dst, so, &log); break;
    case Format::kTorchZip: stats = WriteTorchZip(root, options.dst, so, &log); break;
    case Format::kDcp: stats = WriteDcp(root, options.dst, so, &log); break;
    default: break;
  }
  if (!stats.ok()) return stats.status();
  if (to == Format::kCkfmt) {
    report.scalars = stats->scalars;
    report.containers = stats->containers;
    report.blobs = stats->blobs;
  } else if (to == Format::kTorchZip || to == Format::kDcp) {
    Count(root, &report, true);
  }
  report.tensors = stats->tensors;
  report.tensor_bytes = stats->data_bytes;
  report.output_bytes = stats->output_bytes;
  for (auto& [k, r] : log.dropped) report.dropped.push_back({k, r});
  report.notes = std::move(log.notes);
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

std::string FormatReport(const ConvertReport& r) {
  std::ostringstream o;
  o << "converted " << r.src << " (" << FormatName(r.from) << ") -> " << r.dst << " ("
    << FormatName(r.to) << ")\n";
  o << "  tensors: " << r.tensors << ", scalars: " << r.scalars << ", containers: "
    << r.containers << ", blobs: " << r.blobs << "\n";
  char buf[160];
  double mib = double(r.tensor_bytes) / (1 << 20);
  std::snprintf(buf, sizeof buf, "  data: %.1f MiB in %.2f s (%.0f MiB/s); output file %llu bytes\n",
                mib, r.seconds, r.seconds > 0 ? mib / r.seconds : 0.0,
                static_cast<unsigned long long>(r.output_bytes));
  o << buf;
  if (!r.dropped.empty()) {
    o << "  dropped " << r.dropped.size() << " entries:\n";
    for (const auto& d : r.dropped) {
      o << "    " << EscapeControlCharacters(d.key) << ": " << EscapeControlCharacters(d.reason)
        << "\n";
    }
  }
  if (!r.notes.empty()) {
    o << "  notes:\n";
    for (const auto& n : r.notes) o << "    " << EscapeControlCharacters(n) << "\n";
  }
  return o.str();
}

}  // namespace ckfmt::convert
