// The Value of a non-data index entry (scalar or empty container), for any
// record with EntryRecord's scalar fields (EntryRecord, dist::PlanEntry).
#pragma once

#include "ckfmt/index.h"
#include "ckfmt/state_dict.h"

namespace ckfmt {

template <typename Entry>
Value ScalarValue(const Entry& e) {
  switch (e.kind) {
    case EntryKind::kInt: return Value(e.int_value);
    case EntryKind::kFloat: return Value(e.float_value);
    case EntryKind::kBool: return Value(e.bool_value);
    case EntryKind::kString: return Value(e.string_value);
    case EntryKind::kDict: return Value(Dict{});
    case EntryKind::kList: return Value(List{});
    default: return Value();
  }
}

}  // namespace ckfmt
