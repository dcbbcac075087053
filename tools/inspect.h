// `ckfmt inspect FILE [--json] [--prefix KEYPATH]`.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "ckfmt/key_path.h"
#include "ckfmt/status.h"
#include "describe_json.h"

namespace ckfmt::tools {

struct InspectOptions {
  std::string file;
  bool json = false;
  std::optional<std::string> prefix;  // FormatKeyPath syntax
};

// The human-readable listing.
std::string InspectText(const IndexRecord& index, const FileInfo& info,
                        const std::optional<KeyPath>& prefix);

// Runs the command; returns the exit code (exit_codes.h).
int RunInspect(const InspectOptions& options, std::ostream& out, std::ostream& err);

// "FILE: message" unless the status message already names the file; its
// control characters escaped (a message may quote a key from the file).
std::string ErrorLine(const std::string& file, const Status& status);

}  // namespace ckfmt::tools
