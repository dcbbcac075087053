// Full verification of a file, as `ckfmt verify` runs it: header, footer,
// index (checksum, structure, semantics, coverage), every chunk's checksum
// and decodability, and every padding byte. One sequential pass.
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
  bool ok() const { return problems.empty(); }
};

struct VerifyOptions {
  IoOptions io;
  // Called with (bytes done, bytes total) as the pass advances.
  std::function<void(uint64_t, uint64_t)> progress;
};

// Fails only when the file cannot be opened or read at all: kNotFound,
// kInvalidArgument for a path that is not a regular file (a directory, a
// FIFO, a device), kIOError otherwise. Everything wrong inside the file is
// a problem in the report.
Result<VerifyReport> VerifyFile(const std::string& path, const VerifyOptions& options = {});

}  // namespace ckfmt
