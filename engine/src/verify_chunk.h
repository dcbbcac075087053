// Z1/Z2 for one chunk whose stored bytes are all in memory: its checksum,
// and that it decodes to exactly its raw size. One ChunkChecker per worker.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckfmt/index.h"

namespace ckfmt {

class ChunkChecker {
 public:
  ChunkChecker();
  ~ChunkChecker();
  ChunkChecker(const ChunkChecker&) = delete;
  ChunkChecker& operator=(const ChunkChecker&) = delete;

  // The chunk's problem, or "" when it is fine. `stored` holds its
  // stored_size bytes. Without `decode`, only its checksum and that its
  // codec is known are checked (Z1), not that it decodes (Z2).
  std::string Check(const ChunkRecord& c, const uint8_t* stored, bool decode = true);

 private:
  bool Fine(const ChunkRecord& c, const uint8_t* stored);
  std::string Explain(const ChunkRecord& c, const uint8_t* stored);
  std::string ExplainZstd(const ChunkRecord& c, const uint8_t* stored);  // without the rule

  ZSTD_DCtx* dctx_;
  std::vector<uint8_t> sink_;  // the streaming decoder's output window
};

}  // namespace ckfmt
