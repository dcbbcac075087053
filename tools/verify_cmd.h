// `ckfmt verify FILE... [--json] [--quiet|-q] [--verbose|-v] [--checksums-only]`.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "ckfmt/verify.h"
#include "describe_json.h"

namespace ckfmt::tools {

struct VerifyCmdOptions {
  std::vector<std::string> files;
  bool json = false;
  bool quiet = false;    // no output on stdout; the exit code tells
  bool verbose = false;  // a line per valid file too
  bool checksums_only = false;  // VerifyOptions::decode = false
};

// Files larger than this get a progress bar (when stderr is a terminal).
inline constexpr uint64_t kProgressMinBytes = 256ull << 20;

// The per-file JSON object of `ckfmt verify --json`. `error` is the status
// of a VerifyFile call that failed (the file could not be read at all).
Json VerifyReportToJson(const std::string& file, const VerifyReport* report, const Status& error);

// Runs the command; returns the exit code (exit_codes.h): 0 every file
// valid, 1 some file invalid, 2 some file could not be read (wins over 1).
int RunVerify(const VerifyCmdOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ckfmt::tools
