// ckfmt as a source (through CheckpointReader) and as a sink (through the
// streaming CheckpointWriter).
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "ckfmt/host_memory.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "sink.h"

namespace ckfmt::convert {
namespace {

class CkfmtTensorSource : public TensorSource {
 public:
  std::shared_ptr<CheckpointReader> reader;
  KeyPath path;
  std::vector<Region> piece_regions;  // for partial entries

  Status Stream(PieceMemory& memory, const PieceFn& fn) override {
    uint64_t numel = 1;
    for (uint64_t d : shape) numel *= d;
    if (numel == 0) return fn(Region::Whole(shape), 0, nullptr, 0);
    if (!partial) return StreamBox(memory, Region::Whole(shape), fn);
    std::vector<Region> boxes;
    for (const Region& r : piece_regions) {
      if (r.NumElements()) boxes.push_back(r);
    }
    return ReadBoxes(memory, boxes, fn);
  }

  bool CanStreamBoxes() const override { return !partial; }

  Status StreamBox(PieceMemory& memory, const Region& box, const PieceFn& fn) override {
    std::vector<size_t> order(shape.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const uint64_t esize = DTypeSize(dtype);
    std::vector<Region> boxes;
    CKFMT_RETURN_IF_ERROR(SplitBox(
        box, order, memory.budget(), [&](const Region& r) { return r.NumElements() * esize; },
        [&](const Region& r) {
          boxes.push_back(r);
          return Status::OK();
        }));
    return ReadBoxes(memory, boxes, fn);
  }

 private:
  Status ReadBoxes(PieceMemory& memory, const std::vector<Region>& boxes, const PieceFn& fn) {
    return StreamWithReadAhead(
        boxes, 0,
        [&](const Region& r, int slot, const uint8_t** data, uint64_t* n) -> Status {
          *n = r.NumElements() * DTypeSize(dtype);
          uint8_t* out = memory.Buffer(PieceMemory::Id(slot, 0), *n);
          *data = out;
          return reader->ReadRegion(path, r, out);
        },
        fn);
  }
};

struct Walker {
  CheckpointWriter* w;
  const SinkOptions& opts;
  SinkStats* stats;
  PieceMemory memory{opts.budget};

