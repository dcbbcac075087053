#include "dcp_reader.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "ckfmt/index.h"
#include "file_io.h"
#include "torch_save_reader.h"
#include "pickle_globals.h"
#include "safetensors_reader.h"
#include "unpickler.h"
#include "zip_reader.h"

namespace ckfmt::convert {
namespace {

using py::Kind;

constexpr uint64_t kMaxMetadataBytes = 1ull << 30;
constexpr uint64_t kMaxBytesItem = 1ull << 30;
// Items up to this size are read whole, once, and parsed from memory: each
// is a zip archive that parsing reads in about twenty pieces.
constexpr uint64_t kSmallItem = 64 << 10;

struct ItemInfo {
  std::string relative_path;
  uint64_t offset = 0, length = 0;
};

struct Chunk {
  std::vector<uint64_t> offsets, sizes;
  ItemInfo item;
};

// The safetensors blob that FileSystemWriter(serialization_format=
// SAFETENSORS) appends to a data file. It keys tensors by fqn, so it holds
// at most one chunk of each; DCP_SHARDING_INFO in its __metadata__ says
// which ({"fqn": {"saved_offsets": [...]}, ...}).
struct DcpSafetensors {
  std::shared_ptr<const SafetensorsBlob> blob;
  DcpShardingInfo saved_offsets;
};

Result<DcpSafetensors> OpenDcpSafetensors(std::shared_ptr<InputFile> file, uint64_t offset) {
  const std::string where = file->path() + " @" + std::to_string(offset);
  DcpSafetensors st;
  CKFMT_ASSIGN_OR_RETURN(st.blob, SafetensorsBlob::Open(std::move(file), offset));
  CKFMT_ASSIGN_OR_RETURN(std::optional<DcpShardingInfo> info,
                         DcpShardingInfoOf(st.blob->metadata(), where));
  if (!info) {
    return Status::Unsupported(where + ": safetensors blob without DCP_SHARDING_INFO in its "
                               "__metadata__: which chunk each tensor is cannot be told");
  }
  st.saved_offsets = std::move(*info);
  return st;
}

// Shared state: the directory's data files, opened once.
struct DcpFiles {
  std::string dir;
  std::map<std::string, std::shared_ptr<InputFile>> files;
  std::map<std::pair<std::string, uint64_t>, DcpSafetensors> blobs;  // (file, offset)
  // The blob already opened at `offset` of `rel`, or null.
  const DcpSafetensors* KnownBlob(const std::string& rel, uint64_t offset) const {
    auto it = blobs.find({rel, offset});
    return it == blobs.end() ? nullptr : &it->second;
  }
  Result<const DcpSafetensors*> OpenBlob(const std::string& rel, std::shared_ptr<InputFile> file,
                                         uint64_t offset) {
    CKFMT_ASSIGN_OR_RETURN(DcpSafetensors st, OpenDcpSafetensors(std::move(file), offset));
    return &blobs.insert_or_assign({rel, offset}, std::move(st)).first->second;
  }
  Result<std::shared_ptr<InputFile>> Get(const std::string& rel) {
    auto it = files.find(rel);
    if (it != files.end()) return it->second;
    if (rel.empty() || rel.find("..") != std::string::npos || rel.front() == '/') {
      return Status::Corruption(dir + "/.metadata: refusing data file path \"" + rel + "\"");
    }
    CKFMT_ASSIGN_OR_RETURN(auto f, InputFile::Open(JoinPath(dir, rel)));
    files.emplace(rel, f);
    return f;
  }
};

uint32_t RankOf(const std::string& rel) {
  // __<rank>_<n>.distcp
  if (rel.rfind("__", 0) != 0) return 0;
  size_t end = rel.find('_', 2);
  if (end == std::string::npos) return 0;
  try {
    return static_cast<uint32_t>(std::stoul(rel.substr(2, end - 2)));
  } catch (...) {
    return 0;
  }
}

Result<std::vector<uint64_t>> Ints(const py::Object* o, const std::string& what,
                                   const std::string& where) {
  if (!o || (o->kind != Kind::kTuple && o->kind != Kind::kList)) {
    return Status::Corruption(where + ": " + what + " is " + (o ? py::Describe(*o) : "missing") +
                              ", expected a tuple of ints");
  }
  std::vector<uint64_t> v;
  for (const auto& it : o->items) {
    if (it->kind != Kind::kInt || it->i < 0) {
      return Status::Corruption(where + ": " + what + " holds " + py::Describe(*it));
    }
    v.push_back(static_cast<uint64_t>(it->i));
  }
  return v;
}

class DcpTensorSource : public TensorSource {
 public:
  std::string fqn, where;
  std::vector<Chunk> chunks;
  std::shared_ptr<DcpFiles> files;
  TorchReadOptions topts;

