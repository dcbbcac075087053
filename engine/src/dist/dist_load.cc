// Resharding load: pre-creates this rank's shards of the entries the state
// dict lacks, then lets CheckpointReader::Load fill everything.
#include "ckfmt/dist/dist_load.h"

#include <algorithm>
#include <set>

#include "ckfmt/host_memory.h"

namespace ckfmt::dist {
namespace {

bool Selected(const LoadOptions& o, const KeyPath& p) {
  return o.prefixes.empty() || std::any_of(o.prefixes.begin(), o.prefixes.end(),
                                           [&](const KeyPath& pre) { return HasPrefix(p, pre); });
}

// Removes what PreCreate inserted, newest first.
void Rollback(Value* sd, const std::vector<KeyPath>& created) {
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    KeyPath parent(it->begin(), it->end() - 1);
    Value* p = parent.empty() ? sd : sd->Find(parent);
    if (!p) continue;
    if (const auto* key = std::get_if<std::string>(&it->back())) {
      if (p->is_dict()) p->as_dict().Erase(*key);
    } else if (p->is_list() && !p->as_list().empty()) {
      p->as_list().pop_back();
    }
  }
}

// A placeholder of the entry's kind that Load fills or assigns in place.
// `need` sums what the shards made so far take, refused beyond the machine.
Result<Value> Fresh(const EntryRecord& e, const ShardedLoadOptions& o, const Allocator& alloc,
                    const std::string& file, HostMemoryNeed* need) {
  switch (e.kind) {
    case EntryKind::kDict: return Value(Dict{});
    case EntryKind::kList: return Value(List{});
    case EntryKind::kInt: return Value(int64_t{0});
    case EntryKind::kFloat: return Value(0.0);
    case EntryKind::kBool: return Value(false);
    case EntryKind::kString: return Value(std::string());
    case EntryKind::kNone: return Value();
    case EntryKind::kBytes: return Value(Bytes{e.content_type, {}});
    case EntryKind::kTensor: break;
  }
  const std::string where = file + ": " + FormatKeyPath(e.path);
  std::optional<Region> region;
  if (o.layout) {
    CKFMT_ASSIGN_OR_RETURN(region, o.layout(e.path, e.shape));
  }
  if (region) {
    if (Status s = ValidateRegion(*region, e.shape); !s.ok()) {
      return Status::InvalidArgument(where + ": the layout's region: " + s.message());
    }
  }
  Shape shape = region ? LocalShape(*region) : e.shape;
  const Device device = o.load.reconstruct_device;
  if (device.type == DeviceType::kCPU) {
    need->Add(e.path, region ? region->NumElements() * DTypeSize(e.dtype) : e.ByteSize());
    CKFMT_RETURN_IF_ERROR(need->Check(file));
  }
  auto t = alloc(e.dtype, shape, e.path, device);
  if (!t.ok()) return t.status().WithContext(where + ": allocating");
  if (t->dtype() != e.dtype || t->shape() != shape || (t->numel() && !t->data()) ||
      t->device().type != device.type) {
    return Status::InvalidArgument(where + ": the allocator returned a tensor that does not fit " +
                                   (region ? "the shard " + region->ToString() : "the entry"));
  }
  if (region) t->SetShard(ShardSpec{e.shape, *region});
  return Value(std::move(*t));
}

}  // namespace

Result<LoadReport> LoadSharded(CheckpointReader& reader, Value* sd,
                               const ShardedLoadOptions& options) {
  const std::string& file = reader.path();
  if (!sd || !sd->is_dict()) return Status::InvalidArgument(file + ": Load needs a dict to load into");
  const LoadOptions& lo = options.load;
  std::vector<KeyPath> created;
  if (lo.unexpected == UnexpectedPolicy::kReconstruct && options.layout) {
    Allocator alloc = ReconstructionAllocator(lo);
    HostMemoryNeed need;
    for (const EntryRecord& e : reader.index().entries) {
      if (!Selected(lo, e.path) || sd->Find(e.path)) continue;
      auto v = Fresh(e, options, alloc, file, &need);
      Status s = v.ok() ? InsertAtPath(sd, e.path, std::move(*v)).WithContext(file) : v.status();
      if (!s.ok()) {
        Rollback(sd, created);
        return s;
      }
      created.push_back(e.path);
    }
  }
  auto report = reader.Load(sd, lo);
  if (!report.ok()) {
    Rollback(sd, created);
    return report.status();
  }
  if (created.empty()) return report;
  // What was pre-created counts as reconstructed (containers only when
  // empty, as Load reports them).
  std::set<KeyPath> made(created.begin(), created.end()), parents;
  for (const KeyPath& p : created) parents.insert(KeyPath(p.begin(), p.end() - 1));
  auto& in_place = report->loaded_in_place;
  in_place.erase(std::remove_if(in_place.begin(), in_place.end(),
                                [&](const KeyPath& p) { return made.count(p) > 0; }),
                 in_place.end());
  for (const KeyPath& p : created) {
    const Value* v = sd->Find(p);
    bool container = v && (v->is_dict() || v->is_list());
    if (!container || !parents.count(p)) report->reconstructed.push_back(p);
  }
  return report;
}

Result<Value> LoadRankState(CheckpointReader& reader, const LayoutFn& layout,
                            const ShardedLoadOptions& options) {
  ShardedLoadOptions o = options;
  o.layout = layout;
  o.load.unexpected = UnexpectedPolicy::kReconstruct;
  Value sd{Dict{}};
  CKFMT_RETURN_IF_ERROR(LoadSharded(reader, &sd, o).status());
  return sd;
}

Result<LoadReport> DistLoad(Communicator& comm, const std::string& path, Value* state_dict,
                            const ShardedLoadOptions& options, const ReadOptions& read_options) {
  Result<LoadReport> report = Status::Internal("not loaded");
  auto reader = CheckpointReader::Open(path, read_options);
  if (reader.ok()) {
    report = LoadSharded(**reader, state_dict, options);
  } else {
    report = reader.status();
  }
  Status local = report.ok() ? Status::OK() : report.status();
  CKFMT_RETURN_IF_ERROR(comm.AgreeOnStatus(local, "loading " + path));
  return report;
}

}  // namespace ckfmt::dist
