// Save()'s core, shared with AsyncSaver (which writes the first part of a
// state straight from the caller's tensors and the rest from its snapshot):
// the writer for a state dict, and its entries added in pre-order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ckfmt/writer.h"

namespace ckfmt {

// A writer for `state_dict` (REQUIRES: a dict) at `path`, told the state's
// data size, with host reads deferred until Flush() or Commit().
Result<std::unique_ptr<CheckpointWriter>> BeginSave(const std::string& path,
                                                    const Value& state_dict,
                                                    const SaveOptions& options);

// Adds the values of `state_dict` that VisitValues() visits as number
// `begin` up to, not including, `end` (counting from 0 in pre-order).
// REQUIRES: the values before `begin` were added already.
Status AddEntries(CheckpointWriter& writer, const std::string& path, const Value& state_dict,
                  size_t begin = 0, size_t end = SIZE_MAX);

}  // namespace ckfmt
