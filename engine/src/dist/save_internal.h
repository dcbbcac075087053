// Shared between dist_save.cc (planning, the common protocol) and the two
// save modes.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ckfmt/dist/dist_save.h"
#include "plan.h"

namespace ckfmt::dist {

struct SaveContext {
  Communicator& comm;
  std::string path;
  const Value& local_state;
  DistSaveOptions options;  // rank 0's, as agreed
  GlobalPlan plan;
  // Per plan entry: this rank's data for the entry's owner region held by
  // this rank (nullptr if it owns none), and that region.
  std::vector<const uint8_t*> local_data;
  std::vector<const Region*> local_region;
  std::vector<Device> local_device;  // where local_data is (kCPU if none)
  DistSaveStats stats;

  int rank() const { return comm.rank(); }
  bool root() const { return comm.rank() == 0; }
  // The fault hook's verdict at `point` (OK without a hook).
  Status Hook(const std::string& point, uint64_t index = 0) const {
    if (!options.fault_hook) return Status::OK();
    Status s = options.fault_hook(point, index);
    if (s.ok()) return s;
    return Status(s.code(), "at " + point + " " + std::to_string(index) + ": " + s.message());
  }
};

// The two modes; both run on every rank after the plan is agreed and
// return the agreed outcome.
Status FlattenedSave(SaveContext& ctx);
Status ParallelSave(SaveContext& ctx);

// Writer identification recorded in the index.
inline constexpr const char* kDistWriterName = "ckfmt";
inline constexpr const char* kDistWriterVersion = "0.1.0";

}  // namespace ckfmt::dist