  Status Stream(PieceMemory& memory, const PieceFn& fn) override {
    uint64_t numel = 1;
    for (uint64_t d : shape) numel *= d;
    if (numel == 0) return fn(Region::Whole(shape), 0, nullptr, 0);
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const Chunk& c = chunks[ci];
      uint64_t cn = 1;
      for (uint64_t d : c.sizes) cn *= d;
      if (cn == 0) continue;
      std::string label = files->dir + "/" + c.item.relative_path + " @" +
                          std::to_string(c.item.offset) + " (" + QuoteKey(fqn) + " chunk " +
                          std::to_string(ci) + ")";
      uint32_t rank = RankOf(c.item.relative_path);
      CKFMT_ASSIGN_OR_RETURN(std::shared_ptr<TensorSource> src, ChunkSource(c, label));
      if (src->dtype != dtype || src->shape != c.sizes) {
        return Status::Corruption(label + ": chunk tensor is " + std::string(DTypeName(src->dtype)) +
                                  " of " + std::to_string(src->shape.size()) +
                                  "-d shape, metadata says " + std::string(DTypeName(dtype)) +
                                  " of the chunk's sizes");
      }
      CKFMT_RETURN_IF_ERROR(src->Stream(memory, [&](const Region& r, uint32_t, const void* data,
                                                    uint64_t n) {
        Region g = r;
        for (size_t d = 0; d < g.offsets.size(); ++d) g.offsets[d] += c.offsets[d];
        return fn(g, rank, data, n);
      }));
    }
    return Status::OK();
  }

 private:
  // DCP serializes a tensor item as a torch.save archive (its default) or,
  // with serialization_format=SAFETENSORS, as an entry of the safetensors
  // blob at the item's offset, which all of a data file's items share.
  Result<std::shared_ptr<TensorSource>> ChunkSource(const Chunk& c, const std::string& label) {
    const std::string& rel = c.item.relative_path;
    if (const DcpSafetensors* st = files->KnownBlob(rel, c.item.offset)) {
      return FromBlob(*st, c, label);
    }
    CKFMT_ASSIGN_OR_RETURN(auto file, files->Get(rel));
    std::shared_ptr<InputFile> item_file = file;
    if (c.item.length <= kSmallItem) {
      CKFMT_ASSIGN_OR_RETURN(item_file, InputFile::WithRegionInMemory(file, c.item.offset,
                                                                      c.item.length, label));
    }
    uint8_t head[9] = {};
    const uint64_t room = file->size() - std::min(file->size(), c.item.offset);
    const size_t head_n = static_cast<size_t>(std::min<uint64_t>(sizeof head, room));
    CKFMT_RETURN_IF_ERROR(item_file->ReadAt(c.item.offset, head, head_n, label));
    if (c.item.length >= 4 && LooksLikeZip(head, head_n)) {
      CKFMT_ASSIGN_OR_RETURN(std::shared_ptr<ZipArchive> zip,
                             ZipArchive::Open(item_file, c.item.offset, c.item.length, label));
      ConvertLog inner_log;
      CKFMT_ASSIGN_OR_RETURN(Node n, ReadTorchZip(zip, topts, &inner_log));
      if (n.kind != Node::Kind::kTensor) {
        return Status::Corruption(label + ": item holds a " +
                                  (n.kind == Node::Kind::kDict ? "dict" : "non-tensor value") +
                                  ", expected the chunk's tensor");
      }
      return n.tensor;
    }
    if (LooksLikeSafetensors(head, head_n, room)) {
      CKFMT_ASSIGN_OR_RETURN(const DcpSafetensors* st, files->OpenBlob(rel, file, c.item.offset));
      return FromBlob(*st, c, label);
    }
    return Status::Corruption(label + ": item is neither a torch.save archive nor in a "
                              "safetensors blob, DCP's two serializations");
  }

