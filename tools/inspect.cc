#include "inspect.h"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "ckfmt/reader.h"
#include "ckfmt/utf8.h"
#include "exit_codes.h"

namespace ckfmt::tools {
namespace {

struct Opened {
  std::unique_ptr<CheckpointReader> reader;
  FileInfo info;
};

Result<Opened> Open(const std::string& path, const std::string& label) {
  Opened o;
  CKFMT_ASSIGN_OR_RETURN(o.reader, CheckpointReader::Open(path));
  o.info = DescribeFileInfo(*o.reader, label);
  return o;
}

// Terminal columns, approximated as UTF-8 code points.
size_t Width(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string Ratio(uint64_t raw, uint64_t stored) {
  if (stored == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(raw) / static_cast<double>(stored));
  return buf;
}

std::string ShapeString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// A scalar as JSON writes it (strings quoted and escaped), cut to fit a line.
std::string ScalarString(const EntryRecord& e) {
  Json v = EntryToJson(e)["value"];
  std::string s = v.is_string() && e.kind == EntryKind::kFloat
                      ? v.get<std::string>()  // nan, inf, -inf unquoted
                      : v.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (s.size() > kMax) {
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    s = s.substr(0, cut) + "...";
  }
  return s;
}

std::string RegionsString(const char* what, size_t count, const auto& items) {
  constexpr size_t kShown = 8;
  std::string s = std::to_string(count) + " " + what + (count == 1 ? "" : "s");
  if (count == 0) return s;
  s += ":";
  for (size_t i = 0; i < std::min(count, kShown); ++i) {
    s += (i ? ", r" : " r") + std::to_string(items[i].rank) + " " + items[i].region.ToString();
  }
  if (count > kShown) s += ", ... (+" + std::to_string(count - kShown) + " more)";
  return s;
}

std::string PieceLayout(const EntryRecord& e) {
  std::string s = RegionsString("piece", e.pieces.size(), e.pieces);
  if (!e.saved_layout.empty()) {
    s += "; saved as " + RegionsString("shard", e.saved_layout.size(), e.saved_layout);
  }
  if (e.partial) s += "; partial";
  return s;
}

}  // namespace

std::string ErrorLine(const std::string& file, const Status& status) {
  // Does the message name the file already, as a word of its own?
  const std::string& m = status.message();
  auto boundary = [](char c) { return c == ' ' || c == ':' || c == '"' || c == '\'' || c == ','; };
  for (size_t at = m.find(file); at != std::string::npos; at = m.find(file, at + 1)) {
    size_t end = at + file.size();
    if ((at == 0 || boundary(m[at - 1])) && (end == m.size() || boundary(m[end]))) {
      return EscapeControlCharacters(status.ToString());
    }
  }
  return EscapeControlCharacters(file + ": " + status.ToString());
}

std::string InspectText(const IndexRecord& index, const FileInfo& info,
                        const std::optional<KeyPath>& prefix) {
  std::ostringstream out;
  out << "file:           " << info.file << " (" << info.file_size << " bytes)\n";
  out << "format version: " << info.version.major << "." << info.version.minor << "\n";
  out << "writer:         " << EscapeControlCharacters(index.writer_name) << " "
      << EscapeControlCharacters(index.writer_version) << "\n";
  out << "world size:     " << index.world_size << "\n";
  out << "save mode:      " << EscapeControlCharacters(index.save_mode) << "\n";
  out << "metadata:" << (index.metadata.empty() ? "       (none)" : "") << "\n";
  for (const auto& [k, v] : index.metadata) {
    out << "  " << EscapeControlCharacters(k) << " = " << EscapeControlCharacters(v) << "\n";
  }
  if (prefix) out << "prefix:         " << EscapeControlCharacters(FormatKeyPath(*prefix)) << "\n";

  // Columns: KEY KIND DTYPE SHAPE RAW STORED RATIO LAYOUT (scalars: KEY KIND = VALUE).
  struct Row {
    std::string key, kind, dtype, shape, raw, stored, ratio, layout;
    bool data;
  };
  std::vector<Row> rows;
  uint64_t n_tensors = 0, n_bytes = 0, raw = 0, stored = 0, chunks = 0;
  for (const auto& e : index.entries) {
    if (prefix && !HasPrefix(e.path, *prefix)) continue;
    Row r{EscapeControlCharacters(FormatKeyPath(e.path)),
          std::string(EntryKindName(e.kind)), "", "", "", "", "", "",
          e.HasData()};
    if (e.HasData()) {
      uint64_t er = EntryRawBytes(e), es = e.StoredSize();
      (e.kind == EntryKind::kTensor ? n_tensors : n_bytes) += 1;
      raw += er;
      stored += es;
      chunks += EntryChunks(e);
      r.dtype = e.kind == EntryKind::kBytes ? "(" + EscapeControlCharacters(e.content_type) + ")"
                                            : std::string(DTypeName(e.dtype));
      r.shape = ShapeString(e.shape);
      r.raw = HumanBytes(er);
      r.stored = HumanBytes(es);
      r.ratio = Ratio(er, es);
      r.layout = PieceLayout(e);
    } else if (!e.IsContainer()) {
      r.dtype = "= " + ScalarString(e);
    }
    rows.push_back(std::move(r));
  }
  size_t wk = 3, wkind = 4, wd = 5, ws = 5, wr = 3, wst = 6, wra = 5;
  for (const auto& r : rows) {
    wk = std::max(wk, Width(r.key));
    wkind = std::max(wkind, r.kind.size());
    if (r.data) {
      wd = std::max(wd, Width(r.dtype));
      ws = std::max(ws, r.shape.size());
      wr = std::max(wr, r.raw.size());
      wst = std::max(wst, r.stored.size());
      wra = std::max(wra, r.ratio.size());
    }
  }
  auto pad = [](const std::string& s, size_t w) {
    return Width(s) >= w ? s : s + std::string(w - Width(s), ' ');
  };
  out << "entries:\n";
  std::string header = "  " + pad("KEY", wk) + "  " + pad("KIND", wkind) + "  " + pad("DTYPE", wd) +
                       "  " + pad("SHAPE", ws) + "  " + pad("RAW", wr) + "  " + pad("STORED", wst) +
                       "  " + pad("RATIO", wra) + "  LAYOUT";
  out << header << "\n";
  for (const auto& r : rows) {
    std::string line = "  " + pad(r.key, wk) + "  " + pad(r.kind, wkind);
    if (r.data) {
      line += "  " + pad(r.dtype, wd) + "  " + pad(r.shape, ws) + "  " + pad(r.raw, wr) + "  " +
              pad(r.stored, wst) + "  " + pad(r.ratio, wra) + "  " + r.layout;
    } else if (!r.dtype.empty()) {
      line += "  " + r.dtype;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << "totals: " << rows.size() << " entries (" << n_tensors << " tensors, " << n_bytes
      << " bytes blobs), " << chunks << " chunks, raw " << HumanBytes(raw) << " (" << raw
      << " bytes), stored " << HumanBytes(stored) << " (" << stored << " bytes), ratio "
      << Ratio(raw, stored) << "\n";
  return out.str();
}

int RunInspect(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  std::optional<KeyPath> prefix;
  if (options.prefix) prefix = ParseKeyPath(*options.prefix);
  auto opened = Open(options.file, options.file);
  if (!opened.ok()) {
    err << "ckfmt: " << ErrorLine(options.file, opened.status()) << "\n";
    StatusCode c = opened.status().code();
    return c == StatusCode::kCorruption || c == StatusCode::kUnsupported ? kExitInvalid
                                                                        : kExitError;
  }
  const Opened& o = *opened;
  if (options.json) {
    out << DumpJson(DescribeIndex(o.reader->index(), o.info, prefix));
  } else {
    out << InspectText(o.reader->index(), o.info, prefix);
  }
  out.flush();
  if (!out) {
    err << "ckfmt: error writing the output\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace ckfmt::tools
