// DCP output: a directory that torch.distributed.checkpoint.load (and
// dcp_to_torch_save) reads, as one process's FileSystemWriter would write
// it. The tree is flattened the way DCP flattens a state dict: dicts always,
// lists only where they hold tensors or dicts, tuples and everything else
// as leaves. A tensor is stored as chunks, each a torch.save archive of its
// box: the boxes its ranks held when it was saved (its saved layout; flat
// ranges as the boxes that hold them), where those tile it and the source
// can read a box directly, else the whole
// tensor as one chunk; either way each rank of a load reads only the chunks
// that hold its part. Every other leaf is a torch.save archive of its value
// (DCP's "bytes" items). All go into __0_0.distcp; .metadata is the pickled
// Metadata dataclass (protocol 2), with planner_data mapping each flattened
// key to its path. The directory appears complete or not at all: it is
// written under a temporary name and renamed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <variant>
#include <vector>

#include "ckfmt/commit.h"
#include "pickle_writer.h"
#include "sink.h"
#include "torch_zip_writer.h"

namespace ckfmt::convert {
namespace {

constexpr const char* kDataFile = "__0_0.distcp";
constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

using PathPart = std::variant<std::string, uint64_t>;  // dict key or list index

struct Chunk {
  Region box;                       // tensors: in the tensor's coordinates
  uint64_t offset = 0, length = 0;  // its archive in the data file
};

struct Item {
  std::string fqn;
  std::string key;  // the path for messages
  std::vector<PathPart> path;
  const Node* node;
  std::vector<Chunk> chunks;  // one for a bytes item
};

// More chunks than this per tensor are not worth checking for a tiling
// (quadratic): such a tensor is written whole.
constexpr size_t kMaxChunks = 4096;

// The distinct non-empty boxes of `t`'s saved layout (replicas repeat
// them; a flat range, as FSDP1 shards are, becomes the boxes that hold
// it), in row-major order of their offsets, if they tile the tensor
// exactly and the source can read them; otherwise the whole tensor.
std::vector<Region> ChunkBoxes(const TensorSource& t) {
  const std::vector<Region> whole = {Region::Whole(t.shape)};
  if (!t.CanStreamBoxes() || t.saved_layout.size() < 2) return whole;
  const uint64_t numel = whole[0].NumElements();
  std::set<std::pair<Shape, Shape>> seen;
  std::vector<Region> boxes;
  uint64_t covered = 0;
  for (const ShardRecord& s : t.saved_layout) {
    if (!ValidateRegion(s.region, t.shape).ok()) return whole;
    const std::vector<Region> parts =
        s.region.kind == Region::Kind::kBox
            ? std::vector<Region>{s.region}
            : FlatRangeBoxes(t.shape, s.region.start, s.region.length);
    for (const Region& r : parts) {
      if (r.NumElements() == 0 || !seen.emplace(r.offsets, r.lengths).second) continue;
      covered += r.NumElements();
      // More than the tensor holds: overlaps (and no sum can wrap).
      if (boxes.size() == kMaxChunks || covered > numel) return whole;
      boxes.push_back(r);
    }
  }
  if (boxes.size() < 2 || covered != numel) return whole;
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (RegionsIntersect(t.shape, boxes[i], boxes[j])) return whole;
    }
  }
  std::sort(boxes.begin(), boxes.end(),
            [](const Region& a, const Region& b) { return a.offsets < b.offsets; });
  return boxes;
}

// One box of a tensor as a tensor of its own, for the chunk's archive.
class BoxView : public TensorSource {
 public:
  BoxView(std::shared_ptr<TensorSource> whole, Region box)
      : whole_(std::move(whole)), box_(std::move(box)) {
    dtype = whole_->dtype;
    shape = box_.lengths;
  }
  Status Stream(PieceMemory& memory, const PieceFn& fn) override {
    return whole_->StreamBox(memory, box_,
                             [&](const Region& r, uint32_t rank, const void* data, uint64_t n) {
                               Region local = r;
                               for (size_t d = 0; d < local.offsets.size(); ++d) {
                                 local.offsets[d] -= box_.offsets[d];
                               }
                               return fn(local, rank, data, n);
                             });
  }

 private:
  std::shared_ptr<TensorSource> whole_;
  Region box_;
};

bool Opaque(const Node& n) { return n.kind == Node::Kind::kBytes && n.content_type == "pickle"; }