  Status Visit(const Node& n, KeyPath& path) {
    switch (n.kind) {
      case Node::Kind::kNone: ++stats->scalars; return w->AddScalar(path, Value());
      case Node::Kind::kBool: ++stats->scalars; return w->AddScalar(path, Value(n.b));
      case Node::Kind::kInt: ++stats->scalars; return w->AddScalar(path, Value(n.i));
      case Node::Kind::kFloat: ++stats->scalars; return w->AddScalar(path, Value(n.f));
      case Node::Kind::kStr: ++stats->scalars; return w->AddScalar(path, Value(n.s));
      case Node::Kind::kBytes:
        if (n.partial) return PartialBytesRefused(DottedKeyPath(path));
        ++stats->blobs;
        stats->data_bytes += n.s.size();
        return w->AddBytes(path, n.content_type, n.s.data(), n.s.size());
      case Node::Kind::kTensor: {
        const TensorSource& t = *n.tensor;
        std::string key = DottedKeyPath(path);
        CKFMT_RETURN_IF_ERROR(n.tensor->Stream(
            memory, [&](const Region& r, uint32_t rank, const void* data, uint64_t nb) {
              CKFMT_RETURN_IF_ERROR(w->AddTensorPiece(path, t.dtype, t.shape, r, rank, data));
              stats->data_bytes += nb;
              if (opts.progress) opts.progress(stats->data_bytes, opts.total_bytes, key);
              return Status::OK();
            }));
        for (const auto& s : t.saved_layout) CKFMT_RETURN_IF_ERROR(w->AddSavedLayout(path, s));
        if (t.partial) CKFMT_RETURN_IF_ERROR(w->MarkPartial(path));
        ++stats->tensors;
        return Status::OK();
      }
      case Node::Kind::kDict:
      case Node::Kind::kList: {
        bool list = n.kind == Node::Kind::kList;
        if (!path.empty()) {
          CKFMT_RETURN_IF_ERROR(w->AddContainer(path, list ? EntryKind::kList : EntryKind::kDict));
          ++stats->containers;
        }
        for (size_t i = 0; i < n.children.size(); ++i) {
          if (list) path.emplace_back(static_cast<uint64_t>(i));
          else path.emplace_back(n.children[i].first);
          Status s = Visit(n.children[i].second, path);
          path.pop_back();
          CKFMT_RETURN_IF_ERROR(s);
        }
        return Status::OK();
      }
    }
    return Status::Internal("unhandled node");
  }
};

// Python typing of containers that ckfmt has no kind for, as JSON arrays
// of key paths (FormatKeyPath; the root, whose path would read back as one
// empty key, is null) for the metadata keys of sink.h.
struct Typing {
  nlohmann::json int_key_dicts = nlohmann::json::array();
  nlohmann::json tuples = nlohmann::json::array();
  nlohmann::json ordered_dicts = nlohmann::json::array();
  nlohmann::json dict_attributes = nlohmann::json::array();  // [path, JSON object text]
};

bool NestsAtMost(const nlohmann::ordered_json& v, int levels) {
  if (!v.is_structured()) return true;
  if (levels == 0) return false;
  for (const auto& x : v) {
    if (!NestsAtMost(x, levels - 1)) return false;
  }
  return true;
}

nlohmann::json PathJson(const KeyPath& path) {
  return path.empty() ? nlohmann::json() : nlohmann::json(FormatKeyPath(path));
}

void CollectTyping(const Node& n, KeyPath& path, Typing* t) {
  if (n.kind != Node::Kind::kDict && n.kind != Node::Kind::kList) return;
  if (n.int_keys) t->int_key_dicts.push_back(PathJson(path));
  if (n.is_tuple) t->tuples.push_back(PathJson(path));
  if (n.ordered) t->ordered_dicts.push_back(PathJson(path));
  if (!n.attributes.empty()) t->dict_attributes.push_back({PathJson(path), n.attributes});
  for (size_t i = 0; i < n.children.size(); ++i) {
    if (n.kind == Node::Kind::kList) path.emplace_back(static_cast<uint64_t>(i));
    else path.emplace_back(n.children[i].first);
    CollectTyping(n.children[i].second, path, t);
    path.pop_back();
  }
}

// Bytes of tensor and blob data under `n`, for CheckpointWriter::ExpectBytes
// (partial tensors are left out: they may hold far less than their shape).
uint64_t DataBytes(const Node& n) {
  uint64_t sum = 0;
  if (n.kind == Node::Kind::kTensor && n.tensor && !n.tensor->partial) sum = n.tensor->nbytes();
  if (n.kind == Node::Kind::kBytes) sum = n.s.size();
  for (const auto& child : n.children) sum += DataBytes(child.second);
  return sum;
}

}  // namespace

Result<SinkStats> WriteCkfmt(const Node& root, const std::string& path, const SinkOptions& options,
                             ConvertLog* log) {
  if (root.kind != Node::Kind::kDict) return Status::Internal("ckfmt root must be a dict");
  SaveOptions so;
  so.io.staging_bytes = options.staging;
  so.io.block_size = std::min<uint64_t>(so.io.block_size, std::max<uint64_t>(1 << 20, options.staging / 4));
  so.fsync = options.fsync;
  so.world_size = options.world_size;
  so.save_mode = options.save_mode;
  // Typing of Python containers, so that a later conversion back to
  // torch.save restores int keys, tuples and OrderedDicts with their
  // attributes.
  KeyPath p;
  Typing typing;
  CollectTyping(root, p, &typing);
  const std::pair<const char*, const nlohmann::json*> typing_meta[] = {
      {kIntKeyDictsMeta, &typing.int_key_dicts},
      {kTuplesMeta, &typing.tuples},
      {kOrderedDictsMeta, &typing.ordered_dicts},
      {kDictAttributesMeta, &typing.dict_attributes}};
  for (const auto& kv : options.metadata) {
    bool typing_key = false;
    for (const auto& [k, v] : typing_meta) typing_key = typing_key || kv.first == k;
    if (!typing_key) so.metadata.push_back(kv);
  }
  for (const auto& [k, v] : typing_meta) {
    if (!v->empty()) so.metadata.emplace_back(k, v->dump());
  }
  CKFMT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(path, so));
  w->ExpectBytes(DataBytes(root));
  SinkStats stats;
  Walker walker{w.get(), options, &stats};
  KeyPath kp;
  if (Status s = walker.Visit(root, kp); !s.ok()) {
    w->Abort();
    return s;
  }
  CKFMT_RETURN_IF_ERROR(w->Commit());
  stats.output_bytes = w->stats().file_bytes;
  (void)log;
  return stats;
}

Result<Node> ReadCkfmt(const std::string& path, ConvertLog* log,
                       std::vector<std::pair<std::string, std::string>>* metadata,
                       uint32_t* world_size) {
  CKFMT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> r, CheckpointReader::Open(path));
  std::shared_ptr<CheckpointReader> reader(std::move(r));
  const IndexRecord& index = reader->index();
  *world_size = index.world_size;
  for (const auto& kv : index.metadata) metadata->push_back(kv);
  // Build through an arena keyed by path: parents always precede children.
  std::map<KeyPath, Node*> nodes;
  Node root = Node::Dict();
  nodes[KeyPath{}] = &root;
  // Children vectors must not reallocate while pointers are held: first
  // count children, then reserve.
  std::map<KeyPath, size_t> counts;
  // Bytes entries are read whole into the tree (tensors stream later): their
  // declared sizes together must fit the machine, or no one could convert
  // the file; refused before any is allocated.
  HostMemoryNeed need;
  for (const auto& e : index.entries) {
    counts[KeyPath(e.path.begin(), e.path.end() - 1)]++;
    if (e.kind == EntryKind::kBytes && !e.partial) need.Add(e.path, e.ByteSize());
  }
  CKFMT_RETURN_IF_ERROR(need.Check(path));
  root.children.reserve(counts[KeyPath{}]);
  for (const auto& e : index.entries) {
    KeyPath parent(e.path.begin(), e.path.end() - 1);
    auto it = nodes.find(parent);
    if (it == nodes.end()) {
      return Status::Corruption(path + ": " + FormatKeyPath(e.path) + " has no parent entry");
    }
    Node n;
    switch (e.kind) {
      case EntryKind::kNone: n.kind = Node::Kind::kNone; break;
      case EntryKind::kBool: n.kind = Node::Kind::kBool; n.b = e.bool_value; break;
      case EntryKind::kInt: n.kind = Node::Kind::kInt; n.i = e.int_value; break;
      case EntryKind::kFloat: n.kind = Node::Kind::kFloat; n.f = e.float_value; break;
      case EntryKind::kString: n.kind = Node::Kind::kStr; n.s = e.string_value; break;
      case EntryKind::kDict: n = Node::Dict(); break;
      case EntryKind::kList: n = Node::List(); break;
      case EntryKind::kBytes: {
        n.kind = Node::Kind::kBytes;
        n.content_type = e.content_type;
        // Kept as a placeholder, not read: outputs that hold bytes refuse
        // it, safetensors drops it as it drops every bytes entry.
        n.partial = e.partial;
        if (e.partial) break;
        CKFMT_RETURN_IF_ERROR(ResizeOrFail(&n.s, e.ByteSize())
                                  .WithContext(path + ": allocating " + FormatKeyPath(e.path)));
        CKFMT_RETURN_IF_ERROR(reader->ReadRegion(e.path, Region::Whole(e.shape), n.s.data()));
        break;
      }
      case EntryKind::kTensor: {
        auto t = std::make_shared<CkfmtTensorSource>();
        t->reader = reader;
        t->path = e.path;
        t->dtype = e.dtype;
        t->shape = e.shape;
        t->saved_layout = e.saved_layout;
        t->partial = e.partial;
        for (const auto& pc : e.pieces) t->piece_regions.push_back(pc.region);
        // A parallel save keeps each rank's shard as a piece of its own,
        // with no saved layout: the pieces say where the data lived.
        if (t->saved_layout.empty() && index.save_mode == "parallel") {
          for (const auto& pc : e.pieces) t->saved_layout.push_back({pc.rank, pc.region});
        }
        n.kind = Node::Kind::kTensor;
        n.tensor = t;
        break;
      }
    }
    Node* parent_node = it->second;
    std::string key;
    if (const auto* k = std::get_if<std::string>(&e.path.back())) key = *k;
    parent_node->children.emplace_back(key, std::move(n));
    Node* self = &parent_node->children.back().second;
    if (e.IsContainer()) {
      self->children.reserve(counts[e.path]);
      nodes[e.path] = self;
    }
  }
  // Restore Python typing recorded by an earlier conversion: `mark` on the
  // container each entry of the metadata's array names.
  using Mark = std::function<void(Node*, const nlohmann::json&)>;
  auto apply = [&](const char* meta_key, const Mark& mark) {
    for (const auto& [k, v] : index.metadata) {
      if (k != meta_key) continue;
      auto j = nlohmann::json::parse(v, nullptr, false);
      if (!j.is_array()) {
        log->Note(path + ": metadata " + k + " is not a JSON array; ignored");
        continue;
      }
      for (const auto& entry : j) {
        // An entry is a path, or [path, value] (dict attributes).
        const nlohmann::json& at = entry.is_array() && entry.size() == 2 ? entry[0] : entry;
        const nlohmann::json& value = entry.is_array() && entry.size() == 2 ? entry[1] : entry;
        Node* node = nullptr;
        if (at.is_null()) {
          node = &root;
        } else if (at.is_string()) {
          auto it = nodes.find(ParseKeyPath(at.get<std::string>()));
          if (it != nodes.end()) node = it->second;
        }
        if (node) mark(node, value);
      }
    }
  };
  using Json = nlohmann::json;
  apply(kIntKeyDictsMeta, [](Node* n, const Json&) { n->int_keys = true; });
  apply(kTuplesMeta, [](Node* n, const Json&) { n->is_tuple = n->kind == Node::Kind::kList; });
  apply(kOrderedDictsMeta, [](Node* n, const Json&) { n->ordered = n->kind == Node::Kind::kDict; });
  apply(kDictAttributesMeta, [](Node* n, const Json& v) {
    if (n->kind != Node::Kind::kDict || !v.is_string()) return;
    auto object = nlohmann::ordered_json::parse(v.get<std::string>(), nullptr, false);
    // No deeper than a conversion records them: writing them back recurses.
    if (object.is_object() && NestsAtMost(object, kMaxAttributeDepth)) {
      n->attributes = object.dump();
    }
  });
  return root;
}

}  // namespace ckfmt::convert
