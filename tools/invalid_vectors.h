// The invalid vectors of spec/vectors/invalid: small files that each break
// one numbered rule of spec/FORMAT.md, for testing any reader's refusals.
// Every one is `base.ckfmt` (a valid file holding each kind of entry and
// each codec) with one change. `ckfmt-make-vectors` writes them with a
// manifest, invalid.json; ckfmt_golden_tests regenerates them, compares
// the bytes and checks that ckfmt refuses each as the manifest says.
#pragma once

#include <string>
#include <vector>

#include "ckfmt/key_path.h"
#include "ckfmt/status.h"

namespace ckfmt::tools {

struct InvalidVector {
  std::string name;    // file NAME.ckfmt
  std::string rule;    // the FORMAT.md rule it breaks, e.g. "C3"
  StatusCode refusal;  // kCorruption or kUnsupported
  // Empty: the file is refused when opened (header, footer, index).
  // Otherwise the file opens, and reading this entry is refused (chunks).
  KeyPath entry;
  std::string what;  // one line: what is wrong
};

const std::vector<InvalidVector>& InvalidVectors();

// The bytes of base.ckfmt, which every invalid vector is made from.
std::string InvalidVectorBase();

// The bytes of the invalid vector `name`. REQUIRES: a name InvalidVectors() lists.
std::string MakeInvalidVector(const std::string& name);

// invalid.json: {"base": "base.ckfmt", "vectors": [{"file", "rule",
// "refusal" ("corrupt" | "unsupported"), "stage" ("open" | "read"),
// "entry" (null or a path as in inspect's JSON), "what"}, ...]}.
std::string InvalidVectorManifest();

// Writes base.ckfmt, every NAME.ckfmt and invalid.json into `dir`, which
// must exist.
Status WriteInvalidVectors(const std::string& dir);

}  // namespace ckfmt::tools
