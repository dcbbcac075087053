// Reading parts of entries: which chunks overlap which destinations, and
// the pipelined read -> verify -> decode -> scatter that fills them.
#pragma once

#include <vector>

#include "ckfmt/index.h"
#include "ckfmt/reader.h"
#include "io/file.h"
#include "thread_pool.h"

namespace ckfmt {

// A destination: `dst` receives the row-major stream of `region` of
// `entry`'s global tensor.
struct ReadTarget {
  const EntryRecord* entry;
  Region region;
  uint8_t* dst;
};

// Reads exactly the chunks that overlap the targets (each chunk once, even
// when several targets need it), verifies their checksums if asked,
// decodes them and copies each overlap into place. Fails if a target asks
// for elements no piece holds. Adds the bytes read from disk to *bytes_read.
Status ReadTargets(const File& file, const std::vector<ReadTarget>& targets,
                   const ReadOptions& options, ThreadPool& pool, uint64_t* bytes_read);

}  // namespace ckfmt
