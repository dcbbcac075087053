#include "safetensors_reader.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "file_io.h"

namespace ckfmt::convert {
namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxHeader = 100ull << 20;

struct StDType {
  const char* name;
  DType dtype;
};
constexpr StDType kStDTypes[] = {
    {"F64", DType::kF64}, {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
    {"F8_E4M3", DType::kF8E4M3FN}, {"F8_E5M2", DType::kF8E5M2}, {"I64", DType::kI64},
    {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8}, {"U8", DType::kU8},
    {"BOOL", DType::kBool}, {"C64", DType::kC64}, {"U16", DType::kU16}, {"U32", DType::kU32},
    {"U64", DType::kU64},
};

struct StTensor {
  std::string key;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// A JSON document and the order of its keys. nlohmann::json keeps objects
// sorted, with inserts in log time; its ordered_json inserts in linear
// time, which made a 90000-key index.json (a MoE model's) take 13 s. So
// the order a file lists its keys in is recorded apart: for the top-level
// object, and for the objects under the top-level keys asked for.
struct Doc {
  json j;
  std::vector<std::string> keys;                                // top level, in file order
  std::map<std::string, std::vector<std::string>> nested_keys;  // top-level key -> its keys
};

// Builds the document as json::parse does, refusing duplicate keys in any
// object and recording the key order Doc keeps. A SAX handler of our own,
// because json::parse with a callback rescans an object's members each time
// one of its values ends: quadratic in the number of tensors (a single
// safetensors file of 90,000 took 248 s).
class StrictDocBuilder : public nlohmann::json_sax<json> {
 public:
  StrictDocBuilder(Doc* doc, const std::set<std::string>& nested) : doc_(doc), nested_(nested) {}
  const std::string& duplicate() const { return dup_; }
  bool too_deep() const { return too_deep_; }
  // Headers nest 3 deep (object, tensor, shape); anything near this is
  // hostile, and each level costs memory while the parse is in it.
  static constexpr size_t kMaxDepth = 64;

  bool null() override { return Put(nullptr); }
  bool boolean(bool v) override { return Put(v); }
  bool number_integer(number_integer_t v) override { return Put(v); }
  bool number_unsigned(number_unsigned_t v) override { return Put(v); }
  bool number_float(number_float_t v, const string_t&) override { return Put(v); }
  bool string(string_t& v) override { return Put(std::move(v)); }
  bool binary(binary_t& v) override { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    if (open_.back()->contains(k)) {  // the object holds its keys so far
      dup_ = k;
      return false;  // stops the parse
    }
    // Depth 1: keys of the top-level object; 2: of an object right under one.
    if (open_.size() == 1) {
      top_key_ = k;
      doc_->keys.push_back(k);
    } else if (open_.size() == 2 && nested_.count(top_key_)) {
      doc_->nested_keys[top_key_].push_back(k);
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  // Stores `v` where the parse is; the containers open are never moved
  // meanwhile (an array grows only after its open child closes).
  json* Store(json v) {
    if (open_.empty()) {
      doc_->j = std::move(v);
      return &doc_->j;
    }
    json& top = *open_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool Put(json v) {
    Store(std::move(v));
    return true;
  }
  bool Open(json v) {
    if (open_.size() == kMaxDepth) {
      too_deep_ = true;
      return false;  // stops the parse
    }
    json* p = Store(std::move(v));
    open_.push_back(p);
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Doc* doc_;
  const std::set<std::string>& nested_;
  std::vector<json*> open_;  // the containers the parse is in
  std::string key_, top_key_, dup_;
  bool too_deep_ = false;
};

// Parses JSON refusing duplicate keys in any object.
Result<Doc> ParseStrict(const std::string& text, const std::string& where,
                        const std::set<std::string>& nested = {}) {
  Doc doc;
  StrictDocBuilder builder(&doc, nested);
  const bool ok = json::sax_parse(text, &builder);
  if (!builder.duplicate().empty()) {
    return Status::Corruption(where + ": key " + QuoteKey(builder.duplicate()) +
                              " appears twice in the header");
  }
  if (builder.too_deep()) {
    return Status::Corruption(where + ": header nests deeper than " +
                              std::to_string(StrictDocBuilder::kMaxDepth) + " levels");
  }
  if (!ok) return Status::Corruption(where + ": header is not valid JSON");
  return doc;
}

Result<std::vector<StTensor>> ParseHeader(const std::string& path, const std::string& header,
                                          uint64_t data_len, Metadata* metadata) {
  CKFMT_ASSIGN_OR_RETURN(Doc doc, ParseStrict(header, path, {"__metadata__"}));
  const json& j = doc.j;
  if (!j.is_object()) return Status::Corruption(path + ": header is not a JSON object");
  std::vector<StTensor> out;
  for (const std::string& key : doc.keys) {
    const json& v = j.at(key);
    std::string where = path + ": tensor " + QuoteKey(key);
    if (key == "__metadata__") {
      if (!v.is_object()) return Status::Corruption(path + ": __metadata__ is not an object");
      for (const std::string& mk : doc.nested_keys["__metadata__"]) {
        const json& mv = v.at(mk);
        if (!mv.is_string()) {
          return Status::Corruption(path + ": __metadata__ value for \"" + mk +
                                    "\" is not a string");
        }
        if (metadata) metadata->emplace_back(mk, mv.get<std::string>());
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return Status::Corruption(where + ": needs dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) return Status::Corruption(where + ": dtype is not a string");
    std::string dn = v["dtype"].get<std::string>();
    const StDType* dt = nullptr;
    for (const auto& d : kStDTypes) {
      if (dn == d.name) dt = &d;
    }
    if (!dt) return Status::Unsupported(where + ": unknown dtype \"" + dn + "\"");
    StTensor t{key, dt->dtype, {}, 0, 0};
    if (!v["shape"].is_array()) return Status::Corruption(where + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return Status::Corruption(where + ": shape holds " + d.dump());
      t.shape.push_back(d.get<uint64_t>());
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return Status::Corruption(where + ": data_offsets is not [begin, end]");
    }
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    auto numel = NumElements(t.shape);
    Result<uint64_t> bytes = numel.ok() ? CheckedBytes(*numel, DTypeSize(t.dtype)) : numel;
    if (!bytes.ok()) return Status::Corruption(where + ": shape overflows 64 bits");
    if (t.end < t.begin || t.end - t.begin != *bytes) {
      return Status::Corruption(where + ": data_offsets [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + ") hold " +
                                std::to_string(t.end - std::min(t.end, t.begin)) +
                                " bytes but dtype and shape need " + std::to_string(*bytes));
    }
    if (t.end > data_len) {
      return Status::Corruption(where + ": data_offsets end " + std::to_string(t.end) +
                                " lies past the " + std::to_string(data_len) +
                                "-byte data section (truncated or lying header)");
    }
    out.push_back(std::move(t));
  }
  std::vector<const StTensor*> sorted;
  for (const auto& t : out) {
    if (t.end > t.begin) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return Status::Corruption(path + ": tensors \"" + sorted[i - 1]->key + "\" and \"" +
                                sorted[i]->key + "\" overlap in the data section");
    }
  }
  return out;
}

struct OpenedFile {
  std::shared_ptr<InputFile> file;
  uint64_t data_start = 0;
  std::vector<StTensor> tensors;
};

// The safetensors blob that starts at `offset` of `file` (0 for a
// safetensors file) and whose data section runs to the file's end.
Result<OpenedFile> OpenSt(std::shared_ptr<InputFile> file, uint64_t offset, Metadata* metadata) {
  OpenedFile f;
  f.file = std::move(file);
  const std::string where =
      offset == 0 ? f.file->path() : f.file->path() + " @" + std::to_string(offset);
  const uint64_t size = f.file->size() - std::min(offset, f.file->size());
  if (size < 8) return Status::Corruption(where + ": no room for the 8-byte header length");
  uint8_t lenb[8];
  CKFMT_RETURN_IF_ERROR(f.file->ReadAt(offset, lenb, 8, "header length"));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | lenb[i];
  if (hlen > kMaxHeader) {
    return Status::Corruption(where + ": header length " + std::to_string(hlen) +
                              " exceeds the 100 MiB limit");
  }
  if (hlen > size - 8) {
    return Status::Corruption(where + ": header length " + std::to_string(hlen) +
                              " runs past the end of the file (truncated?)");
  }
  std::string header(hlen, '\0');
  CKFMT_RETURN_IF_ERROR(f.file->ReadAt(offset + 8, header.data(), hlen, "header"));
  f.data_start = offset + 8 + hlen;
  CKFMT_ASSIGN_OR_RETURN(f.tensors,
                         ParseHeader(where, header, f.file->size() - f.data_start, metadata));
  return f;
}

Result<OpenedFile> OpenSt(const std::string& path, Metadata* metadata) {
  CKFMT_ASSIGN_OR_RETURN(auto file, InputFile::Open(path));
  return OpenSt(std::move(file), 0, metadata);
}

Result<std::shared_ptr<TensorSource>> MakeSource(const OpenedFile& f, const StTensor& t) {
  std::vector<uint64_t> stride(t.shape.size(), 1);
  for (size_t d = t.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * t.shape[d];
  uint64_t base = f.data_start + t.begin;
  auto file = f.file;
  std::string where = f.file->path() + ": tensor " + QuoteKey(t.key);
  CKFMT_ASSIGN_OR_RETURN(auto s, StridedTensorSource::Create(
                                     t.dtype, t.shape, stride, 0, t.end - t.begin,
                                     [file, base, where](uint64_t off, void* dst, uint64_t n) {
                                       return file->ReadAt(base + off, dst, n, where);
                                     },
                                     where));
  return s;
}

// A file that DCP's HuggingFace writer saved per rank (save_distributed)
// holds that rank's chunks, and DCP_SHARDING_INFO places them in larger
// tensors whose shapes the file does not record. Each is converted as the
// tensor it holds; the note says which are chunks at nonzero offsets (a
// chunk at offset 0 looks like a whole tensor and cannot be told apart).
void NoteDcpShards(const Metadata& metadata, const std::string& path, ConvertLog* log) {
  Result<std::optional<DcpShardingInfo>> info = DcpShardingInfoOf(metadata, path);
  if (!info.ok() || !*info) return;  // only metadata here, kept as it is
  std::vector<std::string> shards;
  for (const auto& [fqn, offsets] : **info) {
    if (std::any_of(offsets.begin(), offsets.end(), [](uint64_t o) { return o != 0; })) {
      shards.push_back(fqn);
    }
  }
  if (shards.empty()) return;
  std::sort(shards.begin(), shards.end());
  log->Note(path + ": " + NameSomeKeys(shards) +
            " are, by DCP_SHARDING_INFO, chunks at nonzero offsets of larger tensors "
            "(one rank's part of a DCP save); each is stored as the chunk it holds");
}

// Places leaves by dotted key (split) or flat; falls back to flat on a
// conflict such as "a" and "a.b" both being tensors.
Node Place(std::vector<std::pair<std::string, Node>> leaves, bool split, ConvertLog* log,
           const std::string& where) {
  // A key of more than kMaxTreeDepth parts would nest that deep: flat too.
  const bool too_deep = std::any_of(leaves.begin(), leaves.end(),
                                    [](const auto& kv) { return SplitsTooDeep(kv.first); });
  if (split && too_deep) {
    log->Note(where + ": a key has more than " + std::to_string(kMaxTreeDepth) +
              " dotted parts; kept as flat keys");
  } else if (split) {
    // Each dict's children by name, mirroring the tree by index, so that a
    // file of many keys is placed in linear time.
    struct Names {
      std::unordered_map<std::string, size_t> pos;
      std::vector<Names> kids;
    };
    Node root = Node::Dict();
    Names root_names;
    bool ok = true;
    for (auto& [key, leaf] : leaves) {
      Node* cur = &root;
      Names* names = &root_names;
      size_t start = 0;
      for (;;) {
        size_t dot = key.find('.', start);
        std::string part = key.substr(start, dot == std::string::npos ? dot : dot - start);
        auto [it, fresh] = names->pos.emplace(part, cur->children.size());
        if (fresh) names->kids.emplace_back();
        if (dot == std::string::npos) {
          if (fresh) cur->children.emplace_back(part, leaf);
          ok = fresh;
          break;
        }
        if (fresh) cur->children.emplace_back(part, Node::Dict());
        Node* next = &cur->children[it->second].second;
        if (next->kind != Node::Kind::kDict) {
          ok = false;
          break;
        }
        cur = next;
        names = &names->kids[it->second];
        start = dot + 1;
      }
      if (!ok) break;
    }
    if (ok) return root;
    log->Note(where + ": keys conflict when split on '.' (a key is also a prefix of another); "
              "kept as flat keys");
  }
  Node root = Node::Dict();
  for (auto& [key, leaf] : leaves) root.children.emplace_back(key, std::move(leaf));
  return root;
}

}  // namespace

std::string SafetensorsDTypeName(DType t) {
  for (const auto& d : kStDTypes) {
    if (d.dtype == t) return d.name;
  }
  return "";
}

struct SafetensorsBlob::Parsed {
  OpenedFile f;
  std::unordered_map<std::string, size_t> by_key;  // index into f.tensors
};

SafetensorsBlob::SafetensorsBlob(std::unique_ptr<Parsed> p, Metadata m)
    : parsed_(std::move(p)), metadata_(std::move(m)) {}
SafetensorsBlob::~SafetensorsBlob() = default;

Result<std::shared_ptr<const SafetensorsBlob>> SafetensorsBlob::Open(
    std::shared_ptr<InputFile> file, uint64_t offset) {
  auto parsed = std::make_unique<Parsed>();
  Metadata metadata;
  CKFMT_ASSIGN_OR_RETURN(parsed->f, OpenSt(std::move(file), offset, &metadata));
  for (size_t i = 0; i < parsed->f.tensors.size(); ++i) {
    parsed->by_key.emplace(parsed->f.tensors[i].key, i);  // keys are unique (ParseStrict)
  }
  return std::shared_ptr<const SafetensorsBlob>(
      new SafetensorsBlob(std::move(parsed), std::move(metadata)));
}

Result<std::shared_ptr<TensorSource>> SafetensorsBlob::Find(const std::string& key) const {
  auto it = parsed_->by_key.find(key);
  if (it == parsed_->by_key.end()) return std::shared_ptr<TensorSource>();
  return MakeSource(parsed_->f, parsed_->f.tensors[it->second]);
}

Result<std::optional<DcpShardingInfo>> DcpShardingInfoOf(const Metadata& metadata,
                                                         const std::string& where) {
  auto kv = std::find_if(metadata.begin(), metadata.end(),
                         [](const auto& p) { return p.first == "DCP_SHARDING_INFO"; });
  if (kv == metadata.end()) return std::optional<DcpShardingInfo>();
  const std::string& text = kv->second;
  const std::string bad = where + ": DCP_SHARDING_INFO is not {\"<fqn>\": {\"saved_offsets\": "
                          "[<int>, ...]}, ...}";
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Corruption(bad);
  DcpShardingInfo info;
  for (const auto& [fqn, v] : j.items()) {
    if (!v.is_object() || !v.contains("saved_offsets") || !v["saved_offsets"].is_array()) {
      return Status::Corruption(bad);
    }
    std::vector<uint64_t> offs;
    for (const auto& o : v["saved_offsets"]) {
      if (!o.is_number_unsigned()) return Status::Corruption(bad);
      offs.push_back(o.get<uint64_t>());
    }
    info.emplace(fqn, std::move(offs));
  }
  return std::optional<DcpShardingInfo>(std::move(info));
}

bool LooksLikeSafetensors(const uint8_t* p, size_t n, uint64_t file_size) {
  if (n < 9) return false;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | p[i];
  return hlen >= 2 && hlen <= kMaxHeader && hlen <= file_size - 8 && p[8] == '{';
}

std::string ShardedIndexPath(const std::string& path) {
  if (IsDirectory(path)) {
    std::string p = JoinPath(path, "model.safetensors.index.json");
    if (PathExists(p)) return p;
    return "";
  }
  const std::string suffix = ".safetensors.index.json";
  if (path.size() >= suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return path;
  }
  return "";
}

Result<Node> ReadSafetensors(const std::string& path, const SafetensorsReadOptions& options,
                             ConvertLog* log, Metadata* metadata) {
  CKFMT_ASSIGN_OR_RETURN(OpenedFile f, OpenSt(path, metadata));
  NoteDcpShards(*metadata, path, log);
  std::vector<std::pair<std::string, Node>> leaves;
  for (const auto& t : f.tensors) {
    Node n;
    n.kind = Node::Kind::kTensor;
    CKFMT_ASSIGN_OR_RETURN(n.tensor, MakeSource(f, t));
    leaves.emplace_back(t.key, std::move(n));
  }
  return Place(std::move(leaves), options.split_dotted, log, path);
}

Result<Node> ReadSafetensorsSharded(const std::string& path,
                                    const SafetensorsReadOptions& options, ConvertLog* log,
                                    Metadata* metadata) {
  std::string index_path = ShardedIndexPath(path);
  if (index_path.empty()) index_path = path;
  CKFMT_ASSIGN_OR_RETURN(auto f, InputFile::Open(index_path));
  if (f->size() > kMaxHeader) return Status::Unsupported(index_path + ": index over 100 MiB");
  std::string text(f->size(), '\0');
  CKFMT_RETURN_IF_ERROR(f->ReadAt(0, text.data(), text.size(), "index"));
  CKFMT_ASSIGN_OR_RETURN(Doc doc, ParseStrict(text, index_path, {"weight_map", "metadata"}));
  const json& j = doc.j;
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Status::Corruption(index_path + ": no weight_map object");
  }
  if (j.contains("metadata") && j["metadata"].is_object()) {
    for (const std::string& mk : doc.nested_keys["metadata"]) {
      const json& mv = j["metadata"].at(mk);
      metadata->emplace_back(mk, mv.is_string() ? mv.get<std::string>() : mv.dump());
    }
  }
  const json& weight_map = j["weight_map"];
  const std::vector<std::string>& weight_keys = doc.nested_keys["weight_map"];
  std::string dir = DirName(index_path);
  std::map<std::string, std::string> key_file;
  std::vector<std::string> shard_order;
  for (const std::string& key : weight_keys) {
    const json& value = weight_map.at(key);
    if (!value.is_string()) {
      return Status::Corruption(index_path + ": weight_map[" + QuoteKey(key) + "] is not a string");
    }
    std::string file = value.get<std::string>();
    if (file.find('/') != std::string::npos || file.find("..") != std::string::npos) {
      return Status::Corruption(index_path + ": refusing shard path \"" + file + "\"");
    }
    key_file[key] = file;
    if (std::find(shard_order.begin(), shard_order.end(), file) == shard_order.end()) {
      shard_order.push_back(file);
    }
  }
  std::map<std::string, std::pair<std::shared_ptr<OpenedFile>, const StTensor*>> found;
  std::vector<std::shared_ptr<OpenedFile>> opened;
  std::set<std::string> meta_keys;
  for (const auto& [k, v] : *metadata) meta_keys.insert(k);
  for (const auto& shard : shard_order) {
    Metadata shard_meta;
    CKFMT_ASSIGN_OR_RETURN(OpenedFile of, OpenSt(JoinPath(dir, shard), &shard_meta));
    NoteDcpShards(shard_meta, JoinPath(dir, shard), log);
    for (auto& kv : shard_meta) {
      if (meta_keys.insert(kv.first).second) metadata->push_back(kv);
    }
    auto sp = std::make_shared<OpenedFile>(std::move(of));
    opened.push_back(sp);
    for (const auto& t : sp->tensors) {
      auto [it, fresh] = found.emplace(t.key, std::make_pair(sp, &t));
      if (!fresh) {
        return Status::Corruption(index_path + ": tensor " + QuoteKey(t.key) +
                                  " is in two shards (" + it->second.first->file->path() +
                                  " and " + shard + ")");
      }
      auto kf = key_file.find(t.key);
      if (kf == key_file.end()) {
        log->Note(QuoteKey(t.key) + ": in shard " + shard + " but not in the weight_map; included");
      } else if (kf->second != shard) {
        return Status::Corruption(index_path + ": weight_map puts " + QuoteKey(t.key) + " in " +
                                  kf->second + " but it is in " + shard);
      }
    }
  }
  std::vector<std::pair<std::string, Node>> leaves;
  std::set<std::string> placed;
  auto add = [&](const std::string& key) -> Status {
    auto it = found.find(key);
    if (it == found.end()) {
      return Status::Corruption(index_path + ": tensor " + QuoteKey(key) +
                                " is listed in the weight_map but missing from " + key_file[key]);
    }
    if (!placed.insert(key).second) return Status::OK();
    Node n;
    n.kind = Node::Kind::kTensor;
    CKFMT_ASSIGN_OR_RETURN(n.tensor, MakeSource(*it->second.first, *it->second.second));
    leaves.emplace_back(key, std::move(n));
    return Status::OK();
  };
  for (const std::string& key : weight_keys) CKFMT_RETURN_IF_ERROR(add(key));
  for (const auto& sp : opened) {
    for (const auto& t : sp->tensors) CKFMT_RETURN_IF_ERROR(add(t.key));
  }
  return Place(std::move(leaves), options.split_dotted, log, index_path);
}

}  // namespace ckfmt::convert