// DCP's _is_terminal: a list is a leaf unless it holds a tensor, a dict or
// a list that is not a leaf; a tuple is always a leaf.
bool IsLeaf(const Node& n) {
  if (n.kind == Node::Kind::kDict) return false;
  if (n.kind != Node::Kind::kList || n.is_tuple) return true;
  for (const auto& [k, c] : n.children) {
    if (c.kind == Node::Kind::kTensor || c.kind == Node::Kind::kDict) return false;
    if (c.kind == Node::Kind::kList && !c.is_tuple && !IsLeaf(c)) return false;
  }
  return true;
}

class Flattener {
 public:
  explicit Flattener(ConvertLog* log) : log_(log) {}

  Status Visit(const Node& n, std::vector<PathPart>& path, const std::string& key) {
    if (n.kind == Node::Kind::kDict) {
      if (n.children.empty() && !path.empty()) {
        log_->dropped.emplace_back(key, "empty dict: DCP stores leaves only");
      }
      if (n.int_keys) log_->Note(key + ": int dict keys become strings, as DCP makes them");
      for (const auto& [k, c] : n.children) {
        path.emplace_back(k);
        CKFMT_RETURN_IF_ERROR(Visit(c, path, JoinKey(key, k)));
        path.pop_back();
      }
      return Status::OK();
    }
    if (!IsLeaf(n)) {
      for (size_t i = 0; i < n.children.size(); ++i) {
        path.emplace_back(uint64_t(i));
        CKFMT_RETURN_IF_ERROR(Visit(n.children[i].second, path, JoinKey(key, std::to_string(i))));
        path.pop_back();
      }
      return Status::OK();
    }
    if (Opaque(n)) {
      log_->dropped.emplace_back(key, "opaque pickle bytes are not written as DCP items");
      return Status::OK();
    }
    std::string fqn;  // ".".join(path), as DCP writes it: empty parts too
    for (size_t i = 0; i < path.size(); ++i) {
      if (i > 0) fqn += '.';
      fqn += std::holds_alternative<std::string>(path[i])
                 ? std::get<std::string>(path[i])
                 : std::to_string(std::get<uint64_t>(path[i]));
    }
    auto [it, fresh] = seen_.emplace(fqn, key);
    if (!fresh) {
      return Status::Unsupported(KeyForMessage(key) + " and " + KeyForMessage(it->second) +
                                 " flatten to the same DCP key " + QuoteKey(fqn));
    }
    items.push_back({std::move(fqn), key, path, &n, {}});
    return Status::OK();
  }

  std::vector<Item> items;

 private:
  ConvertLog* log_;
  std::map<std::string, std::string> seen_;  // fqn -> key path
};

// A dataclass instance as pickle rebuilds it: cls.__new__(cls), then BUILD.
void NewDataclass(PickleWriter& w, const char* module, const char* name) {
  w.Global(module, name);
  w.EmptyTuple();
  w.NewObj();
}

void TorchSize(PickleWriter& w, const Shape& v) {
  w.Global("torch", "Size");
  w.Mark();
  w.Mark();
  for (uint64_t x : v) w.Int(static_cast<int64_t>(x));
  w.Tuple();
  w.Tuple();
  w.Reduce();
}

void TensorMetadata(PickleWriter& w, const TensorSource& t, const std::vector<Chunk>& chunks) {
  NewDataclass(w, kMetadataModule, "TensorStorageMetadata");
  w.EmptyDict();
  w.Mark();
  w.Str("properties");
  NewDataclass(w, kMetadataModule, "TensorProperties");
  // TensorProperties.__setstate__'s tuple: dtype, layout, requires_grad,
  // memory format (as _MEM_FORMAT_ENCODING), pin_memory. Newer torch adds
  // strides as a sixth, optional, element that older releases refuse.
  w.Mark();
  w.Global("torch", std::string(DTypeName(t.dtype)));
  w.Global("torch.serialization", "_get_layout");
  w.Mark();
  w.Str("torch.strided");
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  w.Mark();
  w.Int(0);  // TORCH_CONTIGUOUS_FORMAT
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Tuple();
  w.Build();
  w.Str("size");
  TorchSize(w, t.shape);
  w.Str("chunks");
  w.EmptyList();
  w.Mark();
  for (const Chunk& c : chunks) {
    NewDataclass(w, kMetadataModule, "ChunkStorageMetadata");
    w.EmptyDict();
    w.Mark();
    w.Str("offsets");
    TorchSize(w, c.box.offsets);
    w.Str("sizes");
    TorchSize(w, c.box.lengths);
    w.SetItems();
    w.Build();
  }
  w.Appends();
  w.SetItems();
  w.Build();
}

