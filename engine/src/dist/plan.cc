#include "plan.h"

#include <algorithm>
#include <map>

#include "ckfmt/checksum.h"
#include "device/device_staging.h"
#include "wire.h"

namespace ckfmt::dist {
namespace {

std::string DescribeTensor(DType dtype, const Shape& shape) {
  std::string s = std::string(DTypeName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

EntryKind KindOf(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone: return EntryKind::kNone;
    case Value::Kind::kBool: return EntryKind::kBool;
    case Value::Kind::kInt: return EntryKind::kInt;
    case Value::Kind::kFloat: return EntryKind::kFloat;
    case Value::Kind::kString: return EntryKind::kString;
    case Value::Kind::kBytes: return EntryKind::kBytes;
    case Value::Kind::kTensor: return EntryKind::kTensor;
    case Value::Kind::kDict: return EntryKind::kDict;
    case Value::Kind::kList: return EntryKind::kList;
  }
  return EntryKind::kNone;
}

// XXH3 of `n` bytes on a GPU, copied to the host piece by piece through
// `staging`, set up on first use (one stream and bounce buffer for all).
Result<uint64_t> DeviceChecksum(std::unique_ptr<DeviceStaging>& staging, Device device,
                                const void* data, size_t n) {
  if (!staging) {
    CKFMT_ASSIGN_OR_RETURN(staging, DeviceStaging::For(device));
    staging->SetBounceSize(4 << 20);
  }
  ChecksumStream sum;
  CKFMT_RETURN_IF_ERROR(
      staging->ForEachHostPiece(device, data, n, [&](const uint8_t* p, size_t len, size_t) {
        sum.Update(p, len);
        return Status::OK();
      }));
  return sum.Digest();
}

// What a local and a merged plan entry share, in the order both are sent:
// what the entry is, and a scalar's value. Read back, a kind or dtype this
// build does not know, or an empty path, fails the reader.
template <typename Entry>
void WriteEntryHead(WireWriter& w, const Entry& e) {
  w.Path(e.path);
  w.U8(static_cast<uint8_t>(e.kind));
  w.U8(static_cast<uint8_t>(e.dtype));
  w.Dims(e.shape);
  w.Str(e.content_type);
  w.I64(e.int_value);
  w.F64(e.float_value);
  w.U8(e.bool_value);
  w.Str(e.string_value);
  w.U8(e.sharded);
  w.U8(e.on_device);
}

template <typename Entry>
void ReadEntryHead(WireReader& r, Entry* e) {
  e->path = r.Path();
  uint8_t kind = r.U8();
  if (kind < uint8_t(EntryKind::kTensor) || kind > uint8_t(EntryKind::kList)) r.Fail();
  e->kind = static_cast<EntryKind>(kind);
  auto dtype = DTypeFromId(r.U8());
  if (!dtype) r.Fail();
  e->dtype = dtype.value_or(DType::kU8);
  e->shape = r.Dims();
  e->content_type = r.Str();
  e->int_value = r.I64();
  e->float_value = r.F64();
  e->bool_value = r.U8() != 0;
  e->string_value = r.Str();
  e->sharded = r.U8() != 0;
  e->on_device = r.U8() != 0;
  if (e->path.empty()) r.Fail();
}

}  // namespace

uint64_t PlanEntry::ByteSize() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n * DTypeSize(dtype);
}

Result<std::vector<LocalEntry>> DescribeLocalState(const Value& state, int rank, bool checksums,
                                                   GpuTensorPolicy gpu) {
  if (!state.is_dict()) {
    return Status::InvalidArgument(std::string("the local state must be a dict, got a ") +
                                   ValueKindName(state.kind()));
  }
  std::vector<LocalEntry> out;
  Status status;
  std::unique_ptr<DeviceStaging> staging;  // for checksums of GPU replicas
  VisitValues(state, [&](const KeyPath& path, const Value& v) {
    if (!status.ok()) return;
    LocalEntry e;
    e.path = path;
    e.kind = KindOf(v);
    auto fail = [&](const std::string& m) {
      status = Status::InvalidArgument(FormatKeyPath(path) + ": " + m);
    };
    switch (v.kind()) {
      case Value::Kind::kTensor: {
        const Tensor& t = v.as_tensor();
        const bool on_device = t.device().type != DeviceType::kCPU;
        using Allow = GpuTensorPolicy::Allow;
        if (on_device && gpu.allow == Allow::kOneDevice && t.device().index != gpu.device) {
          return fail("is on " + DeviceName(t.device()) + " but the device communicator is on " +
                      DeviceName(Device{DeviceType::kCUDA, gpu.device}));
        }
        e.on_device = on_device;
        e.device = t.device();
        if (t.numel() > 0 && !t.data()) return fail("tensor has no data");
        e.sharded = t.shard().has_value();
        e.dtype = t.dtype();
        e.shape = t.global_shape();
        e.region = t.region();
        if (!ShapeBytes(e.shape, DTypeSize(e.dtype)).ok()) {
          return fail("global shape " + DescribeTensor(e.dtype, e.shape) + " overflows 64 bits");
        }
        if (Status s = ValidateRegion(e.region, e.shape); !s.ok()) {
          return fail("shard region: " + s.message());
        }
        if (e.region.NumElements() != t.numel()) {
          return fail("shard region " + e.region.ToString() + " holds " +
                      std::to_string(e.region.NumElements()) + " elements but the tensor has " +
                      std::to_string(t.numel()));
        }
        e.data = t.data();
        if (checksums && !e.sharded) {
          e.has_checksum = true;
          auto sum = on_device ? DeviceChecksum(staging, t.device(), t.data(), t.nbytes())
                               : Result<uint64_t>(Checksum(t.data(), t.nbytes()));
          if (!sum.ok()) return fail("checksum of the replica: " + sum.status().ToString());
          e.checksum = *sum;
        }
        break;
      }
      case Value::Kind::kBytes: {
        const Bytes& b = v.as_bytes();
        e.dtype = DType::kU8;
        e.shape = {b.data.size()};
        e.region = Region::Whole(e.shape);
        e.content_type = b.content_type;
        e.data = b.data.data();
        if (checksums) {
          e.has_checksum = true;
          e.checksum = Checksum(b.data.data(), b.data.size());
        }
        break;
      }
      case Value::Kind::kBool: e.bool_value = v.as_bool(); break;
      case Value::Kind::kInt: e.int_value = v.as_int(); break;
      case Value::Kind::kFloat: e.float_value = v.as_float(); break;
      case Value::Kind::kString: e.string_value = v.as_string(); break;
      default: break;
    }
    out.push_back(std::move(e));
  });
  CKFMT_RETURN_IF_ERROR(status);
  return out;
}

std::string EncodeLocalPlan(const std::vector<LocalEntry>& entries) {
  WireWriter w;
  w.U64(entries.size());
  for (const LocalEntry& e : entries) {
    WriteEntryHead(w, e);
    w.Reg(e.region);
    w.U8(e.has_checksum);
    w.U64(e.checksum);
  }
  return std::move(w.str());
}

Result<std::vector<LocalEntry>> DecodeLocalPlan(const std::string& bytes, int rank) {
  WireReader r(bytes, "rank " + std::to_string(rank) + "'s plan");
  uint64_t n = r.Count(16);
  std::vector<LocalEntry> out;
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    LocalEntry e;
    ReadEntryHead(r, &e);
    e.region = r.Reg();
    e.has_checksum = r.U8() != 0;
    e.checksum = r.U64();
    if (r.ok() && (e.kind == EntryKind::kTensor || e.kind == EntryKind::kBytes)) {
      auto numel = NumElements(e.shape);
      if (!numel.ok() || !CheckedBytes(*numel, DTypeSize(e.dtype)).ok() ||
          !ValidateRegion(e.region, e.shape).ok()) {
        r.Fail();
      }
    }
    out.push_back(std::move(e));
  }
  if (r.ok() && !r.done()) r.Fail();
  CKFMT_RETURN_IF_ERROR(r.status());
  return out;
}

