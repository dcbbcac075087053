// Full verification of a file, as `ckfmt verify` runs it: header, footer,
// index (checksum, structure, semantics, coverage), every chunk's checksum
// and decodability, and every padding byte. One sequential pass.
// (spec/FORMAT.md §8.2: checks Z1-Z4; Z2 may be left out, see
// VerifyOptions::decode.)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ckfmt/io_options.h"
#include "ckfmt/status.h"

namespace ckfmt {

struct VerifyProblem {
  StatusCode code;      // kCorruption, kUnsupported, kIOError
  std::string where;    // "footer", "index", "chunk @ 8192 (model/w)", "padding @ 12345"
  std::string message;
};

struct VerifyReport {
  std::string file;
  uint64_t file_size = 0;
  uint64_t entries = 0;
  uint64_t chunks = 0;
  uint64_t bytes_checked = 0;
  std::vector<VerifyProblem> problems;  // empty iff the file is valid
  bool decoded = true;                  // whether compressed chunks were decoded (Z2)
  bool ok() const { return problems.empty(); }
};

struct VerifyOptions {
  IoOptions io;
  // Whether to decode every compressed chunk to check that it yields its
  // raw size (Z2). Without it the pass still finds any change to the file
  // after it was written, since every stored byte is under a checksum, and
  // runs at the disk's speed whatever the codec; it does not find a chunk
  // that a faulty writer stored undecodable under a matching checksum.
  bool decode = true;
  // Called with (bytes done, bytes total) as the pass advances.
  std::function<void(uint64_t, uint64_t)> progress;
};

// Fails only when the file cannot be opened or read at all: kNotFound,
// kInvalidArgument for a path that is not a regular file (a directory, a
// FIFO, a device), kIOError otherwise. Everything wrong inside the file is
// a problem in the report.
Result<VerifyReport> VerifyFile(const std::string& path, const VerifyOptions& options = {});

}  // namespace ckfmt