  Result<std::shared_ptr<TensorSource>> FromBlob(const DcpSafetensors& st, const Chunk& c,
                                                 const std::string& label) const {
    auto saved = st.saved_offsets.find(fqn);
    if (saved == st.saved_offsets.end() || saved->second != c.offsets) {
      // Two chunks of one key in one file: DCP kept only the last.
      return Status::Corruption(
          label + ": the file's safetensors blob holds " +
          (saved == st.saved_offsets.end()
               ? std::string("no chunk of this key")
               : "the chunk at offsets " + nlohmann::json(saved->second).dump()) +
          ", the metadata expects the chunk at offsets " + nlohmann::json(c.offsets).dump());
    }
    CKFMT_ASSIGN_OR_RETURN(std::shared_ptr<TensorSource> src, st.blob->Find(fqn));
    if (!src) {
      return Status::Corruption(label + ": the file's safetensors blob has no tensor " +
                                QuoteKey(fqn));
    }
    if (c.item.length != src->nbytes()) {
      return Status::Corruption(label + ": item of " + std::to_string(c.item.length) +
                                " bytes, but its safetensors tensor holds " +
                                std::to_string(src->nbytes()));
    }
    return src;
  }
};

// Builds nested containers from (path, leaf) pairs; int components make lists.
struct Builder {
  struct B {
    bool is_list = false;
    bool leaf = false;
    Node value;
    std::vector<std::pair<PathComponent, std::unique_ptr<B>>> kids;  // in insertion order
    std::map<PathComponent, B*> by_key;  // the same kids, found in log time
    B* Kid(const PathComponent& c) {
      auto it = by_key.find(c);
      return it == by_key.end() ? nullptr : it->second;
    }
  };
  B root;

  Status Insert(const KeyPath& path, Node leaf, const std::string& where) {
    B* cur = &root;
    for (size_t i = 0; i < path.size(); ++i) {
      if (cur->leaf) return Status::Corruption(where + ": a value and a container share a path");
      bool idx = std::holds_alternative<uint64_t>(path[i]);
      if (!cur->kids.empty() && cur->is_list != idx) {
        return Status::Corruption(where + ": mixes list indices and dict keys at one level");
      }
      cur->is_list = idx;
      B* next = cur->Kid(path[i]);
      if (!next) {
        cur->kids.emplace_back(path[i], std::make_unique<B>());
        next = cur->kids.back().second.get();
        cur->by_key.emplace(path[i], next);
      }
      cur = next;
    }
    if (cur->leaf || !cur->kids.empty()) return Status::Corruption(where + ": duplicate path");
    cur->leaf = true;
    cur->value = std::move(leaf);
    return Status::OK();
  }

  static Node Finish(B& b, ConvertLog* log, const std::string& key) {
    if (b.leaf) return std::move(b.value);
    if (b.is_list) {
      std::sort(b.kids.begin(), b.kids.end(), [](const auto& x, const auto& y) {
        return std::get<uint64_t>(x.first) < std::get<uint64_t>(y.first);
      });
      bool dense = true;
      for (size_t i = 0; i < b.kids.size(); ++i) {
        if (std::get<uint64_t>(b.kids[i].first) != i) dense = false;
      }
      Node n = dense ? Node::List() : Node::Dict();
      if (!dense) log->Note(key + ": list with missing indices stored as a dict");
      for (auto& [k, v] : b.kids) {
        std::string ks = std::to_string(std::get<uint64_t>(k));
        n.children.emplace_back(dense ? std::string() : ks, Finish(*v, log, JoinKey(key, ks)));
      }
      return n;
    }
    Node n = Node::Dict();
    for (auto& [k, v] : b.kids) {
      const std::string& ks = std::get<std::string>(k);
      n.children.emplace_back(ks, Finish(*v, log, JoinKey(key, ks)));
    }
    return n;
  }
};

}  // namespace