namespace {

struct Merging {
  PlanEntry entry;
  int first_rank = 0;
  bool has_checksum = false;
  uint64_t checksum = 0;
  std::string mismatch;  // replicated contents differ (kChecksum)
  std::vector<size_t> children;
};

std::string Describe(const LocalEntry& e) {
  if (e.kind == EntryKind::kTensor) return "tensor " + DescribeTensor(e.dtype, e.shape);
  if (e.kind == EntryKind::kBytes) {
    return "bytes (" + std::to_string(e.shape[0]) + ", \"" + e.content_type + "\")";
  }
  return std::string(EntryKindName(e.kind));
}

std::string Describe(const PlanEntry& e) {
  if (e.kind == EntryKind::kTensor) return "tensor " + DescribeTensor(e.dtype, e.shape);
  if (e.kind == EntryKind::kBytes) {
    return "bytes (" + std::to_string(e.shape[0]) + ", \"" + e.content_type + "\")";
  }
  return std::string(EntryKindName(e.kind));
}

bool SameScalar(const PlanEntry& a, const LocalEntry& b) {
  switch (a.kind) {
    case EntryKind::kInt: return a.int_value == b.int_value;
    case EntryKind::kFloat:
      return std::memcmp(&a.float_value, &b.float_value, sizeof(double)) == 0;
    case EntryKind::kBool: return a.bool_value == b.bool_value;
    case EntryKind::kString: return a.string_value == b.string_value;
    default: return true;
  }
}

}  // namespace

