// `ckfmt convert SRC DST`: torch.save, DCP and safetensors checkpoints in,
// and ckfmt files back out (tools/convert/ does the work).
#pragma once

#include <ostream>

#include "ckfmt/convert/convert.h"

namespace ckfmt::tools {

struct ConvertCmdOptions {
  convert::ConvertOptions convert;
  std::string to;        // "", "ckfmt", "safetensors", "torch"
  uint64_t budget_mib = 256;
  bool quiet = false;
};

// Runs the conversion; prints the report to `out` unless quiet. Exit code:
// 0 converted, 1 the source is invalid or refused, 2 usage or I/O error.
int RunConvert(ConvertCmdOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ckfmt::tools
