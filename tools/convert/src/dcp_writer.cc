// DCP output: a directory that torch.distributed.checkpoint.load (and
// dcp_to_torch_save) reads, as one process's FileSystemWriter would write
// it. The tree is flattened the way DCP flattens a state dict: dicts always,
// lists only where they hold tensors or dicts, tuples and everything else
// as leaves. Each tensor is whole, one chunk, stored as a torch.save archive
// of it; every other leaf is a torch.save archive of its value (DCP's
// "bytes" items). All go into __0_0.distcp; .metadata is the pickled
// Metadata dataclass (protocol 2), with planner_data mapping each flattened
// key to its path. The directory appears complete or not at all: it is
// written under a temporary name and renamed.
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <map>
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

struct Item {
  std::string fqn;
  std::string key;  // the path for messages
  std::vector<PathPart> path;
  const Node* node;
  uint64_t offset = 0, length = 0;  // its archive in the data file
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
    std::string fqn;
    for (const PathPart& p : path) {
      if (!fqn.empty()) fqn += '.';
      fqn += std::holds_alternative<std::string>(p) ? std::get<std::string>(p)
                                                    : std::to_string(std::get<uint64_t>(p));
    }
    auto [it, fresh] = seen_.emplace(fqn, key);
    if (!fresh) {
      return Status::Unsupported(KeyForMessage(key) + " and " + KeyForMessage(it->second) +
                                 " flatten to the same DCP key " + QuoteKey(fqn));
    }
    items.push_back({std::move(fqn), key, path, &n});
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

void IntTuple(PickleWriter& w, const Shape& v) {
  w.Mark();
  for (uint64_t x : v) w.Int(static_cast<int64_t>(x));
  w.Tuple();
}

void TorchSize(PickleWriter& w, const Shape& v) {
  w.Global("torch", "Size");
  w.Mark();
  IntTuple(w, v);
  w.Tuple();
  w.Reduce();
}

Shape RowMajorStrides(const Shape& shape) {
  Shape stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  return stride;
}

void TensorMetadata(PickleWriter& w, const TensorSource& t) {
  NewDataclass(w, kMetadataModule, "TensorStorageMetadata");
  w.EmptyDict();
  w.Mark();
  w.Str("properties");
  NewDataclass(w, kMetadataModule, "TensorProperties");
  // TensorProperties.__setstate__'s tuple: dtype, layout, requires_grad,
  // memory format (as _MEM_FORMAT_ENCODING), pin_memory, strides.
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
  IntTuple(w, RowMajorStrides(t.shape));
  w.Tuple();
  w.Build();
  w.Str("size");
  TorchSize(w, t.shape);
  w.Str("chunks");
  w.EmptyList();
  w.Mark();
  NewDataclass(w, kMetadataModule, "ChunkStorageMetadata");
  w.EmptyDict();
  w.Mark();
  w.Str("offsets");
  TorchSize(w, Shape(t.shape.size(), 0));
  w.Str("sizes");
  TorchSize(w, t.shape);
  w.SetItems();
  w.Build();
  w.Appends();
  w.SetItems();
  w.Build();
}

void StorageEntry(PickleWriter& w, const Item& item) {
  const bool tensor = item.node->kind == Node::Kind::kTensor;
  NewDataclass(w, kMetadataModule, "MetadataIndex");
  w.EmptyDict();
  w.Mark();
  w.Str("fqn");
  w.Str(item.fqn);
  w.Str("offset");
  if (tensor) {
    TorchSize(w, Shape(item.node->tensor->shape.size(), 0));
  } else {
    w.None();
  }
  w.Str("index");
  if (tensor) w.Int(0); else w.None();
  w.SetItems();
  w.Build();
  NewDataclass(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
  w.EmptyDict();
  w.Mark();
  w.Str("relative_path");
  w.Str(kDataFile);
  w.Str("offset");
  w.Int(static_cast<int64_t>(item.offset));
  w.Str("length");
  w.Int(static_cast<int64_t>(item.length));
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
      TensorMetadata(w, *item.node->tensor);
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
    w.Mark();
    StorageEntry(w, item);
    w.SetItems();
  }
  w.Str("storage_meta");
  NewDataclass(w, kMetadataModule, "StorageMeta");
  w.EmptyDict();
  w.Mark();
  w.Str("checkpoint_id");
  w.None();
  w.Str("save_id");
  w.None();
  w.Str("load_id");
  w.None();
  w.Str("modules");
  w.EmptyList();
  w.SetItems();
  w.Build();
  w.Str("version");
  w.Str("1.0.0");
  w.SetItems();
  w.Build();
  w.Stop();
  return w.Take();
}

// `dst` may be missing or an empty directory (which the rename replaces);
// anything else is refused before any work is done.
Status CheckDestination(const std::string& dst) {
  std::error_code ec;
  auto st = std::filesystem::symlink_status(dst, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) return Status::OK();
  if (st.type() == std::filesystem::file_type::directory &&
      std::filesystem::is_empty(dst, ec) && !ec) {
    return Status::OK();
  }
  return Status::InvalidArgument(dst + ": exists and is not an empty directory; a DCP output is "
                                 "a new directory (remove the old one first)");
}

// Removes the temporary directory unless it was committed.
struct TempDir {
  std::string path;
  bool committed = false;
  ~TempDir() {
    std::error_code ec;
    if (!committed && !path.empty()) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

Result<SinkStats> WriteDcp(const Node& root, const std::string& dst_arg,
                           const SinkOptions& options, ConvertLog* log) {
  std::string dst = dst_arg;
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  CKFMT_RETURN_IF_ERROR(CheckDestination(dst));
  Flattener flat(log);
  std::vector<PathPart> path;
  CKFMT_RETURN_IF_ERROR(flat.Visit(root, path, ""));
  for (const Item& item : flat.items) {
    const Node& n = *item.node;
    if (n.kind == Node::Kind::kTensor && n.tensor->partial) {
      return Status::Unsupported(KeyForMessage(item.key) +
                                 ": tensor is partial (not every element was saved); DCP "
                                 "output writes whole tensors");
    }
  }

  const std::string tmp_path = TemporaryPathFor(dst);
  if (::mkdir(tmp_path.c_str(), 0755) != 0) {
    if (errno == ENOENT) return Status::NotFound(dst + ": its directory does not exist");
    return Status::FromErrno(errno, "cannot create directory " + tmp_path);
  }
  TempDir tmp{tmp_path};
  SinkStats stats;
  PieceMemory memory(options.budget);
  {
    CKFMT_ASSIGN_OR_RETURN(auto data, OutputFile::Create(JoinPath(tmp.path, kDataFile)));
    uint64_t end = 0;
    for (Item& item : flat.items) {
      item.offset = (end + 63) / 64 * 64;  // tensor bytes stay 64-byte aligned in the file
      CKFMT_ASSIGN_OR_RETURN(item.length,
                             WriteTorchArchive(*item.node, item.key, data.get(), item.offset,
                                               memory, options, log, &stats));
      end = item.offset + item.length;
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
  // An empty directory at dst is replaced; rename(2) refuses a non-empty one.
  CKFMT_RETURN_IF_ERROR(CommitRename(tmp.path, dst, options.fsync));
  tmp.committed = true;
  return stats;
}

}  // namespace ckfmt::convert
