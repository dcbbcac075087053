#include "ckfmt/c_api.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "c_api_state.h"
#include "ckfmt/describe.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "scalar_value.h"

namespace ckfmt {
namespace {

constexpr Noun kTensorNoun{"tensor", "tensors"};

// The tensors as entries of the state API, on `devices` (all on the host
// without).
std::vector<ckfmt_entry> TensorEntries(const ckfmt_tensor* ts, const int32_t* devices, size_t n) {
  std::vector<ckfmt_entry> entries(ts ? n : 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    ckfmt_entry& e = entries[i];
    e.key = ts[i].key;
    e.kind = CKFMT_KIND_TENSOR;
    e.dtype = ts[i].dtype;
    e.device = devices ? devices[i] : -1;
    e.ndim = ts[i].ndim;
    e.shape = ts[i].shape;
    e.data = ts[i].data;
  }
  return entries;
}

}  // namespace
}  // namespace ckfmt

using namespace ckfmt;

extern "C" int ckfmt_save_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                  const char* codec, char* err, size_t err_cap) {
  return ckfmt_save_device_tensors(path, tensors, n, nullptr, codec, err, err_cap);
}

extern "C" int ckfmt_load_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                  int verify_checksums, char* err, size_t err_cap) {
  return ckfmt_load_device_tensors(path, tensors, n, nullptr, verify_checksums, err, err_cap);
}

namespace {

Status SaveEntries(const char* path, const ckfmt_entry* entries, size_t n, const Noun& noun,
                   const ckfmt_metadata* metadata, size_t n_metadata, const char* codec) {
  CKFMT_RETURN_IF_ERROR(RequirePath(path));
  CKFMT_ASSIGN_OR_RETURN(SaveOptions options, SaveOptionsFromAbi(codec, metadata, n_metadata));
  CKFMT_ASSIGN_OR_RETURN(Value sd, EntriesToStateDict(entries, n, noun, false));
  return Save(path, sd, options).status();
}

}  // namespace

extern "C" int ckfmt_save_device_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                         const int32_t* devices, const char* codec, char* err,
                                         size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    const auto entries = TensorEntries(tensors, devices, n);
    return SaveEntries(path, tensors ? entries.data() : nullptr, n, kTensorNoun, nullptr, 0, codec);
  });
}

extern "C" int ckfmt_save_entries(const char* path, const ckfmt_entry* entries, size_t n,
                                  const ckfmt_metadata* metadata, size_t n_metadata,
                                  const char* codec, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    return SaveEntries(path, entries, n, kEntryNoun, metadata, n_metadata, codec);
  });
}

