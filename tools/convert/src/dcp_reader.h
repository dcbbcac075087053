// PyTorch DCP directories (torch.distributed.checkpoint): `.metadata` (a
// pickled Metadata dataclass, read by the restricted unpickler) and
// `__<rank>_<n>.distcp` files whose items are torch.save archives. Read
// into one tree: each tensor streams its chunks as box pieces of the whole
// tensor; bytes items become the objects they pickle.
#pragma once

#include <string>

#include "ckfmt/status.h"
#include "tree.h"

namespace ckfmt::convert {

struct DcpReadOptions {
  bool allow_opaque = false;
  bool verify_crc = true;
  bool keep_layout = true;   // saved_layout per chunk
  bool split_dotted = true;  // without planner paths, split fqns on '.'
};

struct DcpInfo {
  uint32_t world_size = 1;
  std::string version;
};

Result<Node> ReadDcp(const std::string& dir, const DcpReadOptions& options, ConvertLog* log,
                     DcpInfo* info);

// A DCP checkpoint directory: it has a .metadata file.
bool IsDcpDirectory(const std::string& dir);

}  // namespace ckfmt::convert
