#include "ckfmt/c_api.h"

#include <cstring>
#include <exception>
#include <map>
#include <new>

#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"

namespace ckfmt {
namespace {

int Fail(const Status& s, char* err, size_t cap) {
  if (err && cap) {
    std::string m = s.ToString();
    size_t n = std::min(cap - 1, m.size());
    std::memcpy(err, m.data(), n);
    err[n] = '\0';
  }
  return s.ok() ? 0 : static_cast<int>(s.code());
}

// Runs `body` (returning a Status) so that no C++ exception crosses the C
// ABI, where it would terminate the caller's process.
template <typename Body>
int Guarded(char* err, size_t cap, Body body) {
  try {
    return Fail(body(), err, cap);
  } catch (const std::bad_alloc&) {
    return Fail(Status::IOError("out of memory"), err, cap);
  } catch (const std::exception& e) {
    return Fail(Status::Internal(std::string("unexpected exception: ") + e.what()), err, cap);
  } catch (...) {
    return Fail(Status::Internal("unexpected exception"), err, cap);
  }
}

// Where tensor `i` lives: devices[i] as the ABI spells it (-1 host, k >= 0
// CUDA device k); all on the host without `devices`.
Result<Device> DeviceOf(const int32_t* devices, size_t i, const std::string& named) {
  if (!devices || devices[i] == -1) return Device{};
  if (devices[i] < -1) {
    return Status::InvalidArgument(named + ": device " + std::to_string(devices[i]) +
                                   ", expected -1 (host memory) or a CUDA device index");
  }
  return Device{DeviceType::kCUDA, devices[i]};
}

// Builds a state dict of views over the descriptors, refusing what C
// callers get wrong: null pointers, unknown dtypes, a key given twice or
// one that earlier keys are under (a tensor would be silently dropped).
Result<Value> ToStateDict(const ckfmt_tensor* ts, const int32_t* devices, size_t n) {
  if (n > 0 && !ts) return Status::InvalidArgument("tensors is NULL for " + std::to_string(n));
  Value root{Dict{}};
  std::map<KeyPath, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    const std::string which = "tensor " + std::to_string(i);
    if (!ts[i].key) return Status::InvalidArgument(which + ": no key");
    const std::string named = which + " (\"" + ts[i].key + "\")";
    auto dtype = DTypeFromId(ts[i].dtype);
    if (!dtype) {
      return Status::InvalidArgument(named + ": unknown dtype id " + std::to_string(ts[i].dtype));
    }
    if (ts[i].ndim > 0 && !ts[i].shape) return Status::InvalidArgument(named + ": shape is NULL");
    Shape shape(ts[i].shape, ts[i].shape + ts[i].ndim);
    auto bytes = ShapeBytes(shape, DTypeSize(*dtype));
    if (!bytes.ok()) return bytes.status().WithContext(named);
    if (*bytes > 0 && !ts[i].data) return Status::InvalidArgument(named + ": data is NULL");
    CKFMT_ASSIGN_OR_RETURN(Device device, DeviceOf(devices, i, named));
    KeyPath path = ParseKeyPath(ts[i].key);
    // InsertAtPath would replace what is there: an earlier tensor of the
    // same key, or the dict holding earlier tensors under this key.
    if (root.Find(path)) {
      const auto at = seen.find(path);
      return Status::InvalidArgument(
          named + (at != seen.end() ? ": the same key as tensor " + std::to_string(at->second)
                                    : ": a key that earlier tensors are under"));
    }
    seen.emplace(path, i);
    CKFMT_RETURN_IF_ERROR(InsertAtPath(&root, path, Tensor::View(*dtype, shape, ts[i].data, device))
                              .WithContext(named));
  }
  return root;
}

Status RequirePath(const char* path) {
  return path ? Status::OK() : Status::InvalidArgument("path is NULL");
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

extern "C" int ckfmt_save_device_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                         const int32_t* devices, const char* codec, char* err,
                                         size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    SaveOptions options;
    if (codec) {
      auto c = CodecFromName(codec);
      if (!c.ok()) return c.status();
      options.codec = *c;
    }
    auto sd = ToStateDict(tensors, devices, n);
    if (!sd.ok()) return sd.status();
    return Save(path, *sd, options).status();
  });
}

extern "C" int ckfmt_load_device_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                         const int32_t* devices, int verify_checksums, char* err,
                                         size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    auto sd = ToStateDict(tensors, devices, n);
    if (!sd.ok()) return sd.status();
    LoadOptions lo;
    lo.unexpected = UnexpectedPolicy::kIgnore;
    ReadOptions ro;
    ro.verify_checksums = verify_checksums != 0;
    return Load(path, &*sd, lo, ro).status();
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