namespace {

// A tensor as a callback is asked about it: key, dtype, shape and device,
// no data; it points into `key` and `shape`.
ckfmt_entry TensorAsked(const std::string& key, uint8_t dtype, const Shape& shape, int32_t device) {
  ckfmt_entry e{};
  e.key = key.c_str();
  e.kind = CKFMT_KIND_TENSOR;
  e.dtype = dtype;
  e.device = device;
  e.ndim = static_cast<uint32_t>(shape.size());
  e.shape = shape.data();
  return e;
}

Result<LoadOptions> LoadOptionsOf(const ckfmt_load_options& o) {
  LoadOptions lo;
  switch (o.unexpected) {
    case CKFMT_UNEXPECTED_RECONSTRUCT:
      lo.unexpected = UnexpectedPolicy::kReconstruct;
      break;
    case CKFMT_UNEXPECTED_IGNORE:
      lo.unexpected = UnexpectedPolicy::kIgnore;
      break;
    case CKFMT_UNEXPECTED_ERROR:
      lo.unexpected = UnexpectedPolicy::kError;
      break;
    default:
      return Status::InvalidArgument("options.unexpected is " + std::to_string(o.unexpected) +
                                     ", expected 0, 1 or 2 (CKFMT_UNEXPECTED_*)");
  }
  switch (o.missing) {
    case CKFMT_MISSING_ERROR:
      lo.missing = MissingPolicy::kError;
      break;
    case CKFMT_MISSING_IGNORE:
      lo.missing = MissingPolicy::kIgnore;
      break;
    default:
      return Status::InvalidArgument("options.missing is " + std::to_string(o.missing) +
                                     ", expected 0 or 1 (CKFMT_MISSING_*)");
  }
  CKFMT_ASSIGN_OR_RETURN(lo.reconstruct_device,
                         DeviceFromAbi(o.reconstruct_device, "options.reconstruct_device"));
  if (o.n_prefixes > 0 && !o.prefixes) {
    return Status::InvalidArgument("options.prefixes is NULL for " + std::to_string(o.n_prefixes));
  }
  for (size_t i = 0; i < o.n_prefixes; ++i) {
    if (!o.prefixes[i]) {
      return Status::InvalidArgument("options.prefixes[" + std::to_string(i) + "] is NULL");
    }
    lo.prefixes.push_back(ParseKeyPath(o.prefixes[i]));
  }
  if (o.alloc) {
    lo.allocator = [&o](DType dtype, const Shape& shape, const KeyPath& at,
                        Device device) -> Result<Tensor> {
      const std::string key = FormatKeyPath(at);
      const ckfmt_entry e =
          TensorAsked(key, static_cast<uint8_t>(dtype), shape, DeviceToAbi(device));
      void* data = o.alloc(o.alloc_ctx, &e);
      // NULL is memory enough for a tensor without elements.
      const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
      if (!data && !empty) return Status::Aborted("the caller's alloc returned NULL");
      return Tensor::View(dtype, shape, data, device);
    };
  }
  return lo;
}

// Hands the caller every loaded value it does not hold in place (see
// ckfmt_load_entries): what the report names, and the containers above it.
Status HandOver(const Value& sd, const LoadReport& report, const std::set<KeyPath>& callers_tensors,
                const ckfmt_load_options& o, const std::string& file) {
  if (!o.on_entry) return Status::OK();
  std::set<KeyPath> loaded;
  for (const auto* list : {&report.loaded_in_place, &report.reconstructed}) {
    for (const KeyPath& p : *list) {
      for (size_t depth = 1; depth <= p.size(); ++depth)
        loaded.emplace(p.begin(), p.begin() + depth);
    }
  }
  Status status;
  EntryArrays arrays;
  VisitValues(sd, [&](const KeyPath& p, const Value& v) {
    if (!status.ok() || !loaded.count(p) || callers_tensors.count(p)) return;
    const std::string key = FormatKeyPath(p);
    const ckfmt_entry e = EntryOf(key, v, &arrays);
    if (int rc = o.on_entry(o.entry_ctx, &e); rc != 0) {
      status = Status::Aborted(file + ": on_entry returned " + std::to_string(rc) + " for " + key);
    }
  });
  return status;
}

Status HandMetadata(const CheckpointReader& reader, ckfmt_metadata_fn on_metadata, void* ctx) {
  if (!on_metadata) return Status::OK();
  for (const auto& [key, value] : reader.index().metadata) {
    if (int rc = on_metadata(ctx, key.c_str(), value.c_str()); rc != 0) {
      return Status::Aborted(reader.path() + ": on_metadata returned " + std::to_string(rc) +
                             " for \"" + key + "\"");
    }
  }
  return Status::OK();
}

// options.refuse_content_type: a bytes entry of that type which the load
// would hand over (selected by the prefixes, and the caller's or to be
// created) stops it before anything is read.
Status RefuseContentType(const CheckpointReader& reader, const Value& sd, const LoadOptions& lo,
                         const ckfmt_load_options& o) {
  for (const EntryRecord& r : reader.index().entries) {
    if (r.kind != EntryKind::kBytes || r.content_type != o.refuse_content_type) continue;
    const bool selected =
        lo.prefixes.empty() || std::any_of(lo.prefixes.begin(), lo.prefixes.end(),
                                           [&](const KeyPath& p) { return HasPrefix(r.path, p); });
    const bool handed_over = sd.Find(r.path) || lo.unexpected == UnexpectedPolicy::kReconstruct;
    if (selected && handed_over) {
      return Status::Aborted(reader.path() + ": " + FormatKeyPath(r.path) +
                             " holds bytes of content type \"" + r.content_type +
                             "\", which this load refuses; nothing was read");
    }
  }
  return Status::OK();
}

Status LoadEntries(const char* path, const ckfmt_entry* entries, size_t n, const Noun& noun,
                   const ckfmt_load_options& o) {
  CKFMT_RETURN_IF_ERROR(RequirePath(path));
  CKFMT_ASSIGN_OR_RETURN(LoadOptions lo, LoadOptionsOf(o));
  CKFMT_ASSIGN_OR_RETURN(Value sd, EntriesToStateDict(entries, n, noun, true));
  std::set<KeyPath> callers_tensors;
  VisitValues(sd, [&](const KeyPath& p, const Value& v) {
    if (v.is_tensor()) callers_tensors.insert(p);
  });
  ReadOptions ro;
  ro.verify_checksums = o.verify_checksums != 0;
  CKFMT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(path, ro));
  CKFMT_RETURN_IF_ERROR(HandMetadata(*reader, o.on_metadata, o.metadata_ctx));
  if (o.refuse_content_type) CKFMT_RETURN_IF_ERROR(RefuseContentType(*reader, sd, lo, o));
  if (!o.layout) {
    CKFMT_ASSIGN_OR_RETURN(LoadReport report, reader->Load(&sd, lo));
    return HandOver(sd, report, callers_tensors, o, path);
  }
  dist::ShardedLoadOptions so;
  so.load = lo;
  so.layout = [&](const KeyPath& at, const Shape& global) -> Result<std::optional<Region>> {
    const std::string key = FormatKeyPath(at);
    const ckfmt_entry e = TensorAsked(key, 0, global, -1);  // dtype: not asked
    std::vector<uint64_t> offsets(global.size()), lengths(global.size());
    const int rc = o.layout(o.layout_ctx, &e, offsets.data(), lengths.data());
    if (rc == 0) return std::optional<Region>();
    if (rc == 1) return std::optional<Region>(Region::Box(std::move(offsets), std::move(lengths)));
    return Status::Aborted(std::string(path) + ": layout returned " + std::to_string(rc) + " for " +
                           key);
  };
  CKFMT_ASSIGN_OR_RETURN(LoadReport report, dist::LoadSharded(*reader, &sd, so));
  return HandOver(sd, report, callers_tensors, o, path);
}

