#include "util/fault_sweep.h"

#include <gtest/gtest.h>

#include <string>

namespace ckfmt_test {

int SweepFaults(const std::function<void(uint64_t k)>& fail_from,
                const std::function<ckfmt::Status()>& attempt,
                const std::function<void(const ckfmt::Status&)>& check, uint64_t max_k) {
  int failures = 0;
  for (uint64_t k = 1; k <= max_k; ++k) {
    fail_from(k);
    ckfmt::Status s = attempt();
    fail_from(0);
    if (s.ok()) return failures;
    ++failures;
    SCOPED_TRACE("fault point " + std::to_string(k) + " failing");
    check(s);
  }
  ADD_FAILURE() << "still failing with the first " << max_k << " fault points working";
  return failures;
}

}  // namespace ckfmt_test
