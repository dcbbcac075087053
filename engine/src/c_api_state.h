// What the C ABI's entry points (ckfmt/c_api.h) share: no exception across
// the ABI (Guarded), and the way between its descriptors and state dicts,
// with the checks C callers need (NULL pointers, unknown ids, a key given
// twice) and the descriptors a load hands back.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "ckfmt/c_api.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/writer.h"

namespace ckfmt {

// Writes `s`'s message into err (at most cap bytes, NUL-terminated; err may
// be NULL) and returns its code as the ABI does: 0 for OK.
inline int Fail(const Status& s, char* err, size_t cap) {
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

inline Status RequirePath(const char* path) {
  return path ? Status::OK() : Status::InvalidArgument("path is NULL");
}

// How messages name the caller's descriptors: "entry 3", "entries".
struct Noun {
  const char* one;
  const char* plural;
};
inline constexpr Noun kEntryNoun{"entry", "entries"};

// A save's options from the ABI's codec name (NULL: none) and metadata.
Result<SaveOptions> SaveOptionsFromAbi(const char* codec, const ckfmt_metadata* metadata,
                                       size_t n_metadata);

// Where tensor data lives, as the ABI spells it: -1 host, k >= 0 CUDA
// device k. `named` starts the message of a refusal.
Result<Device> DeviceFromAbi(int32_t device, const std::string& named);
int32_t DeviceToAbi(Device device);

// Builds a state dict of the entries: tensors are views of the caller's
// memory, other values copies. Messages name an entry as "<noun> <index>
// (\"<key>\")". With `declarations_only` (a load's entries), strings and
// bytes stand in empty: the caller's values only declare their kinds.
Result<Value> EntriesToStateDict(const ckfmt_entry* entries, size_t n, const Noun& noun,
                                 bool declarations_only);

// The arrays a descriptor made by EntryOf points into.
struct EntryArrays {
  std::vector<uint64_t> shape, global_shape, offsets;
};

// A descriptor of `value` at `key` whose pointers (key, shape, bytes, and a
// shard's global shape and offsets) point into `key`, `value` and
// `arrays`, which must outlive its use.
ckfmt_entry EntryOf(const std::string& key, const Value& value, EntryArrays* arrays);

}  // namespace ckfmt
