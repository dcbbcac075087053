#include "ckfmt/c_api.h"

#include <cstring>

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

// Builds a state dict of views over the descriptors.
Result<Value> ToStateDict(const ckfmt_tensor* ts, size_t n) {
  Value root{Dict{}};
  for (size_t i = 0; i < n; ++i) {
    auto dtype = DTypeFromId(ts[i].dtype);
    if (!dtype) return Status::InvalidArgument("tensor " + std::to_string(i) + ": unknown dtype id");
    if (!ts[i].key) return Status::InvalidArgument("tensor " + std::to_string(i) + ": no key");
    Shape shape(ts[i].shape, ts[i].shape + ts[i].ndim);
    KeyPath path = ParseKeyPath(ts[i].key);
    CKFMT_RETURN_IF_ERROR(InsertAtPath(&root, path, Tensor::View(*dtype, shape, ts[i].data)));
  }
  return root;
}

}  // namespace
}  // namespace ckfmt

using namespace ckfmt;

extern "C" int ckfmt_save_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                  const char* codec, char* err, size_t err_cap) {
  SaveOptions options;
  if (codec) {
    auto c = CodecFromName(codec);
    if (!c.ok()) return Fail(c.status(), err, err_cap);
    options.codec = *c;
  }
  auto sd = ToStateDict(tensors, n);
  if (!sd.ok()) return Fail(sd.status(), err, err_cap);
  return Fail(Save(path, *sd, options).status(), err, err_cap);
}

extern "C" int ckfmt_load_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                                  int verify_checksums, char* err, size_t err_cap) {
  auto sd = ToStateDict(tensors, n);
  if (!sd.ok()) return Fail(sd.status(), err, err_cap);
  LoadOptions lo;
  lo.unexpected = UnexpectedPolicy::kIgnore;
  ReadOptions ro;
  ro.verify_checksums = verify_checksums != 0;
  return Fail(Load(path, &*sd, lo, ro).status(), err, err_cap);
}

extern "C" int ckfmt_verify(const char* path, char* err, size_t err_cap) {
  auto r = VerifyFile(path);
  if (!r.ok()) return Fail(r.status(), err, err_cap);
  if (!r->ok()) {
    const auto& p = r->problems.front();
    return Fail(Status(p.code, path + std::string(": ") + p.where + ": " + p.message), err,
                err_cap);
  }
  return 0;
}
