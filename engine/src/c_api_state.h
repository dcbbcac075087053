// Between the C ABI's descriptors (ckfmt/c_api.h) and state dicts: the
// checks that C callers need (NULL pointers, unknown ids, a key given
// twice) and the descriptors a load hands back.
#pragma once

#include <string>

#include "ckfmt/c_api.h"
#include "ckfmt/state_dict.h"

namespace ckfmt {

// Where tensor data lives, as the ABI spells it: -1 host, k >= 0 CUDA
// device k. `named` starts the message of a refusal.
Result<Device> DeviceFromAbi(int32_t device, const std::string& named);
int32_t DeviceToAbi(Device device);

// How messages name the caller's descriptors: "tensor 3", "entries".
struct Noun {
  const char* one;
  const char* plural;
};

// Builds a state dict of the entries: tensors are views of the caller's
// memory, other values copies. Messages name an entry as "<noun> <index>
// (\"<key>\")". With `declarations_only` (a load's entries), strings and
// bytes stand in empty: the caller's values only declare their kinds.
Result<Value> EntriesToStateDict(const ckfmt_entry* entries, size_t n, const Noun& noun,
                                 bool declarations_only);

// A descriptor of `value` at `key` whose pointers (key, shape, bytes) point
// into `key`, `value` and `shape_buffer`, which must outlive its use.
ckfmt_entry EntryOf(const std::string& key, const Value& value,
                    std::vector<uint64_t>* shape_buffer);

}  // namespace ckfmt