Result<GlobalPlan> MergePlans(const std::vector<std::vector<LocalEntry>>& per_rank,
                              ReplicaCheck check, const std::string& file,
                              bool device_gathers) {
  std::vector<Merging> merged;
  std::vector<size_t> top;  // children of the root
  std::map<KeyPath, size_t> pos;
  std::vector<std::string> errors;
  auto error = [&](const KeyPath& p, const std::string& m) {
    if (errors.size() < 20) errors.push_back(FormatKeyPath(p) + ": " + m);
  };
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const LocalEntry& e : per_rank[r]) {
      auto [it, fresh] = pos.emplace(e.path, merged.size());
      if (fresh) {
        // Children in order of first appearance under their parent.
        KeyPath parent(e.path.begin(), e.path.end() - 1);
        auto pit = parent.empty() ? pos.end() : pos.find(parent);
        if (!parent.empty() && (pit == pos.end() || !(merged[pit->second].entry.kind == EntryKind::kDict ||
                                                       merged[pit->second].entry.kind == EntryKind::kList))) {
          pos.erase(it);
          error(e.path, "rank " + std::to_string(r) + " has it without a dict or list parent");
          continue;
        }
        (parent.empty() ? top : merged[pit->second].children).push_back(merged.size());
        Merging m;
        m.first_rank = static_cast<int>(r);
        PlanEntry& p = m.entry;
        p.path = e.path;
        p.kind = e.kind;
        p.dtype = e.dtype;
        p.shape = e.shape;
        p.content_type = e.content_type;
        p.int_value = e.int_value;
        p.float_value = e.float_value;
        p.bool_value = e.bool_value;
        p.string_value = e.string_value;
        m.has_checksum = e.has_checksum;
        m.checksum = e.checksum;
        merged.push_back(std::move(m));
      }
      Merging& m = merged[it->second];
      PlanEntry& p = m.entry;
      const std::string vs = "rank " + std::to_string(m.first_rank) + " has " + Describe(p) +
                             ", rank " + std::to_string(r) + " has " + Describe(e);
      if (!fresh) {
        if (p.kind != e.kind || p.dtype != e.dtype || p.shape != e.shape) {
          error(p.path, vs);
          continue;
        }
        if (p.kind == EntryKind::kBytes && p.content_type != e.content_type) {
          error(p.path, vs);
          continue;
        }
        if (check == ReplicaCheck::kChecksum && !SameScalar(p, e)) {
          error(p.path, "replicated value differs between rank " + std::to_string(m.first_rank) +
                            " and rank " + std::to_string(r));
          continue;
        }
      }
      if (p.kind == EntryKind::kTensor) {
        p.sharded = p.sharded || e.sharded;
        p.layout.push_back({static_cast<uint32_t>(r), e.region, e.on_device});
      } else if (p.kind == EntryKind::kBytes) {
        p.layout.push_back({static_cast<uint32_t>(r), e.region});
      }
      if (!fresh && check == ReplicaCheck::kChecksum && e.has_checksum && m.has_checksum &&
          e.checksum != m.checksum && m.mismatch.empty()) {
        m.mismatch = "replicated contents differ between rank " + std::to_string(m.first_rank) +
                     " and rank " + std::to_string(r) + " (XXH3 mismatch)";
      }
    }
  }
  // Owners: replicated data from the lowest rank; shards deduplicated and
  // checked to tile the tensor.
  for (Merging& m : merged) {
    PlanEntry& p = m.entry;
    if (!p.HasData()) continue;
    if (!p.sharded || p.kind == EntryKind::kBytes) {
      if (!m.mismatch.empty()) error(p.path, m.mismatch);
      const Source& first = p.layout.front();
      p.owners = {{first.rank, Region::Whole(p.shape), first.on_device}};
      p.on_device = device_gathers && first.on_device;
      p.layout.clear();
      p.sharded = false;
      continue;
    }
    for (const Source& s : p.layout) {
      if (s.region.NumElements() == 0) continue;
      bool dup = false;
      for (const Source& o : p.owners) dup = dup || o.region == s.region;
      if (!dup) p.owners.push_back(s);
    }
    // One gather per memory space: gathered over a device communicator, a
    // tensor's owners all hold it on their GPUs or all on the host.
    const bool first_on_device = !p.owners.empty() && p.owners.front().on_device;
    p.on_device = device_gathers && first_on_device;
    auto other = std::find_if(p.owners.begin(), p.owners.end(),
                              [&](const Source& o) { return o.on_device != first_on_device; });
    if (device_gathers && other != p.owners.end()) {
      error(p.path, "rank " + std::to_string(p.owners.front().rank) + " holds its shard on " +
                        (p.on_device ? "a GPU" : "the host") + ", rank " +
                        std::to_string(other->rank) + " on " +
                        (other->on_device ? "a GPU" : "the host") +
                        " (gathered over a device communicator, a tensor's shards must all be "
                        "on GPUs or all on the host)");
    }
    EntryRecord probe;
    probe.path = p.path;
    probe.kind = EntryKind::kTensor;
    probe.dtype = p.dtype;
    probe.shape = p.shape;
    for (const Source& o : p.owners) probe.pieces.push_back({o.rank, o.region, {}});
    if (Status s = CheckCoverage(probe); !s.ok()) {
      std::string regions;
      for (const Source& o : p.owners) {
        regions += (regions.empty() ? "" : ", ") + std::string("rank ") + std::to_string(o.rank) +
                   " " + o.region.ToString();
      }
      error(p.path, "the ranks' shards do not tile the tensor exactly once (" + s.message() +
                        "); shards: " + regions);
    }
  }
  if (!errors.empty()) {
    std::string m = file + ": the ranks' states disagree or do not fit together (" +
                    std::to_string(errors.size()) + (errors.size() == 20 ? "+" : "") +
                    " problems): ";
    for (size_t i = 0; i < errors.size(); ++i) m += (i ? "; " : "") + errors[i];
    return Status::InvalidArgument(m);
  }
  // Pre-order: every container directly followed by its subtree.
  GlobalPlan plan;
  plan.entries.reserve(merged.size());
  std::vector<std::pair<const std::vector<size_t>*, size_t>> stack{{&top, 0}};
  while (!stack.empty()) {
    auto& [list, next] = stack.back();
    if (next == list->size()) {
      stack.pop_back();
      continue;
    }
    Merging& m = merged[(*list)[next++]];
    plan.entries.push_back(std::move(m.entry));
    if (!m.children.empty()) stack.push_back({&m.children, 0});
  }
  return plan;
}

