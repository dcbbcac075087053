// A restricted unpickler: interprets pickle opcodes (protocols 0-5) into
// the object model of pickle_object.h without executing anything. Globals
// are checked against a whitelist of what torch checkpoints use; any other
// global is refused with an error naming it, or - when allow_opaque - kept
// as a symbolic node (see pickle_object.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "byte_source.h"
#include "ckfmt/status.h"
#include "pickle_object.h"

namespace ckfmt::convert {

struct UnpickleOptions {
  std::string where;  // names the file/record in messages
  bool allow_opaque = false;
  // Resolves a persistent id (BINPERSID/PERSID); none: persistent ids are refused.
  std::function<Result<py::Ref>(const py::Ref& pid)> persistent_load;
};

// Reads one pickle (up to and including STOP) from `src`.
Result<py::Ref> Unpickle(ByteSource& src, const UnpickleOptions& options);
Result<py::Ref> Unpickle(const std::string& bytes, const UnpickleOptions& options);

}  // namespace ckfmt::convert