void StorageEntry(PickleWriter& w, const Item& item, size_t k) {
  const bool tensor = item.node->kind == Node::Kind::kTensor;
  const Chunk& chunk = item.chunks[k];
  NewDataclass(w, kMetadataModule, "MetadataIndex");
  w.EmptyDict();
  w.Mark();
  w.Str("fqn");
  w.Str(item.fqn);
  w.Str("offset");
  if (tensor) {
    TorchSize(w, chunk.box.offsets);
  } else {
    w.None();
  }
  w.Str("index");
  if (tensor) w.Int(static_cast<int64_t>(k)); else w.None();
  w.SetItems();
  w.Build();
  NewDataclass(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
  w.EmptyDict();
  w.Mark();
  w.Str("relative_path");
  w.Str(kDataFile);
  w.Str("offset");
  w.Int(static_cast<int64_t>(chunk.offset));
  w.Str("length");
  w.Int(static_cast<int64_t>(chunk.length));
  w.SetItems();
  w.Build();
}

std::string MetadataPickle(const std::vector<Item>& items) {
  PickleWriter w(2);
  NewDataclass(w, kMetadataModule, "Metadata");
  w.EmptyDict();
  w.Mark();
  w.Str("state_dict_metadata");
  w.EmptyDict();
  for (const Item& item : items) {
    w.Mark();
    w.Str(item.fqn);
    if (item.node->kind == Node::Kind::kTensor) {
      TensorMetadata(w, *item.node->tensor, item.chunks);
    } else {
      NewDataclass(w, kMetadataModule, "BytesStorageMetadata");
    }
    w.SetItems();
  }
  w.Str("planner_data");
  w.EmptyDict();
  for (const Item& item : items) {
    w.Mark();
    w.Str(item.fqn);
    w.Mark();
    for (const PathPart& p : item.path) {
      if (std::holds_alternative<std::string>(p)) {
        w.Str(std::get<std::string>(p));
      } else {
        w.Int(static_cast<int64_t>(std::get<uint64_t>(p)));
      }
    }
    w.Tuple();
    w.SetItems();
  }
  w.Str("storage_data");
  w.EmptyDict();
  for (const Item& item : items) {
    for (size_t k = 0; k < item.chunks.size(); ++k) {
      w.Mark();
      StorageEntry(w, item, k);
      w.SetItems();
    }
  }
  // No storage_meta: readers make an empty one, and its class is newer
  // than DCP itself.
  w.Str("version");
  w.Str("1.0.0");
  w.SetItems();
  w.Build();
  w.Stop();
  return w.Take();
}

// Whether `dir` holds only what a DCP save writes: `.metadata` and
// `*.distcp` files. Otherwise the first other entry, in `*foreign`.
bool HoldsOnlyDcpFiles(const std::string& dir, std::string* foreign) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    const bool dcp_name = name == ".metadata" || (name.size() > 7 && name.ends_with(".distcp"));
    if (!dcp_name || !e.is_regular_file(ec) || e.is_symlink(ec)) {
      *foreign = name;
      return false;
    }
  }
  if (ec) *foreign = "(unreadable: " + ec.message() + ")";
  return !ec;
}

// What is at `dst`: nothing or an empty directory (which the rename
// replaces), or a DCP checkpoint (which is exchanged for the new one, then
// removed). Anything else is refused before any work is done.
enum class Destination { kNew, kReplaceDcp };

Result<Destination> CheckDestination(const std::string& dst) {
  std::error_code ec;
  auto st = std::filesystem::symlink_status(dst, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) return Destination::kNew;
  if (st.type() != std::filesystem::file_type::directory) {
    return Status::InvalidArgument(dst + ": exists and is not a directory; a DCP output is one");
  }
  if (std::filesystem::is_empty(dst, ec) && !ec) return Destination::kNew;
  std::string foreign;
  if (HoldsOnlyDcpFiles(dst, &foreign)) return Destination::kReplaceDcp;
  return Status::InvalidArgument(dst + ": holds " + foreign +
                                 ", which is not a DCP file (.metadata, *.distcp); a DCP "
                                 "output replaces only a DCP checkpoint or an empty directory");
}

// Removes the temporary directory unless it was committed; holds its lock
// (HoldTemporary) until then.
struct TempDir {
  std::string path;
  bool committed = false;
  int lock = -1;
  ~TempDir() {
    std::error_code ec;
    if (!committed && !path.empty()) std::filesystem::remove_all(path, ec);
    if (lock >= 0) ::close(lock);
  }
};

}  // namespace