std::string EncodeGlobalPlan(const GlobalPlan& plan) {
  WireWriter w;
  w.U64(plan.entries.size());
  for (const PlanEntry& e : plan.entries) {
    WriteEntryHead(w, e);
    for (const auto* list : {&e.layout, &e.owners}) {
      w.U64(list->size());
      for (const Source& s : *list) {
        w.U64(s.rank);
        w.Reg(s.region);
      }
    }
  }
  return std::move(w.str());
}

Result<GlobalPlan> DecodeGlobalPlan(const std::string& bytes) {
  WireReader r(bytes, "rank 0's merged plan");
  GlobalPlan plan;
  uint64_t n = r.Count(16);
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    PlanEntry e;
    ReadEntryHead(r, &e);
    for (auto* list : {&e.layout, &e.owners}) {
      uint64_t k = r.Count(9);
      for (uint64_t j = 0; j < k && r.ok(); ++j) {
        Source s;
        s.rank = static_cast<uint32_t>(r.U64());
        s.region = r.Reg();
        list->push_back(std::move(s));
      }
    }
    plan.entries.push_back(std::move(e));
  }
  if (r.ok() && !r.done()) r.Fail();
  CKFMT_RETURN_IF_ERROR(r.status());
  return plan;
}

}  // namespace ckfmt::dist
