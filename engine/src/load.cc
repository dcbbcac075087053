// Load(): file entries -> the caller's state dict, under the load policies.
//
// Two passes: the first checks everything (kinds, dtypes, shapes, missing
// and unexpected keys) without touching the caller's dict, so a refused
// load changes nothing; the second allocates, inserts and reads all data in
// one pipelined pass over the file.
#include <algorithm>
#include <set>

#include "ckfmt/cuda.h"
#include "ckfmt/log.h"
#include "device/device_ops.h"
#include "ckfmt/host_memory.h"
#include "prefault.h"
#include "reader_impl.h"
#include "scalar_value.h"

namespace ckfmt {
namespace {

std::string Describe(const Value& v) {
  if (!v.is_tensor()) return ValueKindName(v.kind());
  const Tensor& t = v.as_tensor();
  std::string s = std::string(DTypeName(t.dtype())) + "[";
  for (size_t i = 0; i < t.global_shape().size(); ++i) {
    s += (i ? "," : "") + std::to_string(t.global_shape()[i]);
  }
  s += "]";
  if (t.shard()) s += " shard " + t.region().ToString();
  if (t.device().type != DeviceType::kCPU) s += " on " + DeviceName(t.device());
  return s;
}

std::string Describe(const EntryRecord& e) {
  if (e.kind != EntryKind::kTensor) return std::string(EntryKindName(e.kind));
  std::string s = std::string(DTypeName(e.dtype)) + "[";
  for (size_t i = 0; i < e.shape.size(); ++i) s += (i ? "," : "") + std::to_string(e.shape[i]);
  return s + "]";
}

// Whether the caller's value can take the file entry in place.
bool Compatible(const EntryRecord& e, const Value& v) {
  switch (e.kind) {
    case EntryKind::kTensor: {
      if (!v.is_tensor()) return false;
      const Tensor& t = v.as_tensor();
      return t.dtype() == e.dtype && t.global_shape() == e.shape &&
             ValidateRegion(t.region(), e.shape).ok() &&
             t.region().NumElements() == t.numel() && (t.data() || t.numel() == 0);
    }
    case EntryKind::kBytes: return v.kind() == Value::Kind::kBytes;
    case EntryKind::kInt: return v.kind() == Value::Kind::kInt;
    case EntryKind::kFloat: return v.kind() == Value::Kind::kFloat;
    case EntryKind::kBool: return v.kind() == Value::Kind::kBool;
    case EntryKind::kString: return v.kind() == Value::Kind::kString;
    case EntryKind::kNone: return v.is_none();
    case EntryKind::kDict: return v.is_dict();
    case EntryKind::kList: return v.is_list();
  }
  return false;
}

std::string JoinPaths(const std::vector<KeyPath>& paths) {
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + FormatKeyPath(p);
  return s;
}

struct Plan {
  std::vector<const EntryRecord*> in_place, create;
};

}  // namespace

std::string LoadReport::ToString() const {
  std::string s;
  auto section = [&](const char* title, const std::vector<KeyPath>& paths) {
    s += std::string(title) + " (" + std::to_string(paths.size()) + ")\n";
    for (const auto& p : paths) s += "  " + FormatKeyPath(p) + "\n";
  };
  section("loaded in place", loaded_in_place);
  section("reconstructed", reconstructed);
  section("missing (in the state dict, not in the file)", missing);
  section("unexpected (in the file, not loaded)", unexpected);
  s += "bytes read: " + std::to_string(bytes_read) + " (" + std::to_string(bytes_read_direct) +
       " straight into place)\n";
  return s;
}

Allocator ReconstructionAllocator(const LoadOptions& o) {
  if (o.allocator) return o.allocator;
  return o.reconstruct_device.type == DeviceType::kCUDA ? CudaAllocator() : HostAllocator();
}

Result<LoadReport> LoadImpl(CheckpointReader::Impl& r, Value* sd, const LoadOptions& o) {
  const std::string& file = r.file.path();
  if (!sd || !sd->is_dict()) {
    return Status::InvalidArgument(file + ": Load needs a dict to load into");
  }
  auto selected = [&](const KeyPath& p) {
    return o.prefixes.empty() ||
           std::any_of(o.prefixes.begin(), o.prefixes.end(),
                       [&](const KeyPath& pre) { return HasPrefix(p, pre); });
  };
  LoadReport report;
  Plan plan;
  std::vector<std::string> mismatches;
  std::vector<KeyPath> refused;
  std::vector<KeyPath> skipped_roots;  // unexpected entries not created
  // Pass 1: decide, touching nothing.
  for (const EntryRecord& e : r.index.entries) {
    if (!selected(e.path)) continue;
    if (std::any_of(skipped_roots.begin(), skipped_roots.end(),
                    [&](const KeyPath& s) { return HasPrefix(e.path, s); })) {
      continue;  // under an entry already reported
    }
    const Value* v = sd->Find(e.path);
    if (v) {
      if (!Compatible(e, *v)) {
        mismatches.push_back(FormatKeyPath(e.path) + ": the state dict has " + Describe(*v) +
                             ", the file has " + Describe(e));
      } else if (!e.IsContainer()) {
        plan.in_place.push_back(&e);
      }
      continue;
    }
    // The caller lacks it; a parent on the way may also be of the wrong kind.
    switch (o.unexpected) {
      case UnexpectedPolicy::kReconstruct: plan.create.push_back(&e); break;
      case UnexpectedPolicy::kError: refused.push_back(e.path); skipped_roots.push_back(e.path); break;
      case UnexpectedPolicy::kWarn:
      case UnexpectedPolicy::kIgnore:
        report.unexpected.push_back(e.path);
        skipped_roots.push_back(e.path);
        break;
    }
  }
  VisitValues(*sd, [&](const KeyPath& p, const Value& v) {
    bool leaf = !(v.is_dict() || v.is_list()) || (v.is_dict() ? v.as_dict().empty() : v.as_list().empty());
    if (leaf && selected(p) && !r.Find(p)) report.missing.push_back(p);
  });
  if (!mismatches.empty()) {
    std::string m = file + ": " + std::to_string(mismatches.size()) +
                    " entries do not match the state dict: ";
    for (size_t i = 0; i < mismatches.size(); ++i) m += (i ? "; " : "") + mismatches[i];
    return Status::Mismatch(m);
  }
  if (!refused.empty()) {
    return Status(StatusCode::kUnexpectedKeys,
                  file + ": " + std::to_string(refused.size()) +
                      " entries are in the file but not in the state dict: " + JoinPaths(refused));
  }
  if (!report.missing.empty() && o.missing == MissingPolicy::kError) {
    return Status(StatusCode::kMissingKeys,
                  file + ": " + std::to_string(report.missing.size()) +
                      " entries of the state dict are not in the file: " +
                      JoinPaths(report.missing));
  }
  // Device tensors need a device backend: checked here, so that a build or
  // machine without one refuses before anything changes.
  auto usable = [&](Device d, const KeyPath& p) {
    if (d.type == DeviceType::kCPU) return Status::OK();
    return DeviceOpsFor(d).status().WithContext(file + ": " + FormatKeyPath(p));
  };
  for (const EntryRecord* e : plan.in_place) {
    const Value* v = sd->Find(e->path);
    if (v->is_tensor()) CKFMT_RETURN_IF_ERROR(usable(v->as_tensor().device(), e->path));
  }
  for (const EntryRecord* e : plan.create) {
    if (e->kind != EntryKind::kTensor) continue;
    CKFMT_RETURN_IF_ERROR(usable(o.reconstruct_device, e->path));
    break;
  }
  // The sizes come from the file: refuse what this machine could never hold
  // before allocating any of it.
  HostMemoryNeed need;
  for (const EntryRecord* e : plan.create) {
    const bool host_tensor =
        e->kind == EntryKind::kTensor && o.reconstruct_device.type == DeviceType::kCPU;
    const bool host = e->kind == EntryKind::kBytes || host_tensor;
    if (host) need.Add(e->path, e->ByteSize());
  }
  for (const EntryRecord* e : plan.in_place) {
    if (e->kind == EntryKind::kBytes) need.Add(e->path, e->ByteSize());
  }
  CKFMT_RETURN_IF_ERROR(need.Check(file));
  if (!report.missing.empty() && o.missing == MissingPolicy::kWarn) {
    Log(LogLevel::kWarning, file + ": not in the file, left as they are: " + JoinPaths(report.missing));
  }
  if (!report.unexpected.empty() && o.unexpected == UnexpectedPolicy::kWarn) {
    Log(LogLevel::kWarning, file + ": in the file, not loaded: " + JoinPaths(report.unexpected));
  }

  // Pass 2: create what the caller lacks, assign scalars, then read all
  // data in one pass.
  Allocator alloc = ReconstructionAllocator(o);
  std::set<KeyPath> has_created_child;
  for (const EntryRecord* e : plan.create) {
    has_created_child.insert(KeyPath(e->path.begin(), e->path.end() - 1));
  }
  std::vector<const EntryRecord*> reads;
  // Reconstructed host tensors are fresh memory that the reads fill whole:
  // a worker faults their pages in meanwhile (see prefault.h).
  std::vector<std::pair<uint8_t*, size_t>> fresh_memory;
  for (const EntryRecord* e : plan.create) {
    Value fresh;
    if (e->kind == EntryKind::kTensor) {
      auto t = alloc(e->dtype, e->shape, e->path, o.reconstruct_device);
      if (!t.ok()) return t.status().WithContext(file + ": allocating " + FormatKeyPath(e->path));
      CKFMT_RETURN_IF_ERROR(usable(t->device(), e->path));
      if (t->dtype() != e->dtype || t->shape() != e->shape || (t->numel() && !t->data())) {
        return Status::InvalidArgument(file + ": the allocator returned " + Describe(Value(*t)) +
                                       " for " + FormatKeyPath(e->path) + ", which needs " +
                                       Describe(*e));
      }
      if (t->device().type == DeviceType::kCPU && t->nbytes() >= kMinPrefaultBytes) {
        fresh_memory.emplace_back(static_cast<uint8_t*>(t->data()), t->nbytes());
      }
      fresh = Value(std::move(*t));
    } else if (e->kind == EntryKind::kBytes) {
      Bytes b{e->content_type, {}};
      CKFMT_RETURN_IF_ERROR(ResizeOrFail(&b.data, e->ByteSize())
                                .WithContext(file + ": allocating " + FormatKeyPath(e->path)));
      fresh = Value(std::move(b));
    } else {
      fresh = ScalarValue(*e);
    }
    CKFMT_RETURN_IF_ERROR(InsertAtPath(sd, e->path, std::move(fresh)).WithContext(file));
    // Containers are reported only when empty: their children speak for them.
    if (!e->IsContainer() || !has_created_child.count(e->path)) {
      report.reconstructed.push_back(e->path);
    }
    if (e->HasData()) reads.push_back(e);
  }
  for (const EntryRecord* e : plan.in_place) {
    report.loaded_in_place.push_back(e->path);
    if (e->HasData()) {
      reads.push_back(e);
    } else {
      *sd->Find(e->path) = ScalarValue(*e);
    }
  }
  BackgroundPrefault prefault(r.pool, std::move(fresh_memory));
  std::vector<ReadTarget> targets;
  for (const EntryRecord* e : reads) {
    Value* v = sd->Find(e->path);
    if (e->kind == EntryKind::kTensor) {
      Tensor& t = v->as_tensor();
      targets.push_back(
          {e, t.region(), static_cast<uint8_t*>(t.data()), t.device(), t.on_huge_pages()});
    } else {
      Bytes& b = v->as_bytes();
      b.content_type = e->content_type;
      CKFMT_RETURN_IF_ERROR(ResizeOrFail(&b.data, e->ByteSize())
                                .WithContext(file + ": allocating " + FormatKeyPath(e->path)));
      targets.push_back({e, Region::Whole(e->shape), reinterpret_cast<uint8_t*>(b.data.data())});
    }
  }
  CKFMT_RETURN_IF_ERROR(
      r.session.Read(targets, r.pool, &report.bytes_read, &report.bytes_read_direct));
  return report;
}

}  // namespace ckfmt