bool IsDcpDirectory(const std::string& dir) {
  return IsDirectory(dir) && PathExists(JoinPath(dir, ".metadata"));
}

Result<Node> ReadDcp(const std::string& dir, const DcpReadOptions& options, ConvertLog* log,
                     DcpInfo* info) {
  const std::string meta_path = JoinPath(dir, ".metadata");
  CKFMT_ASSIGN_OR_RETURN(auto meta_file, InputFile::Open(meta_path));
  if (meta_file->size() > kMaxMetadataBytes) {
    return Status::Unsupported(meta_path + ": larger than 1 GiB");
  }
  std::string bytes(meta_file->size(), '\0');
  CKFMT_RETURN_IF_ERROR(meta_file->ReadAt(0, bytes.data(), bytes.size(), "metadata"));
  UnpickleOptions uo;
  uo.where = meta_path;
  CKFMT_ASSIGN_OR_RETURN(py::Ref meta, Unpickle(bytes, uo));
  if (meta->kind != Kind::kInstance || meta->s2 != "Metadata") {
    return Status::Corruption(meta_path + ": holds " + py::Describe(*meta) +
                              ", expected torch.distributed.checkpoint.metadata.Metadata");
  }
  const py::Object* sdm = meta->Attr("state_dict_metadata");
  const py::Object* sdata = meta->Attr("storage_data");
  const py::Object* planner = meta->Attr("planner_data");
  if (const py::Object* v = meta->Attr("version"); v && v->kind == Kind::kStr) info->version = v->s;
  if (!sdm || sdm->kind != Kind::kDict) {
    return Status::Corruption(meta_path + ": state_dict_metadata is missing or not a dict");
  }
  if (!sdata || sdata->kind != Kind::kDict) {
    return Status::Corruption(meta_path + ": storage_data is missing or not a dict (was the "
                              "checkpoint written by FileSystemWriter?)");
  }
  // (fqn, offsets) -> item
  std::map<std::pair<std::string, std::vector<uint64_t>>, ItemInfo> items;
  for (const auto& [k, v] : sdata->dict) {
    std::string where = meta_path + ": storage_data";
    if (k->kind != Kind::kInstance || v->kind != Kind::kInstance) {
      return Status::Corruption(where + " maps " + py::Describe(*k) + " to " + py::Describe(*v));
    }
    const py::Object* fqn = k->Attr("fqn");
    if (!fqn || fqn->kind != Kind::kStr) return Status::Corruption(where + ": index without fqn");
    where += " [" + QuoteKey(fqn->s) + "]";
    std::vector<uint64_t> offs;
    const py::Object* off = k->Attr("offset");
    if (off && off->kind != Kind::kNone) {
      CKFMT_ASSIGN_OR_RETURN(offs, Ints(off, "offset", where));
    }
    ItemInfo it;
    const py::Object* rel = v->Attr("relative_path");
    const py::Object* o = v->Attr("offset");
    const py::Object* len = v->Attr("length");
    if (!rel || rel->kind != Kind::kStr || !o || o->kind != Kind::kInt || o->i < 0 || !len ||
        len->kind != Kind::kInt || len->i < 0) {
      return Status::Corruption(where + ": storage info needs relative_path, offset and length");
    }
    if (const py::Object* td = v->Attr("transform_descriptors");
        td && td->kind != Kind::kNone && !(td->kind == Kind::kList && td->items.empty())) {
      return Status::Unsupported(where + ": transformed (e.g. compressed) DCP items are not "
                                 "supported");
    }
    it.relative_path = rel->s;
    it.offset = static_cast<uint64_t>(o->i);
    it.length = static_cast<uint64_t>(len->i);
    items[{fqn->s, offs}] = it;
  }
  auto files = std::make_shared<DcpFiles>();
  files->dir = dir;
  TorchReadOptions topts{options.allow_opaque, options.verify_crc};
  // fqn -> the planner's original object path (as in a dict, the last of
  // equal keys counts), looked up once per fqn below.
  std::unordered_map<std::string_view, const py::Object*> planner_paths;
  if (planner && planner->kind == Kind::kDict) {
    for (const auto& [pk, pv] : planner->dict) {
      if (pk->kind == Kind::kStr) planner_paths[pk->s] = pv.get();
    }
  }
  Builder builder;
  uint32_t max_rank = 0;
  uint64_t coverage_budget = kCoverageBudget;
  for (const auto& [k, v] : sdm->dict) {
    if (k->kind != Kind::kStr) return Status::Corruption(meta_path + ": non-string fqn");
    const std::string& fqn = k->s;
    const std::string where = meta_path + ": " + QuoteKey(fqn);
    // Path: the planner's original object path, else the dotted fqn.
    KeyPath path;
    auto planned = planner_paths.find(fqn);
    const py::Object* mapped = planned == planner_paths.end() ? nullptr : planned->second;
    if (mapped && (mapped->kind == Kind::kTuple || mapped->kind == Kind::kList)) {
      for (const auto& c : mapped->items) {
        if (c->kind == Kind::kStr) path.emplace_back(c->s);
        else if (c->kind == Kind::kInt && c->i >= 0) path.emplace_back(static_cast<uint64_t>(c->i));
        else return Status::Corruption(where + ": planner path holds " + py::Describe(*c));
      }
    } else if (options.split_dotted && !SplitsTooDeep(fqn)) {
      size_t start = 0;
      for (;;) {
        size_t dot = fqn.find('.', start);
        path.emplace_back(fqn.substr(start, dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
    } else {
      if (options.split_dotted) {
        log->Note(meta_path + ": key " + QuoteKey(fqn) + " has more than " +
                  std::to_string(kMaxTreeDepth) + " dotted parts; kept as one key");
      }
      path.emplace_back(fqn);
    }
    if (path.empty()) return Status::Corruption(where + ": empty path");
    if (path.size() > size_t(kMaxTreeDepth)) {
      return Status::Unsupported(where + ": its planner path nests deeper than " +
                                 std::to_string(kMaxTreeDepth) + " levels");
    }
    if (v->kind != Kind::kInstance) return Status::Corruption(where + ": " + py::Describe(*v));
    Node leaf;
    if (v->s2 == "BytesStorageMetadata") {
      auto it = items.find({fqn, {}});
      if (it == items.end()) return Status::Corruption(where + ": no storage_data entry");
      const ItemInfo& ii = it->second;
      CKFMT_ASSIGN_OR_RETURN(auto file, files->Get(ii.relative_path));
      std::string label = dir + "/" + ii.relative_path + " @" + std::to_string(ii.offset) +
                          " (" + QuoteKey(fqn) + ")";
      if (ii.length > kMaxBytesItem) return Status::Unsupported(label + ": bytes item over 1 GiB");
      if (ii.length <= kSmallItem) {
        CKFMT_ASSIGN_OR_RETURN(file, InputFile::WithRegionInMemory(file, ii.offset, ii.length, label));
      }
      std::string head(std::min<uint64_t>(ii.length, 4), '\0');
      CKFMT_RETURN_IF_ERROR(file->ReadAt(ii.offset, head.data(), head.size(), label));
      if (LooksLikeZip(reinterpret_cast<const uint8_t*>(head.data()), head.size())) {
        CKFMT_ASSIGN_OR_RETURN(std::shared_ptr<ZipArchive> zip,
                               ZipArchive::Open(file, ii.offset, ii.length, label));
        CKFMT_ASSIGN_OR_RETURN(leaf, ReadTorchZip(zip, topts, log));
      } else {
        std::string raw(ii.length, '\0');
        CKFMT_RETURN_IF_ERROR(file->ReadAt(ii.offset, raw.data(), raw.size(), label));
        leaf.kind = Node::Kind::kBytes;
        leaf.content_type = "bytes";
        leaf.s = std::move(raw);
        log->Note(QuoteKey(fqn) +
                  ": DCP bytes item is not a torch.save archive; kept as raw bytes");
      }
      max_rank = std::max(max_rank, RankOf(ii.relative_path));
    } else if (v->s2 == "TensorStorageMetadata") {
      auto src = std::make_shared<DcpTensorSource>();
      src->fqn = fqn;
      src->where = where;
      src->files = files;
      src->topts = topts;
      const py::Object* props = v->Attr("properties");
      const py::Object* dt = nullptr;
      if (props && props->kind == Kind::kInstance) {
        if (props->state && props->state->kind == Kind::kTuple && !props->state->items.empty()) {
          dt = props->state->items[0].get();
        } else {
          dt = props->Attr("dtype");
        }
      }
      if (!dt || dt->kind != Kind::kGlobal || dt->s != "torch" || !DTypeOfTorchName(dt->s2)) {
        return Status::Unsupported(where + ": tensor dtype " + (dt ? py::Describe(*dt) : "?") +
                                   " is not supported");
      }
      src->dtype = *DTypeOfTorchName(dt->s2);
      CKFMT_ASSIGN_OR_RETURN(src->shape, Ints(v->Attr("size"), "size", where));
      auto total = NumElements(src->shape);
      if (!total.ok() || !CheckedBytes(*total, DTypeSize(src->dtype)).ok()) {
        return Status::Corruption(where + ": tensor size overflows 64 bits");
      }
      const py::Object* chunks = v->Attr("chunks");
      if (!chunks || chunks->kind != Kind::kList) {
        return Status::Corruption(where + ": chunks missing");
      }
      uint64_t covered = 0;
      for (size_t ci = 0; ci < chunks->items.size(); ++ci) {
        const py::Object& c = *chunks->items[ci];
        std::string cw = where + " chunk " + std::to_string(ci);
        Chunk ch;
        CKFMT_ASSIGN_OR_RETURN(ch.offsets, Ints(c.Attr("offsets"), "offsets", cw));
        CKFMT_ASSIGN_OR_RETURN(ch.sizes, Ints(c.Attr("sizes"), "sizes", cw));
        Region box = Region::Box(ch.offsets, ch.sizes);
        if (Status s = ValidateRegion(box, src->shape); !s.ok()) {
          return Status::Corruption(cw + ": " + s.message());
        }
        uint64_t n = box.NumElements();
        auto it = items.find({fqn, ch.offsets});
        if (it == items.end()) {
          if (n == 0) continue;
          return Status::Corruption(cw + ": no storage_data entry for offsets " + box.ToString());
        }
        ch.item = it->second;
        uint32_t rank = RankOf(ch.item.relative_path);
        max_rank = std::max(max_rank, rank);
        if (options.keep_layout) src->saved_layout.push_back(ShardRecord{rank, box});
        covered += n;
        src->chunks.push_back(std::move(ch));
      }
      // No element in two chunks: the index's coverage check (T3), with
      // its work limit shared by the whole metadata file.
      EntryRecord probe;
      probe.path = {fqn};
      probe.kind = EntryKind::kTensor;
      probe.dtype = src->dtype;
      probe.shape = src->shape;
      probe.partial = true;
      for (const Chunk& ch : src->chunks) {
        probe.pieces.push_back({0, Region::Box(ch.offsets, ch.sizes), {}});
      }
      if (Status s = CheckCoverage(probe, &coverage_budget); !s.ok()) {
        return Status(s.code(), where + ": chunks: " + s.message());
      }
      if (covered != *total) {
        src->partial = true;
        log->Note(QuoteKey(fqn) + ": chunks cover " + std::to_string(covered) + " of " +
                  std::to_string(*total) + " elements; stored as a partial entry");
      }
      leaf.kind = Node::Kind::kTensor;
      leaf.tensor = src;
    } else {
      return Status::Unsupported(where + ": storage metadata " + v->GlobalName());
    }
    CKFMT_RETURN_IF_ERROR(builder.Insert(path, std::move(leaf), where));
  }
  info->world_size = max_rank + 1;
  // Saved layouts name ranks; keep them within world_size.
  return Builder::Finish(builder.root, log, "");
}

}  // namespace ckfmt::convert
