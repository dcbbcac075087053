// Helpers over a host Communicator: exchanging strings and statuses, and
// reducing all-gathered values.
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

// AllReduce for transports without it: `all` holds every rank's `n` values,
// rank by rank (an all-gather's result); out[i] = op over the ranks' i-th
// values. kSum wraps around modulo 2^64.
void ReduceGathered(const int64_t* all, size_t n, int ranks, ReduceOp op, int64_t* out);

}  // namespace ckfmt::dist
