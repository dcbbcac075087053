// Helpers over a host Communicator: exchanging strings and statuses.
#pragma once

#include <string>
#include <vector>

#include "ckfmt/dist/communicator.h"

namespace ckfmt::dist {

// Every rank's `mine`, indexed by rank. REQUIRES: a host communicator.
Result<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& mine);
// On `root`: every rank's `mine`, indexed by rank; elsewhere an empty vector.
Result<std::vector<std::string>> GatherStrings(Communicator& comm, const std::string& mine,
                                               int root);
// `*s` on `root` is copied into `*s` on every rank.
Status BroadcastString(Communicator& comm, std::string* s, int root);

// A status as bytes, and back (a malformed encoding decodes to kInternal).
std::string EncodeStatus(const Status& s);
Status DecodeStatus(const std::string& bytes);

// The agreed outcome of per-rank statuses (see Communicator::AgreeOnStatus):
// OK iff all are OK; else the first failing rank's code, with every failing
// rank's message. `what` names the step.
Status CombineStatuses(const std::vector<Status>& per_rank, const std::string& what);

}  // namespace ckfmt::dist