Result<SinkStats> WriteDcp(const Node& root, const std::string& dst_arg,
                           const SinkOptions& options, ConvertLog* log) {
  std::string dst = dst_arg;
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  CKFMT_ASSIGN_OR_RETURN(const Destination destination, CheckDestination(dst));
  Flattener flat(log);
  std::vector<PathPart> path;
  CKFMT_RETURN_IF_ERROR(flat.Visit(root, path, ""));
  for (Item& item : flat.items) {
    const Node& n = *item.node;
    if (n.kind != Node::Kind::kTensor) {
      item.chunks.resize(1);
      continue;
    }
    if (n.tensor->partial) {
      return Status::Unsupported(KeyForMessage(item.key) +
                                 ": tensor is partial (not every element was saved); DCP "
                                 "output writes whole tensors");
    }
    for (Region& box : ChunkBoxes(*n.tensor)) item.chunks.push_back({std::move(box)});
  }

  RemoveStaleTemporaries(dst);  // of conversions killed before they committed
  const std::string tmp_path = TemporaryPathFor(dst);
  if (::mkdir(tmp_path.c_str(), 0755) != 0) {
    if (errno == ENOENT) return Status::NotFound(dst + ": its directory does not exist");
    return Status::FromErrno(errno, "cannot create directory " + tmp_path);
  }
  TempDir tmp{tmp_path};
  tmp.lock = ::open(tmp_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tmp.lock >= 0) HoldTemporary(tmp.lock);  // live: not stale to other conversions
  SinkStats stats;
  PieceMemory memory(options.budget);
  {
    CKFMT_ASSIGN_OR_RETURN(auto data, OutputFile::Create(JoinPath(tmp.path, kDataFile)));
    uint64_t end = 0;
    for (Item& item : flat.items) {
      for (Chunk& c : item.chunks) {
        Node part;
        const Node* value = item.node;
        if (item.chunks.size() > 1) {
          part.kind = Node::Kind::kTensor;
          part.tensor = std::make_shared<BoxView>(item.node->tensor, c.box);
          value = &part;
        }
        c.offset = (end + 63) / 64 * 64;  // tensor bytes stay 64-byte aligned in the file
        CKFMT_ASSIGN_OR_RETURN(c.length, WriteTorchArchive(*value, item.key, data.get(),
                                                           c.offset, memory, options, log, &stats));
        end = c.offset + c.length;
      }
      stats.tensors -= item.chunks.size() - 1;  // a tensor, however many chunks
    }
    CKFMT_RETURN_IF_ERROR(data->Commit(options.fsync));
    stats.output_bytes = end;
  }
  {
    const std::string meta = MetadataPickle(flat.items);
    CKFMT_ASSIGN_OR_RETURN(auto out, OutputFile::Create(JoinPath(tmp.path, ".metadata")));
    CKFMT_RETURN_IF_ERROR(out->WriteAt(0, meta.data(), meta.size()));
    CKFMT_RETURN_IF_ERROR(out->Commit(options.fsync));
    stats.output_bytes += meta.size();
  }
  if (destination == Destination::kNew) {
    // An empty directory at dst is replaced; rename(2) refuses a non-empty one.
    CKFMT_RETURN_IF_ERROR(CommitRename(tmp.path, dst, options.fsync));
    tmp.committed = true;
    return stats;
  }
  CKFMT_RETURN_IF_ERROR(CommitExchange(tmp.path, dst, options.fsync));
  // tmp.path now names the old checkpoint, which TempDir removes - unless
  // something other than DCP files came into it while this one was written.
  std::string foreign;
  if (!HoldsOnlyDcpFiles(tmp.path, &foreign)) {
    // Under a name that later conversions do not take for their own stale
    // temporary ("<dst>.kept.<hex>").
    const std::string kept = dst + ".kept" + tmp.path.substr(tmp.path.rfind('.'));
    const bool moved = ::rename(tmp.path.c_str(), kept.c_str()) == 0;
    tmp.committed = true;
    log->Note("kept the directory that " + dst + " named, now " + (moved ? kept : tmp.path) +
              ": it came to hold " + foreign + " while the new checkpoint was written");
  } else {
    log->Note("replaced the DCP checkpoint at " + dst);
  }
  return stats;
}

}  // namespace ckfmt::convert