ckfmt_load_options DefaultLoadOptions() {
  ckfmt_load_options o{};
  o.verify_checksums = 1;
  o.reconstruct_device = -1;
  return o;
}

}  // namespace

extern "C" int ckfmt_load_device_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                         const int32_t* devices, int verify_checksums, char* err,
                                         size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    ckfmt_load_options o = DefaultLoadOptions();
    o.verify_checksums = verify_checksums;
    o.unexpected = CKFMT_UNEXPECTED_IGNORE;
    const auto entries = TensorEntries(tensors, devices, n);
    return LoadEntries(path, tensors ? entries.data() : nullptr, n, kTensorNoun, o);
  });
}

extern "C" int ckfmt_load_entries(const char* path, const ckfmt_entry* entries, size_t n,
                                  const ckfmt_load_options* options, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    return LoadEntries(path, entries, n, kEntryNoun, options ? *options : DefaultLoadOptions());
  });
}

extern "C" int ckfmt_list_entries(const char* path, ckfmt_entry_fn on_entry, void* entry_ctx,
                                  ckfmt_metadata_fn on_metadata, void* metadata_ctx, char* err,
                                  size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    CKFMT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(path));
    CKFMT_RETURN_IF_ERROR(HandMetadata(*reader, on_metadata, metadata_ctx));
    if (!on_entry) return Status::OK();
    EntryArrays arrays;
    for (const EntryRecord& r : reader->index().entries) {
      // A value standing for the record: data-less views, the scalars themselves.
      Value v = r.kind == EntryKind::kTensor  ? Value(Tensor::View(r.dtype, r.shape, nullptr))
                : r.kind == EntryKind::kBytes ? Value(Bytes{r.content_type, {}})
                                              : ScalarValue(r);
      const std::string key = FormatKeyPath(r.path);
      ckfmt_entry e = EntryOf(key, v, &arrays);
      if (r.HasData()) {
        e.bytes = nullptr;
        e.size = r.ByteSize();
      }
      if (int rc = on_entry(entry_ctx, &e); rc != 0) {
        return Status::Aborted(std::string(path) + ": on_entry returned " + std::to_string(rc) +
                               " for " + key);
      }
    }
    return Status::OK();
  });
}

extern "C" int ckfmt_describe_json(const char* path, const char* prefix, ckfmt_text_fn on_json,
                                   void* ctx, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    if (!on_json) return Status::InvalidArgument("ckfmt_describe_json: on_json is NULL");
    std::optional<KeyPath> filter;
    if (prefix) filter = ParseKeyPath(prefix);
    CKFMT_ASSIGN_OR_RETURN(std::string json, DescribeFileJson(path, path, filter));
    if (int rc = on_json(ctx, json.data(), json.size()); rc != 0) {
      return Status::Aborted(std::string(path) + ": on_json returned " + std::to_string(rc));
    }
    return Status::OK();
  });
}

namespace {

int VerifyWith(const char* path, const VerifyOptions& options, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    auto r = VerifyFile(path, options);
    if (!r.ok()) return r.status();
    if (r->ok()) return Status::OK();
    const auto& p = r->problems.front();
    return Status(p.code, path + std::string(": ") + p.where + ": " + p.message);
  });
}

}  // namespace

extern "C" int ckfmt_verify(const char* path, char* err, size_t err_cap) {
  return VerifyWith(path, VerifyOptions{}, err, err_cap);
}

extern "C" int ckfmt_verify_checksums(const char* path, char* err, size_t err_cap) {
  VerifyOptions options;
  options.decode = false;
  return VerifyWith(path, options, err, err_cap);
}
