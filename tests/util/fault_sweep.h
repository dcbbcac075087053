// Fault sweeps: an operation run again and again with its first, then its
// second, ... fault point failing (a pin, a copy, a read or write), until
// it gets through with all of them working. Each failure is handed to a
// check of what must hold after it (the old file kept, nothing pinned).
#pragma once

#include <cstdint>
#include <functional>

#include "ckfmt/status.h"

namespace ckfmt_test {

// Runs `attempt` after `fail_from(k)` for k = 1, 2, ... up to `max_k`,
// until an attempt succeeds; `fail_from(k)` makes the k-th fault point the
// attempt reaches, and every later one, fail, and `fail_from(0)` (called
// after each attempt) makes them all work again. Calls `check` on each
// failure, under a trace naming k. Returns how many attempts failed; a
// test failure if the last still failed.
int SweepFaults(const std::function<void(uint64_t k)>& fail_from,
                const std::function<ckfmt::Status()>& attempt,
                const std::function<void(const ckfmt::Status&)>& check, uint64_t max_k = 5000);

}  // namespace ckfmt_test
