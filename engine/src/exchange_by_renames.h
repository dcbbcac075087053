// CommitExchange's way on file systems that cannot exchange two names
// (ckfmt/commit.h); its own header so that tests can take it there.
#pragma once

#include <string>

#include "ckfmt/status.h"

namespace ckfmt {

// Swaps the names `from` and `to` with three renames: `to` aside to a
// TemporaryPathFor(to) name, `from` to `to`, the aside one to `from`. Not
// atomic, but nothing is lost: a crash leaves the old `to` under its
// temporary name; a failed second rename puts it back. REQUIRES: both exist.
Status ExchangeByRenames(const std::string& from, const std::string& to);

}  // namespace ckfmt
